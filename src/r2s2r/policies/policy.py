"""The policy interface every part of r2s2r speaks, and loaders for the two kinds of policies.

A policy is any object with `reset()` and `select_action(batch) -> (B, A) tensor`, exactly LeRobot's
convention: `batch["observation.images.<cam>"]` is (B,3,H,W) float in [0,1], `batch["observation.state"]`
is (B,14) float; `observation.environment_state` (B,7 per object) is present when the world provides it
(the reference world does, hardware usually does not), so scripted demonstrators can use it.

Policies come from (a) a LeRobot pretrained policy directory, (b) a policy directory exported by `r2s2r-rl`
(`rl_policy.json`; kwargs `noise`, `seed`; see `DIRECTORY_FACTORIES`) or (c) an import path
`package.module:factory` called with keyword arguments. The same object runs unchanged in the reference
world and in the world model.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from r2s2r.errors import UserError


class PolicyError(UserError, RuntimeError):
    """A policy that failed to load, raised, or returned a bad action; the message names the policy."""


@runtime_checkable
class Policy(Protocol):
    def reset(self) -> None: ...

    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...


@dataclass
class PolicyConfig:
    """Which policy to run: a LeRobot pretrained directory or a `package.module:factory` import path."""

    path: str = "r2s2r.robots.demonstrators:make_demonstrator"  # LeRobot policy dir or pkg.mod:factory
    kwargs: dict[str, Any] = field(default_factory=dict)  # factory keyword arguments: '{skill: noisy}'
    device: str = "cpu"  # torch device the policy runs on

    def __post_init__(self) -> None:
        if not isinstance(self.kwargs, dict):
            raise ValueError(
                f"policy.kwargs={self.kwargs!r} must be a mapping, "
                """e.g. --policy.kwargs='{"skill": "noisy"}'."""
            )
        try:
            json.dumps(self.kwargs)
        except TypeError as e:
            raise ValueError(
                f"policy.kwargs must hold JSON values (str, number, bool, list, dict): {e}"
            ) from None

    @property
    def is_import_path(self) -> bool:
        return ":" in self.path and not Path(self.path).exists()


class LeRobotPolicyAdapter:
    """A LeRobot pretrained policy with its saved pre/post-processors, as one `Policy`.

    LeRobot >= 0.4 keeps normalization in processor pipelines saved beside the weights; running the bare
    policy on raw observations would silently feed it unnormalized inputs, so this adapter always runs
    preprocessor -> policy.select_action -> postprocessor, as `lerobot-eval` does.
    """

    def __init__(self, path: str | Path, device: str = "cpu"):
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors

        path = str(path)
        cfg = PreTrainedConfig.from_pretrained(path)
        cfg.pretrained_path = path
        cfg.device = device
        self.policy = get_policy_class(cfg.type).from_pretrained(path, config=cfg)
        self.policy.eval()
        self.preprocessor, self.postprocessor = make_pre_post_processors(
            cfg, pretrained_path=path, preprocessor_overrides={"device_processor": {"device": device}}
        )
        self.config = cfg
        self.name = f"{cfg.type}:{path}"

    def reset(self) -> None:
        self.policy.reset()
        self.preprocessor.reset()
        self.postprocessor.reset()

    def _inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        wanted = set(self.config.input_features)
        inputs = {k: v for k, v in batch.items() if k in wanted}
        missing = wanted - set(inputs)
        if missing:
            raise KeyError(
                f"policy {self.name} needs {sorted(missing)} but the observation has {sorted(batch)}; "
                "record or render those cameras/features."
            )
        return inputs

    @torch.no_grad()
    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        action = self.policy.select_action(self.preprocessor(self._inputs(batch)))
        return self.postprocessor(action)


class ACTLatentAdapter(LeRobotPolicyAdapter):
    """A LeRobot ACT trained as a CVAE (`use_vae`), whose plans can also be drawn from its latent prior.

    ACT acts with the latent at the prior's mean (zero), so it is deterministic. `reseed(seed)` makes this
    copy draw the latent of each new chunk from the prior, N(0, `latent_scale`^2 I), with a generator seeded
    by `seed`, and re-plan at once: the rest of the chunk under way is dropped, and so is the new chunk's
    first action, which is meant for the step the policy just took. Those are ACT's own alternative plans
    for the action search; how much they differ depends on how much the CVAE put into its latent (little
    in the zoo's ACT: benchmarks/studies/act_latent.py). Until `reseed` is called it acts exactly as
    `LeRobotPolicyAdapter`.
    """

    def __init__(self, path: str | Path, device: str = "cpu", latent_scale: float = 1.0):
        super().__init__(path, device)
        self.latent_scale = latent_scale
        self.generator: torch.Generator | None = None
        self._skip_first = False

    def reseed(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(int(seed))
        if hasattr(self.policy, "_action_queue"):
            self.policy._action_queue.clear()
            self._skip_first = True

    def _sampled_latent(self, module: torch.nn.Module, args: tuple) -> tuple:
        """Forward pre-hook of ACT's latent projection: the zero latent -> a draw from the prior."""
        zeros = args[0]
        draw = torch.randn(zeros.shape, generator=self.generator, dtype=zeros.dtype)
        return (draw.to(zeros.device) * self.latent_scale,)

    @torch.no_grad()
    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.generator is None:
            return super().select_action(batch)
        inputs = self.preprocessor(self._inputs(batch))
        hook = self.policy.model.encoder_latent_input_proj.register_forward_pre_hook(self._sampled_latent)
        try:
            action = self.policy.select_action(inputs)
            if self._skip_first:
                self._skip_first = False
                action = self.policy.select_action(inputs)  # from the queue just filled
        finally:
            hook.remove()
        return self.postprocessor(action)


def is_latent_act(path: Path) -> bool:
    """Whether the LeRobot directory `path` holds an ACT trained with its CVAE encoder (`use_vae`)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return config.get("type") == "act" and bool(config.get("use_vae"))


def _import_factory(path: str):
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"policy.path='{path}' is not 'package.module:factory' nor an existing directory.")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"policy.path='{path}': cannot import module '{module_name}' ({e}).") from None
    if not hasattr(module, attr):
        raise ValueError(f"policy.path='{path}': module '{module_name}' has no attribute '{attr}'.")
    return getattr(module, attr)


# Policy directories that r2s2r's own commands export, by the file that marks them, and the factory that
# loads one, called with (directory, device=..., **kwargs). Named by import path, not imported here: the
# exporting package (the RL trainer) sits above this one and needs the world model; nothing of it loads
# until such a directory is played.
DIRECTORY_FACTORIES = {"rl_policy.json": "r2s2r.rl.policy:ImaginationPolicy"}


def load_policy(cfg: PolicyConfig) -> Policy:
    """Build the policy named by `cfg`: a LeRobot pretrained directory, a directory r2s2r exported, or an
    import-path factory. A loader or factory that raises is reported as a `PolicyError` naming `cfg.path`."""
    path = Path(cfg.path)
    marker = next((m for m in DIRECTORY_FACTORIES if (path / m).is_file()), None)
    if marker is not None:
        factory = _import_factory(DIRECTORY_FACTORIES[marker])
        return _built(cfg, factory, path, device=cfg.device, **cfg.kwargs)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"policy.path='{cfg.path}' is a directory without config.json; point it at a LeRobot "
                "pretrained policy directory (the one holding config.json and model.safetensors)."
            )
        if cfg.kwargs:
            raise ValueError(
                "policy.kwargs only applies to import-path factories, not to LeRobot directories."
            )
        adapter = ACTLatentAdapter if is_latent_act(path) else LeRobotPolicyAdapter
        return _built(cfg, adapter, path, device=cfg.device)
    if not cfg.is_import_path:
        raise ValueError(
            f"policy.path='{cfg.path}' is neither an existing directory nor an import path "
            "'package.module:factory'."
        )
    policy = _built(cfg, _import_factory(cfg.path), **cfg.kwargs)
    if not isinstance(policy, Policy):
        raise PolicyError(
            f"policy.path='{cfg.path}' returned {type(policy).__name__}, which lacks reset() and "
            "select_action(batch); return an object that has both."
        )
    return policy


def _built(cfg: PolicyConfig, make, *args, **kwargs) -> Policy:
    """`make(*args, **kwargs)`; whatever it raises (the policy's own code) as a `PolicyError` naming it."""
    try:
        return make(*args, **kwargs)
    except UserError:
        raise
    except Exception as e:
        raise PolicyError(
            f"policy.path='{cfg.path}' failed to load: {type(e).__name__}: {_first_line(e)}; fix the policy "
            "or its --policy.kwargs."
        ) from e


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else "(no message)"


def to_policy_batch(observation: dict[str, np.ndarray], device: str | torch.device = "cpu") -> dict:
    """Reference-world observations (uint8 HWC images) -> LeRobot policy batch (float CHW in [0,1])."""
    batch = {}
    for key, value in observation.items():
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        if key.startswith("observation.images."):
            tensor = tensor.permute(0, 3, 1, 2).float().div_(255.0)  # (B,H,W,3) -> (B,3,H,W)
        else:
            tensor = tensor.float()
        batch[key] = tensor.to(device)
    return batch


def check_action(
    action: Any, batch_size: int, action_dim: int, policy_name: str, episodes: list[int] | None = None
) -> np.ndarray:
    """The policy's action as a (B, A) float array, or a one-line error naming the policy and the fault.

    `episodes` names the episode each env is playing, so an error can say which episodes misbehaved.
    """
    if isinstance(action, torch.Tensor):
        action = action.detach().float().cpu().numpy()
    action = np.asarray(action, dtype=np.float32)
    if action.shape != (batch_size, action_dim):
        raise ValueError(
            f"policy {policy_name} returned an action of shape {tuple(action.shape)}, expected "
            f"({batch_size}, {action_dim}); select_action must return one {action_dim}-D action per env."
        )
    bad = ~np.isfinite(action)
    if bad.any():
        rows = sorted(set(np.nonzero(bad)[0].tolist()))
        where = f"episode(s) {[episodes[r] for r in rows]}" if episodes is not None else f"env(s) {rows}"
        raise ValueError(f"policy {policy_name} returned NaN/inf actions for {where}.")
    return action
