"""Train the world model: one `train(cfg)` on accelerate (CPU, one GPU, or several via `accelerate launch`).

    setup (data, model with the data's normalization stats, AdamW + cosine schedule, EMA, accelerate)
    loop:  batch -> train_step (accumulate, autocast, backward, clip, step) -> log -> save every N
    finish: a last checkpoint whose `pretrained_model/` is what the rest of r2s2r loads

The sample order is a pure function of (seed, step), and checkpoints hold the optimizer, scheduler, EMA
and RNG state, so `--resume` continues the same run bit for bit on the same machine. A resume that changes
what defines the run (the model config, the data, the batch, the seed, the optimiser's settings: see
`RUN_SETTINGS`) is refused with the list of changes. `--steps` may be raised to train further: the cosine
schedule then becomes that of a run of the new length (at the resumed step the learning rate is what such a
run would have there), so the result equals neither run exactly.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from r2s2r.data.mixture import MixtureBatchSampler, MixtureDataset, dataset_robot, open_sources, split_roots
from r2s2r.data.provenance import dataset_provenance, read_provenance, write_provenance
from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate
from r2s2r.errors import SettingsChangedError, UserError
from r2s2r.files import atomic_write_text
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.training.checkpoint import load_checkpoint, read_training_state, save_checkpoint
from r2s2r.training.mixture import (
    adapt_pretrained,
    check_known_robot,
    mixture_config,
    model_frame_rate,
    set_mixture_stats,
)

log = logging.getLogger(__name__)
PRESETS = ("tiny", "small", "base")
# What defines a run, besides the model config: `--resume` refuses to change any of these. The rest (steps,
# stop_after, logging, saving, workers, precision, tensorboard) may change between jobs.
RUN_SETTINGS = ("preset", "batch_size", "grad_accum", "lr", "warmup_steps", "weight_decay", "grad_clip",
                "ema_decay", "seed", "init_from")  # fmt: skip
DATA_SETTINGS = (
    "root",
    "episodes",
    "frame_rate",
    "future_frames",
    "robot",
    "action_free",
    "action_free_share",
)
# Settings added after runs were first saved, with the value older checkpoints were trained with.
LATER_SETTINGS = {"init_from": "", "data.action_free": [], "data.action_free_share": 0.0}


class TrainingDivergedError(UserError, FloatingPointError):
    """The loss became NaN or infinite."""


@dataclass
class TrainConfig:
    """A training run: data, model preset (with overrides), optimisation and checkpointing."""

    output_dir: str = "outputs/train/world_model"  # checkpoints/ and logs go here
    preset: str = "small"  # tiny (tests) | small (2-core CPU, ~1 h) | base (one GPU)
    model: WorldModelConfig = field(default_factory=WorldModelConfig)  # --model.<field> overrides the preset
    data: ClipConfig = field(default_factory=ClipConfig)  # clips to train on (at the model's frame rate)
    steps: int = 3000  # optimizer steps in total
    batch_size: int = 8  # clips per step (per process)
    grad_accum: int = 1  # micro-batches per optimizer step
    lr: float = 3e-4  # peak learning rate (cosine decay after warmup)
    warmup_steps: int = 100  # linear warmup
    weight_decay: float = 0.01  # AdamW weight decay
    grad_clip: float = 1.0  # max gradient norm
    ema_decay: float = 0.999  # EMA of the weights, which is what checkpoints publish
    num_workers: int = 2  # DataLoader processes decoding video
    log_every: int = 50  # steps between log lines
    save_every: int = 500  # steps between checkpoints
    seed: int = 0  # data order and initialisation
    resume: bool = False  # continue from <output_dir>/checkpoints/last
    stop_after: int = 0  # if > 0, save and stop at this step (split a long run into jobs; resume later)
    mixed_precision: str = "auto"  # auto (bf16 on CUDA, none on CPU) | no | bf16 | fp16
    tensorboard: bool = False  # also log to <output_dir>/logs (needs tensorboard installed)
    init_from: str = ""  # fine-tune: start from this pretrained model directory (its architecture, the
    # robots and tasks it knows; --model.* flags are not read); the data's robots must be known to it

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"preset='{self.preset}' must be one of {PRESETS}.")
        if self.preset != "small":  # fields left at the small defaults take the preset's values
            given, defaults = self.model.to_dict(), WorldModelConfig().to_dict()
            overrides = {k: v for k, v in given.items() if v != defaults[k] and k != "head"}
            overrides["head"] = {k: v for k, v in given["head"].items() if v != defaults["head"][k]}
            self.model = getattr(WorldModelConfig, self.preset)(**overrides)
        self.data.cameras = self.model.cameras
        self.data.context_frames = self.model.context_frames
        for name in ("steps", "batch_size", "grad_accum", "save_every", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1.")


class StepSampler(torch.utils.data.Sampler):
    """Sample indices as a pure function of (seed, position): epoch e is permutation(seed + e).

    Starting at `start_batch` replays exactly the batches a run that never stopped would have seen.
    """

    def __init__(
        self, size: int, batch_size: int, seed: int, start_batch: int = 0, rank: int = 0, world: int = 1
    ):
        self.size, self.batch_size, self.seed, self.start = size, batch_size, seed, start_batch
        self.rank, self.world = rank, world
        self.per_epoch = size // (batch_size * world)
        if self.per_epoch == 0:
            raise ValueError(
                f"{size} clips are fewer than one batch of {batch_size * world}; record more data."
            )

    def __iter__(self):
        batch = self.start
        while True:
            epoch, offset = divmod(batch, self.per_epoch)
            order = np.random.default_rng(self.seed + epoch).permutation(self.size)
            share = order[self.rank :: self.world]
            yield from share[offset * self.batch_size : self.per_epoch * self.batch_size].tolist()
            batch = (epoch + 1) * self.per_epoch


def _accelerator(cfg: TrainConfig):
    from accelerate import Accelerator

    precision = cfg.mixed_precision
    if precision == "auto":
        precision = "bf16" if torch.cuda.is_available() else "no"
    return Accelerator(
        mixed_precision=precision,
        gradient_accumulation_steps=cfg.grad_accum,
        log_with="tensorboard" if cfg.tensorboard else None,
        project_dir=cfg.output_dir,
    )


def train(cfg: TrainConfig) -> Path:
    """Train (or resume) and return the last checkpoint's `pretrained_model` directory."""
    from diffusers.optimization import get_cosine_schedule_with_warmup
    from diffusers.training_utils import EMAModel

    output = Path(cfg.output_dir)
    settings = run_settings(cfg)
    last = _last_checkpoint(cfg)
    accelerator = _accelerator(cfg)
    torch.manual_seed(cfg.seed)
    dataset, model, started = _data_and_model(cfg)
    if cfg.resume:
        check_resume(cfg, last, settings)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = get_cosine_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.steps)
    ema = EMAModel(model.parameters(), decay=cfg.ema_decay)
    if accelerator.state.deepspeed_plugin is not None:  # DeepSpeed sizes its buffers from the micro-batch
        accelerator.state.deepspeed_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = cfg.batch_size
    model, optimizer = accelerator.prepare(model, optimizer)
    ema.to(accelerator.device)
    start = 0
    if cfg.resume:
        start = load_checkpoint(last, accelerator.unwrap_model(model), optimizer, scheduler, ema, accelerator)
        log.info("resumed from %s at step %d", last.resolve(), start)

    loader = _mixture_loader(cfg, dataset, start, accelerator) if isinstance(dataset, MixtureDataset) else (
        _loader(cfg, dataset, start, accelerator))  # fmt: skip
    if cfg.tensorboard:
        accelerator.init_trackers("r2s2r", config=_flat(cfg))
    log.info("training %s (%.2f M parameters) on %d clips, %s", cfg.preset, _millions(model), len(dataset),
             accelerator.device)  # fmt: skip

    batches = iter(loader)
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="train", unit="step",
               disable=not accelerator.is_main_process)  # fmt: skip
    seen, tic = 0, time.perf_counter()
    for step in bar:
        for _ in range(cfg.grad_accum):
            logs = train_step(accelerator, model, optimizer, next(batches), cfg.grad_clip)
            seen += cfg.batch_size * accelerator.num_processes
        scheduler.step()
        ema.step(accelerator.unwrap_model(model).parameters())
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            logs.update(lr=scheduler.get_last_lr()[0], samples_per_s=seen / (time.perf_counter() - tic))
            bar.set_postfix(loss=f"{logs['loss']:.4f}")
            accelerator.log(logs, step=step + 1)
            log.info("step %d: %s", step + 1, " ".join(f"{k}={v:.4g}" for k, v in logs.items()))
        stop = step + 1 == cfg.steps or step + 1 == cfg.stop_after
        if (step + 1) % cfg.save_every == 0 or stop:
            save_checkpoint(output, step + 1, model, optimizer, scheduler, ema, accelerator, settings)
        if stop:
            break
    accelerator.end_training()
    model_dir = (output / "checkpoints" / "last" / "pretrained_model").resolve()
    if accelerator.is_main_process:
        _write_records(cfg, model_dir, started)
    return model_dir


def _write_records(cfg: TrainConfig, model_dir: Path, started: dict | None) -> None:
    """provenance.json (every dataset, the pretrained model's too) and, for a pretrained start, init.json
    (which weights came from it)."""
    entries = [dataset_provenance(root, "train") for root in split_roots(cfg.data.root)]
    if cfg.init_from:  # what the pretrained model learnt from is in this one too
        entries = [
            {**e, "stage": f"pretrain ({e['stage']})"} for e in read_provenance(cfg.init_from)
        ] + entries
    write_provenance(model_dir, entries)
    if started is not None:
        atomic_write_text(
            model_dir / "init.json", json.dumps({"init_from": cfg.init_from, **started}, indent=1)
        )


def _data_and_model(cfg: TrainConfig) -> tuple[torch.utils.data.Dataset, WorldModel, dict | None]:
    """The training data and the model to train: one dataset as before, or (several datasets, or a
    pretrained start) a `MixtureDataset` and a model whose robots and tasks are the data's. `cfg.model`
    becomes that model's config. The third value says what a pretrained start loaded (None: from scratch)."""
    if len(split_roots(cfg.data.root)) == 1 and not cfg.init_from and not cfg.data.action_free:
        dataset = _dataset(cfg)
        model = WorldModel(cfg.model)
        model.set_stats(dataset.stats)
        return dataset, model, None
    pretrained = WorldModel.from_pretrained(cfg.init_from) if cfg.init_from else None
    base = pretrained.config if pretrained is not None else cfg.model
    own = dataset_robot(split_roots(cfg.data.root)[0], cfg.data.robot or "aloha")
    if pretrained is not None:
        check_known_robot(base, own, split_roots(cfg.data.root)[0])
    cameras = base.embodiment(own).cameras if own in base.robots else ()
    cfg.data.future_frames = cfg.data.future_frames or 3
    sources = open_sources(cfg.data, model_frame_rate(base), cameras, own)
    started = None
    if pretrained is not None:
        model, started = adapt_pretrained(pretrained, sources)
    else:
        model = WorldModel(mixture_config(base, sources))
        set_mixture_stats(model, sources)
    cfg.model = model.config
    return MixtureDataset(sources, cfg.model.robots, list(cfg.model.tasks)), model, started


def _dataset(cfg: TrainConfig) -> ClipDataset:
    """The training clips at the model's frame rate; data the model cannot learn from is refused."""
    match_frame_rate(cfg.data, cfg.model.frame_stride)
    cfg.data.future_frames = cfg.data.future_frames or 3  # one is denoised, the state head unrolls all
    dataset = ClipDataset(cfg.data)
    if dataset.stride != cfg.model.frame_stride:
        raise ValueError(
            f"data.frame_rate={cfg.data.frame_rate} Hz gives a stride of {dataset.stride} control steps but "
            f"the model expects frame_stride={cfg.model.frame_stride}; "
            f"set --data.frame_rate={dataset.fps // cfg.model.frame_stride}."
        )
    if cfg.model.sketched_objects and "observation.environment_state" not in dataset.stats:
        raise ValueError(
            f"the model sketches objects (object_sketch) but {cfg.data.root} has no "
            "observation.environment_state (object poses); set --model.object_sketch=false."
        )
    return dataset


def _last_checkpoint(cfg: TrainConfig) -> Path:
    """Where the run's last checkpoint is (or will be); a resume needs one, a new run must not find one."""
    output = Path(cfg.output_dir)
    last = output / "checkpoints" / "last"
    if cfg.resume and not last.exists():
        raise FileNotFoundError(f"--resume: no checkpoint at {last}; train without --resume first.")
    if not cfg.resume and last.exists():
        raise ValueError(
            f"{output} already holds a run; pass --resume to continue it or pick a new --output_dir."
        )
    return last


def run_settings(cfg: TrainConfig) -> dict:
    """What defines the run `cfg` asks for (`RUN_SETTINGS`, the data's `DATA_SETTINGS`), as JSON values;
    the data folder as an absolute path, so a resume from another working directory compares equal."""
    settings = {name: getattr(cfg, name) for name in RUN_SETTINGS}
    settings["init_from"] = str(Path(cfg.init_from).resolve()) if cfg.init_from else ""
    for name in DATA_SETTINGS:
        value = getattr(cfg.data, name)
        if name == "root":
            roots = [str(Path(r).resolve()) for r in split_roots(value)]
            value = roots[0] if len(roots) == 1 else roots
        elif name == "action_free":
            value = [str(Path(r).resolve()) for r in value]
        settings[f"data.{name}"] = value
    return json.loads(json.dumps(settings))


def check_resume(cfg: TrainConfig, last: Path, settings: dict) -> None:
    """Refuse to resume the checkpoint `last` with another model config, other `run_settings`, or fewer
    `steps` than it has already taken; name every change and the fix."""
    state, changes = read_training_state(last), []
    saved = state.get("run")
    if saved is None:  # a checkpoint from before runs kept their settings: only the model can be checked
        log.warning("%s does not record its run's settings; they are not checked on resume", last)
    else:
        saved = {**LATER_SETTINGS, **saved}
        changes += [
            f"--{k}: checkpoint {saved.get(k)!r}, now {v!r}" for k, v in settings.items() if saved.get(k) != v
        ]
    changes += [
        f"--model.{k}: checkpoint {a!r}, now {b!r}"
        for k, (a, b) in WorldModelConfig.load(last / "pretrained_model").differences(cfg.model).items()
    ]
    if changes:
        shown = "; ".join(changes[:6]) + (f"; and {len(changes) - 6} more" if len(changes) > 6 else "")
        raise SettingsChangedError(
            f"cannot resume {cfg.output_dir} with other settings ({shown}); resume with the flags it was "
            "started with (--steps may grow), or train into a new --output_dir."
        )
    if cfg.steps < state["step"]:
        raise SettingsChangedError(
            f"--steps={cfg.steps} is below the {state['step']} steps checkpoint {last.resolve().name} has "
            f"taken; pass --steps >= {state['step']} to resume it."
        )


def _loader(cfg: TrainConfig, dataset: ClipDataset, start: int, accelerator) -> torch.utils.data.DataLoader:
    """Batches in the order the seed fixes, from step `start` on, this process's share of them."""
    sampler = StepSampler(len(dataset), cfg.batch_size, cfg.seed, start * cfg.grad_accum,
                          accelerator.process_index, accelerator.num_processes)  # fmt: skip
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        sampler=sampler,
        num_workers=cfg.num_workers,
        drop_last=True,
        persistent_workers=cfg.num_workers > 0,
        generator=torch.Generator().manual_seed(
            cfg.seed
        ),  # the global RNG, saved in checkpoints, is the model's
    )


def _mixture_loader(cfg: TrainConfig, dataset: MixtureDataset, start: int, accelerator):
    """Batches of one (robot, task) group each, in the order the seed fixes, from step `start` on."""
    sampler = MixtureBatchSampler(dataset.groups(), cfg.batch_size, cfg.seed, start * cfg.grad_accum,
                                  accelerator.process_index, accelerator.num_processes,
                                  dataset.group_weights(cfg.data.action_free_share))  # fmt: skip
    return torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, num_workers=cfg.num_workers, persistent_workers=cfg.num_workers > 0,
        generator=torch.Generator().manual_seed(cfg.seed),  # not the global RNG: checkpoints restore that one
    )  # fmt: skip


def train_step(accelerator, model, optimizer, batch: dict, grad_clip: float) -> dict[str, float]:
    """One micro-batch: forward under autocast, backward, and (at accumulation boundaries) clip and step."""
    with accelerator.accumulate(model), accelerator.autocast():
        batch = {k: v.to(accelerator.device, non_blocking=True) for k, v in batch.items()}
        loss, logs = model(batch)
        if not math.isfinite(logs["loss"]):
            raise TrainingDivergedError(
                f"loss became {logs['loss']}; lower --lr or check the data for outliers."
            )
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            logs.update(part_grad_norms(accelerator.unwrap_model(model)))
            logs["grad_norm"] = float(accelerator.clip_grad_norm_(model.parameters(), grad_clip))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return logs


PARTS = ("denoiser", "state_head", "judge")


def part_grad_norms(model: WorldModel) -> dict[str, float]:
    """Gradient norm of each part before clipping: each part has its own loss, and one shared clip can let
    one part's gradient shrink another's step. Parts without local gradients (DeepSpeed shards) are left out.
    """
    norms = {}
    for part in PARTS:
        grads = [p.grad.detach().float() for p in getattr(model, part).parameters() if p.grad is not None]
        if grads:
            norms[f"grad_norm_{part}"] = float(
                torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
            )
    return norms


def _millions(model) -> float:
    return sum(p.numel() for p in model.parameters()) / 1e6


def _flat(cfg: TrainConfig) -> dict:
    out = {}
    for key, value in asdict(cfg).items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": str(v) for k, v in value.items()})
        else:
            out[key] = value
    return out
