"""The learned families of the policy zoo: LeRobot ACT checkpoints along one training run.

A simulator is worth trusting if it ranks policies as the reference world does, so the zoo needs
policies whose real success rates spread out. Checkpoints saved along one behaviour-cloning run give
that for free: early ones never transfer the cube, later ones about half the time (not monotonically in
the step: one late checkpoint can fall back to 0 %, which makes the ranking less trivial).

1. train LeRobot's ACT on the demonstrator recording, 14-D action chunks out: state-only by default
   (observation.state + observation.environment_state in; no vision backbone, cheap on a CPU), or, with
   `--cameras`, camera-only as a real ALOHA policy (those views + observation.state in, never the cube's
   pose; a ResNet-18 trained from scratch, since nothing is downloaded here),
2. save `<output_dir>/step_<N>/` at each `save_at` step: a LeRobot pretrained directory (config.json,
   model.safetensors, pre/post-processors with the dataset stats) that `LeRobotPolicyAdapter` loads,
   plus `training_state/` (optimizer, RNG, loss) to resume from,
3. play every checkpoint in the reference world, ID and OOD cubes, rendering only the views it reads.
Prints a table and writes benchmarks/results/zoo_act.json.

Resuming: a re-run keeps the checkpoints already saved and continues training from the newest one
(weights, optimizer and RNG state; batches are a function of (seed, step)), so an interrupted run
ends with the same checkpoints as an uninterrupted one.

Usage:
    python benchmarks/zoo_act.py          # ~20 min training + ~15 min eval on 2 shared cores
    python benchmarks/zoo_act.py --steps=400 --save_at='[200,400]' --eval_episodes=10  # a quick look
    bash benchmarks/camera_act.sh   # the camera-only runs of benchmarks/generalization.py's act_cam families
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).parent))
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from lerobot.configs.types import NormalizationMode  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402
from lerobot.datasets.utils import dataset_to_policy_features  # noqa: E402
from lerobot.policies.act.configuration_act import ACTConfig  # noqa: E402
from lerobot.policies.act.modeling_act import ACTPolicy  # noqa: E402
from lerobot.policies.factory import make_pre_post_processors  # noqa: E402
from lerobot.processor import PolicyProcessorPipeline  # noqa: E402
from lerobot.utils.train_utils import load_training_state, save_training_state  # noqa: E402
from safetensors.torch import load_model  # noqa: E402

from r2s2r.data.reader import ClipConfig, ClipDataset  # noqa: E402
from r2s2r.data.recorder import RecordConfig, evaluate  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import WorldConfig  # noqa: E402
from r2s2r.scripts.cli import run  # noqa: E402

INPUTS = ("observation.state", "observation.environment_state")  # the state-only policy's inputs
METRICS = "train_metrics.json"  # in <checkpoint>/training_state/: loss and wall time at that step
# Fields that define the training run: a resumed run must match the saved checkpoints on all of them.
RUN_KEYS = ("data", "only_successful", "batch_size", "lr", "weight_decay", "grad_clip", "chunk_size",
            "n_action_steps", "dim_model", "n_heads", "dim_feedforward", "n_encoder_layers",
            "n_vae_encoder_layers", "kl_weight", "seed", "cameras", "start_every")  # fmt: skip


@dataclass
class ZooConfig:
    """One ACT training run, its checkpoints, and how they are scored in the reference world."""

    data: str = "outputs/bench/data/train"  # LeRobot dataset recorded by r2s2r (demonstrators)
    heldout: str = "outputs/bench/data/heldout"  # dataset for the held-out action error ('' skips it)
    repo_id: str = "local/aloha_transfer_cube"  # repo id the recorder stored (never downloaded)
    output_dir: str = "outputs/bench/zoo/act"  # checkpoints go to <output_dir>/step_<N>/
    only_successful: bool = True  # clone only the episodes that reached success
    steps: int = 8000  # optimizer steps of the run
    save_at: list[int] = field(default_factory=lambda: [500, 1000, 2000, 3000, 4000, 5000, 6500, 8000])
    batch_size: int = 32  # frames (each with its action chunk) per step
    lr: float = 2e-4  # AdamW learning rate (constant, so a longer run extends a shorter one exactly)
    weight_decay: float = 1e-4  # AdamW weight decay
    grad_clip: float = 10.0  # gradient-norm clip, as lerobot-train
    chunk_size: int = 25  # actions predicted per query (0.5 s at 50 Hz)
    n_action_steps: int = 25  # actions executed before querying again (<= chunk_size)
    dim_model: int = 128  # transformer width
    n_heads: int = 8  # attention heads
    dim_feedforward: int = 512  # transformer MLP width
    n_encoder_layers: int = 2  # transformer encoder layers (the decoder has 1, as LeRobot's ACT)
    n_vae_encoder_layers: int = 1  # layers of the CVAE encoder (training only)
    kl_weight: float = 10.0  # weight of the CVAE KL term
    seed: int = 0  # weights, dropout and batches are a function of it
    cameras: list[str] = field(default_factory=list)  # views a camera-only policy reads (with the joint
    # state, never the cube's pose); empty: state-only
    start_every: int = 2  # with cameras: a batch starts only on every k-th frame, so only those frames'
    # images are decoded and kept in memory (uint8); the action chunks keep every step
    device: str = "auto"  # auto (cuda if present) | cpu | cuda
    eval_episodes: int = 20  # reference-world episodes per checkpoint and distribution
    eval_seed: int = 1000  # seed of the evaluation cube poses (training data used 100, held-out 200)
    eval_envs: int = 10  # episodes simulated in lockstep
    workers: int = 2  # processes that run evaluation episodes
    num_threads: int = 1  # torch CPU threads; 1 degrades gracefully on a shared machine, 2 spin-wait
    out: str = "benchmarks/results/zoo_act.json"  # where the JSON goes

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps={self.steps} and batch_size={self.batch_size} must be >= 1.")
        bad = [s for s in self.save_at if not 1 <= s <= self.steps]
        if not self.save_at or bad:
            raise ValueError(f"save_at={self.save_at} must be a non-empty list of steps in 1..{self.steps}.")
        self.save_at = sorted(set(self.save_at))
        if not 1 <= self.n_action_steps <= self.chunk_size:
            raise ValueError(
                f"n_action_steps={self.n_action_steps} must be in 1..chunk_size={self.chunk_size}."
            )
        if self.start_every < 1:
            raise ValueError(f"start_every={self.start_every} must be >= 1.")
        self.cameras = list(self.cameras)
        if self.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"

    def checkpoint(self, step: int) -> Path:
        return Path(self.output_dir) / f"step_{step}"

    @property
    def run_key(self) -> dict:
        return {k: getattr(self, k) for k in RUN_KEYS}

    @property
    def inputs(self) -> tuple[str, ...]:
        """The policy's input features."""
        if not self.cameras:
            return INPUTS
        return ("observation.state", *(f"observation.images.{cam}" for cam in self.cameras))


class ChunkData:
    """A LeRobot recording in memory, sampled as (frame, action chunk) batches.

    The tabular part is read through `LeRobotDataset.hf_dataset` rather than `dataset[i]`, which would
    decode three camera videos per frame. A camera-only policy's views are decoded once, for the frames a
    batch may start from (every `start_every`-th of each kept episode), and kept as uint8.
    """

    def __init__(self, root: str, cfg: ZooConfig, only_successful: bool):
        self.dataset = LeRobotDataset(cfg.repo_id, root=root)
        tabular = [k for k in cfg.inputs if not k.startswith("observation.images.")]
        cols = self.dataset.hf_dataset.with_format(
            "torch", columns=[*tabular, "action", "episode_index", "frame_index", "next.success"]
        )[:]
        episode = cols["episode_index"]  # (N,), sorted: LeRobot stores episodes one after the other
        ends = torch.searchsorted(episode, episode, right=True)  # (N,): one past its episode's last frame
        keep = torch.ones_like(episode, dtype=torch.bool)
        if only_successful:
            success = torch.zeros(int(episode.max()) + 1, dtype=torch.bool)
            success.index_put_((episode,), cols["next.success"].view(-1), accumulate=True)
            keep = success[episode]
        if cfg.cameras:
            keep &= cols["frame_index"] % cfg.start_every == 0
        self.frames = torch.nonzero(keep).view(-1)  # indices a batch may start from
        self.num_episodes = int(episode[self.frames].unique().numel())
        self.cols, self.ends, self.chunk_size, self.tabular = cols, ends, cfg.chunk_size, tabular
        kept = episode[self.frames].unique().tolist()
        self.images = _decode_views(root, cfg, kept, self.dataset.meta.fps) if cfg.cameras else {}

    def batch(self, frames: torch.Tensor) -> dict[str, torch.Tensor]:
        """Observations at `frames` (B,) and the next `chunk_size` actions, padded past episode ends."""
        idx = frames[:, None] + torch.arange(self.chunk_size)  # (B, T)
        pad = idx >= self.ends[frames, None]  # (B, T): past the episode's last frame
        idx = torch.minimum(idx, self.ends[frames, None] - 1)  # (B, T): LeRobot repeats the last action
        batch = {k: self.cols[k][frames] for k in self.tabular}
        if self.images:
            slot = torch.searchsorted(self.frames, frames)  # the images are stored in self.frames' order
            batch |= {k: v[slot].float().div_(255.0) for k, v in self.images.items()}  # (B, 3, H, W)
        batch["action"] = self.cols["action"][idx]  # (B, T, A)
        batch["action_is_pad"] = pad
        return batch

    def sample(self, batch_size: int, seed: int, step: int) -> dict[str, torch.Tensor]:
        """A batch that depends only on (seed, step), so a resumed run sees the same batches."""
        gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
        pick = torch.randint(len(self.frames), (batch_size,), generator=gen)
        return self.batch(self.frames[pick])


def _decode_views(root: str, cfg: ZooConfig, episodes: list[int], fps: int) -> dict[str, torch.Tensor]:
    """`observation.images.<cam>` -> (F, 3, H, W) uint8: every `start_every`-th frame of `episodes`, in
    order (the order of `ChunkData.frames`); `fps`: the recording's."""
    clips = ClipDataset(ClipConfig(
        root=root, repo_id=cfg.repo_id, cameras=tuple(cfg.cameras), frame_rate=fps // cfg.start_every,
        future_frames=1, context_frames=1, episodes=tuple(episodes),
    ))  # fmt: skip
    views: dict[str, list[torch.Tensor]] = {k: [] for k in clips.camera_keys}
    for ep in tqdm(episodes, desc="decode views", unit="episode"):
        clip = clips.episode(ep)
        for k in views:
            views[k].append(clip[k].mul(255.0).round_().to(torch.uint8))
    return {k: torch.cat(v) for k, v in views.items()}


def make_policy(
    cfg: ZooConfig, data: ChunkData
) -> tuple[ACTPolicy, PolicyProcessorPipeline, PolicyProcessorPipeline]:
    """A fresh ACT and its pre/post-processors, normalizing with the dataset's stats."""
    features = dataset_to_policy_features(data.dataset.meta.features)
    act_cfg = ACTConfig(
        input_features={k: features[k] for k in cfg.inputs},  # environment_state is FeatureType.ENV
        output_features={"action": features["action"]},
        # ACT's default map has no ENV entry, which leaves the cube pose unnormalized. Quantiles (q01..q99
        # -> -1..1), not mean/std: a few cubes knocked off the table (z down to -84 m) make the std of z
        # 2.2 m, which would squash every real cube height into a few hundredths.
        normalization_mapping={
            "VISUAL": NormalizationMode.MEAN_STD,  # per channel, the frames' own stats (`image_stats`)
            "STATE": NormalizationMode.MEAN_STD,
            "ENV": NormalizationMode.QUANTILES,
            "ACTION": NormalizationMode.MEAN_STD,
        },
        chunk_size=cfg.chunk_size,
        n_action_steps=cfg.n_action_steps,
        dim_model=cfg.dim_model,
        n_heads=cfg.n_heads,
        dim_feedforward=cfg.dim_feedforward,
        n_encoder_layers=cfg.n_encoder_layers,
        n_vae_encoder_layers=cfg.n_vae_encoder_layers,
        kl_weight=cfg.kl_weight,
        pretrained_backbone_weights=None,  # nothing is downloaded: a camera policy's ResNet starts random
        optimizer_lr=cfg.lr,
        optimizer_weight_decay=cfg.weight_decay,
        device=cfg.device,
        push_to_hub=False,
    )
    policy = ACTPolicy(act_cfg).to(cfg.device)
    stats = dict(data.dataset.meta.stats) | {k: image_stats(v) for k, v in data.images.items()}
    pre, post = make_pre_post_processors(act_cfg, dataset_stats=stats)
    return policy, pre, post


def image_stats(images: torch.Tensor, chunk: int = 512) -> dict[str, np.ndarray]:
    """Per-channel mean and std of uint8 frames (F, 3, H, W) read as [0, 1], shaped (3, 1, 1) as LeRobot's.

    Computed from the frames themselves: the per-channel image stats LeRobot 0.4.4 writes while recording
    here are not the frames' (std about 0.001 where the pixels spread over 0..1), and normalizing by them
    scales a policy's inputs up a thousandfold."""
    total = torch.zeros(3, dtype=torch.float64)
    squares = torch.zeros(3, dtype=torch.float64)
    for part in images.split(chunk):
        x = part.double().div_(255.0)
        total += x.sum((0, 2, 3))
        squares += x.square().sum((0, 2, 3))
    n = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / n
    std = (squares / n - mean.square()).clamp_min(0).sqrt()
    return {"mean": mean.view(3, 1, 1).numpy(), "std": std.view(3, 1, 1).numpy()}


def save_checkpoint(cfg: ZooConfig, step: int, policy, pre, post, optimizer, metrics: dict) -> Path:
    """Write `<output_dir>/step_<step>/` under a temporary name, then rename it: all or nothing."""
    final = cfg.checkpoint(step)
    tmp = final.with_name(f".{final.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp)  # config.json + model.safetensors
    pre.save_pretrained(tmp)  # policy_preprocessor.json + normalizer stats (safetensors)
    post.save_pretrained(tmp)
    save_training_state(tmp, step, optimizer)  # training_state/: optimizer, RNG, step
    (tmp / "training_state" / METRICS).write_text(json.dumps(metrics, indent=2))
    tmp.rename(final)
    return final


def train_zoo(cfg: ZooConfig) -> list[dict]:
    """Train (or finish training) the run and return the metrics saved with each checkpoint."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for leftover in out.glob(".step_*.tmp"):
        shutil.rmtree(leftover)  # a checkpoint a killed run did not finish
    todo = [s for s in cfg.save_at if not cfg.checkpoint(s).is_dir()]
    if todo:
        torch.manual_seed(cfg.seed)
        data = ChunkData(cfg.data, cfg, cfg.only_successful)
        heldout = ChunkData(cfg.heldout, cfg, False) if cfg.heldout else None
        policy, pre, post = make_policy(cfg, data)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        on_disk = sorted(int(p.name.removeprefix("step_")) for p in out.glob("step_*") if p.is_dir())
        done = [s for s in on_disk if s < todo[0]]  # any saved step, not only those in save_at
        start, seconds, recent = 0, 0.0, []
        if done:  # continue from the newest checkpoint before the first missing one
            ckpt = cfg.checkpoint(done[-1])
            saved = json.loads((ckpt / "training_state" / METRICS).read_text())
            changed = {k: (v, cfg.run_key[k]) for k, v in saved["run"].items() if cfg.run_key[k] != v}
            if changed:
                raise ValueError(
                    f"cannot resume {out} with different settings ({changed}, saved vs now); "
                    "use the same ones or a new --output_dir."
                )
            load_model(policy, ckpt / "model.safetensors")
            start, optimizer, _ = load_training_state(ckpt, optimizer, None)  # also restores the RNG
            seconds, recent = saved["train_seconds"], saved["recent"]
        n_params = sum(p.numel() for p in policy.parameters())
        print(
            f"ACT {n_params / 1e6:.2f} M parameters; {data.num_episodes} episodes, "
            f"{len(data.frames)} frames; training steps {start + 1}..{todo[-1]} on {cfg.device}"
        )
        _train_loop(cfg, data, heldout, policy, pre, post, optimizer, start, seconds, recent, todo)
    return [json.loads((cfg.checkpoint(s) / "training_state" / METRICS).read_text()) for s in cfg.save_at]


def _train_loop(cfg, data, heldout, policy, pre, post, optimizer, start, seconds, recent, todo) -> None:
    """Steps `start + 1 .. todo[-1]`, saving at each step in `todo`; `recent`: the last 100 steps' losses."""
    bar = tqdm(range(start + 1, todo[-1] + 1), desc="train", unit="step")
    tic = time.perf_counter()
    for step in bar:
        policy.train()
        batch = pre(data.sample(cfg.batch_size, cfg.seed, step))  # normalized, on the device
        loss, logs = policy.forward(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
        optimizer.step()
        recent = (recent + [[loss.item(), logs["l1_loss"]]])[-100:]
        if step % 50 == 0:
            bar.set_postfix(loss=f"{np.mean([r[0] for r in recent]):.3f}")
        if step in todo:
            metrics = {
                "step": step,
                "train_loss": float(np.mean([r[0] for r in recent])),  # mean of the last 100 steps
                "train_l1": float(np.mean([r[1] for r in recent])),
                "heldout_l1": heldout_l1(policy, pre, heldout, cfg) if heldout else None,
                "train_seconds": seconds + time.perf_counter() - tic,
                "run": cfg.run_key,
                "recent": recent,  # (loss, l1) of the last 100 steps, for a resumed run's running mean
            }
            # Held-out scoring draws no random numbers, so the RNG saved here is the training run's own.
            save_checkpoint(cfg, step, policy, pre, post, optimizer, metrics)
    bar.close()


@torch.no_grad()
def heldout_l1(policy: ACTPolicy, pre, data: ChunkData, cfg: ZooConfig, frames: int = 2048) -> float:
    """Mean L1 (normalized units) of inference-mode action chunks on fixed held-out frames."""
    policy.eval()
    pick = data.frames[torch.linspace(0, len(data.frames) - 1, frames).long()]
    errors = []
    for chunk in pick.split(512):
        batch = pre(data.batch(chunk))
        actions = policy.model(batch)[0]  # (B, T, A); eval mode: CVAE latent = 0
        err = (actions - batch["action"]).abs().mean(-1)  # (B, T)
        errors.append(err[~batch["action_is_pad"]])
    return float(torch.cat(errors).mean())


def evaluate_checkpoint(cfg: ZooConfig, step: int, dist: str) -> dict:
    """Reference-world labels of one checkpoint on `dist` cubes, cached in `<output_dir>/eval/`.

    The cache is keyed by the weights' hash, the seed and the episode count, so a re-run only plays the
    checkpoints it has not played yet.
    """
    ckpt = cfg.checkpoint(step)
    sha = hashlib.sha1((ckpt / "model.safetensors").read_bytes()).hexdigest()
    cache = (
        Path(cfg.output_dir) / "eval" / f"step_{step}_{dist}_seed{cfg.eval_seed}_n{cfg.eval_episodes}.json"
    )
    if cache.is_file() and json.loads(cache.read_text())["model_sha1"] == sha:
        return json.loads(cache.read_text())
    rec = RecordConfig(
        num_episodes=cfg.eval_episodes, distribution=dist, seed=cfg.eval_seed, workers=cfg.workers,
        world=WorldConfig(num_envs=cfg.eval_envs, cameras=tuple(cfg.cameras)),  # only the views it reads
        policy=PolicyConfig(path=str(ckpt), device=cfg.device),
    )  # fmt: skip
    tic = time.perf_counter()
    labels = evaluate(rec, render=bool(cfg.cameras))
    result = {"model_sha1": sha, "seconds": time.perf_counter() - tic, "labels": labels}
    cache.parent.mkdir(exist_ok=True)
    write_json(cache, result)
    return result


def evaluate_zoo(cfg: ZooConfig, metrics: list[dict]) -> list[dict]:
    """Play each checkpoint in the reference world (ID and OOD cubes, rendering only the views it reads)."""
    results = []
    for m in metrics:
        row = {k: v for k, v in m.items() if k not in ("run", "recent")}
        row["checkpoint"] = str(cfg.checkpoint(m["step"]))
        for dist in ("id", "ood"):
            played = evaluate_checkpoint(cfg, m["step"], dist)
            labels = played["labels"]
            row[f"{dist}_seconds"] = played["seconds"]
            row[f"{dist}_success"] = float(np.mean([e["success"] for e in labels]))
            row[f"{dist}_success_at_end"] = float(np.mean([e["success_at_end"] for e in labels]))
            row[f"{dist}_max_reward_histogram"] = np.bincount(
                [int(e["max_reward"]) for e in labels], minlength=5
            ).tolist()
        results.append(row)
    return results


def report(cfg: ZooConfig, results: list[dict]) -> None:
    rows = [
        [f"step_{r['step']}", r["train_loss"], r["train_l1"], r["heldout_l1"] if r["heldout_l1"] else "-",
         f"{100 * r['id_success']:.0f}", f"{100 * r['ood_success']:.0f}", str(r["id_max_reward_histogram"]),
         f"{r['train_seconds']:.0f}", f"{r['id_seconds'] + r['ood_seconds']:.0f}"]
        for r in results
    ]  # fmt: skip
    print_table(
        f"{'Camera-only' if cfg.cameras else 'State-only'} ACT checkpoints in the reference world "
        f"({cfg.eval_episodes} episodes per distribution, "
        f"seed {cfg.eval_seed}; success = top reward at any step; loss = mean of the last 100 steps)",
        ["checkpoint", "train loss", "train L1", "held-out L1", "ID success %", "OOD success %",
         "ID max-reward hist 0..4", "train s (cumulative)", "eval s"],
        rows,
    )  # fmt: skip


def zoo(cfg: ZooConfig) -> int:
    """Train, save, score and report: the whole benchmark from Python."""
    start = time.perf_counter()
    torch.set_num_threads(cfg.num_threads)
    metrics = train_zoo(cfg)
    results = evaluate_zoo(cfg, metrics)
    report(cfg, results)
    payload = {"benchmark": "zoo_act", "machine": machine_info(), "config": asdict(cfg),
               "checkpoints": results, "seconds": time.perf_counter() - start}  # fmt: skip
    write_json(cfg.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(run(ZooConfig, zoo, __doc__, None, "zoo_act.py"))
