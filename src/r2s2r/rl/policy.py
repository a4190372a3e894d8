"""Policies trained in imagination: what they observe, how they act, how they are saved and loaded.

**What the policy observes.** A vector of normalized features (the world model's statistics):
proprio (S), the cube pose (E), the joint targets it commanded last (A) and the episode phase t/T (1).
In imagination proprio and cube pose are the state-dynamics head's predictions (the ensemble's mean),
rolled forward from real episode starts. At deployment they come from the robot, by `observation`:

- `"latent"` (default): the robot's proprio, and the cube pose the world model reads from the cameras
  (the head's encoding of all views + proprio, decoded). This is all a real robot has, so the policy runs on
  hardware unchanged.
- `"state"`: the robot's proprio and the cube pose from `observation.environment_state`, for setups that
  track the object (motion capture, tags); the reference world provides it.

Decoded predictions rather than the raw latent: the decoded values are trained against the same targets
whether they come from an encoded real frame or from a latent rolled forward many frames, so the policy
sees the same quantities at training and at deployment; the raw latent has no such anchor, and latents
rolled by the dynamics drift away from what the encoder produces for the same scene.

**How it acts.** Once per world-model frame (`frame_stride` control steps) the actor outputs a change of
its joint targets, in units of the action's standard deviation; the new target is the old one plus that
change, clipped into the joint and gripper ranges, and the control steps of the frame move linearly from
the old target to the new one (the demonstrations' commands are smooth; a jump per frame would not be).
At an episode's start the old target is the measured proprio clipped into the ranges ("hold still").

**Saved form.** A policy directory holds `rl_policy.json` (features, sizes, action scaling),
`actor.safetensors` (the actor MLP; its mean is the deterministic action) and `world_model/` (a copy of
the world model it was trained in: its encoder reads the cameras in `latent` mode, its statistics
normalize the features). `load_policy` recognises such a directory, so `r2s2r-record`, `r2s2r-eval`,
`r2s2r-rank` and `r2s2r-search` run it by path.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from r2s2r.data.commit import atomic_write_text
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.robots.spec import robot_spec

POLICY_FILE = "rl_policy.json"
OBSERVATIONS = ("latent", "state")


@dataclass
class ActorSpec:
    """Everything that fixes an exported actor besides its weights."""

    observation: str = "latent"  # how the deployed policy gets the cube pose; see the module docstring
    feature_dim: int = 36  # S + E + A + 1
    action_dim: int = 14
    hidden: tuple[int, ...] = (256, 256)  # the actor MLP's hidden widths (tanh), as stable-baselines3's
    frame_stride: int = 10  # control steps per decision (the world model's)
    horizon_frames: int = 40  # decisions per episode the policy was trained for (the phase feature's T)
    robot: str = "aloha"

    def __post_init__(self) -> None:
        self.hidden = tuple(self.hidden)
        if self.observation not in OBSERVATIONS:
            raise ValueError(f"observation={self.observation!r} must be one of {OBSERVATIONS}.")


def feature_dim(model: WorldModel) -> int:
    c = model.config
    return c.state_dim + max(c.env_state_dim, 1) + c.action_dim + 1


def features(
    model: WorldModel,
    norm_state: torch.Tensor,
    norm_env: torch.Tensor,
    target: torch.Tensor,
    phase: torch.Tensor,
) -> torch.Tensor:
    """The policy's input (B,F): normalized proprio and cube pose, the last targets (raw), the phase."""
    return torch.cat([norm_state, norm_env, model.norm("action", target), phase[:, None]], dim=-1)


class ActionMap:
    """Actor outputs (normalized target changes) -> joint targets and the control steps of one frame."""

    def __init__(self, model: WorldModel):
        spec = robot_spec(model.config.robot)
        device = model.action_std.device
        self.lower = torch.tensor(spec.position_lower, dtype=torch.float32, device=device)
        self.upper = torch.tensor(spec.position_upper, dtype=torch.float32, device=device)
        self.scale = model.action_std
        self.stride = model.config.frame_stride
        self.ramp = torch.arange(1, self.stride + 1, dtype=torch.float32, device=device) / self.stride

    def clip(self, target: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum(target, self.lower), self.upper)

    def hold(self, state: torch.Tensor) -> torch.Tensor:
        """The targets that hold the robot where it is: its proprio, clipped into the command ranges."""
        return self.clip(state)

    def target(self, previous: torch.Tensor, change: torch.Tensor) -> torch.Tensor:
        return self.clip(previous + change * self.scale)

    def chunk(self, previous: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """(B,stride,A): the frame's control steps, linear from `previous` to `target`."""
        return previous[:, None] + self.ramp[None, :, None] * (target - previous)[:, None]


def build_actor(spec: ActorSpec) -> nn.Sequential:
    """The actor MLP, laid out as stable-baselines3's policy_net (tanh) followed by its action_net."""
    layers: list[nn.Module] = []
    width = spec.feature_dim
    for hidden in spec.hidden:
        layers += [nn.Linear(width, hidden), nn.Tanh()]
        width = hidden
    layers.append(nn.Linear(width, spec.action_dim))
    return nn.Sequential(*layers)


def export_policy(
    directory: str | Path, actor: nn.Sequential, spec: ActorSpec, world_model_dir: str | Path
) -> Path:
    """Write a policy directory (see the module docstring) atomically; returns its path."""
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copytree(world_model_dir, tmp / "world_model")
    tensors = {k: v.detach().cpu().contiguous() for k, v in actor.state_dict().items()}
    save_file(tensors, tmp / "actor.safetensors", metadata={"format": "pt", "library": "r2s2r"})
    atomic_write_text(tmp / POLICY_FILE, json.dumps(asdict(spec), indent=2))
    if directory.exists():
        old = directory.with_name(f".{directory.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
        os.replace(tmp, directory)
        shutil.rmtree(old)
    else:
        os.replace(tmp, directory)
    return directory


def is_rl_policy(path: str | Path) -> bool:
    return Path(path, POLICY_FILE).is_file()


class ImaginationPolicy:
    """An exported policy, as a `Policy`: `reset()`, `select_action(batch) -> (B,A)` once per control step.

    Deterministic by default (the actor's mean). With `noise > 0` it adds Gaussian noise of that std (in
    actor units) drawn from a generator seeded with `seed` at every `reset()`, so runs repeat exactly.
    """

    def __init__(self, path: str | Path, device: str = "cpu", noise: float = 0.0, seed: int = 0):
        path = Path(path)
        if not is_rl_policy(path):
            raise FileNotFoundError(
                f"{path} has no {POLICY_FILE}; point at a directory written by r2s2r-rl (its policy/ folder)."
            )
        raw = json.loads((path / POLICY_FILE).read_text())
        try:
            self.spec = ActorSpec(**raw)
        except TypeError as e:
            raise ValueError(
                f"{path / POLICY_FILE} does not describe a policy this r2s2r reads ({e})."
            ) from None
        self.device = torch.device(device)
        self.model = WorldModel.from_pretrained(path / "world_model", device=self.device).eval()
        if feature_dim(self.model) != self.spec.feature_dim:
            raise ValueError(
                f"{path}: the actor expects {self.spec.feature_dim} features but its world model gives "
                f"{feature_dim(self.model)}; the directory mixes files of different runs: re-export it."
            )
        self.actor = build_actor(self.spec)
        try:
            self.actor.load_state_dict(load_file(path / "actor.safetensors"))
        except RuntimeError as e:
            raise ValueError(f"{path / 'actor.safetensors'} does not fit {POLICY_FILE} ({e}).") from None
        self.actor.to(self.device).eval()
        self.actions = ActionMap(self.model)
        self.noise, self.seed = noise, seed
        self.name = f"rl:{path}"
        self.reset()

    def reset(self) -> None:
        self.step = 0
        self.previous: torch.Tensor | None = None
        self.chunk: torch.Tensor | None = None
        self.generator = torch.Generator(self.device).manual_seed(self.seed)

    def _observe(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalized proprio and cube pose of the real observation, as the spec's `observation` says."""
        model = self.model
        state = batch["observation.state"].float().to(self.device)
        norm_state = model.norm("state", state)
        if self.spec.observation == "state":
            if "observation.environment_state" not in batch:
                raise KeyError(
                    f"{self.name} was trained with observation='state' and needs "
                    "observation.environment_state (the object pose), which this observation lacks; train "
                    "with observation='latent' for camera-only robots."
                )
            return norm_state, model.norm(
                "env", batch["observation.environment_state"].float().to(self.device)
            )
        missing = [k for k in model.config.camera_keys if k not in batch]
        if missing:
            raise KeyError(
                f"{self.name} reads the cube pose from the cameras {model.config.cameras} but the "
                f"observation lacks {missing}; render them (at least every {self.spec.frame_stride} "
                "control steps)."
            )
        frames = model.frames(
            {k: batch[k][:, None].float().to(self.device) for k in model.config.camera_keys}
        )
        decoded = model.state_head.decode(model.state_head.encode(frames[:, 0], norm_state))
        return norm_state, decoded["env_state"]

    @torch.no_grad()
    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        k = self.step % self.spec.frame_stride
        if k == 0:
            norm_state, norm_env = self._observe(batch)
            if self.previous is None:
                self.previous = self.actions.hold(batch["observation.state"].float().to(self.device))
            frame = self.step // self.spec.frame_stride
            phase = torch.full(
                (len(norm_state),), min(frame / self.spec.horizon_frames, 1.0), device=self.device
            )
            change = self.actor(features(self.model, norm_state, norm_env, self.previous, phase))
            if self.noise:
                change = change + self.noise * torch.randn(
                    change.shape, generator=self.generator, device=self.device
                )
            target = self.actions.target(self.previous, change)
            self.chunk = self.actions.chunk(self.previous, target)
            self.previous = target
        self.step += 1
        return self.chunk[:, k].cpu()


def load_rl_policy(path: str, device: str = "cpu", noise: float = 0.0, seed: int = 0) -> ImaginationPolicy:
    """Import-path factory: `--policy.path=r2s2r.rl.policy:load_rl_policy --policy.kwargs='{path: DIR}'`."""
    return ImaginationPolicy(path, device=device, noise=noise, seed=seed)
