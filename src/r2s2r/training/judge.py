"""Fit the success/reward judge to the world model's own imagined frames.

The judge learns with the world model from real frames. Imagined frames are not real frames: at 48x64
the video model's one-step samples are softer and grainier than the recordings, the cube a blurred red
blob. A judge that has only seen real frames reads them poorly: on 2026-12-03, replaying the held-out
episodes with object sketches, the state head predicted 94 % of the logged outcomes and the judge, reading
the imagined video, 19 %. `refit_judge` replays each episode of the given recordings open-loop in the world
model (from its first observation, the logged actions, as `r2s2r-eval-openloop` does) and trains the
judge on the imagined frames beside the real ones, each labelled with the staged reward and success the
recording logged at that time. Everything else in the model is left as it was. Give it the world model's
training recordings, never the episodes it is evaluated on.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate
from r2s2r.files import atomic_write_text
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.rollout.replay import imagine_episodes

log = logging.getLogger(__name__)


@dataclass
class JudgeConfig:
    """Which world model's judge to fit, on which recordings, and for how long."""

    checkpoint: str = "assets/world_model_small"  # WorldModel directory
    data: list[str] = field(default_factory=list)  # recordings to replay (the model's training recordings)
    output_dir: str = "outputs/world_model_judged"  # the world model with the fitted judge
    steps: int = 2000  # optimizer steps of the judge
    batch_size: int = 64  # frames per step, half real and half imagined
    lr: float = 3e-4  # AdamW learning rate (constant)
    sampling_steps: int = 1  # denoising steps per imagined frame (as the model will be used)
    batch_episodes: int = 8  # episodes imagined together
    seed: int = 0  # imagination noise and batch order

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError(
                "data is empty: pass the world model's training recordings, --data='[DIR, ...]'."
            )
        for name in ("steps", "batch_size", "batch_episodes", "sampling_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1.")


def _to_bytes(frames: torch.Tensor) -> torch.Tensor:
    """Frames in [-1,1] -> uint8, to keep thousands of them in memory."""
    return ((frames.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)


def _from_bytes(frames: torch.Tensor) -> torch.Tensor:
    return frames.float() / 127.5 - 1


@torch.no_grad()
def replay_frames(model: WorldModel, root: str, cfg: JudgeConfig) -> dict[str, torch.Tensor]:
    """Real and imagined frames 1..T-1 of every episode of `root` at the model's resolution (N,V,3,h,w) as
    uint8, with the logged staged reward and success of each (N,)."""
    mc = model.config
    clips = ClipConfig(root=root, cameras=mc.cameras, context_frames=1, future_frames=1)
    match_frame_rate(clips, mc.frame_stride)
    dataset = ClipDataset(clips)
    pool: dict[str, list[torch.Tensor]] = {"real": [], "imagined": [], "reward": [], "success": []}
    batches = [eps[i : i + cfg.batch_episodes] for eps in dataset.episodes_by_length().values()
               for i in range(0, len(eps), cfg.batch_episodes)]  # fmt: skip
    for eps in tqdm(batches, desc=f"imagining {Path(root).name}", unit="batch"):
        real = [dataset.episode(ep) for ep in eps]
        if not {"next.reward", "next.success"} <= set(real[0]):
            raise ValueError(
                f"{root} has no next.reward/next.success: the judge learns from the logged labels."
            )
        imagined = imagine_episodes(model, real, cfg.sampling_steps, cfg.seed)
        for r, im in zip(real, imagined, strict=True):
            pool["real"].append(_to_bytes(model.frames({k: r[k][None] for k in mc.camera_keys})[0, 1:]))
            pool["imagined"].append(
                _to_bytes(model.frames({k: im["frames"][k][None] for k in mc.camera_keys})[0, 1:])
            )
            pool["reward"].append(r["next.reward"].long().clamp(0, mc.reward_levels - 1))
            pool["success"].append(r["next.success"].float())
    return {k: torch.cat(v) for k, v in pool.items()}


def judge_loss(model: WorldModel, frames: torch.Tensor, reward: torch.Tensor, success: torch.Tensor):
    """Cross-entropy of the staged reward plus the success BCE, as in joint training; and the accuracy."""
    reward_logits, success_logit = model.judge(frames)
    loss = F.cross_entropy(reward_logits, reward) + F.binary_cross_entropy_with_logits(success_logit, success)
    return loss, (reward_logits.argmax(-1) == reward).float().mean()


@torch.no_grad()
def judge_scores(model: WorldModel, pool: dict[str, torch.Tensor], chunk: int = 512) -> dict:
    """Staged-reward accuracy and success recall of the judge on the pool's real and imagined frames."""
    out, positives = {}, int((pool["success"] > 0.5).sum())
    for name in ("real", "imagined"):
        correct, found = 0, 0
        for i in range(0, len(pool[name]), chunk):
            logits, success_logit = model.judge(_from_bytes(pool[name][i : i + chunk]))
            correct += int((logits.argmax(-1) == pool["reward"][i : i + chunk]).sum())
            found += int(((success_logit > 0) & (pool["success"][i : i + chunk] > 0.5)).sum())
        out[name] = {
            "reward_accuracy": correct / len(pool[name]),
            "success_recall": found / max(positives, 1),
        }
    return out


def refit_judge(cfg: JudgeConfig) -> dict:
    """Fit `cfg.checkpoint`'s judge to real and imagined frames of `cfg.data`; write the model to
    `cfg.output_dir` (with judge.json: the judge's scores on those frames before and after)."""
    model = WorldModel.from_pretrained(cfg.checkpoint).eval()
    parts = [replay_frames(model, root, cfg) for root in cfg.data]
    pool = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    before = judge_scores(model, pool)
    generator = torch.Generator().manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(model.judge.parameters(), lr=cfg.lr)
    model.judge.train()
    half, n = cfg.batch_size // 2, len(pool["reward"])
    bar = tqdm(range(cfg.steps), desc="judge", unit="step")
    for _ in bar:
        real = torch.randint(0, n, (cfg.batch_size - half,), generator=generator)
        imagined = torch.randint(0, n, (half,), generator=generator)
        frames = torch.cat([_from_bytes(pool["real"][real]), _from_bytes(pool["imagined"][imagined])])
        picks = torch.cat([real, imagined])
        loss, accuracy = judge_loss(model, frames, pool["reward"][picks], pool["success"][picks])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy.item():.2f}")
    model.eval()
    after = judge_scores(model, pool)
    out = model.save_pretrained(cfg.output_dir)
    figures = {"checkpoint": cfg.checkpoint, "data": cfg.data, "frames": n, "before": before, "after": after}
    atomic_write_text(out / "judge.json", json.dumps(figures, indent=1))
    return figures
