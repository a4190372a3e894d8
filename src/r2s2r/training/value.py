"""Fitting a base policy's value (`rollout/value.py`) on that policy's own recorded episodes.

Example:
    value, report = fit_value(ValueConfig(data=["outputs/rollouts/act_3000"], output_dir="outputs/value/act"))
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.rollout.value import BaseValue


@dataclass
class ValueConfig:
    """What a base value is fitted on, and its size."""

    data: list[str] = field(default_factory=list)  # LeRobot datasets of the base policy's episodes
    output_dir: str = "outputs/value"  # where the fitted value is saved (config.json + model.safetensors)
    robot: str = "aloha"  # embodiment (its spec and MJCF give the grasp points)
    frame_rate: int = 10  # states per second read from each episode
    members: int = 5  # ensemble members, each on its own bootstrap of the episodes
    hidden: int = 128  # width of each member's two hidden layers
    steps: int = 3000  # optimiser steps per member
    batch_size: int = 256
    lr: float = 2e-3
    weight_decay: float = 1e-4
    heldout: float = 0.2  # share of the episodes kept out of fitting, to report how well the value predicts
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.data, str):
            self.data = [self.data]
        if self.members < 1 or self.steps < 1 or self.hidden < 1 or self.frame_rate < 1:
            raise ValueError("members, steps, hidden and frame_rate must all be >= 1.")
        if not 0 <= self.heldout < 1:
            raise ValueError(f"heldout={self.heldout} must be in [0, 1).")


def read_states(roots: list[str], robot: str, frame_rate: int) -> dict[str, np.ndarray]:
    """Every state of every episode: proprio, object pose, control step, episode id and outcome."""
    parts: dict[str, list] = {k: [] for k in ("state", "env", "step", "episode", "success", "steps")}
    for root in roots:
        clips = ClipDataset(ClipConfig(root=root, read_images=False, future_frames=1, frame_rate=frame_rate,
                                       robot=robot))  # fmt: skip
        if "next.success" not in clips.data:
            raise ValueError(f"{root} has no success labels (next.success); the value learns from outcomes.")
        if "observation.environment_state" not in clips.data:
            raise ValueError(f"{root} has no observation.environment_state; record with the object pose.")
        for ep in tqdm(clips.episodes, desc=f"reading {Path(root).name}", unit="episode", leave=False):
            e = clips.episode(ep)
            T = len(e["frame_index"])
            parts["state"].append(e["observation.state"].numpy())
            parts["env"].append(e["observation.environment_state"].numpy())
            parts["step"].append(e["frame_index"].numpy())
            parts["episode"].append(np.full(T, len(parts["steps"])))
            parts["success"].append(np.full(T, float(e["episode_success"])))
            parts["steps"].append(clips.episode_length(ep))
    if not parts["steps"]:
        raise ValueError(f"no episodes in {roots}; record the base policy first (r2s2r-record).")
    return {k: np.concatenate(v) if k != "steps" else np.array(v) for k, v in parts.items()}


def _auc(score: np.ndarray, label: np.ndarray) -> float:
    """Area under the ROC curve (ties count half); nan with one class only."""
    pos, neg = score[label > 0.5], score[label <= 0.5]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    greater = (pos[:, None] > neg[None]).mean() + 0.5 * (pos[:, None] == neg[None]).mean()
    return float(greater)


def fit_value(cfg: ValueConfig) -> tuple[BaseValue, dict]:
    """Fit and save a base value on `cfg.data`; the value and its report (held-out AUC and Brier score)."""
    data = read_states(cfg.data, cfg.robot, cfg.frame_rate)
    episodes = len(data["steps"])
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(episodes)
    split = int(round(cfg.heldout * episodes))
    out, kept = order[:split], order[split:]
    torch.manual_seed(cfg.seed)
    value = BaseValue(
        cfg.robot,
        data["state"].shape[1],
        data["env"].shape[1],
        int(data["steps"].max()),
        cfg.members,
        cfg.hidden,
    )
    feats = value.features(
        torch.from_numpy(data["state"]), torch.from_numpy(data["env"]), torch.from_numpy(data["step"])
    )
    labels = torch.from_numpy(data["success"]).float()
    fit_rows = np.flatnonzero(np.isin(data["episode"], kept))
    value.mean.copy_(feats[fit_rows].mean(0))
    value.std.copy_(feats[fit_rows].std(0).clamp_min(1e-4))
    by_episode = {ep: np.flatnonzero(data["episode"] == ep) for ep in kept}
    for m, member in enumerate(tqdm(value.members, desc="fitting value members", unit="member")):
        boot = rng.choice(kept, size=len(kept))  # each member sees its own bootstrap of the episodes
        rows = torch.from_numpy(np.concatenate([by_episode[ep] for ep in boot]))
        opt = torch.optim.AdamW(member.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps)
        gen = torch.Generator().manual_seed(cfg.seed * 1000 + m)
        for _ in range(cfg.steps):
            pick = rows[torch.randint(len(rows), (cfg.batch_size,), generator=gen)]
            x = (feats[pick] - value.mean) / value.std
            loss = nn.functional.binary_cross_entropy_with_logits(member(x)[:, 0], labels[pick])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    value.eval()
    report = {"episodes": episodes, "states": len(labels), "success_rate": float(data["success"].mean())}
    if len(out):
        rows = np.flatnonzero(np.isin(data["episode"], out))
        with torch.no_grad():
            p = value.logits(feats[rows]).sigmoid().mean(0).numpy()
        y = data["success"][rows]
        report["heldout"] = {
            "episodes": len(out), "auc": _auc(p, y), "brier": float(np.mean((p - y) ** 2)),
            "brier_constant": float(np.mean((y.mean() - y) ** 2)),
        }  # fmt: skip
    report["config"] = asdict(cfg)
    value.save_pretrained(cfg.output_dir, report)
    return value, report
