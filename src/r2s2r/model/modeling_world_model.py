"""The world model: multi-view denoiser + state-dynamics head + judge, trained together on clips.

`forward(batch) -> (loss, logs)` takes a batch of `ClipDataset` samples (K context frames and at least one
future frame per view, the action chunks between them, proprio and labels) and returns the sum of
  - the denoiser's loss on one future frame of every view (rectified flow, logit-normal noise levels,
    EDM-style preconditioning (see `precondition`), context frames noised a little so that imagined
    context does not derail rollouts);
    by default it generates the frame's change from the last context frame, so that predicting "nothing
    moves" (copy-last-frame) costs nothing and capacity goes to what the actions change,
  - the state-dynamics head's loss over the whole clip, unrolled from the first frame through every chunk,
  - the judge's loss on the real frames' staged reward and success.
Normalization statistics live in the model (buffers saved with the weights), so a checkpoint carries
everything needed to read raw observations. `save_pretrained` / `from_pretrained` write and read
`config.json` + `model.safetensors`.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from r2s2r.errors import DamagedFileError
from r2s2r.files import load_safetensors, staged_directory
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.denoiser import MultiViewDenoiser
from r2s2r.model.state_head import Judge, StateDynamicsHead

STAT_KEYS = {"state": "observation.state", "action": "action", "env": "observation.environment_state"}
RELATIVE_UNIT = 0.2  # relative actions are read in units of a fifth of the action's std (a frame's motion)
ROBUST_SPAN = 4.65  # the 1-99 % range of a normal distribution, in standard deviations


class RobotStats(nn.Module):
    """Normalization of another robot's actions and proprio (the model's own robot's are `WorldModel`'s)."""

    def __init__(self, action_dim: int, state_dim: int):
        super().__init__()
        for name, dim in (("state", state_dim), ("action", action_dim)):
            self.register_buffer(f"{name}_mean", torch.zeros(dim))
            self.register_buffer(f"{name}_std", torch.ones(dim))


# Checkpoints from before embodiments were named kept one robot's per-robot parameters unnamed.
UNNAMED_ROBOT_PARTS = ("view_emb", "action_joint", "state_joint", "no_action_tokens", "unknown_state")


def name_robot_parts(state: dict[str, torch.Tensor], robot: str) -> dict[str, torch.Tensor]:
    """An older checkpoint's weights with its robot's parts under the robot's name (`denoiser.view_emb` ->
    `denoiser.view_emb.<robot>`, `denoiser.sketch_in.weight` -> `denoiser.sketch_in.<robot>.weight`)."""
    renamed = {}
    for key, value in state.items():
        head, _, tail = key.partition(".")
        if head == "denoiser" and tail in UNNAMED_ROBOT_PARTS:
            key = f"denoiser.{tail}.{robot}"
        elif head == "denoiser" and tail in ("sketch_in.weight", "sketch_in.bias"):
            key = f"denoiser.sketch_in.{robot}.{tail.split('.')[1]}"
        renamed[key] = value
    return renamed


class WorldModel(nn.Module):
    def __init__(self, config: WorldModelConfig):
        super().__init__()
        self.config = config
        self.denoiser = MultiViewDenoiser(config)
        self.state_head = StateDynamicsHead(config)
        self.judge = Judge(config)
        dims = {"state": config.state_dim, "action": config.action_dim, "env": max(config.env_state_dim, 1)}
        for name, dim in dims.items():
            self.register_buffer(f"{name}_mean", torch.zeros(dim))
            self.register_buffer(f"{name}_std", torch.ones(dim))
        self.robot_stats = nn.ModuleDict({e.robot: RobotStats(e.action_dim, e.state_dim)
                                          for e in config.embodiments})  # fmt: skip
        # running mean of each view's squared denoising target (view_balance); training state, not saved
        self.register_buffer("view_energy", torch.zeros(config.num_views), persistent=False)
        self._sketches = {}  # robot -> robots/arm_sketch.ArmSketch, built on first use (arm_sketch)

    # ------------------------------------------------------------------ normalization
    def set_stats(self, stats: dict[str, dict[str, torch.Tensor]]) -> None:
        """Take mean/std from `ClipDataset.stats` (LeRobot keys); std is floored so constant joints work.

        Object poses are centred on their median and scaled by their 1-99 % range where the stats have it:
        objects can leave the workspace (a cube knocked off the table falls for metres), and a few such
        frames would otherwise set a scale at which centimetres vanish from the head's loss."""
        for name, key in STAT_KEYS.items():
            if key not in stats:
                continue
            mean, std = stats[key]["mean"], stats[key]["std"]
            if name == "env" and {"median", "q01", "q99"} <= set(stats[key]):
                mean, std = stats[key]["median"], (stats[key]["q99"] - stats[key]["q01"]) / ROBUST_SPAN
            getattr(self, f"{name}_mean").copy_(mean)
            getattr(self, f"{name}_std").copy_(std.clamp_min(1e-2))
        self.state_head.set_scales(self)

    def set_robot_stats(self, robot: str, stats: dict[str, dict[str, torch.Tensor]]) -> None:
        """Mean/std of another robot's action and observation.state (LeRobot keys, as `set_stats`)."""
        holder = self.robot_stats[robot]
        for name in ("state", "action"):
            key = STAT_KEYS[name]
            getattr(holder, f"{name}_mean").copy_(stats[key]["mean"])
            getattr(holder, f"{name}_std").copy_(stats[key]["std"].clamp_min(1e-2))

    def stats_of(self, robot: str | None = None) -> nn.Module:
        """What holds `robot`'s action and proprio statistics (this model for its own robot)."""
        return self if robot in (None, self.config.robot) else self.robot_stats[robot]

    def norm(self, name: str, x: torch.Tensor, robot: str | None = None) -> torch.Tensor:
        holder = self.stats_of(robot)
        return (x - getattr(holder, f"{name}_mean")) / getattr(holder, f"{name}_std")

    def unnorm(self, name: str, x: torch.Tensor, robot: str | None = None) -> torch.Tensor:
        holder = self.stats_of(robot)
        return x * getattr(holder, f"{name}_std") + getattr(holder, f"{name}_mean")

    def norm_chunks(self, actions: torch.Tensor, robot: str | None = None) -> torch.Tensor:
        """Raw actions (...,stride,A) -> normalized flat chunks (..., stride*A)."""
        return self.norm("action", actions, robot).flatten(-2)

    def batch_robot(self, batch: dict[str, torch.Tensor]) -> str:
        """Whose data a batch holds: `robot_index` (one robot per batch) names a row of `config.robots`."""
        if "robot_index" not in batch:
            return self.config.robot
        index = batch["robot_index"]
        if bool((index != index[0]).any()):
            raise ValueError(
                "a batch mixes robots; batches must hold one robot's clips (MixtureBatchSampler)."
            )
        return self.config.robots[int(index[0])]

    def frames(self, batch: dict[str, torch.Tensor], robot: str | None = None) -> torch.Tensor:
        """All views of a clip at model resolution, in [-1,1]: (B,T,V,3,h,w)."""
        views, cameras = [], self.config.embodiment(robot).cameras
        for key in [f"observation.images.{c}" for c in cameras]:
            if key not in batch:
                raise KeyError(f"the batch has no '{key}'; the world model was trained on {list(cameras)}.")
            x = batch[key]  # (B,T,3,H,W) in [0,1]
            B, T = x.shape[:2]
            size = (self.config.image_height, self.config.image_width)
            if tuple(x.shape[-2:]) != size:
                x = F.interpolate(x.flatten(0, 1), size=size, mode="area").reshape(B, T, 3, *size)
            views.append(x * 2 - 1)
        return torch.stack(views, dim=2)

    # ------------------------------------------------------------------ losses
    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Losses of a batch of one robot's clips; in a mixture (`robot_index`, `task_index`, `actions_known`
        per sample) the head and the judge learn only from clips of the model's own robot and task with
        actions."""
        robot = self.batch_robot(batch)
        frames = self.frames(batch, robot)  # (B,T,V,3,h,w)
        states = self.norm("state", batch["observation.state"], robot)  # (B,T,S)
        chunks = self.norm_chunks(batch["action"], robot)  # (B,T-1,C)
        own = robot == self.config.robot
        poses = batch.get("observation.environment_state") if self.config.sketched_objects and own else None
        task, known = batch.get("task_index"), batch.get("actions_known")
        denoise = self.denoise_loss(frames, states, chunks, poses, robot, task, known)
        mine = self.own_samples(batch, robot)
        if mine is None:
            state = judge = frames.new_zeros(())
        else:
            pick = {k: v[mine] for k, v in batch.items()}
            state = self.state_loss(frames[mine], states[mine], chunks[mine], pick)
            judge = self.judge_loss(frames[mine], pick)
        cfg = self.config
        loss = denoise + cfg.state_loss_weight * state + cfg.judge_loss_weight * judge
        logs = {"loss": loss.item(), "denoise": denoise.item(), "state": state.item(), "judge": judge.item()}
        return loss, logs

    def own_samples(self, batch: dict[str, torch.Tensor], robot: str) -> torch.Tensor | None:
        """(B,) mask of the clips the head and judge learn from (the model's own robot and task, with
        actions), or None when there are none."""
        if robot != self.config.robot:
            return None
        mine = torch.ones(len(batch["observation.state"]), dtype=torch.bool, device=batch["action"].device)
        if "task_index" in batch and self.config.tasks:
            mine = mine & (batch["task_index"] == self.config.task_index)
        if "actions_known" in batch:
            mine = mine & batch["actions_known"].bool()
        return mine if bool(mine.any()) else None

    def denoise_loss(
        self,
        frames: torch.Tensor,
        states: torch.Tensor,
        chunks: torch.Tensor,
        poses: torch.Tensor | None = None,
        robot: str | None = None,
        task: torch.Tensor | None = None,
        known: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Flow matching on one future frame: x_s = (1-s) x0 + s noise, the network predicts noise - x0.
        `poses` (B,T,E): the clips' raw object poses, which `object_sketch` draws (jittered). `robot`, `task`
        and `known` as `MultiViewDenoiser.forward` reads them."""
        B, T = frames.shape[:2]
        K = self.config.context_frames
        if T <= K:
            raise ValueError(f"clips have {T} frames; the model needs context_frames={K} plus at least one.")
        j = int(torch.randint(K, T, (1,)))  # which future frame to predict (its K predecessors are context)
        x0 = self.denoise_target(frames[:, j], frames[:, j - 1])  # (B,V,3,h,w)
        sigma = torch.sigmoid(torch.randn(B, device=x0.device))  # logit-normal levels, as SD3
        pure = torch.rand(B, device=x0.device) < self.config.mean_fraction
        sigma = torch.where(pure, torch.ones_like(sigma), sigma)  # some at pure noise: the conditional mean
        noise = torch.randn_like(x0)
        noisy = (1 - sigma.view(B, 1, 1, 1, 1)) * x0 + sigma.view(B, 1, 1, 1, 1) * noise
        context = frames[:, j - K : j]  # (B,K,V,3,h,w)
        context_sigma = torch.rand(B, device=x0.device) * self.config.context_noise
        s = context_sigma.view(B, 1, 1, 1, 1, 1)
        context = (1 - s) * context + s * torch.randn_like(context)
        chunks, states = chunks[:, j - K : j], states[:, j - K : j]
        if self.config.sketched_objects:
            if poses is None:
                raise ValueError(
                    "object_sketch needs observation.environment_state (object poses) in the training data; "
                    "record it, or set object_sketch=False."
                )
            poses = self.jitter_poses(poses[:, j - 1 : j + 1])
        sketch = self.sketches(chunks, states, poses, robot)
        chunks = self.denoiser_chunks(chunks, states, robot)
        out = self.denoiser(noisy, sigma, context, context_sigma, chunks, states, sketch, robot, task, known)
        c_skip, c_out = self.precondition(sigma)
        per_view = F.mse_loss(out, (x0 - c_skip * noisy) / c_out, reduction="none").mean(dim=(0, 2, 3, 4))
        if robot not in (None, self.config.robot):  # view_balance tracks the model's own views only
            return per_view.mean()
        return (self.view_weights(x0) * per_view).mean()

    def view_weights(self, x0: torch.Tensor | None = None) -> torch.Tensor:
        """Each view's weight in the denoising loss, (V,), averaging 1: `view_energy ** -view_balance`.

        `x0` (B,V,3,h,w), the batch's denoising targets, updates the running mean of each view's squared
        target (in training: the first batch sets it, then a 0.99 moving average)."""
        balance = self.config.view_balance
        if balance == 0:
            return torch.ones(self.config.num_views, device=self.view_energy.device)
        if x0 is not None and self.training:
            energy = x0.detach().pow(2).mean(dim=(0, 2, 3, 4))
            first = bool((self.view_energy == 0).all())
            self.view_energy.copy_(energy if first else 0.99 * self.view_energy + 0.01 * energy)
        weights = self.view_energy.clamp_min(1e-4) ** -balance
        return weights / weights.mean()

    def precondition(self, sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """EDM-style skip and output scales for rectified flow, x_s = (1-s) x0 + s noise: (B,1,1,1,1) each.

        The network's output F gives x0 = c_skip x_s + c_out F, where c_skip x_s is the best linear guess
        of x0 for data of std `data_std`. An untrained network (F = 0) therefore already predicts "no change"
        from pure noise and denoises linearly near the data, so rollouts start from copy-last-frame instead
        of from noise, and training spends its capacity on what the actions change (as DIAMOND does with
        EDM preconditioning).
        """
        s, sd = sigma.view(-1, 1, 1, 1, 1), self.config.data_std
        denom = (1 - s) ** 2 * sd**2 + s**2
        return (1 - s) * sd**2 / denom, s * sd / denom.sqrt()

    def velocity(
        self,
        noisy: torch.Tensor,
        sigma: torch.Tensor,
        context: torch.Tensor,
        context_sigma: torch.Tensor,
        chunks: torch.Tensor,
        states: torch.Tensor,
        sketch: torch.Tensor | None = None,
        robot: str | None = None,
    ) -> torch.Tensor:
        """The flow-matching velocity (noise - x0) at `noisy`, from the preconditioned x0 prediction.
        `sketch`: `sketches(chunks, states, poses)` (the same at every sampling step); drawn here if None,
        which a model that sketches objects refuses (it needs their poses). `robot`: whose views and actions
        (None: the model's own)."""
        c_skip, c_out = self.precondition(sigma)
        if sketch is None:
            sketch = self.sketches(chunks, states, robot=robot)
        chunks = self.denoiser_chunks(chunks, states, robot)
        out = self.denoiser(noisy, sigma, context, context_sigma, chunks, states, sketch, robot)
        x0 = c_skip * noisy + c_out * out
        return (noisy - x0) / sigma.clamp_min(1e-4).view(-1, 1, 1, 1, 1)

    def denoiser_chunks(
        self, chunks: torch.Tensor, states: torch.Tensor, robot: str | None = None
    ) -> torch.Tensor:
        """The action chunks as the denoiser reads them: (B,K,C), and with `relative_actions` (B,K,2C), the
        targets followed by their offsets from the proprio at the frame each chunk leads from."""
        if not self.config.relative_actions:
            return chunks
        A = self.config.embodiment(robot).action_dim
        targets = self.unnorm("action", chunks.unflatten(-1, (-1, A)), robot)  # (B,K,stride,A)
        position = self.unnorm("state", states, robot)[..., None, :]  # (B,K,1,A)
        offsets = (targets - position) / (RELATIVE_UNIT * self.stats_of(robot).action_std)
        return torch.cat([chunks, offsets.flatten(-2)], dim=-1)

    def sketches(
        self,
        chunks: torch.Tensor,
        states: torch.Tensor,
        poses: torch.Tensor | None = None,
        robot: str | None = None,
    ) -> torch.Tensor | None:
        """With `arm_sketch`: (B,2,V,channels,h,w), the arms' stick figures in every view at the last context
        frame's joints and at the last chunk's final targets; with `object_sketch`, then each object's box
        at `poses` (B,2,E), raw object poses at the last context frame and in the frame to come. None without
        `arm_sketch` (or for another robot without arm chains). `chunks` (B,K,C) and `states` (B,K,S)
        normalized."""
        cfg, e = self.config, self.config.embodiment(robot)
        objects = cfg.sketched_objects if e.robot == cfg.robot else 0
        if not e.arm_sketch:
            return None
        if objects and poses is None:
            raise ValueError("this model sketches objects (object_sketch): pass their poses now and next.")
        if e.robot not in self._sketches:
            from r2s2r.robots.arm_sketch import ArmSketch
            from r2s2r.robots.spec import robot_spec

            self._sketches[e.robot] = ArmSketch(
                robot_spec(e.robot), e.cameras, cfg.image_height, cfg.image_width, bool(objects)
            )
        now = self.unnorm("state", states[:, -1], robot)  # (B,S)
        target = self.unnorm("action", chunks[:, -1].unflatten(-1, (-1, e.action_dim))[:, -1], robot)
        joints = torch.stack([now, target], dim=1).flatten(0, 1)  # (2B,S)
        drawn = self._sketches[e.robot](joints, None if not objects else poses.flatten(0, 1))
        return drawn.unflatten(0, (len(now), 2))

    def jitter_poses(self, poses: torch.Tensor) -> torch.Tensor:
        """Training: object poses (B,F,E) with every object of a sample shifted by one random offset of
        `object_jitter` metres std, the same in all F frames (the motion between them stays exact)."""
        B, F, E = poses.shape
        shift = torch.randn(B, 1, E // 7, 3, device=poses.device) * self.config.object_jitter
        poses = poses.unflatten(-1, (E // 7, 7))
        return torch.cat([poses[..., :3] + shift, poses[..., 3:]], dim=-1).flatten(-2)

    def denoise_target(self, frame: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """What the denoiser generates for `frame`: the frame, or its scaled change from `last`."""
        if self.config.predict_delta:
            return (frame - last) / self.config.delta_scale
        return frame

    def frame_from_target(self, target: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """Inverse of `denoise_target`: a frame in [-1,1]."""
        frame = last + target * self.config.delta_scale if self.config.predict_delta else target
        return frame.clamp(-1, 1)

    def state_loss(
        self, frames: torch.Tensor, states: torch.Tensor, chunks: torch.Tensor, batch: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The head rolls from frame 0 through every chunk; every member is scored at every frame."""
        head = self.state_head
        env = self.norm("env", batch["observation.environment_state"]) if self.has_env(batch) else None
        seen = head.sees_objects(len(states), states.device) if env is not None else None
        latent = head.encode(frames[:, 0], states[:, 0], None if env is None else env[:, 0], seen)  # (B,L)
        loss = F.mse_loss(head.decode(latent)["state"], states[:, 0])
        if env is not None and head.carried:  # the cameras' own guess, for observations without a pose
            loss = loss + F.mse_loss(head.camera_guess(latent), env[:, 0])
        for t in range(chunks.shape[1]):
            nxt = None if env is None else env[:, t + 1]
            before = None if env is None else (states[:, t], env[:, t])  # the truth says what was carried
            latent, pose_loss = head.step_supervised(latent, chunks[:, t], nxt, states[:, t + 1], before)
            pred = head.decode(latent)  # (B,M,·)
            M = latent.shape[1]
            loss = loss + F.mse_loss(pred["state"], states[:, t + 1, None].expand(-1, M, -1))
            if env is not None:
                loss = loss + pose_loss.mean()
            if "next.reward" in batch:
                reward = batch["next.reward"][:, t].long().clamp(0, self.config.reward_levels - 1)
                loss = loss + F.cross_entropy(
                    pred["reward_logits"].flatten(0, 1), reward.repeat_interleave(M)
                )
            if "next.success" in batch:
                success = batch["next.success"][:, t].float()[:, None].expand(-1, M)
                loss = loss + F.binary_cross_entropy_with_logits(pred["success_logit"], success)
        return loss / (chunks.shape[1] + 1)

    def judge_loss(self, frames: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Staged reward and success of the state each real frame 1..T-1 shows."""
        if "next.reward" not in batch:
            return frames.new_zeros(())
        reward_logits, success_logit = self.judge(frames[:, 1:].flatten(0, 1))  # (B*(T-1), ...)
        reward = batch["next.reward"].long().clamp(0, self.config.reward_levels - 1).flatten()
        loss = F.cross_entropy(reward_logits, reward)
        if "next.success" in batch:
            loss = loss + F.binary_cross_entropy_with_logits(
                success_logit, batch["next.success"].float().flatten()
            )
        return loss

    def has_env(self, batch: dict) -> bool:
        return self.config.env_state_dim > 0 and "observation.environment_state" in batch

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, directory: str | Path, half_matrices: bool = False) -> Path:
        """Write config.json + model.safetensors (weights and normalization stats) atomically.

        `half_matrices` stores weight matrices (2-D and up) in float16, half the size, for checkpoints
        committed to a repository; biases, norms and normalization statistics stay float32, and
        `from_pretrained` loads it all into a float32 model."""
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        if half_matrices:
            tensors = {k: v.half() if v.dim() >= 2 else v for k, v in tensors.items()}  # all are float
        with staged_directory(directory) as tmp:
            self.config.save(tmp)
            save_file(tensors, tmp / "model.safetensors", metadata={"format": "pt", "library": "r2s2r"})
        return Path(directory)

    @classmethod
    def from_pretrained(
        cls, directory: str | Path, config: WorldModelConfig | None = None, device: str | torch.device = "cpu"
    ) -> WorldModel:
        """Load a checkpoint; `config`, when given, must equal the one it was saved with."""
        directory = Path(directory)
        saved = WorldModelConfig.load(directory)
        if config is not None and (diff := saved.differences(config)):
            detail = ", ".join(f"{k}: checkpoint {a!r} vs requested {b!r}" for k, (a, b) in diff.items())
            raise ValueError(
                f"checkpoint {directory} was made with another config ({detail}); load it without a config "
                "or with the one it was trained with."
            )
        model = cls(saved)
        weights = directory / "model.safetensors"
        if not weights.is_file():
            raise FileNotFoundError(f"no model.safetensors in {directory}; the checkpoint is incomplete.")
        fix = "the checkpoint is damaged: copy it again, or re-save or retrain it."
        state = name_robot_parts(load_safetensors(weights, fix, device=str(device)), saved.robot)
        if bad := [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]:
            raise DamagedFileError(f"{weights} holds NaN/inf in {bad[0]}; {fix}")
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as e:
            first = str(e).strip().splitlines()[1].strip() if "\n" in str(e) else str(e)
            raise ValueError(
                f"the weights in {weights} do not fit its config.json ({first}); the files come from "
                "different models: re-save the checkpoint or retrain."
            ) from None
        model.state_head.set_scales(model)  # the head's unsaved scales (head.arm_targets)
        return model.to(device)
