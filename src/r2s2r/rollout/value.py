"""A base policy's value: the odds that an episode still ends in success from a state, if the policy goes on.

The action search imagines each candidate only `horizon` model frames ahead (0.4 s by default), and over so
short a horizon the staged reward has nothing to say about most of an episode: a reach that will miss the
cube and one that will close on it both score "not touched yet". `BaseValue` judges where a candidate leaves
the robot by what usually followed such states when the base policy carried on: an ensemble of small MLPs,
trained on the base policy's own recorded episodes (state-only recordings suffice) to predict each episode's
outcome from any of its states. The search adds `value_weight` x its pessimistic estimate (members' mean -
`pessimism` x std) at the end of each imagined candidate (`SearchConfig.value`).

What it reads from a state: the proprio, the object pose, each gripper's grasp point (forward kinematics of
the robot's MJCF, `robots/kinematics.py`), where the object is in each gripper's frame, and how much of the
episode is left (a cube not yet grasped with a second to go is not the same as with six).

Example:
    value = fit_value(ValueConfig(data=["outputs/rollouts/act_3000"], output_dir="outputs/value/act_3000"))
    odds = BaseValue.from_pretrained("outputs/value/act_3000")(state, env_state, step)  # (M,B)
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm

from r2s2r.data.commit import replace_directory
from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.robots.kinematics import GraspKinematics
from r2s2r.robots.spec import robot_spec


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


class BaseValue(nn.Module):
    """Ensemble value of M members: raw proprio (B,S), object pose (B,E), control step (B,) -> odds (M,B)."""

    def __init__(
        self, robot: str, state_dim: int, env_dim: int, episode_steps: int, members: int, hidden: int
    ):
        super().__init__()
        if env_dim < 3:
            raise ValueError(
                f"the value needs the object's position (observation.environment_state, >= 3 values); got "
                f"{env_dim}. Record with the object pose."
            )
        self.meta = dict(
            robot=robot, state_dim=state_dim, env_dim=env_dim, episode_steps=episode_steps, members=members,
            hidden=hidden,
        )  # fmt: skip
        self.kinematics = GraspKinematics(robot_spec(robot))
        G = self.kinematics.num_grippers
        width = state_dim + env_dim + 3 * G + 3 * G + G + 1
        self.register_buffer("mean", torch.zeros(width))
        self.register_buffer("std", torch.ones(width))
        self.members = nn.ModuleList(
            nn.Sequential(
                nn.Linear(width, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                nn.Linear(hidden, 1),
            )
            for _ in range(members)
        )  # fmt: skip

    def features(self, state: torch.Tensor, env: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """(B,F) unnormalised: proprio, object pose, grasp points, object in each gripper's frame, distances,
        share of the episode left."""
        S, E = self.meta["state_dim"], self.meta["env_dim"]
        if state.shape[-1] != S or env.shape[-1] != E:
            raise ValueError(
                f"the value was fitted on proprio of {S} and object state of {E} values; got "
                f"{state.shape[-1]} and {env.shape[-1]}. Fit one on this robot's recordings."
            )
        state, env = state.float(), env.float()
        point, rot = self.kinematics(state)  # (B,G,3), (B,G,3,3)
        offset = env[:, None, :3] - point  # (B,G,3)
        in_gripper = (rot.transpose(-1, -2) @ offset[..., None])[..., 0]
        left = 1 - step.float().to(state)[:, None] / self.meta["episode_steps"]
        return torch.cat(
            [state, env, point.flatten(1), in_gripper.flatten(1), offset.norm(dim=-1), left], dim=-1
        )

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        x = (features - self.mean) / self.std
        return torch.stack([m(x)[:, 0] for m in self.members])  # (M,B)

    @torch.no_grad()
    def forward(self, state: torch.Tensor, env: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        return self.logits(self.features(state, env, step)).sigmoid()

    # ------------------------------------------------------------------ io
    def save_pretrained(self, directory: str | Path, report: dict | None = None) -> None:
        """config.json + model.safetensors (+ fit.json), written to a temp folder and renamed into place."""
        directory = Path(directory)
        tmp = directory.with_name(f".{directory.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / "config.json").write_text(json.dumps({"kind": "base_value", **self.meta}, indent=2))
        weights = {k: v.contiguous() for k, v in self.state_dict().items()}
        save_file(weights, str(tmp / "model.safetensors"))
        if report is not None:
            (tmp / "fit.json").write_text(json.dumps(report, indent=2))
        replace_directory(tmp, directory)

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> BaseValue:
        path = Path(directory, "config.json")
        if not path.is_file():
            raise FileNotFoundError(f"no config.json in {directory}; fit a value with r2s2r-fit-value first.")
        meta = json.loads(path.read_text())
        if meta.pop("kind", None) != "base_value":
            raise ValueError(
                f"{directory} is not a base value (a world model?); fit one with r2s2r-fit-value."
            )
        value = cls(**meta)
        value.load_state_dict(load_file(str(Path(directory, "model.safetensors"))))
        return value.eval()


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
