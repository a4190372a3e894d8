"""Training checkpoints as safetensors + JSON (no pickles), written atomically, with a `last` pointer.

    <output_dir>/checkpoints/0001000/pretrained_model/   config.json + model.safetensors (EMA weights):
                                                           what `WorldModel.from_pretrained` loads
    <output_dir>/checkpoints/0001000/training_state/     raw weights, optimizer, scheduler, EMA and RNG
                                                           state: what `--resume` continues from
    <output_dir>/checkpoints/last                          symlink to the newest complete checkpoint

A checkpoint directory is written under a temporary name and renamed when complete, and `last` is
switched with an atomic rename, so a run killed at any moment leaves the previous checkpoint intact; a save
that fails (a full disk) removes its temporary folder. `state.json` also keeps the run's settings (`run`),
which `--resume` compares with the ones it is given. Under DeepSpeed, `training_state/deepspeed/` is
DeepSpeed's own format, written and read with `torch.save`/`torch.load` (pickles): load only checkpoints
you wrote.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from r2s2r.files import disk_full, is_disk_full, load_safetensors, read_json


def flatten_optimizer(state: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """A torch optimizer's `state_dict()` as (tensors for safetensors, the rest as JSON)."""
    tensors, scalars = {}, {}
    for idx, values in state["state"].items():
        for name, value in values.items():
            if torch.is_tensor(value):
                tensors[f"{idx}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    """The `state_dict()` that `flatten_optimizer` took apart, for the optimizer's `load_state_dict`."""
    state: dict[int, dict] = {}
    for key, value in list(tensors.items()) + list(meta["scalars"].items()):
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def _is_deepspeed(accelerator) -> bool:
    return accelerator is not None and accelerator.state.deepspeed_plugin is not None


def save_checkpoint(
    output_dir: Path, step: int, model, optimizer, scheduler, ema, accelerator=None, run: dict | None = None
) -> Path:
    """Write checkpoint `step` (EMA model + full training state) and point `last` at it.

    `run` (the run's settings, JSON) is kept in `training_state/state.json` for `--resume` to compare.
    Call it on every process: under DeepSpeed the sharded optimizer state is written by all ranks in
    DeepSpeed's own format (`training_state/deepspeed/`); everything else is written by the main process.
    """
    root = Path(output_dir) / "checkpoints"
    tmp = root / f".{step:07d}.tmp"
    try:
        return _save_checkpoint(root, tmp, step, model, optimizer, scheduler, ema, accelerator, run)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(e):
            raise disk_full(root / f"{step:07d}") from e
        raise


def _save_checkpoint(root: Path, tmp: Path, step: int, model, optimizer, scheduler, ema, accelerator, run):
    final = root / f"{step:07d}"
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
        tensors, meta = flatten_optimizer(optimizer.state_dict())
        save_file(tensors, tmp / "training_state" / "optimizer.safetensors")
    ema_state = ema.state_dict()
    shadow = {f"{i}": p.detach().cpu().contiguous() for i, p in enumerate(ema_state.pop("shadow_params"))}
    save_file(shadow, tmp / "training_state" / "ema.safetensors")
    save_file({"torch": torch.get_rng_state()}, tmp / "training_state" / "rng.safetensors")
    save_file(_running_buffers(model), tmp / "training_state" / "buffers.safetensors")
    state = {
        "step": step,
        "optimizer": meta,
        "scheduler": scheduler.state_dict(),
        "ema": ema_state,
        "run": run,
    }
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


def read_training_state(directory: Path) -> dict:
    """`training_state/state.json` of checkpoint `directory`: step, optimizer and scheduler state, the run's
    settings (`run`, absent in checkpoints written before 2026-12-04)."""
    path = Path(directory).resolve() / "training_state" / "state.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{directory} holds no training state (training_state/state.json); point --resume at a "
            "checkpoint written by r2s2r-train, or start without --resume."
        )
    return read_json(path, _damaged_fix(directory))


def _damaged_fix(directory: Path) -> str:
    """How to resume when a file of checkpoint `directory` is damaged: from the checkpoint before it."""
    directory = Path(directory).resolve()
    return (
        f"checkpoint {directory.name} is damaged: point {directory.parent / 'last'} at an earlier checkpoint "
        f"(ln -sfn <step> {directory.parent / 'last'}) and resume, or train into a new --output_dir."
    )


def load_checkpoint(directory: Path, model, optimizer, scheduler, ema, accelerator=None) -> int:
    """Restore everything `save_checkpoint` wrote; returns the step to continue from.

    Under DeepSpeed call it after `accelerator.prepare`, on every process. A truncated or corrupt file
    raises `DamagedFileError` naming it and how to resume from the checkpoint before.
    """
    directory = Path(directory).resolve()
    state_dir, fix = directory / "training_state", _damaged_fix(directory)
    state = read_training_state(directory)
    if _is_deepspeed(accelerator):
        accelerator.load_state(str(state_dir / "deepspeed"))  # DeepSpeed's torch.load: trusted files only
    else:
        weights = load_safetensors(state_dir / "model.safetensors", fix)
        try:
            model.load_state_dict(weights, strict=True)
        except RuntimeError as e:
            first = next((ln.strip() for ln in str(e).splitlines()[1:] if ln.strip()), str(e))
            raise ValueError(
                f"checkpoint {directory} was trained with another model config ({first}); resume with the "
                f"config it was saved with ({directory / 'pretrained_model' / 'config.json'})."
            ) from None
        optimizer.load_state_dict(
            unflatten_optimizer(
                load_safetensors(state_dir / "optimizer.safetensors", fix), state["optimizer"]
            )
        )
    scheduler.load_state_dict(state["scheduler"])
    shadow = load_safetensors(state_dir / "ema.safetensors", fix)
    ema.load_state_dict({**state["ema"], "shadow_params": [shadow[f"{i}"] for i in range(len(shadow))]})
    torch.set_rng_state(load_safetensors(state_dir / "rng.safetensors", fix)["torch"])
    if (state_dir / "buffers.safetensors").is_file():  # checkpoints before 2026-12-03 have none
        buffers = dict(model.named_buffers())
        for name, value in load_safetensors(state_dir / "buffers.safetensors", fix).items():
            if name in buffers:
                buffers[name].copy_(value)
    return int(state["step"])


def _running_buffers(model) -> dict[str, torch.Tensor]:
    """The model's buffers that its weights file leaves out (non-persistent): running training statistics
    such as the world model's `view_energy`, which a resumed run must continue from."""
    saved = set(model.state_dict())
    return {k: v.detach().cpu().contiguous() for k, v in model.named_buffers() if k not in saved}
