"""Imagined episodes for RL: the state-dynamics head as a batched stable-baselines3 `VecEnv`.

Each env is one imagined episode, started from a real episode start of the world model's own training
recordings (encoded once), rolled one world-model frame per step by the head's ensemble, never decoding
pixels. Observations are the policy features of `rl/policy.py`; actions are what the actor outputs
(`ActionMap`: joint targets, their changes, or a residual on a base policy that acts on the imagined
observations, one copy of it per env).

Reward of a frame, from the head's predictions of every ensemble member, combined pessimistically (the
members' mean minus `pessimism` stds, so that a state only some members believe in is not worth much):

    progress_weight * (P_t - P_{t-1}) + success_weight * S_t
    - uncertainty_weight * max(U_t - uncertainty_floor, 0) - violation_weight * V_t
    - residual_weight * mean(a_t ** 2)    (residual actions only)

P is the expected staged reward in 0..1 (the task's stages over the number of levels), S the success
probability, U the ensemble disagreement, V the number of physics-checker violation types the imagined
frame breaks (`robots/checker.py`, over the last few imagined frames and the commanded chunk), a_t the
actor's residual output (a trust region around the base policy, like the search's `deviation_weight`: the
further an imagined correction strays from what the data shows, the likelier its predicted gain is the
head's error). Or, for a
`reach` task, minus the squared normalized distance of the predicted proprio to `reach_target` (a task
whose answer is known, for tests).

Exploitation control: an imagined episode whose disagreement passes `support_threshold` has left the
data's support; it ends there, that frame earns only its penalties and `support_penalty` for every frame
the episode had left, and it is counted. Its predicted progress and success are not believed: a policy
that jumps into a state the head wrongly scores as a success must not collect it. And the charge grows
with the frames left, because a flat one made ending early the cheapest way to stop paying the
per-frame uncertainty penalty: fine-tuning learnt to leave the support on purpose. The threshold is
calibrated from the head replaying the logged actions of its training episodes: the 99th percentile of
each episode's worst frame (`calibrate_support`). The uncertainty floor, where set, is a quantile of all the
frames of the same replays (`calibrate_floor`): what the head is unsure of on the data itself is not
charged. Where the data's own disagreement gathers around the object (grasps, pushes), a charge on all of
it teaches a fine-tuned policy to keep away from the object (docs/benchmarks.md, RL in imagination).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv

from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import Policy
from r2s2r.rl.policy import ActionMap, feature_dim, features
from r2s2r.robots.checker import VIOLATIONS, PhysicsChecker
from r2s2r.robots.spec import robot_spec
from r2s2r.rollout.search import fork_policy
from r2s2r.training.head import start_env

TASKS = ("task", "reach")
ACTION_BOUND = 5.0  # actor outputs are clipped to +-5 action stds of target change per frame
WINDOW = 4  # imagined frames the checker looks back over (velocity, acceleration, object motion)


@dataclass
class RewardConfig:
    """What an imagined frame is worth; see the module docstring."""

    task: str = "task"  # task: the head's staged reward and success | reach: proprio to reach_target
    progress_weight: float = 4.0  # per unit of expected staged reward (0..1 over all stages)
    success_weight: float = 1.0  # per frame, times the predicted success probability
    uncertainty_weight: float = 2.0  # per unit of ensemble disagreement (normalized units)
    violation_weight: float = 0.1  # per physics-violation type the frame breaks
    pessimism: float = 1.0  # members' mean minus this many stds, for progress and success
    support_threshold: float = 0.0  # disagreement that ends an episode (0: never; see calibrate_support)
    uncertainty_floor: float = 0.0  # disagreement not charged: what the data itself shows (calibrate_floor)
    support_penalty: float = (
        0.5  # per frame left in the episode, charged on the frame that leaves the support
    )
    reach_target: tuple[float, ...] = ()  # raw proprio (S) the reach task drives towards
    residual_weight: float = 0.0  # residual actions: per mean squared actor output (trust region)

    def __post_init__(self) -> None:
        self.reach_target = tuple(self.reach_target)
        if self.task not in TASKS:
            raise ValueError(f"reward.task={self.task!r} must be one of {TASKS}.")
        for name in ("progress_weight", "success_weight", "uncertainty_weight", "violation_weight",
                     "pessimism", "support_threshold", "support_penalty", "uncertainty_floor",
                     "residual_weight"):  # fmt: skip
            if not getattr(self, name) >= 0:
                raise ValueError(f"reward.{name}={getattr(self, name)!r} must be >= 0.")


class ImaginedEnv(VecEnv):
    """`num_envs` imagined episodes of `horizon` frames, auto-reset from `starts` (see the module docstring).

    `starts` holds real first observations: the model's camera keys (N,3,H,W) in [0,1], `observation.state`
    (N,S) and, when the model predicts objects, `observation.environment_state` (N,E).
    """

    def __init__(
        self,
        model: WorldModel,
        starts: dict[str, torch.Tensor],
        num_envs: int,
        horizon: int,
        reward: RewardConfig | None = None,
        observation: str = "latent",
        check_physics: bool = True,
        action: str = "absolute",
        seed: int = 0,
        base: Policy | None = None,
        residual_scale: float = 0.2,
    ):
        self.model = model.eval()
        self.cfg = model.config
        self.reward_cfg = reward or RewardConfig()
        self.horizon = horizon
        self.observation = observation
        self.device = model.state_mean.device
        self.action_mode = action
        self.actions = ActionMap(model, action, residual_scale)
        if (action == "residual") != (base is not None):
            raise ValueError("residual actions need a base policy, and only they take one.")
        self.base = base
        self.bases: list[Policy] = []  # one copy of the base per env, each with its own running state
        spec = robot_spec(self.cfg.robot)
        self.frame_dt = self.cfg.frame_stride / spec.control_hz
        self.checker = PhysicsChecker(spec) if check_physics else None
        self.levels = torch.arange(self.cfg.reward_levels, dtype=torch.float32, device=self.device)
        self.levels /= max(self.cfg.reward_levels - 1, 1)
        if self.reward_cfg.task == "reach":
            target = torch.tensor(self.reward_cfg.reach_target, dtype=torch.float32, device=self.device)
            if target.shape != (self.cfg.state_dim,):
                raise ValueError(
                    f"reward.reach_target has {target.numel()} values; the reach task needs the "
                    f"{self.cfg.state_dim}-D proprio to reach."
                )
            self.reach = model.norm("state", target)
        self._encode_starts(starts)
        dim = feature_dim(model, action)
        self.render_mode = None  # nothing to render: imagined episodes have no frames
        super().__init__(
            num_envs,
            gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32),
            gym.spaces.Box(-ACTION_BOUND, ACTION_BOUND, (self.cfg.action_dim,), np.float32),
        )
        self.rng = np.random.default_rng(seed)
        self._actions: np.ndarray | None = None
        self.episodes_done: list[dict] = []  # finished episodes since the last `pop_episodes`

    # ------------------------------------------------------------------ starts
    @torch.no_grad()
    def _encode_starts(self, starts: dict[str, torch.Tensor]) -> None:
        model = self.model
        cameras = list(self.cfg.camera_keys) if self.cfg.head.reads_cameras else []
        missing = [k for k in [*cameras, "observation.state"] if k not in starts]
        if missing:
            raise KeyError(
                f"episode starts lack {missing}; the world model needs {[*cameras, 'observation.state']}."
            )
        if not cameras and not (self.observation == "state" and "observation.environment_state" in starts):
            raise ValueError(
                "this world model's state head reads no cameras: it starts from the object pose, so the "
                "policy needs observation='state' and the starts observation.environment_state."
            )
        state = starts["observation.state"].float().to(self.device)
        images = None  # (N,V,3,H,W) for a head that reads the cameras
        if cameras:
            images = model.frames({k: starts[k][:, None].float().to(self.device) for k in cameras})[:, 0]
        env = starts.get("observation.environment_state")
        # A policy that reads the object pose has it at its start, so the imagination may start from it too;
        # one that reads the cameras deploys on a robot that may have no pose estimate: cameras alone.
        sees = self.observation == "state" and env is not None and model.config.env_state_dim > 0
        norm_env = model.norm("env", env.float().to(self.device)) if sees else None
        latents = []
        for i in range(0, len(state), 256):  # bounded memory for thousands of starts
            latents.append(
                model.state_head.encode(
                    None if images is None else images[i : i + 256],
                    model.norm("state", state[i : i + 256]),
                    None if norm_env is None else norm_env[i : i + 256],
                )
            )
        self.start_latent = torch.cat(latents)  # (N,L)
        self.start_state = state
        decoded_env = model.state_head.decode(self.start_latent)["env_state"]
        if self.observation == "state" and "observation.environment_state" in starts:
            self.start_env = model.norm(
                "env", starts["observation.environment_state"].float().to(self.device)
            )
        else:  # what the deployed policy will read from its cameras
            self.start_env = decoded_env
        self.start_env_raw = model.unnorm("env", self.start_env)
        true_env = starts.get("observation.environment_state")  # a base policy reads the real start pose
        self.start_env_true = true_env.float().to(self.device) if true_env is not None else self.start_env_raw

    # ------------------------------------------------------------------ VecEnv api
    def reset(self) -> np.ndarray:
        B, M = self.num_envs, self.cfg.head.ensemble
        self.latent = torch.zeros(B, M, self.model.state_head.latent_size, device=self.device)
        self.norm_state = torch.zeros(B, self.cfg.state_dim, device=self.device)
        self.norm_env = torch.zeros(B, self.start_env.shape[-1], device=self.device)
        self.previous = torch.zeros(B, self.cfg.action_dim, device=self.device)
        self.base_chunk = torch.zeros(B, self.cfg.frame_stride, self.cfg.action_dim, device=self.device)
        if self.base is not None and len(self.bases) != B:
            self.bases = [fork_policy(self.base) for _ in range(B)]
        self.t = np.zeros(B, dtype=int)
        self.value = torch.zeros(B, device=self.device)  # pessimistic progress of the last frame
        self.stats = {k: np.zeros(B) for k in ("return", "success", "uncertainty", "violations", "progress")}
        self.history = {
            "state": np.zeros((B, WINDOW, self.cfg.state_dim)),
            "env": np.zeros((B, WINDOW, self.start_env.shape[-1])),
            "table_depth": np.zeros((B, WINDOW)),
            "arm_depth": np.zeros((B, WINDOW)),
            "tcp": np.zeros((B, WINDOW, 2, 3)),
        }
        self._restart(np.arange(B))
        return self._features()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions, dtype=np.float32)

    @torch.no_grad()
    def step_wait(self):
        model, head = self.model, self.model.state_head
        change = torch.from_numpy(self._actions).to(self.device).clamp(-ACTION_BOUND, ACTION_BOUND)
        if self.base is not None:
            chunk = self.actions.residual(self.base_chunk, change)  # (B,stride,A)
            target = chunk[:, -1]
        else:
            target = self.actions.target(self.previous, change)
            chunk = self.actions.chunk(self.previous, target)  # (B,stride,A)
        self.latent = head.step(self.latent, model.norm_chunks(chunk))  # (B,M,L)
        decoded = head.decode(self.latent)
        self.norm_state = decoded["state"].mean(1)
        self.norm_env = decoded["env_state"].mean(1)
        self.previous = target
        self.t += 1
        if self.base is not None:
            env = model.unnorm("env", self.norm_env)
            self._plan_base(np.arange(self.num_envs), model.unnorm("state", self.norm_state), env)

        uncertainty = head.disagreement(decoded)  # (B,)
        violations = self._violations(chunk)  # (B,K)
        cfg = self.reward_cfg
        outside = (
            uncertainty > cfg.support_threshold
            if cfg.support_threshold
            else torch.zeros_like(uncertainty) > 0
        )
        reward, progress, success = self._reward(decoded, uncertainty, violations, outside)
        if self.base is not None and cfg.residual_weight:  # straying from the base costs, as in the search
            reward = reward - cfg.residual_weight * change.pow(2).mean(-1)
        left = outside.cpu().numpy()
        done = (self.t >= self.horizon) | left
        rewards = reward.cpu().numpy().astype(np.float32)
        s = self.stats
        s["return"] += rewards
        s["success"] = np.maximum(s["success"], ((success > 0.5) & ~outside).cpu().numpy())
        s["uncertainty"] += uncertainty.cpu().numpy()
        s["violations"] += violations.any(1)
        s["progress"] = np.maximum(s["progress"], torch.where(outside, 0.0, progress).cpu().numpy())
        observation = self._features()
        infos: list[dict] = [{} for _ in range(self.num_envs)]
        ended = np.flatnonzero(done)
        for b in ended:
            episode = {
                "r": float(s["return"][b]), "l": int(self.t[b]), "success": bool(s["success"][b]),
                "left_support": bool(left[b]), "uncertainty": float(s["uncertainty"][b] / self.t[b]),
                "violation_frames": float(s["violations"][b] / self.t[b]),
                "progress": float(s["progress"][b]),
            }  # fmt: skip
            infos[b] = {"episode": episode, "terminal_observation": observation[b]}
            self.episodes_done.append(episode)
        if len(ended):
            self._restart(ended)
            observation[ended] = self._features()[ended]
        return observation, rewards, done, infos

    def close(self) -> None:
        pass

    def get_attr(self, attr_name, indices=None):
        return [getattr(self, attr_name)] * len(list(self._get_indices(indices)))

    def set_attr(self, attr_name, value, indices=None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name, *method_args, indices=None, **method_kwargs):
        return [getattr(self, method_name)(*method_args, **method_kwargs)] * len(
            list(self._get_indices(indices))
        )

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False] * len(list(self._get_indices(indices)))

    def seed(self, seed: int | None = None):
        self.rng = np.random.default_rng(seed)
        return [seed] * self.num_envs

    # ------------------------------------------------------------------ internals
    def pop_episodes(self) -> list[dict]:
        done, self.episodes_done = self.episodes_done, []
        return done

    def _restart(self, idx: np.ndarray) -> None:
        """New episodes in envs `idx`, each from a start drawn uniformly from `starts`."""
        pick = torch.from_numpy(self.rng.integers(0, len(self.start_latent), len(idx))).to(self.device)
        i = torch.from_numpy(idx).to(self.device)
        model = self.model
        self.latent[i] = self.start_latent[pick][:, None].expand(-1, self.cfg.head.ensemble, -1)
        state = self.start_state[pick]
        self.norm_state[i] = model.norm("state", state)
        self.norm_env[i] = self.start_env[pick]
        self.previous[i] = self.actions.hold(state)
        self.t[idx] = 0
        if self.base is not None:
            for b in idx:
                self.bases[b].reset()
                if hasattr(self.bases[b], "reseed"):  # a scripted base: its own noise in every episode
                    self.bases[b].reseed(int(self.rng.integers(2**31)))
            self._plan_base(idx, state, self.start_env_true[pick])
        self.value[i] = self._progress(model.state_head.decode(self.latent[i]))[0]
        for key in self.stats:
            self.stats[key][idx] = 0
        if self.checker is not None:
            raw = state.cpu().numpy().astype(np.float64)
            geometry = self.checker.geometry(raw)
            self.history["state"][idx] = raw[:, None]
            self.history["env"][idx] = self.start_env_raw[pick].cpu().numpy()[:, None]
            for key in ("table_depth", "arm_depth", "tcp"):
                self.history[key][idx] = geometry[key][:, None]

    @torch.no_grad()
    def _plan_base(self, idx: np.ndarray, state: torch.Tensor, env: torch.Tensor) -> None:
        """The base's actions for the next frame of envs `idx`, from their (imagined) state (n,S), env (n,E).

        The imagined observation holds for the frame (the head predicts one per frame), so each copy of the
        base is asked `stride` times with it, as a robot's policy between two camera frames would be.
        """
        obs = {"observation.state": state.cpu()}
        if self.cfg.env_state_dim:
            obs["observation.environment_state"] = env.cpu()
        for n, b in enumerate(idx):
            one = {k: v[n : n + 1] for k, v in obs.items()}
            actions = [
                torch.as_tensor(self.bases[b].select_action(one)).float()
                for _ in range(self.cfg.frame_stride)
            ]
            self.base_chunk[b] = torch.cat(actions).to(self.device)

    def _features(self) -> np.ndarray:
        phase = torch.from_numpy(self.t / self.horizon).float().to(self.device)
        extra = self.base_chunk[:, 0] if self.base is not None else self.previous
        feats = features(self.model, self.norm_state, self.norm_env, extra, phase, self.action_mode)
        return feats.cpu().numpy()

    def _progress(self, decoded: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pessimistic expected staged reward (0..1) and success probability: (B,), (B,)."""
        k = self.reward_cfg.pessimism
        progress = decoded["reward_logits"].softmax(-1) @ self.levels  # (B,M)
        success = decoded["success_logit"].sigmoid()  # (B,M)
        if progress.shape[1] > 1:
            progress = progress.mean(1) - k * progress.std(1)
            success = success.mean(1) - k * success.std(1)
        else:
            progress, success = progress[:, 0], success[:, 0]
        return progress, success

    def _reward(
        self, decoded, uncertainty, violations, outside=None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reward (B,), pessimistic progress and success of the newest frame. A frame `outside` the support
        earns nothing but its penalties and `support_penalty` per frame left in the episode: its predictions
        are not to be believed, and ending early must not be a way to stop paying the other penalties."""
        cfg = self.reward_cfg
        progress, success = self._progress(decoded)
        if cfg.task == "reach":
            value = -(self.norm_state - self.reach).pow(2).mean(-1)
            reward = value
        else:
            reward = cfg.progress_weight * (progress - self.value) + cfg.success_weight * success
        self.value = progress
        penalty = cfg.uncertainty_weight * (uncertainty - cfg.uncertainty_floor).clamp(min=0)
        penalty = penalty + cfg.violation_weight * torch.from_numpy(violations.sum(1)).float().to(self.device)
        if outside is not None:  # the rest of the episode is forfeited at more than it could have cost inside
            left = torch.from_numpy(self.horizon - self.t + 1).float().to(self.device)
            reward = torch.where(outside, -cfg.support_penalty * left, reward)
        return reward - penalty, progress, success

    def _violations(self, chunk: torch.Tensor) -> np.ndarray:
        """(B,K) physics-violation flags of the newest imagined frame and its commanded chunk."""
        if self.checker is None:
            return np.zeros((self.num_envs, len(VIOLATIONS)), dtype=bool)
        state = self.model.unnorm("state", self.norm_state).cpu().numpy().astype(np.float64)
        env = self.model.unnorm("env", self.norm_env).cpu().numpy().astype(np.float64)
        geometry = self.checker.geometry(state)
        h = self.history
        h["state"] = np.concatenate([h["state"][:, 1:], state[:, None]], axis=1)
        h["env"] = np.concatenate([h["env"][:, 1:], env[:, None]], axis=1)
        for key in ("table_depth", "arm_depth", "tcp"):
            h[key] = np.concatenate([h[key][:, 1:], geometry[key][:, None]], axis=1)
        B = self.num_envs
        has_objects = self.cfg.env_state_dim > 0 and env.shape[-1] % 7 == 0
        geometry = {k: h[k].reshape(B * WINDOW, *h[k].shape[2:]) for k in ("table_depth", "arm_depth", "tcp")}
        envs = h["env"] if has_objects else None
        flags = self.checker.check(h["state"], self.frame_dt, env_states=envs, geometry=geometry).flags
        newest = flags[:, -1].copy()
        acc = VIOLATIONS.index("joint_acceleration")
        newest[:, acc] = flags[:, -2, acc]  # an acceleration is known once the next state is in
        return newest | self.checker.commands(chunk.cpu().numpy()).any(axis=1)


def calibrate_support(
    model: WorldModel, episodes: list[dict[str, torch.Tensor]], quantile: float = 0.99, objects: bool = False
) -> float:
    """The `quantile`, over episodes, of the head's largest disagreement replaying each one's logged actions.

    `episodes` are `ClipDataset.episode` samples (all frames of an episode at the model's rate), replayed
    from their first frames as imagined episodes are. An imagined episode that goes further from the data
    than nearly every logged one did at its worst frame has left the support. With `objects`, each replay
    starts from its recorded object pose as well (as imagined episodes of a state-observing policy do).
    """
    worst = replay_disagreement(model, episodes, objects).max(dim=1).values
    return float(np.quantile(worst.numpy(), quantile))


def calibrate_floor(
    model: WorldModel, episodes: list[dict[str, torch.Tensor]], quantile: float = 0.9, objects: bool = False
) -> float:
    """The `quantile`, over all frames, of the head's disagreement replaying the logged actions (as
    `calibrate_support`): how unsure the head is on the data itself, which a policy that behaves like the data
    should not pay for. Charging all of it taught fine-tuning to stay away from the cube, where even the
    logged episodes make the members disagree most."""
    return float(np.quantile(replay_disagreement(model, episodes, objects).flatten().numpy(), quantile))


@torch.no_grad()
def replay_disagreement(
    model: WorldModel, episodes: list[dict[str, torch.Tensor]], objects: bool = False
) -> torch.Tensor:
    """(N,T) disagreement of the head replaying each episode's logged actions from its first frame."""
    head = model.state_head
    if not episodes:
        raise ValueError("no episodes to calibrate the support threshold on.")
    starts = [ep for ep in episodes if len(ep["action"])]
    T = min(len(ep["action"]) for ep in starts)
    images = None
    if model.config.head.reads_cameras:
        images = model.frames(
            {k: torch.stack([ep[k][:1] for ep in starts]).float() for k in model.config.camera_keys}
        )[:, 0]
    state = torch.stack([ep["observation.state"][0] for ep in starts]).float()
    poses = [start_env(model, ep) for ep in starts]
    env = torch.cat(poses) if objects and all(pose is not None for pose in poses) else None
    latent = head.encode(images, model.norm("state", state), env)
    chunks = model.norm_chunks(torch.stack([ep["action"][:T] for ep in starts]).float())  # (N,T,C)
    frames = []
    for t in range(T):
        latent = head.step(latent, chunks[:, t])
        frames.append(head.disagreement(head.decode(latent)).cpu())
    return torch.stack(frames, dim=1)
