"""Training checkpoints as safetensors + JSON (no pickles), written atomically, with a `last` pointer.

    <output_dir>/checkpoints/0001000/pretrained_model/   config.json + model.safetensors (EMA weights):
                                                           what `WorldModel.from_pretrained` loads
    <output_dir>/checkpoints/0001000/training_state/     raw weights, optimizer, scheduler, EMA and RNG
                                                           state: what `--resume` continues from
    <output_dir>/checkpoints/last                          symlink to the newest complete checkpoint

A checkpoint directory is written under a temporary name and renamed when complete, and `last` is
switched with an atomic rename, so a run killed at any moment leaves the previous checkpoint intact.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def _flatten_optimizer(state: dict) -> tuple[dict[str, torch.Tensor], dict]:
    tensors, scalars = {}, {}
    for idx, values in state["state"].items():
        for name, value in values.items():
            if torch.is_tensor(value):
                tensors[f"{idx}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for key, value in list(tensors.items()) + list(meta["scalars"].items()):
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def _is_deepspeed(accelerator) -> bool:
    return accelerator is not None and accelerator.state.deepspeed_plugin is not None


def save_checkpoint(output_dir: Path, step: int, model, optimizer, scheduler, ema, accelerator=None) -> Path:
    """Write checkpoint `step` (EMA model + full training state) and point `last` at it.

    Call it on every process: under DeepSpeed the sharded optimizer state is written by all ranks in
    DeepSpeed's own format (`training_state/deepspeed/`); everything else is written by the main process.
    """
    root = Path(output_dir) / "checkpoints"
    final = root / f"{step:07d}"
    tmp = root / f".{step:07d}.tmp"
    main = accelerator is None or accelerator.is_main_process
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "training_state").mkdir(parents=True)
    if _is_deepspeed(accelerator):
        accelerator.wait_for_everyone()
        accelerator.save_state(str(tmp / "training_state" / "deepspeed"))
        accelerator.wait_for_everyone()
        model = accelerator.unwrap_model(model)
    if not main:
        return final
    meta = None
    if not _is_deepspeed(accelerator):
        raw = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        save_file(raw, tmp / "training_state" / "model.safetensors")
        tensors, meta = _flatten_optimizer(optimizer.state_dict())
        save_file(tensors, tmp / "training_state" / "optimizer.safetensors")
    ema_state = ema.state_dict()
    shadow = {f"{i}": p.detach().cpu().contiguous() for i, p in enumerate(ema_state.pop("shadow_params"))}
    save_file(shadow, tmp / "training_state" / "ema.safetensors")
    save_file({"torch": torch.get_rng_state()}, tmp / "training_state" / "rng.safetensors")
    save_file(_running_buffers(model), tmp / "training_state" / "buffers.safetensors")
    state = {"step": step, "optimizer": meta, "scheduler": scheduler.state_dict(), "ema": ema_state}
    (tmp / "training_state" / "state.json").write_text(json.dumps(state, indent=1, default=float))

    ema.store(model.parameters())  # the published weights are the EMA weights
    ema.copy_to(model.parameters())
    model.save_pretrained(tmp / "pretrained_model")
    ema.restore(model.parameters())

    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    link = root / ".last.tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(final.name)
    os.replace(link, root / "last")
    return final


def load_checkpoint(directory: Path, model, optimizer, scheduler, ema, accelerator=None) -> int:
    """Restore everything `save_checkpoint` wrote; returns the step to continue from.

    Under DeepSpeed call it after `accelerator.prepare`, on every process.
    """
    directory = Path(directory).resolve()
    state_dir = directory / "training_state"
    if not (state_dir / "state.json").is_file():
        raise FileNotFoundError(
            f"{directory} holds no training state (training_state/state.json); point --resume at a "
            "checkpoint written by r2s2r-train, or start without --resume."
        )
    state = json.loads((state_dir / "state.json").read_text())
    if _is_deepspeed(accelerator):
        accelerator.load_state(str(state_dir / "deepspeed"))
    else:
        try:
            model.load_state_dict(load_file(state_dir / "model.safetensors"), strict=True)
        except RuntimeError as e:
            raise ValueError(
                f"checkpoint {directory} was trained with another model config; resume with the config it "
                f"was saved with ({directory / 'pretrained_model' / 'config.json'}). {str(e).splitlines()[0]}"
            ) from None
        optimizer.load_state_dict(
            _unflatten_optimizer(load_file(state_dir / "optimizer.safetensors"), state["optimizer"])
        )
    scheduler.load_state_dict(state["scheduler"])
    shadow = load_file(state_dir / "ema.safetensors")
    ema.load_state_dict({**state["ema"], "shadow_params": [shadow[f"{i}"] for i in range(len(shadow))]})
    torch.set_rng_state(load_file(state_dir / "rng.safetensors")["torch"])
    if (state_dir / "buffers.safetensors").is_file():  # checkpoints before 2026-12-03 have none
        buffers = dict(model.named_buffers())
        for name, value in load_file(state_dir / "buffers.safetensors").items():
            if name in buffers:
                buffers[name].copy_(value)
    return int(state["step"])


def _running_buffers(model) -> dict[str, torch.Tensor]:
    """The model's buffers that its weights file leaves out (non-persistent): running training statistics
    such as the world model's `view_energy`, which a resumed run must continue from."""
    saved = set(model.state_dict())
    return {k: v.detach().cpu().contiguous() for k, v in model.named_buffers() if k not in saved}
