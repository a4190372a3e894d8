"""The world model as a batched environment: `reset(initial observations)`, `step(actions)`.

Policies run unchanged against it: observations come back with LeRobot keys at the resolution of the
observations the env was reset with (imagined frames are resized up from the model's resolution), and
`step` takes one 14-D action per env per control step, as in the reference world. The model imagines a
new frame every `frame_stride` control steps (10 Hz over 50 Hz control): between frames the observation
holds and the actions are collected into the chunk that conditions the next frame. A full chunk
(B, stride, A) may also be given at once.

With a head of several object-pose modes (`head.pose_modes`), each imagined episode draws once at
`reset` which of the predicted outcomes it follows, by their predicted odds: over many episodes the
imagined rates follow the odds instead of an average outcome no real episode has. With `head.chance`, it
also draws once per gripper the luck its grasps' fitted odds must beat (`StateDynamicsHead.take_odds`).
Within a frame the policy sees the frame's start repeated, unless the head follows the commands between
frames (`head.substeps`, `StateDynamicsHead.between`): then each control step's observation moves the arms
and grippers as the head's tracking and servo models say and a held object with its hand, and each frame
still ends where the head's step puts it. Images change once per model frame either way.

Where the reset observation carries the object pose (`observation.environment_state`), the state head
starts from it as well as from the cameras (`head.reads_objects`); without it, from the cameras alone,
and the first observation's object pose is then the head's reading of the cameras.

A video model that sketches objects (`object_sketch`) draws each imagined frame's cube where the state
head puts it: the head leads, the video follows. With `head_frames` (`rollout/head_frames.py`,
`frames=head` in r2s2r-eval and r2s2r-rank) no frame is sampled at all: every view is drawn, at the
resolution of the reset observations, from the head's imagined state (the robot's MJCF posed there,
coloured as the logs look), success is the head's, and the judge reading those frames cross-checks it:
where the two disagree, `uncertainty` rises by 1 and `info["judge_success"]` keeps the judge's verdict.

Each imagined step returns the judge's staged reward and success read from the imagined frames, the
state-dynamics head's proprio, object state, reward and success, and an uncertainty (ensemble
disagreement of the head, in normalized units, and their disagreement about the outcome; with
`head.doubt`, also how near the episode's grasps came to a grasp rule's edge). The env never steps
physics or calls the reference world:
MuJoCo serves only the robot's description (its kinematics for the checker and the sketches, and, with
`head_frames`, rasterizing it).

Every imagined frame is checked by the physics checker (`robots/checker.py`) over the last few seconds
of imagined proprio and object state and the commanded chunk: `info["violations"]` (B,K) flags, per type
of `VIOLATIONS`, what the newest frame broke (an acceleration is known one frame late, once the next
state is in), and `violation_counts` keeps the flagged frames per type since `reset`.

With `render=False` the env runs the state-dynamics head alone (the fast path): no frame is sampled, the
observations carry proprio and object state but no images, and reward and success are the head's. Policies
that read only state (scripted demonstrators, state-based checkpoints) can then be evaluated at thousands
of episodes per minute; one that asks for a camera gets a clear error from its loader.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.robots.checker import VIOLATIONS, PhysicsChecker
from r2s2r.robots.spec import robot_spec
from r2s2r.rollout.head_frames import HeadFrames
from r2s2r.rollout.sampler import FrameSampler


class WorldModelEnv:
    def __init__(
        self,
        model: WorldModel,
        num_envs: int,
        device: str | torch.device = "cpu",
        sampling_steps: int | None = None,
        seed: int = 0,
        render: bool = True,
        check_physics: bool = True,
        head_frames: HeadFrames | None = None,
    ):
        self.model = model.to(device).eval()
        self.cfg = model.config
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.sampler = FrameSampler(self.model, sampling_steps)
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.seed = seed
        self.render = render  # False: state head only, no frames sampled (see the module docstring)
        if head_frames is not None and not render:
            raise ValueError("head_frames draws imagined frames; it needs render=True.")
        self.head_frames = head_frames  # frames drawn from the head's state instead of sampled
        self.images: torch.Tensor | None = None  # (B,V,3,H,W) in [0,1]: the newest head-drawn frame
        self.output_size: tuple[int, int] | None = None
        self._pending: list[torch.Tensor] = []  # actions of the chunk being collected, each (B,A)
        spec = robot_spec(self.cfg.robot)
        self.checker = PhysicsChecker(spec) if check_physics else None
        self.frame_dt = self.cfg.frame_stride / spec.control_hz  # seconds between imagined frames

    # ------------------------------------------------------------------ helpers
    def _model_frames(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B,V,3,h,w) in [-1,1] from LeRobot-keyed images (B,3,H,W) in [0,1]."""
        missing = [k for k in self.cfg.camera_keys if k not in obs]
        if missing:
            raise KeyError(
                f"reset observation lacks {missing}; the world model needs {self.cfg.camera_keys}."
            )
        batch = {k: obs[k][:, None].to(self.device, torch.float32) for k in self.cfg.camera_keys}
        return self.model.frames(batch)[:, 0]

    def _observation(self) -> dict[str, torch.Tensor]:
        obs = {"observation.state": self.state}
        if self.cfg.env_state_dim:
            obs["observation.environment_state"] = self.env_state
        if not self.render:
            return obs
        if self.head_frames is not None:
            return {**{key: self.images[:, v] for v, key in enumerate(self.cfg.camera_keys)}, **obs}
        frame = self.context[:, -1]  # (B,V,3,h,w) the newest frame
        B, V = frame.shape[:2]
        images = F.interpolate(
            frame.flatten(0, 1), size=self.output_size, mode="bilinear", align_corners=False
        )
        images = ((images + 1) / 2).clamp(0, 1).reshape(B, V, 3, *self.output_size)
        return {**{key: images[:, v] for v, key in enumerate(self.cfg.camera_keys)}, **obs}

    # ------------------------------------------------------------------ api
    @torch.no_grad()
    def reset(self, initial: dict[str, torch.Tensor], seed: int | None = None) -> dict[str, torch.Tensor]:
        """Start imagined episodes from real observations: images (B,3,H,W) in [0,1], state (B,S), object
        pose (B,E) where known. Without `render`, a head without cameras needs no images (but the pose)."""
        state = initial["observation.state"].to(self.device, torch.float32)
        if state.shape != (self.num_envs, self.cfg.state_dim):
            raise ValueError(
                f"observation.state has shape {tuple(state.shape)}, "
                f"expected ({self.num_envs}, {self.cfg.state_dim})."
            )
        if seed is not None:
            self.generator.manual_seed(seed)
        K = self.cfg.context_frames
        frame = self.context = None  # a head without cameras, not rendering: no frames at all
        if self.render or self.cfg.head.reads_cameras:
            frame = self._model_frames(initial)  # (B,V,3,h,w)
            self.output_size = tuple(initial[self.cfg.camera_keys[0]].shape[-2:])
            self.context = frame[:, None].repeat(1, K, 1, 1, 1, 1)  # (B,K,V,3,h,w): the start, held still
        norm_state = self.model.norm("state", state)
        self.context_states = norm_state[:, None].repeat(1, K, 1)  # (B,K,S)
        hold = state[:, None].expand(-1, self.cfg.frame_stride, -1)  # holding still = targets at the state
        self.chunks = self.model.norm_chunks(hold)[:, None].repeat(1, K, 1)  # (B,K,C)
        self.env_state = initial.get("observation.environment_state", torch.zeros(self.num_envs, 1))
        self.env_state = self.env_state.to(self.device, torch.float32)
        observed = self.env_state.shape[-1] == self.cfg.env_state_dim > 0  # the object pose, where known
        norm_env = self.model.norm("env", self.env_state) if observed else None
        latent = self.model.state_head.encode(frame, norm_state, norm_env)
        self.latent = latent[:, None].repeat(1, self.cfg.head.ensemble, 1)
        self.state = state
        self.draw = None  # one draw per episode picks its object-pose mode (head.pose_modes > 1)
        if self.model.state_head.modes > 1:
            self.draw = torch.rand(self.num_envs, generator=self.generator, device=self.device)
        self.luck = None  # head.chance: one draw per episode and gripper decides its grasps
        if self.model.state_head.chances:
            G = self.model.state_head.fk.num_grippers
            self.luck = torch.rand(self.num_envs, G, generator=self.generator, device=self.device)
        decoded = self.model.state_head.decode(self.latent, imagined=True)
        self.model.state_head.forget_outcomes()  # a new episode: no step behind this frame
        self._read(frame, decoded)
        if self.cfg.env_state_dim and not observed:  # the policy and the checker see the head's start pose
            self.env_state = self.model.unnorm("env", decoded["env_state"].mean(1))
        self.pose = self.env_state if self.cfg.sketched_objects else None  # raw poses of the newest frame
        if self.head_frames is not None:  # the logged first frame itself, at the logs' resolution
            self.images = torch.stack(
                [initial[k].to(self.device, torch.float32) for k in self.cfg.camera_keys], 1
            )
            if tuple(self.images.shape[-2:]) != self.head_frames.size:
                raise ValueError(
                    f"the reset images are {tuple(self.images.shape[-2:])}; the head's frames were fitted at "
                    f"{self.head_frames.size}: fit them on logs of this size (r2s2r-fit-frames)."
                )
        self._pending = []
        self._frame_start()
        self.t = 0
        self._history: list[tuple[np.ndarray, np.ndarray, dict]] = []  # per frame: state, env, geometry
        self.violations = torch.zeros(self.num_envs, len(VIOLATIONS), dtype=torch.bool)
        self.violation_counts = torch.zeros(self.num_envs, len(VIOLATIONS), dtype=torch.long)
        self._check(None)  # the real start: history for the first imagined frames, not counted
        self.violation_counts.zero_()
        return self._observation()

    @torch.no_grad()
    def step(self, actions: torch.Tensor) -> tuple[dict, torch.Tensor, torch.Tensor, dict]:
        """Apply (B,A) actions for one control step, or a full chunk (B,stride,A).

        Returns (observation, reward, done, info). `reward`/`info["success"]` are the judge's reading of the
        newest imagined frame (the head's when `render=False`), `info["success_prob"]` its confidence;
        `info` also has the head's predictions, `uncertainty` (B,) and `imagined` (whether this call
        produced a new frame).
        """
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        A, stride = self.cfg.action_dim, self.cfg.frame_stride
        if not torch.isfinite(actions).all():
            raise ValueError("actions contain NaN or inf; nothing was applied.")
        if actions.shape == (self.num_envs, A):
            self._pending.append(actions)
        elif actions.shape == (self.num_envs, stride, A):
            if self._pending:
                raise ValueError("a full chunk was given while single actions were being collected.")
            self._pending = list(actions.unbind(1))
        else:
            raise ValueError(
                f"actions have shape {tuple(actions.shape)}; expected ({self.num_envs}, {A}) per control "
                f"step or ({self.num_envs}, {stride}, {A}) per imagined frame."
            )
        self.t += 1 if actions.dim() == 2 else stride
        imagined = len(self._pending) == stride
        if imagined:
            self._imagine(torch.stack(self._pending, dim=1))
            self._pending = []
            self._frame_start()
        elif self.model.state_head.follows:  # between frames: the commands so far, one step at a time
            start, pose = self._start
            self.state, moved = self.model.state_head.between(
                start, pose, self.state, torch.stack(self._pending, dim=1)
            )
            if moved is not None:
                self.env_state = moved
        info = {
            "imagined": imagined,
            "violations": self.violations,
            "success": self.success,
            "success_prob": self.success_prob,
            "uncertainty": self.uncertainty,
            **self.head,
        }
        return self._observation(), self.reward, torch.zeros(self.num_envs, dtype=torch.bool), info

    def _frame_start(self) -> None:
        """Keep the newest frame's proprio and object pose: where `head.substeps` starts the next steps."""
        posed = self.cfg.env_state_dim >= 7 and self.env_state.shape[-1] == self.cfg.env_state_dim
        self._start = (self.state, self.env_state if posed else None)

    def _imagine(self, chunk: torch.Tensor) -> None:
        """One model frame: sample every view, roll the state head, read the frame with the judge."""
        model = self.model
        norm_chunk = model.norm_chunks(chunk)  # (B,C)
        chunks = torch.cat([self.chunks[:, 1:], norm_chunk[:, None]], dim=1)  # (B,K,C)
        self.latent = model.state_head.step(self.latent, norm_chunk, self.draw, self.luck)  # (B,M,L)
        decoded = model.state_head.decode(self.latent, imagined=True)
        norm_state = decoded["state"].mean(dim=1)  # (B,S)
        self.state = model.unnorm("state", norm_state)
        if self.cfg.env_state_dim:
            self.env_state = model.unnorm("env", decoded["env_state"].mean(dim=1))
        poses = None
        if self.cfg.sketched_objects:  # where the object is and where the head puts it in the new frame
            poses = torch.stack([self.pose, self.env_state], dim=1)
            self.pose = self.env_state
        if self.head_frames is not None:  # drawn from the head's state; the judge reads them at its size
            self.images = self.head_frames(self.state, self.env_state if self.cfg.env_state_dim else None)
            frame = self._model_frames({k: self.images[:, v] for v, k in enumerate(self.cfg.camera_keys)})
            self.context = torch.cat([self.context[:, 1:], frame[:, None]], dim=1)
        elif self.render:
            frame = self.sampler.sample(
                self.context, chunks, self.context_states, generator=self.generator, poses=poses
            )
            self.context = torch.cat([self.context[:, 1:], frame[:, None]], dim=1)
        self._read(None if self.context is None else self.context[:, -1], decoded)
        self.context_states = torch.cat([self.context_states[:, 1:], norm_state[:, None]], dim=1)
        self.chunks = chunks
        self._check(chunk)

    HISTORY_FRAMES = 30  # frames (3 s at 10 Hz) of imagined state the checker looks back over

    def _check(self, chunk: torch.Tensor | None) -> None:
        """Physics flags of the newest frame, from the recent imagined states and the commanded chunk."""
        if self.checker is None:
            return
        state = self.state.cpu().numpy().astype(np.float64)
        width = self.env_state.shape[-1]
        has_objects = self.cfg.env_state_dim > 0 and width > 0 and width % 7 == 0  # 7-D poses per object
        env = self.env_state.cpu().numpy().astype(np.float64) if has_objects else None
        self._history.append((state, env, self.checker.geometry(state)))
        self._history = self._history[-self.HISTORY_FRAMES :]
        B, T = self.num_envs, len(self._history)
        states = np.stack([h[0] for h in self._history], axis=1)  # (B,T,S)
        known = all(h[1] is not None for h in self._history)  # object state from the start on
        envs = np.stack([h[1] for h in self._history], axis=1) if known else None
        geometry = {
            key: np.stack([h[2][key] for h in self._history], axis=1).reshape(B * T, *state_shape)
            for key, state_shape in (("table_depth", ()), ("arm_depth", ()), ("tcp", (2, 3)))
        }  # per (B*T) state, as PhysicsChecker.check wants it
        flags = self.checker.check(states, self.frame_dt, env_states=envs, geometry=geometry).flags
        newest = flags[:, -1].copy()  # (B,K)
        acc = VIOLATIONS.index("joint_acceleration")
        newest[:, acc] = flags[:, -2, acc] if T >= 3 else False  # centred on the frame before
        if chunk is not None:
            newest |= self.checker.commands(chunk.cpu().numpy()).any(axis=1)
        self.violations = torch.from_numpy(newest)
        self.violation_counts += self.violations.long()

    def _read(self, frame: torch.Tensor | None, decoded: dict[str, torch.Tensor]) -> None:
        """Outcomes of the newest frame: the judge reads the pixels, the head its latent members (B,M,·)."""
        head_prob = decoded["success_logit"].sigmoid().mean(1)  # (B,) ensemble mean
        self.head = {
            "head_reward": decoded["reward_logits"].softmax(-1).mean(1).argmax(-1).float(),
            "head_success": head_prob > 0.5,
        }
        self.uncertainty = self.model.state_head.disagreement(decoded)  # (B,)
        outcomes = self.model.state_head.outcome_spread()  # the members' disagreement about the outcome
        if outcomes is not None:
            self.uncertainty = self.uncertainty + outcomes
        if self.render:
            reward_logits, success_logit = self.model.judge(frame)
            self.reward = reward_logits.argmax(-1).float()  # (B,) staged reward
            self.success_prob = success_logit.sigmoid()  # (B,)
        else:
            self.reward, self.success_prob = self.head["head_reward"], head_prob
        self.success = self.success_prob > 0.5  # (B,)
        if self.head_frames is not None:  # the frames show the head's state: success is the head's
            self.head["judge_success"] = self.success
            self.uncertainty = self.uncertainty + (self.success != self.head["head_success"]).float()
            self.reward, self.success_prob = self.head["head_reward"], head_prob
            self.success = self.head["head_success"]
