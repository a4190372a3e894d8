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

Fitted by `training/value.py` (`r2s2r-fit-value`); read here:
    odds = BaseValue.from_pretrained("outputs/value/act_3000")(state, env_state, step)  # (M,B)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from r2s2r.files import load_safetensors, read_json, staged_directory
from r2s2r.robots.kinematics import GraspKinematics
from r2s2r.robots.spec import robot_spec


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
        weights = {k: v.contiguous() for k, v in self.state_dict().items()}
        with staged_directory(directory) as tmp:
            (tmp / "config.json").write_text(json.dumps({"kind": "base_value", **self.meta}, indent=2))
            save_file(weights, str(tmp / "model.safetensors"))
            if report is not None:
                (tmp / "fit.json").write_text(json.dumps(report, indent=2))

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> BaseValue:
        path = Path(directory, "config.json")
        if not path.is_file():
            raise FileNotFoundError(f"no config.json in {directory}; fit a value with r2s2r-fit-value first.")
        fix = "the base value is damaged: fit it again with r2s2r-fit-value."
        meta = read_json(path, fix)
        if not isinstance(meta, dict) or meta.pop("kind", None) != "base_value":
            raise ValueError(
                f"{directory} is not a base value (a world model?); fit one with r2s2r-fit-value."
            )
        value = cls(**meta)
        value.load_state_dict(load_safetensors(Path(directory, "model.safetensors"), fix))
        return value.eval()
