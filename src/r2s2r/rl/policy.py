"""Policies trained in imagination: what they observe, how they act, how they are saved and loaded.

**What the policy observes.** A vector of normalized features (the world model's statistics):
proprio (S), the cube pose (E), the episode phase t/T (1) and, for `delta` actions, the joint targets it
commanded last (A).
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

**How it acts.** Once per world-model frame (`frame_stride` control steps) the actor outputs new joint
targets (`absolute`, the default: normalized by the action statistics) or a change of its last targets in
action standard deviations (`delta`); the target is clipped into the joint and gripper ranges, and the
control steps of the frame move linearly from the old target to the new one (the demonstrations' commands
are smooth; a jump per frame would not be). At an episode's start the old target is the measured proprio
clipped into the ranges ("hold still"). Absolute targets are the default because behaviour cloning with
deltas compounds its errors: each frame's small error is added to the next one's starting point, and a
cloned policy drifted off the demonstrations' joint configurations within a second.

**Saved form.** A policy directory holds `rl_policy.json` (features, sizes, action scaling),
`actor.safetensors` (the actor MLP; its mean is the deterministic action) and `world_model/` (a copy of
the world model it was trained in: its encoder reads the cameras in `latent` mode, its statistics
normalize the features). `load_policy` recognises such a directory, so `r2s2r-record`, `r2s2r-eval`,
`r2s2r-rank` and `r2s2r-search` run it by path.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from r2s2r.files import atomic_write_text, load_safetensors, read_json, staged_directory
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.robots.spec import robot_spec

POLICY_FILE = "rl_policy.json"
OBSERVATIONS = ("latent", "state")
ACTIONS = ("absolute", "delta", "residual")


@dataclass
class ActorSpec:
    """Everything that fixes an exported actor besides its weights."""

    observation: str = "latent"  # how the deployed policy gets the cube pose; see the module docstring
    action: str = "absolute"  # absolute: joint targets | delta: changes of the last ones | residual: on base
    feature_dim: int = 22  # S + E + 1, and + A (the last targets, or the base's action) for delta, residual
    base: dict | None = None  # residual actions: the base policy (PolicyConfig fields: path, kwargs)
    residual_scale: float = 0.2  # residual actions: one actor unit is this many action stds
    action_dim: int = 14
    hidden: tuple[int, ...] = (256, 256)  # the actor MLP's hidden widths (tanh), as stable-baselines3's
    frame_stride: int = 10  # control steps per decision (the world model's)
    horizon_frames: int = 40  # decisions per episode the policy was trained for (the phase feature's T)
    robot: str = "aloha"

    def __post_init__(self) -> None:
        self.hidden = tuple(self.hidden)
        if self.observation not in OBSERVATIONS:
            raise ValueError(f"observation={self.observation!r} must be one of {OBSERVATIONS}.")
        if self.action not in ACTIONS:
            raise ValueError(f"action={self.action!r} must be one of {ACTIONS}.")
        if (self.action == "residual") != (self.base is not None):
            raise ValueError("residual actions need a base policy, and only they have one.")


def feature_dim(model: WorldModel, action: str = "absolute") -> int:
    c = model.config
    return c.state_dim + max(c.env_state_dim, 1) + 1 + (c.action_dim if action != "absolute" else 0)


def features(
    model: WorldModel,
    norm_state: torch.Tensor,
    norm_env: torch.Tensor,
    target: torch.Tensor,
    phase: torch.Tensor,
    action: str = "absolute",
) -> torch.Tensor:
    """The policy's input (B,F): normalized proprio and cube pose, the phase, and `target` (raw, normalized
    here): for delta actions the last targets, for residual ones the base policy's action."""
    parts = [norm_state, norm_env, phase[:, None]]
    if action != "absolute":
        parts.append(model.norm("action", target))
    return torch.cat(parts, dim=-1)


class ActionMap:
    """Actor outputs -> joint targets and the control steps of one frame.

    `absolute`: the output is the target, normalized by the action statistics. `delta`: the output is the
    change of the last target, in action standard deviations. `residual`: the output, times
    `residual_scale` action standard deviations, is added to every action of the base policy in the frame.
    """

    def __init__(self, model: WorldModel, mode: str = "absolute", residual_scale: float = 0.2):
        self.mode, self.residual_scale = mode, residual_scale
        self.mean = model.action_mean
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

    def target(self, previous: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        if self.mode == "absolute":
            return self.clip(self.mean + output * self.scale)
        return self.clip(previous + output * self.scale)

    def residual(self, base: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """Base actions (B,A) or (B,stride,A) plus the actor's residual (B,A), within the ranges."""
        offset = output * self.scale * self.residual_scale
        return self.clip(base + (offset[:, None] if base.dim() == 3 else offset))

    def label(self, previous: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The output that commands `target` (behaviour cloning's regression target)."""
        if self.mode == "absolute":
            return (target - self.mean) / self.scale
        return (target - previous) / self.scale

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
    tensors = {k: v.detach().cpu().contiguous() for k, v in actor.state_dict().items()}
    with staged_directory(directory) as tmp:
        shutil.copytree(world_model_dir, tmp / "world_model")
        save_file(tensors, tmp / "actor.safetensors", metadata={"format": "pt", "library": "r2s2r"})
        atomic_write_text(tmp / POLICY_FILE, json.dumps(asdict(spec), indent=2))
    return Path(directory)


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
        fix = "the exported policy is damaged: export it again (re-run the r2s2r-rl command that wrote it)."
        raw = read_json(path / POLICY_FILE, fix)
        try:
            self.spec = ActorSpec(**raw)
        except TypeError as e:
            raise ValueError(
                f"{path / POLICY_FILE} does not describe a policy this r2s2r reads ({e})."
            ) from None
        self.device = torch.device(device)
        self.model = WorldModel.from_pretrained(path / "world_model", device=self.device).eval()
        if feature_dim(self.model, self.spec.action) != self.spec.feature_dim:
            raise ValueError(
                f"{path}: the actor expects {self.spec.feature_dim} features but its world model gives "
                f"{feature_dim(self.model, self.spec.action)}; the directory mixes files of different runs: "
                "re-export it."
            )
        self.actor = build_actor(self.spec)
        try:
            self.actor.load_state_dict(load_safetensors(path / "actor.safetensors", fix))
        except RuntimeError as e:
            raise ValueError(f"{path / 'actor.safetensors'} does not fit {POLICY_FILE} ({e}).") from None
        self.actor.to(self.device).eval()
        self.actions = ActionMap(self.model, self.spec.action, self.spec.residual_scale)
        self.base = None
        if self.spec.base is not None:
            from r2s2r.policies.policy import PolicyConfig, load_policy

            self.base = load_policy(PolicyConfig(**self.spec.base, device=device))
        self.noise, self.seed = noise, seed
        self.name = f"rl:{path}"
        self.reset()

    def reset(self) -> None:
        if self.base is not None:
            self.base.reset()
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
        base = None
        if self.base is not None:
            base = torch.as_tensor(self.base.select_action(batch)).float().to(self.device)
        if k == 0:
            norm_state, norm_env = self._observe(batch)
            if self.previous is None:
                self.previous = self.actions.hold(batch["observation.state"].float().to(self.device))
            frame = self.step // self.spec.frame_stride
            phase = torch.full(
                (len(norm_state),), min(frame / self.spec.horizon_frames, 1.0), device=self.device
            )
            extra = base if base is not None else self.previous
            inputs = features(self.model, norm_state, norm_env, extra, phase, self.spec.action)
            change = self.actor(inputs)
            if self.noise:
                change = change + self.noise * torch.randn(
                    change.shape, generator=self.generator, device=self.device
                )
            if base is not None:
                self.output = change
            else:
                target = self.actions.target(self.previous, change)
                self.chunk = self.actions.chunk(self.previous, target)
                self.previous = target
        self.step += 1
        if base is not None:
            return self.actions.residual(base, self.output).cpu()
        return self.chunk[:, k].cpu()
