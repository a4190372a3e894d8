"""The state-dynamics head (fast path) and the success/reward judge (reads frames).

State-dynamics head: encodes one real observation (all views at model resolution + proprio, and the object
pose where the observation has it and `head.reads_objects` is on) into a compact latent, then rolls that
latent forward one model frame per action chunk with an ensemble of small MLPs, never decoding pixels. From
any latent it predicts the proprio, the object state (where the data has it), the staged reward and success.
Thousands of candidate action chunks roll out in one batched call; the spread of the ensemble members is the
uncertainty of each imagined step (members agree where they were trained and drift apart elsewhere).

Judge: a small CNN over all views of one (real or imagined) frame that predicts the staged reward and
success of the state it shows, so an imagined video can be scored like a real one.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from r2s2r.model.configuration_world_model import WorldModelConfig

REL_SCALE = 0.05  # m: the object's position in a gripper's frame is read in units of this (clamped at 4x)
NEAR = 0.02  # m: width of the "object between the pads" feature, exp(-d^2 / 2 NEAR^2)


TRACKING_FEATURES = 3  # what `head.arm_tracking` reads of each arm joint (`tracking_features`)


def tracking_features(targets: torch.Tensor) -> torch.Tensor:
    """What `head.arm_tracking`'s model reads of each arm joint: a frame's commanded targets (...,K,A), in
    radians -> (...,A,3): the last target's change over the frame's last control step and over the whole
    frame, and 1. The commands only, not where the arm is: a model fed its own imagined joints compounded
    its errors over an episode (and a fit across joints, or on gravity's sine and cosine, followed the
    demonstrators' poses and was wrong for other controllers')."""
    last = targets[..., -1, :]
    step = last - targets[..., -min(2, targets.shape[-2]), :]
    return torch.stack([step, last - targets[..., 0, :], torch.ones_like(last)], dim=-1)


def conv_trunk(width: int) -> nn.Sequential:
    """(N,3,H,W) -> (N, 4*width) features: three stride-2 convs and a global average."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, stride=2, padding=1), nn.SiLU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.SiLU(),
        nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1), nn.SiLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    )  # fmt: skip


class EnsembleMLP(nn.Module):
    """M independent two-layer MLPs evaluated in one einsum: (B,M,I) -> (B,M,O)."""

    def __init__(self, members: int, dim_in: int, dim_hidden: int, dim_out: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(members, dim_in, dim_hidden))
        self.b1 = nn.Parameter(torch.zeros(members, dim_hidden))
        self.w2 = nn.Parameter(torch.empty(members, dim_hidden, dim_out))
        self.b2 = nn.Parameter(torch.zeros(members, dim_out))
        for w in (self.w1, self.w2):  # each member drawn independently: their disagreement is the signal
            nn.init.uniform_(w, -1 / math.sqrt(w.shape[1]), 1 / math.sqrt(w.shape[1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(torch.einsum("bmi,mih->bmh", x, self.w1) + self.b1)
        return torch.einsum("bmh,mho->bmo", h, self.w2) + self.b2


class StateDynamicsHead(nn.Module):
    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.cfg = cfg
        self._outcomes = None  # the members' own expected object positions after the last `step`
        self._doubt = None  # head.doubt: how near a grasp rule's edge the episode has come (B,)
        self._carrier = None  # (B,) the gripper whose carried mode the last `step` picked (-1: none)
        self._frame_fk = None  # `between`: the frame's start proprio and its grasp frames
        self._loose = None  # `between`, head.pushes: the frame's start proprio, where pushes left the object
        self._path = None  # `_follow_path`: the start proprio, the targets so far and the steps they gave
        self._frames = None  # `_follow`: the proprio of its last step and that proprio's grasp frames
        L, H = cfg.head.latent_dim, cfg.head.hidden
        self._build_encoder(cfg)  # 1. observation -> latent; the action chunk's embedding
        # With `head.carries_state` the latent is [z (L), proprio (S), object pose (E)]: the normalized
        # state is carried explicitly and stepped by predicted changes, so "nothing moved" is the default.
        self.carried = C = cfg.state_dim + cfg.env_state_dim if cfg.head.carries_state else 0
        relations = self._build_modes(cfg)  # 2. the object pose's modes, the grippers' relations to it
        self._build_scales(cfg)  # 3. the normalizations the kinematic and arm-target rules read
        extra = (self.modes - 1) * cfg.env_state_dim + (self.modes if self.modes > 1 else 0)
        self.dynamics = EnsembleMLP(cfg.head.ensemble, L + C + H + relations, H, L + C + extra)  # 4. dynamics
        with torch.no_grad():  # an untrained head predicts "nothing moves" for the carried state
            self.dynamics.w2[..., L:].zero_()
        if not C:  # 5. decoders
            self.state_out = nn.ModuleDict({cfg.robot: nn.Linear(L, cfg.state_dim)})
        self.env_out = nn.Linear(L, max(cfg.env_state_dim, 1))  # carried: the cameras' guess at the start
        self.contact = bool(cfg.head.contact and self.kinematic and self.modes > 1)
        if self.contact:  # 6. contact outcomes from the gripper-object geometry alone
            self._build_contact(cfg)
        else:
            self.reward_out = nn.Linear(L + C + relations, cfg.reward_levels)
            self.success_out = nn.Linear(L + C + relations, 1)

    def _build_encoder(self, cfg: WorldModelConfig) -> None:
        """The camera trunk (if it reads cameras), the proprio and object-pose inputs, the encoder to the
        latent, and the action chunk's input."""
        L, H = cfg.head.latent_dim, cfg.head.hidden
        self.reads_cameras = cfg.head.reads_cameras
        self.trunk = conv_trunk(cfg.judge_width) if self.reads_cameras else None  # shared by all views
        self.state_in = nn.ModuleDict({cfg.robot: nn.Linear(cfg.state_dim, H)})
        self.reads_objects = cfg.head.reads_objects and cfg.env_state_dim > 0
        if self.reads_objects:  # the object pose and a flag saying whether it was observed at all
            self.env_in = nn.Linear(cfg.env_state_dim + 1, H)
        self.encoder = nn.Sequential(
            nn.Linear(self.feature_width + H * (1 + self.reads_objects), H),
            nn.SiLU(),
            nn.Linear(H, L),
        )
        self.latent_norm = nn.LayerNorm(L)  # keeps long latent rollouts bounded (no drift to infinity)
        self.chunk_in = nn.ModuleDict({cfg.robot: nn.Linear(cfg.chunk_dim, H)})

    def _build_modes(self, cfg: WorldModelConfig) -> int:
        """The object pose's modes: `pose_modes` free changes, then the still one, then one carried mode per
        gripper (kinematic heads). Returns the width of the gripper-object relations the dynamics read."""
        C = self.carried
        # With `head.pose_modes` K > 1, the object pose's change is one of K predicted changes (e.g. carried
        # along by the gripper, or left behind), picked per imagined episode by the predicted odds.
        self.modes = cfg.head.pose_modes if C and cfg.env_state_dim else 1
        self.free_modes = self.modes  # the first modes; the still one and the carried ones follow
        # With `head.still_mode`, the next mode keeps the object exactly where it is (its change is not used).
        self.still = bool(cfg.head.still_mode and C and cfg.env_state_dim)
        self.modes += self.still
        # With `head.kinematics`, the object is also related to each gripper's grasp point: its position in
        # every gripper's frame is an input, and one more mode per gripper moves it rigidly with that gripper.
        self.kinematic = bool(cfg.head.kinematics and C and cfg.env_state_dim >= 3)
        relations = 0
        if self.kinematic:
            from r2s2r.robots.kinematics import GraspKinematics
            from r2s2r.robots.spec import robot_spec

            spec = robot_spec(cfg.robot)
            self.fk = GraspKinematics(spec, cfg.head.pad_overlap)
            self.grippers = list(spec.gripper_indices)  # proprio index of each gripper (fk's order)
            self._memo = None  # the last latent _grasp read, and what it found
            self._swept = None  # the last latent and chunk `sweep` read, and what it found
            self.modes += self.fk.num_grippers
            relations = 4 * self.fk.num_grippers
        if self.still:  # 1 for the modes whose predicted change moves the object, 0 for the still one
            moves = torch.ones(self.modes, 1)
            moves[self.free_modes] = 0.0
            self.register_buffer("mode_moves", moves, persistent=False)
        return relations

    CONTACT_HIDDEN = 64  # hidden width of the contact MLPs
    # per gripper: the object's position in its frame (3), nearness, opening, the object's height, 2
    # alignments, the grasp point's height and the gripper's axes' vertical components (3)
    GEOMETRY = 12

    def _build_contact(self, cfg: WorldModelConfig) -> None:
        """`head.contact`: four small ensembles that read only `geometry` (each gripper's relation to the
        object and the table, its opening, the object's height) and the gripper's command. One network
        serves every gripper (a grasp is a grasp whichever hand makes it): `grip_net` gives how far it
        moves this frame (a closing gripper stops on the object between its pads), `carry_net` the odds
        that it carries the object; `rest_net` gives the odds of the free and still modes from both grippers'
        geometry, `outcome_net` the staged reward and success."""
        if cfg.state_dim != cfg.action_dim:
            raise ValueError(
                "head.contact=True needs actions that are joint targets (action_dim == state_dim); "
                f"this robot has action_dim={cfg.action_dim}, state_dim={cfg.state_dim}."
            )
        M, H, G, X = cfg.head.ensemble, self.CONTACT_HIDDEN, self.fk.num_grippers, self.GEOMETRY
        self.grip_net = EnsembleMLP(M, X + 2, H, 1)  # + command, command - opening
        self.carry_net = EnsembleMLP(M, X + 3, H, 1)  # + the same, + the predicted motion
        self.rest_net = EnsembleMLP(M, G * (X + 2), H, self.modes - G)
        self.outcome_net = EnsembleMLP(M, G * X, H, cfg.reward_levels + 1)
        with torch.no_grad():  # untrained: the grippers do not move
            self.grip_net.w2.zero_()
        if cfg.head.pads:  # a gripper's closing motion alone, for an object outside its pads' box
            self.free_net = EnsembleMLP(M, 3, H, 1)  # opening, command, command - opening
            with torch.no_grad():
                self.free_net.w2.zero_()

    PAD_SOFTNESS = 0.002  # m: how sharply the faces of the box between the pads cut

    def _build_scales(self, cfg: WorldModelConfig) -> None:
        """Buffers for joints in radians and the pose in metres (kinematic heads, saved) and for commands in
        proprio's normalization (`head.arm_targets`, not saved: it adds no weights, so a trained head can
        switch it on, and the model re-copies these scales from its own normalization when it loads); with
        `head.arm_tracking`, the fitted tracking model (saved)."""
        scales = {"joint": cfg.state_dim, "pose": cfg.env_state_dim} if self.kinematic else {}
        for name, dim in scales.items():
            self.register_buffer(f"{name}_mean", torch.zeros(dim))
            self.register_buffer(f"{name}_std", torch.ones(dim))
        # With `head.arm_targets` the arm joints end each frame at their last target.
        self.arm_targets = bool(cfg.head.arm_targets and self.carried and cfg.state_dim == cfg.action_dim)
        from r2s2r.robots.spec import robot_spec

        if self.arm_targets or (cfg.head.contact and self.kinematic):
            grippers = set(robot_spec(cfg.robot).gripper_indices)
            arms = torch.tensor([i for i in range(cfg.state_dim) if i not in grippers])
            self.register_buffer("arm_index", arms, persistent=False)
            self.register_buffer(
                "grip_index", torch.tensor(robot_spec(cfg.robot).gripper_indices), persistent=False
            )
            for name, dim in (("joint", cfg.state_dim), ("command", cfg.action_dim)):
                if name not in scales:
                    self.register_buffer(f"{name}_mean", torch.zeros(dim), persistent=False)
                    self.register_buffer(f"{name}_std", torch.ones(dim), persistent=False)
        # With `head.arm_tracking`, the tracking model's weights (fitted by `fit_arm_tracking`, saved).
        self.tracks = bool(self.arm_targets and cfg.head.arm_tracking)
        if self.tracks:  # zeros: exactly the last target until fitted
            self.register_buffer("tracking", torch.zeros(len(self.arm_index), TRACKING_FEATURES))
        # With `head.grip_servo`, the grippers' servo (gain, top speed, dead band; `fit_grip_servo`, saved).
        self.servos = bool(cfg.head.grip_servo and cfg.head.contact and self.kinematic)
        # With `head.substeps`, the observations between frames follow the commands (`between`), the grippers
        # by the same fitted servo.
        self.follows = bool(cfg.head.substeps and self.arm_targets and cfg.head.contact and self.kinematic)
        self.pushes = bool(self.follows and cfg.head.pushes)
        self.drops = bool(self.follows and cfg.head.drops)
        if self.drops:  # s: one control step
            self.control_dt = 1.0 / robot_spec(cfg.robot).control_hz
        if self.pushes:  # m: how far from the grasp point an object in a finger's grown box can lie
            fk = self.fk
            corners = torch.stack([fk.finger_lower - fk.object_rest, fk.finger_upper + fk.object_rest])
            self.finger_reach = float(corners.abs().amax(0).norm(dim=-1).max())
        self.closes = bool(cfg.head.closes and cfg.head.contact and self.kinematic)  # also by the servo
        if self.servos or self.follows or self.closes:  # zeros: the grippers stay put until fitted
            self.register_buffer("grip_servo", torch.zeros(3))
        # With `head.chance`, each grasp factor's edge and width (`fit_grasp_odds`, saved); until fitted,
        # head.balance's edge, and no squeeze edge.
        self.chances = bool(cfg.head.chance and cfg.head.takes and self.kinematic)
        self.odds = self.chances or bool(cfg.head.odds_doubt and cfg.head.takes and self.kinematic)
        if self.odds:  # head.odds_doubt reads the same fitted odds for the uncertainty alone
            self.register_buffer("grasp_odds", torch.tensor(self.ODDS_UNFITTED))

    @property
    def feature_width(self) -> int:
        """Width of the camera trunk's features of one observation (all views); 0 for a blind head."""
        return self.cfg.num_views * 4 * self.cfg.judge_width if self.cfg.head.reads_cameras else 0

    @property
    def latent_size(self) -> int:
        """Width of the latent `encode` returns and `step` rolls: latent_dim, plus the carried state."""
        return self.cfg.head.latent_dim + self.carried

    def encode(
        self,
        images: torch.Tensor | None,
        state: torch.Tensor,
        env: torch.Tensor | None = None,
        seen: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Latent (B,L) of one observation: images (B,V,3,H,W) in [-1,1], normalized state (B,S), and the
        normalized object pose (B,E) where it was observed (`seen` (B,) bool; all of it when omitted). A head
        that does not read objects ignores `env`; one without cameras ignores `images` (may be None)."""
        return self.encode_features(self.features(images, state), state, env, seen)

    def features(self, images: torch.Tensor | None, state: torch.Tensor) -> torch.Tensor:
        """The camera trunk's features (B, V*4w) of images (B,V,3,H,W); (B,0) for a head without cameras."""
        if self.trunk is None:
            return state.new_zeros(state.shape[0], 0)
        if images is None:
            raise ValueError(
                "this state head reads cameras (head.reads_cameras=True): the observation needs images."
            )
        B = images.shape[0]
        return self.trunk(images.flatten(0, 1)).reshape(B, -1)

    def encode_features(
        self,
        features: torch.Tensor,
        state: torch.Tensor,
        env: torch.Tensor | None = None,
        seen: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Latent (B,L) from the camera trunk's features (B, V*4w), normalized state (B,S) and object pose."""
        parts = [features, F.silu(self.state_in[self.cfg.robot](state))]
        B, E = state.shape[0], self.cfg.env_state_dim
        if self.reads_objects:
            if env is None and not self.reads_cameras:
                raise ValueError(
                    "this state head reads no cameras (head.reads_cameras=False): every observation it "
                    "starts from needs observation.environment_state (the object pose)."
                )
            if env is None:
                env, seen = state.new_zeros(B, E), state.new_zeros(B, dtype=torch.bool)
            if env.shape != (B, E):
                raise ValueError(
                    f"object pose has shape {tuple(env.shape)}, expected ({B}, {E}) "
                    "(observation.environment_state, as the world model was trained on)."
                )
            seen = torch.ones(B, dtype=torch.bool, device=state.device) if seen is None else seen
            flag = seen.to(state.dtype)[:, None]
            parts.append(F.silu(self.env_in(torch.cat([env * flag, flag], dim=-1))))
        z = self.latent_norm(self.encoder(torch.cat(parts, dim=-1)))
        if not self.carried:
            return z
        if not E:
            return torch.cat([z, state], dim=-1)
        pose = self.camera_guess(z)  # what the cameras say; the observed pose where there is one
        if self.reads_objects:
            pose = torch.where(seen[:, None], env, pose)
        return torch.cat([z, state, pose], dim=-1)

    def camera_guess(self, latent: torch.Tensor) -> torch.Tensor:
        """The normalized object pose (...,E) the cameras alone suggest for an encoded latent. Trained on
        every encoding, shown pose or not, so it is ready when an observation has none."""
        return self.env_out(latent[..., : self.cfg.head.latent_dim])

    def sees_objects(
        self, batch_size: int, device: torch.device | str = "cpu", generator: torch.Generator | None = None
    ) -> torch.Tensor | None:
        """Training: which encodings see the object pose (B,) bool; `head.object_dropout` of them do not."""
        if not self.reads_objects:
            return None
        if not self.reads_cameras:  # nothing else tells it where the object is: always shown
            return torch.ones(batch_size, dtype=torch.bool, device=device)
        return (torch.rand(batch_size, generator=generator) >= self.cfg.head.object_dropout).to(device)

    def set_scales(self, source: nn.Module) -> None:
        """Copy the world model's normalization (`source.{state,env,action}_{mean,std}`) into the buffers this
        head reads: a kinematic head needs joints in radians and the pose in metres, one with `arm_targets`
        the commands in proprio's normalization."""
        for mine, theirs in (("joint", "state"), ("pose", "env"), ("command", "action")):
            if hasattr(self, f"{mine}_mean"):
                getattr(self, f"{mine}_mean").copy_(getattr(source, f"{theirs}_mean"))
                getattr(self, f"{mine}_std").copy_(getattr(source, f"{theirs}_std"))

    def _grasp(self, latent: torch.Tensor):
        """latent (...,·) -> grasp points (...,G,3) and orientations (...,G,3,3) of its proprio, the object's
        position (...,3) (metres, world frame) and that position in each gripper's frame (...,G,3)."""
        if self._memo is not None and self._memo[0] is latent:  # decode(latent), then step(latent)
            return self._memo[1]
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        joints = latent[..., L : L + S] * self.joint_std + self.joint_mean
        position = (latent[..., L + S :] * self.pose_std + self.pose_mean)[..., :3]
        point, rot = self.fk(joints)
        rel = (rot.transpose(-1, -2) @ (position[..., None, :] - point)[..., None])[..., 0]
        self._memo = (latent, (point, rot, position, rel))
        return self._memo[1]

    def relations(self, latent: torch.Tensor) -> torch.Tensor:
        """(...,4G) features of the object relative to every gripper: its position in the gripper's frame
        (units of REL_SCALE, clamped) and how close it is to the point between the pads (1 there, 0 far)."""
        rel = self._grasp(latent)[3]
        near = torch.exp(-rel.pow(2).sum(-1, keepdim=True) / (2 * NEAR**2))
        return torch.cat([(rel / REL_SCALE).clamp(-4, 4), near], dim=-1).flatten(-2)

    def geometry(self, latent: torch.Tensor) -> torch.Tensor:
        """(...,G,GEOMETRY) what `head.contact` reads of a latent, per gripper: the object's position in the
        gripper's frame (units of REL_SCALE, clamped) and its nearness to the point between the pads, the
        gripper's opening (its joint, raw), the object's height above the table (units of REL_SCALE), how
        square the fingers' closing axis and the gripper's pointing axis stand to the object's faces (1:
        along a face normal), and the gripper's own relation to the table: its grasp point's height above
        it (units of REL_SCALE) and its axes' vertical components (fingers can close on the table as well
        as on the object). Nothing else: not the arms' joints, not where over the table it is."""
        point, rot, position, rel = self._grasp(latent)
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        raw = latent[..., L : L + S] * self.joint_std + self.joint_mean
        opening = raw[..., self.grippers, None]  # (...,G,1)
        height = ((position[..., 2:3] - self.fk.table_top) / REL_SCALE).clamp(-4, 8)  # (...,1)
        faces = self._object_axes(latent)
        square = (rot.transpose(-1, -2) @ faces[..., None, :, :]).abs().amax(-1)  # (...,G,3)
        near = torch.exp(-rel.pow(2).sum(-1, keepdim=True) / (2 * NEAR**2))
        above = ((point[..., 2:3] - self.fk.table_top) / REL_SCALE).clamp(-4, 8)  # (...,G,1)
        return torch.cat(
            [
                (rel / REL_SCALE).clamp(-4, 4),
                near,
                opening,
                height[..., None, :].expand_as(near),
                square[..., :2],
                above,
                rot[..., 2, :],  # the world's vertical in the gripper's frame
            ],
            dim=-1,
        )

    def between_pads(self, rel: torch.Tensor) -> torch.Tensor:
        """`head.pads`: (...) in [0,1], how far the object, at rel (...,3) metres in a gripper's frame, lies
        in the box where that gripper's pads close on it (robots/kinematics.py: pad_box, from the MJCF's
        fingers; not learnt), soft at PAD_SOFTNESS."""
        return self._boxed(rel, self.fk.pad_half)

    def _boxed(self, rel: torch.Tensor, half: torch.Tensor) -> torch.Tensor:
        """(...) in [0,1], how far rel (...,3) lies in the box of half-sizes `half` about the pads' centre."""
        gap = half - (rel - self.fk.pad_centre).abs()
        return torch.sigmoid(gap / self.PAD_SOFTNESS).prod(-1)

    def gripped(self, rel: torch.Tensor) -> torch.Tensor:
        """(...) in [0,1], how far an object at rel (...,3) metres in a gripper's frame lies where closed
        fingers hold it: the box between the pads (`between_pads`), but along the closing axis within
        HOLD_ACROSS of the grasp point (closing fingers push an object off the middle into it)."""
        half = self.fk.pad_half.clone()
        half[self.fk.closing_axis] = self.HOLD_ACROSS
        return self._boxed(rel, half)

    def meets(self, rel: torch.Tensor) -> torch.Tensor:
        """(...) in [0,1], how far an object at rel (...,3) metres in a gripper's frame lies where closing
        fingers meet it: `gripped`'s box grown by `head.pad_overlap` (any overlap of the pads with the object
        at all, not the overlap a grasp needs to carry it)."""
        half = self.fk.pad_half.clone()
        half[self.fk.closing_axis] = self.HOLD_ACROSS
        return self._boxed(rel, half + self.cfg.head.pad_overlap)

    # m: of the coverage hand-overs where the left fingers closed on the cube this far from their grasp point
    # across them, 95-100 % succeeded within 1.5 cm, 90 % at 1.5-2 cm, 50 % at 2-3 cm, none at 3-3.5 cm
    # (benchmarks/studies/grasp_margins.py)
    HOLD_ACROSS = 0.025

    def _targets(self, chunk: torch.Tensor) -> torch.Tensor:
        """(B,K,A) the chunk's (B,C) commanded targets at each of its K control steps, raw."""
        return chunk.unflatten(-1, (self.cfg.frame_stride, -1)) * self.command_std + self.command_mean

    def _commands(self, chunk: torch.Tensor) -> torch.Tensor:
        """(B,G) each gripper's last commanded target of the chunk (B,C), raw."""
        return self._targets(chunk)[:, -1, self.grippers]

    @staticmethod
    def _members(net: EnsembleMLP, x: torch.Tensor) -> torch.Tensor:
        """An ensemble over (B,M,...,I): the dimensions between M and I are folded into the batch."""
        B, M, *mid, I = x.shape
        out = net(x.movedim(1, -2).reshape(-1, M, I))  # (B*mid, M, O)
        return out.reshape(B, *mid, M, -1).movedim(-2, 1)

    def stop_opening(self, latent: torch.Tensor) -> torch.Tensor:
        """`head.stops`: (...,G) the raw opening at which each gripper's pads meet the object: its half-width
        across the closing axis (a cube's half-size times the sum of its axes' components along that axis)
        as finger travel (robots/kinematics.py: GraspKinematics.opening_at)."""
        return self.stop_at(self._grasp(latent)[1], self._object_axes(latent))

    def stop_at(self, rot: torch.Tensor, faces: torch.Tensor) -> torch.Tensor:
        """(...,G) `stop_opening` of grippers oriented `rot` (...,G,3,3) on an object with axes `faces`
        (...,3,3) as columns."""
        across = (faces[..., None, :, :].transpose(-1, -2) @ rot[..., :, 1:2])[..., 0].abs().sum(-1)
        return self.fk.opening_at(self.fk.object_rest * across)

    def _object_axes(self, latent: torch.Tensor) -> torch.Tensor:
        """(...,3,3) the object's axes as columns, from the pose a latent carries."""
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        return quat_matrix((latent[..., L + S :] * self.pose_std + self.pose_mean)[..., 3:7])

    def _contact_step(self, latent: torch.Tensor, chunk: torch.Tensor, imagined: bool = False):
        """`head.contact`: latent (B,M,·), chunk (B,C) -> each gripper's raw opening at the frame's end
        (B,M,G) and the modes' logits (B,M,K) (free, still, then carried by each gripper). `imagined` with
        `head.stops`: a gripper open wider than the object between its pads closes no further than them."""
        geo = self.geometry(latent)  # (B,M,G,X)
        cmd = self._commands(chunk)[:, None, :, None].expand(*geo.shape[:-1], 1)
        opening = geo[..., 4:5]
        x = torch.cat([geo, cmd, cmd - opening], dim=-1)
        move = self._members(self.grip_net, x)  # (B,M,G,1)
        if self.cfg.head.pads:  # the object's effect only between the pads; elsewhere a free close
            inside = self.between_pads(self._grasp(latent)[3])  # (B,M,G)
            free = self._members(self.free_net, x[..., [4, -2, -1]])
            move = free + inside[..., None] * move
        carry = self._members(self.carry_net, torch.cat([x, move], dim=-1))[..., 0]  # (B,M,G)
        if self.cfg.head.pads:  # no carry of an object outside the pads
            carry = carry + inside.clamp_min(1e-4).log()
        if imagined and self.cfg.head.balance:
            carry = carry + self.balanced(latent).clamp_min(1e-4).log()
        rest = self.rest_net(x.flatten(-2))  # (B,M,K-G)
        after = (opening + move)[..., 0]
        captured = None
        if imagined and self.cfg.head.capture:  # the frame's control steps, one by one
            captured, meets = self.sweep(latent, chunk)
        if imagined and self.servos:  # fingers that do not close on the object follow the fitted servo
            free_close = self.servo(opening[..., 0], self.grip_commands(chunk)[:, None])
            if captured is not None:  # those that meet it open round it, stopped by it
                grasp = (captured & meets)[:, None].float()
                after = torch.maximum(after, self.stop_opening(latent) - self.STOP_SLACK * (1 - grasp))
            else:
                grasp = self._boxed(self._grasp(latent)[3], self.fk.pad_half + self.SERVO_CLEAR)
            after = grasp * after + (1 - grasp) * free_close
        if imagined and (self.cfg.head.capture or self.cfg.head.squeeze):
            carry = carry + self.grasp_able(latent, chunk).clamp_min(1e-4).log()
        if imagined and self.closes:
            after = self._close_on(latent, chunk, opening[..., 0], inside, after)
        if self.cfg.head.stops and imagined:
            stop = self.stop_opening(latent)  # (B,M,G)
            wider = (opening[..., 0] >= stop - self.STOP_SLACK).float()  # the fingers are outside the object
            after = after + inside * wider * F.relu(stop - after)
        if imagined and self.cfg.head.rests:
            after = self._rest_on(latent, chunk, opening[..., 0], after)
        return after, torch.cat([rest, carry], dim=-1)

    def _close_on(
        self, latent: torch.Tensor, chunk: torch.Tensor, start: torch.Tensor, inside: torch.Tensor, after
    ) -> torch.Tensor:
        """`head.closes`, imagined: the grippers' raw openings at the frame's end `after` (B,M,G), replaced
        for those open round an object between their pads (`inside` (B,M,G) over one half, `start` (B,M,G)
        no narrower than `stop_opening` less STOP_SLACK) by the fitted servo's opening after the frame's
        commands (`servo`), no narrower than where the pads meet the object. The grasp nets, fitted on the
        coverage closes, closed a gentle command (to 0.57, the cube's width 0.61) in three frames that the
        real fingers closed in one (benchmarks/studies/divergence.py)."""
        stop = self.stop_opening(latent)  # (B,M,G)
        servo = self.servo(start, self.grip_commands(chunk)[:, None])
        round_it = (inside > 0.5) & (start >= stop - self.STOP_SLACK)
        return torch.where(round_it, torch.maximum(servo, stop), after)

    def _rest_on(
        self, latent: torch.Tensor, chunk: torch.Tensor, start: torch.Tensor, after: torch.Tensor
    ) -> torch.Tensor:
        """`head.rests`, imagined: the grippers' raw openings at the frame's end `after` (B,M,G), no wider
        than REST_SLACK past where their pads meet the object (`stop_opening`) for those whose fingers are
        on it at the frame's start (`start` (B,M,G): within ON_SLACK of that opening, the object where
        closed fingers hold it, `gripped`) and squeeze it (the chunk's (B,C) last command more than SQUEEZE
        inside that opening). A squeezing finger stops on the object; the grasp nets, fitted to the
        frames' ends alone, left a held gripper as much as 0.1 wider than the object it held."""
        stop = self.stop_opening(latent)  # (B,M,G)
        command = self._commands(chunk)[:, None]  # (B,1,G)
        on = (self.gripped(self._grasp(latent)[3]) > 0.5) & ((start - stop).abs() <= self.ON_SLACK)
        return torch.where(
            on & (command < stop - self.SQUEEZE), torch.minimum(after, stop + self.REST_SLACK), after
        )

    # raw opening: of 89,000 steady coverage frames of the right gripper squeezing the cube in mid-air, 95 %
    # lay within 0.014 past where its pads meet it (benchmarks/studies/grasp_margins.py, table 5)
    REST_SLACK = 0.02

    def sweep(self, latent: torch.Tensor, chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`head.capture`: play the frame's control steps one by one, the arms at each step's target and the
        fingers as the servo moves them (`grip_servo`; at the last target without it), the object where it
        starts (the members' mean). Returns, per gripper (B,G) bool: whether it captures the object (where
        the object first lies between its pads in the frame, it is open wider than the object less
        STOP_SLACK; where it lies there from the frame's start, wider less CAPTURE_SLACK), and whether the
        object lies between its pads at some step of the frame. Fingers that closed before the object came
        between them rest on it and do not grasp it."""
        slack, meets = self._sweep_slack(latent, chunk)
        return slack >= 0, meets

    def _sweep_slack(self, latent: torch.Tensor, chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`sweep`'s margins (B,G) (raw opening; >= 0: the gripper captures the object) and whether the
        object lies between its fingers in the frame (B,G), kept for the latent and chunk last read."""
        if self._swept is not None and self._swept[0] is latent and self._swept[1] is chunk:
            return self._swept[2]
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        _, _, position, rel0 = self._grasp(latent)
        targets = self._targets(chunk)
        start = (latent[..., L : L + S] * self.joint_std + self.joint_mean).mean(1)  # (B,S)
        grips = targets[..., self.grippers]  # (B,K,G) without a servo: at the command
        if self.servos:
            opening, steps = start[:, self.grippers], []
            for k in range(targets.shape[1]):
                opening = self.servo(opening, targets[:, k : k + 1, self.grippers])
                steps.append(opening)
            grips = torch.stack(steps, 1)
        joints = targets.index_copy(-1, self.grip_index, grips)  # (B,K,S)
        point, rot = self.fk(joints)  # (B,K,G,3), (B,K,G,3,3)
        cube = position.mean(1)[:, None, None]  # (B,1,1,3)
        rel = (rot.transpose(-1, -2) @ (cube - point)[..., None])[..., 0]  # (B,K,G,3)
        stop = self.stop_at(rot, self._object_axes(latent)[:, 0, None])  # (B,K,G)
        inside = self.meets(rel) > 0.5  # (B,K,G) between the fingers: closing, they push it to the pads
        first = inside.float().argmax(1, keepdim=True)  # the first step with the object between the pads
        slack = (grips - stop + self.STOP_SLACK).gather(1, first)[:, 0]  # (B,G) >= 0: open round it
        already = self.meets(rel0).mean(1) > 0.5  # (B,G) from the frame's start
        stop0 = self.stop_opening(latent).mean(1)
        slack = torch.where(already, start[:, self.grippers] - stop0 + self.CAPTURE_SLACK, slack)
        self._swept = (latent, chunk, (slack, inside.any(1) | already))
        return self._swept[2]

    def grip_commands(self, chunk: torch.Tensor) -> torch.Tensor:
        """(B,K,G) each gripper's raw commanded target at every control step of the chunk (B,C)."""
        return self._targets(chunk)[..., self.grippers]

    def servo(self, opening: torch.Tensor, commands: torch.Tensor) -> torch.Tensor:
        """`head.grip_servo`: the raw openings (...,G) after following `commands` (...,K,G), one control step
        at a time: each step closes the gap to the command, less the dead band, by the gain, at most the top
        speed (`grip_servo`: gain, speed, band; fitted by `fit_grip_servo`)."""
        gain, speed, band = self.grip_servo.unbind()
        for k in range(commands.shape[-2]):
            gap = commands[..., k, :] - opening
            opening = opening + (gain * gap.sign() * F.relu(gap.abs() - band)).clamp(-speed, speed)
        return opening

    def grasp_able(self, latent: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """(B,M,G) in [0,1]: whether each gripper can grasp the object this frame, by `head.capture` (it
        captures the object in the frame's control steps: `sweep`) and `head.squeeze` (its last command lies
        at least `head.squeeze_depth` below the opening at which its pads meet the object, soft at
        GRASP_SOFTNESS); 1 where neither rule is on."""
        stop = self.stop_opening(latent)  # (B,M,G)
        able = torch.ones_like(stop)
        if self.cfg.head.capture:
            able = able * self.sweep(latent, chunk)[0][:, None].float()
        if self.cfg.head.squeeze:
            command = self._commands(chunk)[:, None]  # (B,1,G)
            able = able * torch.sigmoid((stop - command - self.cfg.head.squeeze_depth) / self.GRASP_SOFTNESS)
        return able

    # raw opening: of 10,000 coverage grasps of the resting cube (balanced, centred across the fingers)
    # commanded less than 0.04 past where the pads meet it, 2 % lifted it; 0.04-0.1 past, 20-40 %; over 0.1,
    # 74-89 % (benchmarks/studies/grasp_margins.py, table 3)
    SQUEEZE = 0.04
    # raw opening: the grasp nets end a gripper holding the cube up to 0.1 inside its width (0.5-0.6 for 0.61)
    CAPTURE_SLACK = 0.15
    GRASP_SOFTNESS = 0.005  # raw opening: how sharply capture and squeeze cut

    # m: an object this near the pads' box (any way) may meet the fingers within the frame, as they close
    # and the arm moves: there the grasp nets say how far the fingers close, elsewhere the servo
    SERVO_CLEAR = 0.01
    STOP_SLACK = 0.05  # raw opening: a gripper this far inside the object's width still counts as outside it

    def grasp_room(
        self, rel: torch.Tensor, rot: torch.Tensor, stop: torch.Tensor, command: torch.Tensor
    ) -> torch.Tensor:
        """(...,G,2) how much room each gripper's grasp has on each of `head.chance`'s factors (larger:
        safer): the object's centre inside the pads' faces across gravity (`balance_margin`, m, clamped to
        ROOM_CAP) and how far past the opening where the pads meet it (`stop`, (...,G)) the gripper is
        commanded (`command`, (...,G), raw). `rel` (...,G,3) and `rot` (...,G,3,3) as `_grasp` gives them."""
        margin = self.fk.balance_margin(rel, rot).clamp(-self.ROOM_CAP, self.ROOM_CAP)
        return torch.stack([margin, stop - command], dim=-1)

    def odds_of(self, room: torch.Tensor) -> torch.Tensor:
        """(...) the odds that a grasp with `grasp_room` (...,2) holds the object: the product of one
        logistic curve per factor, at its fitted edge and width (`grasp_odds`)."""
        edge, width = self.grasp_odds.unbind(-1)
        return torch.sigmoid((room - edge) / width).prod(-1)

    def take_odds(self, latent: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """`head.chance`: (B,M,G) the odds that each gripper's grasp holds the object this frame."""
        _, rot, _, rel = self._grasp(latent)
        command = self._commands(chunk)[:, None]  # (B,1,G)
        return self.odds_of(self.grasp_room(rel, rot, self.stop_opening(latent), command))

    # head.chance before fitting: balance at head.balance's edge and softness, and the squeeze's edge far
    # below any command (every depth passes)
    ODDS_UNFITTED = ((0.003, 0.0005), (-2.0, 0.01))
    ROOM_CAP = 0.1  # m: balance margins beyond this count as this (faces lying flat: +inf)

    def balanced(self, latent: torch.Tensor) -> torch.Tensor:
        """`head.balance`: (...,G) in [0,1], whether the object's centre lies at least `head.balance_margin`
        inside each gripper's pad faces across gravity (`GraspKinematics.balance_margin`: the MJCF's faces,
        along their plane's horizontal direction), soft at BALANCE_SOFTNESS. Held outside it, the object's
        weight turns it about the pads and it leaves the grip as it is lifted."""
        _, rot, _, rel = self._grasp(latent)
        margin = self.fk.balance_margin(rel, rot)
        return torch.sigmoid((margin - self.cfg.head.balance_margin) / self.BALANCE_SOFTNESS)

    # m: of 200 coverage grasps with the cube's centre less than 3 mm inside the faces (or outside them) 5
    # lifted it, 18 % of those 3-6 mm inside, 86 % of those 2 cm inside (benchmarks/studies/grasp_margins.py);
    # head.balance_margin's default
    BALANCE_MARGIN = 0.003
    BALANCE_SOFTNESS = 0.0005  # m: how sharply the balance cuts

    def _step_parts(
        self,
        latent: torch.Tensor,
        chunk: torch.Tensor,
        carry_state: torch.Tensor | None = None,
        imagined: bool = False,
    ):
        """latent (B,M,·) -> next z (B,M,L), next carried state without the pose (B,M,S), candidate next
        poses (B,M,K,E) and their logits (B,M,K) (None for one mode); carried parts None without them.

        A kinematic head's last G candidates start from the object moved rigidly with gripper g (its position
        in g's frame kept; orientation as the free modes'), the others from where it is; the still mode (after
        the free ones) is where it is, unchanged. `carry_state` (B,S), normalized: the joints to carry it with
        (training: the true next proprio; default: the head's own prediction). `imagined`: a step of
        imagination, where `head.holds` keeps a carried object within CARRY_TOLERANCE of its rigid motion."""
        action = F.silu(self.chunk_in[self.cfg.robot](chunk))[:, None].expand(
            -1, latent.shape[1], -1
        )  # (B,M,H)
        inputs = [latent, action] + ([self.relations(latent)] if self.kinematic else [])
        change = self.dynamics(torch.cat(inputs, dim=-1))
        L, S, E, K = self.cfg.head.latent_dim, self.cfg.state_dim, self.cfg.env_state_dim, self.modes
        z = self.latent_norm(latent[..., :L] + change[..., :L])
        if not self.carried:
            return z, None, None, None
        state = latent[..., L : L + S] + change[..., L : L + S]
        if self.arm_targets:  # the arms end the frame at (or, tracked, near) their last target
            arms = self._arm_end(chunk).expand(*state.shape[:-1], -1)
            state = state.index_copy(-1, self.arm_index, arms)
        contact = self._contact_step(latent, chunk, imagined) if self.contact else None
        if contact is not None:  # the grippers' opening from the contact model
            grip = (contact[0] - self.joint_mean[self.grippers]) / self.joint_std[self.grippers]
            state = state.index_copy(-1, self.grip_index, grip)
        if not E:
            return z, state, None, None
        base = latent[..., None, L + S :].expand(*latent.shape[:-1], K, E)
        if self.kinematic:
            rel = self._grasp(latent)[3]  # (B,M,G,3)
            joints = state if carry_state is None else carry_state[:, None].expand_as(state)
            point, rot = self.fk(joints * self.joint_std + self.joint_mean)  # after this frame's motion
            carried = point + (rot @ rel[..., None])[..., 0]  # (B,M,G,3) metres
            carried = (carried - self.pose_mean[:3]) / self.pose_std[:3]
            F_ = self.modes - carried.shape[-2]  # the carried modes are the last G
            turned = base[..., F_:, 3:]
            if imagined and self.cfg.head.turns and E >= 7:  # a held object turns with its gripper
                turned = self._turned(latent, rot, turned)
            base = torch.cat([base[..., :F_, :], torch.cat([carried, turned], dim=-1)], dim=-2)
        moved = change[..., L + S : L + S + K * E].unflatten(-1, (K, E))
        if self.kinematic and self.cfg.head.holds and imagined:
            moved = self._rigid_holds(moved)
        poses = base + (moved * self.mode_moves if self.still else moved)
        logits = change[..., -K:] if K > 1 else None
        if contact is not None:
            logits = contact[1]
        return z, state, poses, logits

    def _turned(self, latent: torch.Tensor, rot: torch.Tensor, pose: torch.Tensor) -> torch.Tensor:
        """`head.turns`, imagined: the normalized pose past the position (B,M,G,E-3) of the object carried
        by each gripper, its orientation turned as that gripper turns from the frame's start (latent
        (B,M,·)) to its end (rot (B,M,G,3,3)); the rest as it was."""
        mean, std = self.pose_mean[3:7], self.pose_std[3:7]
        after = turned_with(pose[..., :4] * std + mean, self._grasp(latent)[1], rot)  # (B,M,G,4)
        return torch.cat([(after - mean) / std, pose[..., 4:]], dim=-1)

    def arm_targets_of(self, chunk: torch.Tensor) -> torch.Tensor:
        """The chunk's (B,C) commanded arm-joint targets (B,K,A), in radians (K: control steps per frame)."""
        return self._targets(chunk).index_select(-1, self.arm_index)

    def _arm_end(self, chunk: torch.Tensor) -> torch.Tensor:
        """Where the arm joints end the frame (B,1,A), in proprio's normalization: at the chunk's last target,
        plus, with `head.arm_tracking`, the fitted tracking model's lag behind it."""
        targets = self.arm_targets_of(chunk)  # (B,K,A)
        end = targets[:, -1]
        if self.tracks:
            end = end + (tracking_features(targets) * self.tracking).sum(-1)
        mean, std = self.joint_mean[self.arm_index], self.joint_std[self.arm_index]
        return ((end - mean) / std)[:, None]

    def step(
        self,
        latent: torch.Tensor,
        chunk: torch.Tensor,
        draw: torch.Tensor | None = None,
        luck: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One model frame ahead for every member: latent (B,·) or (B,M,·), chunk (B,C) -> (B,M,·).

        With several pose modes, `draw` (B,) in [0,1) picks each env's mode by inverse CDF of the predicted
        odds (keep one draw per imagined episode, so the episode stays in one outcome while the odds
        hold); without it, the likeliest mode. With `head.chance`, `luck` (B,G) in [0,1) is each gripper's
        draw for the episode (keep it too): its grasp holds where the odds beat it (without it, odds over
        one half). A gripper's carried mode is ruled out where the object starts
        the frame farther than CARRY_REACH from its grasp point (the odds alone gave a cube in the right hand
        a third of a chance of leaving with the distant left one as it started to move)."""
        if latent.dim() == 2:
            latent = latent[:, None].expand(-1, self.cfg.head.ensemble, -1)  # (B,M,L)
        z, state, poses, logits = self._step_parts(latent, chunk, imagined=True)
        self._outcomes = self._carrier = None
        if self.cfg.head.doubt and self.kinematic and self.contact:
            self._track_doubt(latent, chunk)
        if state is None:
            return z
        if poses is None:
            return torch.cat([z, state], dim=-1)
        if logits is None:
            return torch.cat([z, state, poses[:, :, 0]], dim=-1)  # carried state: old + change
        # One mode for every member of an env: the members' mean odds pick it, so they differ only within
        # the outcome. Members picking apart (some carry the cube, some leave it) average into a cube that
        # half-follows the gripper, which neither outcome is.
        if self.kinematic:  # no gripper carries an object out of its reach
            far = self._grasp(latent)[3].norm(dim=-1) > self.CARRY_REACH  # (B,M,G)
            logits = logits.masked_fill(F.pad(far, (self.modes - far.shape[-1], 0)), float("-inf"))
        own = logits.softmax(-1)  # (B,M,K) each member's own odds
        self._outcomes = (own[..., None] * poses[..., :3]).sum(-2)  # (B,M,3) its expected next position
        odds = own.mean(1, keepdim=True)  # (B,1,K)
        if draw is None:
            pick = odds.argmax(-1)
        else:
            cdf = odds.cumsum(-1)
            pick = (cdf <= draw.to(cdf)[:, None, None]).sum(-1).clamp_max(self.modes - 1)
        if self.cfg.head.holds and self.kinematic:
            held, holder = self._holder(
                latent, state, chunk, luck
            )  # (B,) whether a gripper holds the cube, which one
            pick = torch.where(held[:, None], self.modes - self.fk.num_grippers + holder[:, None], pick)
        pick = pick.expand(-1, latent.shape[1])  # (B,M)
        first_carried = self.modes - self.fk.num_grippers if self.kinematic else self.modes
        self._carrier = torch.where(pick[:, 0] >= first_carried, pick[:, 0] - first_carried, -1)
        pose = _take(poses, pick)
        if self.kinematic:
            if self.drops and pose.shape[-1] >= 7:
                pose = self._dropped(latent, chunk, pose)
            pose = self._on_table(latent, pose)
            if self.cfg.head.falls:
                pose = self._falls(latent, pose)
        if self.pushes and pose.shape[-1] >= 7:
            pose = self._swept_pose(latent, chunk, pose)
        return torch.cat([z, state, pose], dim=-1)

    def _swept_pose(self, latent: torch.Tensor, chunk: torch.Tensor, pose: torch.Tensor) -> torch.Tensor:
        """`head.pushes`: the frame's end poses (B,M,E), normalized, with an uncarried object the fingers
        pushed (`_push_path`) where they left it: its start pose moved along the table by the pushes."""
        shift = self._push_path(latent, chunk)  # (B,3)
        pushed = (shift.norm(dim=-1) > 0) & (self._carrier < 0)
        before = latent[..., -pose.shape[-1] :]
        moved = torch.cat([before[..., :3] + shift[:, None] / self.pose_std[:3], before[..., 3:]], dim=-1)
        return torch.where(pushed[:, None, None], moved, pose)

    @torch.no_grad()
    def between(
        self, start: torch.Tensor, pose: torch.Tensor | None, last: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`head.substeps`: the raw proprio (B,S) and object pose (B,E) (None without one) after the first k
        control steps of an imagined frame that started at proprio `start` (B,S) and object pose `pose`
        (B,E), raw; `last` (B,S) is the proprio after k - 1 steps, `targets` (B,k,A) the commanded targets so
        far, raw. The arms are where the tracking model puts them on the targets so far (at the last target
        without it); each gripper moves one step of the fitted servo (`servo`) from `last`, but no further
        closed than where its pads meet an object between them (`stop_at`) if it was open round it; an
        object the last `step` left carried by a gripper moves rigidly with it (turning as it turns), any
        other stays, or, with `head.pushes`, goes where the fingers have pushed it so far (`pushed`); with
        `head.drops`, an object in mid-air goes where `_drop_path` puts it (held, falling or caught). Each
        frame still ends where `step` puts it: this is only what the policy sees meanwhile.
        """
        carrier = self._carrier if self._carrier is not None else torch.full_like(last[:, 0], -1).long()
        if self._loose is None or self._loose[0] is not start:  # a new frame: nothing pushed yet
            self._loose = (start, None)
        state, moved, loose = self._follow(start, pose, last, targets, carrier, self._loose[1])
        self._loose = (start, loose)
        if self.drops and moved is not None and moved.shape[-1] >= 7:  # an object in mid-air: `_drop_path`
            airborne = self._airborne(pose)
            if airborne.any():
                position = self._drop_path(start, pose, targets)[0]
                moved = torch.cat([torch.where(airborne[:, None], position, moved[:, :3]), moved[:, 3:]], -1)
        return state, moved

    def _follow(
        self,
        start: torch.Tensor,
        pose: torch.Tensor | None,
        last: torch.Tensor,
        targets: torch.Tensor,
        carrier: torch.Tensor,
        loose: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """`between`'s k-th control step, for objects carried by `carrier` (B,) (-1: none), and with
        `head.pushes` an uncarried object's position after k - 1 steps `loose` (B,3) (None: where the frame
        started it). Returns the proprio, the pose and the uncarried object's position after k steps."""
        arm_targets = targets.index_select(-1, self.arm_index)  # (B,k,·)
        arms = arm_targets[:, -1]
        if self.tracks:
            arms = arms + (tracking_features(arm_targets) * self.tracking).sum(-1)
        state = last.index_copy(-1, self.arm_index, arms)
        before = last[:, self.grippers]
        opening = self.servo(before, targets[:, -1:, self.grippers])  # (B,G)
        state[:, self.grippers] = opening
        if pose is None or pose.shape[-1] < 7:
            return state, pose, loose
        if self._frame_fk is None or self._frame_fk[0] is not start:  # once per frame, not per step
            self._frame_fk = (start, self.fk(start))
        point0, rot0 = self._frame_fk[1]  # (B,G,3), (B,G,3,3)
        point, rot = self.fk(state)
        position, quat = pose[:, :3], pose[:, 3:7]
        b, g = torch.arange(len(state)), carrier.clamp_min(0)  # each env's carrier (any, where none)
        rel0 = (rot0[b, g].transpose(-1, -2) @ (position - point0[b, g])[..., None])[..., 0]
        carried = point[b, g] + (rot[b, g] @ rel0[..., None])[..., 0]  # (B,3)
        moved = torch.cat([carried, turned_with(quat, rot0[b, g], rot[b, g])], dim=-1)
        free = pose[:, :7]
        if self.pushes:  # fingers that are not closing push an object resting on the table
            earlier = (point0, rot0) if last is start else self._frames_of(last)
            loose = self.pushed(position if loose is None else loose, state, (point, rot), last, earlier)
            free = torch.cat([loose, quat], dim=-1)
        pose = torch.cat([torch.where((carrier >= 0)[:, None], moved, free), pose[:, 7:]], dim=-1)
        # fingers closing on the object between their pads stop where the pads meet it
        faces = quat_matrix(pose[:, 3:7])  # (B,3,3)
        rel = (rot.transpose(-1, -2) @ (pose[:, None, :3] - point)[..., None])[..., 0]  # (B,G,3)
        stop = self.stop_at(rot, faces)  # (B,G)
        slack = self.ON_SLACK if self.cfg.head.rests else self.STOP_SLACK  # rests: fingers on it stay
        stopped = (self.meets(rel) > 0.5) & (before >= stop - slack)
        state[:, self.grippers] = torch.where(
            stopped, torch.maximum(opening, torch.minimum(stop, before)), opening
        )
        self._frames = (state, (point, rot))  # the next step's `last` (the grippers do not move them)
        return state, pose, loose

    def _frames_of(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The grasp frames of proprio `state`: those `_follow` last computed, where it is that step's."""
        if self._frames is not None and self._frames[0] is state:
            return self._frames[1]
        return self.fk(state)

    def pushed(
        self,
        position: torch.Tensor,
        state: torch.Tensor,
        frames: tuple[torch.Tensor, torch.Tensor],
        before: torch.Tensor,
        earlier: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """`head.pushes`: the object's position (B,3) (metres) after the grippers' fingers moved from raw
        proprio `before` (B,S), with grasp frames `earlier` (points (B,G,3), orientations (B,G,3,3)), to
        `state` with grasp frames `frames`, pushing it out of their way.

        An object resting on the table (its centre within PUSH_RESTING of its lowest resting height) that
        now lies in a finger's box (`GraspKinematics.fingers_at`) grown by its half-size, and lay outside it
        across one of the box's faces a step earlier, is moved back out through that face (the nearest, if
        several), along the table: a finger that comes in from the side slides it, one that comes down on
        it from above presses it into the table and does not. Fingers of a gripper that is closing this
        step are left to the grasp rules. Each push is cut to PUSH_MOST. An object that lay up to
        `head.push_touch` inside a face a step earlier still lay at it (the finger was already pushing it)."""
        fk = self.fk
        rest = position[:, 2] < fk.table_top + fk.object_rest + self.PUSH_RESTING  # (B,)
        closing = state[:, self.grippers] < before[:, self.grippers]  # (B,G)

        def sides(opening, point, rot):  # how far past each lower and upper face of each finger (B,G,F,3)
            rel = (rot.transpose(-1, -2) @ (position[:, None] - point)[..., None])[..., 0]  # (B,G,3)
            lower, upper = fk.fingers_at(opening)
            return rel[:, :, None] - (lower - fk.object_rest), (upper + fk.object_rest) - rel[:, :, None]

        under, over = sides(state[:, self.grippers], *frames)
        was_under, was_over = sides(before[:, self.grippers], *earlier)
        inside = ((under > 0) & (over > 0)).all(-1)  # (B,G,F)
        touch = self.cfg.head.push_touch  # faces it lay beyond (or at, or this little inside)
        low, high = was_under <= touch, was_over <= touch
        way = torch.where(low, -under, torch.where(high, over, torch.zeros_like(over)))  # back out, signed
        depth = torch.where(low | high, way.abs(), torch.full_like(way, float("inf")))
        axis = depth.argmin(-1, keepdim=True)  # the nearest face it came in through
        out = torch.zeros_like(way).scatter(-1, axis, way.gather(-1, axis))  # (B,G,F,3)
        out = (frames[1][:, :, None] @ out[..., None])[..., 0]  # world frame
        along = out[..., :2].norm(dim=-1)  # (B,G,F)
        size = out.norm(dim=-1)
        pushes = inside & (along > self.PUSH_ALONG * size) & ~closing[..., None] & rest[:, None, None]
        shift = out[..., :2] * (size.pow(2) / along.pow(2).clamp_min(1e-12))[..., None]  # leaves the box
        shift = shift * (self.PUSH_MOST / shift.norm(dim=-1, keepdim=True).clamp_min(1e-9)).clamp_max(1.0)
        shift = (shift * pushes[..., None]).sum((1, 2))  # (B,2)
        return position + F.pad(shift, (0, 1))

    PUSH_RESTING = 0.01  # m above its lowest resting height: an object still counts as resting on the table
    PUSH_ALONG = 0.5  # a push's share along the table below which a finger presses the object into it
    PUSH_MOST = 0.03  # m: the most one finger pushes an object in one control step
    PUSH_TOUCH = 1e-3  # m: head.push_touch's default: a pushed object lies at the face, not inside it

    def _push_path(self, latent: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
        """`head.pushes`, imagined steps: how far (B,3) metres the frame's control steps (`_follow`, on the
        members' mean start) push the object if nothing carries it; zero where no finger reaches it."""
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        mean = latent.mean(1)
        start = mean[:, L : L + S] * self.joint_std + self.joint_mean
        pose = mean[:, L + S :] * self.pose_std + self.pose_mean
        shift = torch.zeros_like(pose[:, :3])
        point = self._grasp(latent)[0].mean(1)  # (B,G,3)
        near = ((point - pose[:, None, :3]).norm(dim=-1) < self.PUSH_NEAR).any(-1)
        near &= pose[:, 2] < self.fk.table_top + self.fk.object_rest + self.PUSH_RESTING  # pushes slide it
        idx = near.nonzero()[:, 0]
        if not len(idx):  # no resting object with a gripper near it
            return shift
        targets = self._targets(chunk)[idx]
        # and some finger can reach it: a grasp point at one of the frame's targets comes near enough
        ahead = self.fk(targets)[0]  # (b,K,G,3)
        reach = (ahead - pose[idx][:, None, None, :3]).norm(dim=-1).flatten(1).amin(1)
        kept = reach < self.finger_reach + self.PUSH_SLACK
        if not kept.any():  # no finger able to reach it in this frame
            return shift
        idx, targets = idx[kept], targets[kept]
        start, pose, carrier = start[idx], pose[idx], torch.full_like(idx, -1)
        state, loose = start, None
        for k in range(1, targets.shape[1] + 1):
            state, _, loose = self._follow(start, pose, state, targets[:, :k], carrier, loose)
        return shift.index_copy(0, idx, loose - pose[:, :3])

    PUSH_NEAR = 0.25  # m: a gripper farther than this from the object at a frame's start cannot push it in it
    # m: how far the tracked arms may lag their targets (~0.06 rad at most, at the wrist's reach)
    PUSH_SLACK = 0.05

    def _falls(self, latent: torch.Tensor, pose: torch.Tensor) -> torch.Tensor:
        """`head.falls`, imagined steps: an object that starts the frame over the table more than LANDING
        above its resting height with every gripper's grasp point farther than CARRY_REACH (nothing can
        hold it) ends the frame resting on the table at the x-y it started from. A dropped 4 cm cube falls
        its 3 cm in under a frame (0.08 s). Recordings start with the cube 3 cm up, where the simulator
        spawns it; without the rule it hovered there through the imagined episode, 3 cm above the fingers.
        `latent` (B,M,·): the frame's start; `pose` (B,M,E) normalized: its predicted end."""
        fk, std, mean = self.fk, self.pose_std[:3], self.pose_mean[:3]
        _, _, position, rel = self._grasp(latent)
        floor = fk.table_top + fk.object_rest
        over = ((position[..., :2] >= fk.table_lo) & (position[..., :2] <= fk.table_hi)).all(-1)
        alone = (rel.norm(dim=-1) > self.CARRY_REACH).all(-1)
        falls = over & alone & (position[..., 2] > floor + self.LANDING)  # (B,M)
        landed = torch.cat([position[..., :2], torch.full_like(position[..., 2:], floor)], dim=-1)
        landed = torch.cat([(landed - mean) / std, pose[..., 3:]], dim=-1)
        return torch.where(falls[..., None], landed, pose)

    def _airborne(self, pose: torch.Tensor) -> torch.Tensor:
        """(...) whether an object at raw pose `pose` (...,E) is over the table and more than LANDING above
        its lowest resting height: in mid-air, where only a gripper can keep it."""
        fk, position = self.fk, pose[..., :3]
        over = ((position[..., :2] >= fk.table_lo) & (position[..., :2] <= fk.table_hi)).all(-1)
        return over & (position[..., 2] > fk.table_top + fk.object_rest + self.LANDING)

    def _dropped(self, latent: torch.Tensor, chunk: torch.Tensor, pose: torch.Tensor) -> torch.Tensor:
        """`head.drops`, imagined steps: the frame's end poses (B,M,E), normalized, with an object that starts
        the frame (latent (B,M,·), members' mean) in mid-air and that no gripper holds through it (`_let_go`
        over the chunk's (B,C) control steps) where `_drop_path` puts it; its catcher, if one caught it,
        becomes its carrier (-1: none), whatever the hold rules (`_holder`) said."""
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        mean = latent.mean(1)
        start = mean[:, L : L + S] * self.joint_std + self.joint_mean
        raw = mean[:, L + S :] * self.pose_std + self.pose_mean
        idx = self._airborne(raw).nonzero()[:, 0]
        if not len(idx):
            return pose
        targets = self._targets(chunk)[idx]
        position, catcher, holder, released = self._drop_path(start[idx], raw[idx], targets)
        drops = (holder < 0) | (released < targets.shape[1])  # unless a holder keeps it through the frame
        idx, position, catcher = idx[drops], position[drops], catcher[drops]
        moved = ((position - self.pose_mean[:3]) / self.pose_std[:3])[:, None].expand(-1, pose.shape[1], -1)
        self._carrier = self._carrier.index_copy(0, idx, catcher)
        return pose.index_copy(0, idx, torch.cat([moved, pose[idx, :, 3:]], dim=-1))

    def _let_go(
        self, start: torch.Tensor, pose: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`head.drops`: which gripper holds an object at raw pose `pose` (B,E) longest in a frame that
        started at raw proprio `start` (B,S) (-1: none), the object's place in its frame (B,3), and the
        control step of the raw targets so far `targets` (B,k,A) at which it lets go (B,) (k: not yet; 0
        where none holds it). A gripper holds it where closed fingers hold it (`gripped`) and closed on it
        (within ON_SLACK of where its pads meet it, `stop_at`); it lets go at the first step whose command
        opens it to at least its opening at the frame's start less the servo's dead band (the fitted
        `grip_servo`): the squeeze is gone. Of several, the one that lets go last (the nearest, if together)
        holds it."""
        rows, k = torch.arange(len(start)), targets.shape[1]
        point, rot = self.fk(start)
        rel = (rot.transpose(-1, -2) @ (pose[:, None, :3] - point)[..., None])[..., 0]  # (B,G,3)
        opening = start[:, self.grippers]
        stop = self.stop_at(rot, quat_matrix(pose[:, 3:7]))
        grips = (self.gripped(rel) > 0.5) & (opening <= stop + self.ON_SLACK)  # (B,G)
        lets_go = targets[..., self.grippers] >= opening[:, None] - self.grip_servo[2]  # (B,k,G)
        step = torch.where(lets_go.any(1), lets_go.float().argmax(1), k)  # (B,G)
        order = (step - rel.norm(dim=-1).clamp_max(1.0)).masked_fill(~grips, -float("inf"))
        holder = torch.where(grips.any(-1), order.argmax(-1), -1)
        h = holder.clamp_min(0)
        return holder, rel[rows, h], torch.where(holder >= 0, step[rows, h], 0)

    def _drop_path(
        self, start: torch.Tensor, pose: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`head.drops`: where an object in mid-air is (B,3), metres, after the first k control steps of a
        frame that started at raw proprio `start` (B,S) with the object at raw pose `pose` (B,E), given the
        raw targets so far `targets` (B,k,A); which gripper caught it (B,) (-1: none); and `_let_go`'s holder
        and step of release.

        The object moves rigidly with its holder until it lets go, then falls freely from rest, straight
        down (from the frame's start if nothing held it), as far as its resting height over the table.
        Another gripper catches it at the step its closing fingers (the fitted servo, `_follow`) reach where
        their pads meet it (`stop_at`) with it where closed fingers hold it (`gripped`); from then on it
        moves rigidly with the catcher."""
        B = len(start)
        rows, none = torch.arange(B), torch.full((B,), -1, dtype=torch.long)
        holder, anchor, released = self._let_go(start, pose, targets)
        faces, floor = quat_matrix(pose[:, 3:7]), self.fk.table_top + self.fk.object_rest
        carrier, position = holder, pose[:, :3]
        falling_from, caught = position, torch.zeros(B, dtype=torch.bool)
        for m, (state, point, rot) in enumerate(self._follow_path(start, targets), start=1):
            c = carrier.clamp_min(0)
            rigid = point[rows, c] + (rot[rows, c] @ anchor[..., None])[..., 0]
            fall = 0.5 * self.GRAVITY * ((m - released).clamp_min(0) * self.control_dt) ** 2
            free = torch.cat(
                [falling_from[:, :2], (falling_from[:, 2:] - fall[:, None]).clamp_min(floor)], -1
            )
            position = torch.where(((carrier >= 0) & ((m <= released) | caught))[:, None], rigid, free)
            falling_from = torch.where((m <= released)[:, None], position, falling_from)
            rel = (rot.transpose(-1, -2) @ (position[:, None] - point)[..., None])[..., 0]
            shut = state[:, self.grippers] <= self.stop_at(rot, faces)
            closing = targets[:, m - 1, self.grippers] < state[:, self.grippers]
            catches = (self.gripped(rel) > 0.5) & shut & closing & (m > released)[:, None] & ~caught[:, None]
            catches[rows, holder.clamp_min(0)] &= holder < 0  # the holder does not catch what it drops
            catcher = rel.norm(dim=-1).masked_fill(~catches, float("inf")).argmin(-1)
            new = catches.any(-1)
            anchor = torch.where(new[:, None], rel[rows, catcher], anchor)
            carrier, caught = torch.where(new, catcher, carrier), caught | new
        return position, torch.where(caught, carrier, none), holder, released

    def _follow_path(self, start: torch.Tensor, targets: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
        """`head.drops`: the raw proprio (B,S), grasp points (B,G,3) and orientations (B,G,3,3) after each of
        the first k control steps of the raw targets `targets` (B,k,A) from raw proprio `start` (B,S), as
        `_follow` moves the arms and grippers with nothing carried. `between` asks once per control step
        with one more target each time: the steps it already asked for are kept, not recomputed."""
        done = []
        if self._path is not None and self._path[0] is start:
            seen = self._path[1]
            if seen.shape[1] <= targets.shape[1] and torch.equal(seen, targets[:, : seen.shape[1]]):
                done = self._path[2]
        path, none = list(done), torch.full((len(start),), -1, dtype=torch.long)
        state = path[-1][0] if path else start
        for m in range(len(path) + 1, targets.shape[1] + 1):
            state = self._follow(start, None, state, targets[:, :m], none, None)[0]
            path.append((state, *self.fk(state)))
        self._path = (start, targets, path)
        return path

    GRAVITY = 9.81  # m/s^2
    # raw opening: a gripper this far outside where its pads meet the object still has its fingers on it (a
    # real left pinching the cube's top and bottom held it 0.07 outside the MJCF's estimate; a catch's
    # open left waiting round it stood 0.14 outside)
    ON_SLACK = 0.1

    def _holds(self, height: torch.Tensor, reach: torch.Tensor, opening: torch.Tensor) -> torch.Tensor:
        """Where a gripper holds the object through a frame whatever it did (the labels' rule, `carried_by`,
        and imagination's, `head.holds`): the object starts it more than CARRY_AIRBORNE above the table
        (`height`, m), within CARRY_REACH of that gripper's grasp point (`reach`, m), and the gripper opens by
        no more than CARRY_RELEASE of its range (`opening`)."""
        airborne = height - self.fk.table_top > self.CARRY_AIRBORNE
        return airborne & (reach < self.CARRY_REACH) & (opening <= self.CARRY_RELEASE)

    def _holder(
        self,
        latent: torch.Tensor,
        state: torch.Tensor,
        chunk: torch.Tensor | None = None,
        luck: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Whether a gripper holds the object through this frame (B,) bool, and which (B,) (the nearest such):
        `_holds` on the members' means, and the gripper starts the frame closed (below HOLD_CLOSED; with
        `head.drops`, on the object: within ON_SLACK of the opening where its pads meet it, `stop_opening`,
        since open fingers round a cube hold nothing); with `head.pad_holds`, the object between its fingers
        too (`gripped`). With `head.takes`, also a gripper
        that ends the frame closed, not opening, with the object between its pads and balanced at its start
        (`between_pads`, `balanced`), wherever the object is, and, with `head.capture` / `head.squeeze`, able
        to grasp it (`grasp_able`, by the frame's `chunk`). With `head.chance`, either way only where the
        grasp's odds (`take_odds`) beat the gripper's `luck` (B,G) (one half without it), and the odds take
        the balance's place in a take.
        `latent` (B,M,·): the frame's start; `state` (B,M,S): its predicted end."""
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        _, _, position, rel = self._grasp(latent)
        raw = lambda x: x * self.joint_std + self.joint_mean  # noqa: E731
        start, end = raw(latent[..., L : L + S])[..., self.grippers], raw(state)[..., self.grippers]
        reach = rel.norm(dim=-1).mean(1)  # (B,G)
        opens = (end - start).mean(1)
        able = self._holds(position[..., 2].mean(1)[:, None], reach, opens)
        closed = self.stop_opening(latent).mean(1) + self.ON_SLACK if self.drops else self.HOLD_CLOSED
        able &= start.mean(1) < closed
        if self.cfg.head.pad_holds:  # only an object between its fingers
            able &= self.gripped(rel).mean(1) > 0.5
        lucky = None
        if self.chances and chunk is not None:  # a grasp holds where its odds beat the episode's draw
            lucky = self.take_odds(latent, chunk).mean(1) > (0.5 if luck is None else luck)  # (B,G)
            able &= lucky
        if self.cfg.head.takes:  # closing on an object between its pads, balanced there: takes it
            between = self.between_pads(rel).mean(1) > 0.5
            between &= lucky if lucky is not None else self.balanced(latent).mean(1) > 0.5
            if chunk is not None and (self.cfg.head.capture or self.cfg.head.squeeze):
                between &= self.grasp_able(latent, chunk).mean(1) > 0.5
            able |= between & (end.mean(1) < closed) & (opens <= self.CARRY_RELEASE)
        return able.any(-1), reach.masked_fill(~able, float("inf")).argmin(-1)

    def _rigid_holds(self, moved: torch.Tensor) -> torch.Tensor:
        """The predicted pose changes (B,M,K,E), normalized, with each carried mode's change of position
        (its departure from moving rigidly with its gripper) cut to CARRY_TOLERANCE, the most a recorded
        carry ever departed from it: the carried modes learn only where they won, so elsewhere their
        change is unconstrained (a held, lifted cube was moved 4-5 cm off the fingers, and the script
        holding it judged the grasp lost and let go). With `head.pad_holds`, cut to nothing: the cut change
        is biased, and over a slow hand-over 5 mm a frame slid the cube 5 cm down the fingers."""
        G, std = self.fk.num_grippers, self.pose_std[:3]
        slip = moved[..., -G:, :3] * std  # (B,M,G,3) metres
        tolerance = 0.0 if self.cfg.head.pad_holds else self.CARRY_TOLERANCE  # pad holds: rigid
        scale = (tolerance / slip.norm(dim=-1, keepdim=True).clamp_min(1e-9)).clamp_max(1.0)
        turn = moved[..., -G:, 3:] * (0.0 if self.cfg.head.turns else 1.0)  # turns: as its gripper does
        carried = torch.cat([slip * scale / std, turn], dim=-1)
        return torch.cat([moved[..., :-G, :], carried], dim=-2)

    def _on_table(self, latent: torch.Tensor, pose: torch.Tensor) -> torch.Tensor:
        """Imagined steps: the next normalized poses (B,M,E) held above the table the robot's MJCF gives. An
        object over the table never ends a frame below its lowest resting height (a cube face down); one that
        starts the frame over it and is predicted to sink more than LANDING below that height hit the table:
        it ends the frame on it, at the x-y it started from (a dropped cube lands and stays, it does not slide
        on or fly past the edge). Without these, a cube let go at
        speed over the table fell through it for metres (one held-out episode ended 5.6 m under the table
        after 6 s), and one only stopped from sinking slid on, off the table's edge. Off the edge, objects
        fall as the head predicts. `latent` (B,M,·): the frame's start."""
        fk, std, mean = self.fk, self.pose_std[:3], self.pose_mean[:3]
        start = latent[..., -pose.shape[-1] :]
        end = pose[..., :3] * std + mean  # (B,M,3) metres
        over = lambda p: ((p[..., :2] >= fk.table_lo) & (p[..., :2] <= fk.table_hi)).all(-1)  # noqa: E731
        floor = fk.table_top + fk.object_rest
        landed = over(start[..., :3] * std + mean) & (end[..., 2] < floor - self.LANDING)
        z = torch.where(over(end) | landed, end[..., 2].clamp_min(floor), end[..., 2])
        xy = torch.where(landed[..., None], start[..., :2], pose[..., :2])
        return torch.cat([xy, ((z - mean[2]) / std[2])[..., None], pose[..., 3:]], dim=-1)

    HOLD_CLOSED = 0.8  # opening (0..1) a gripper must start a frame below to hold (head.holds; a cube: ~0.6)
    LANDING = 0.015  # m below its resting height an object must be predicted to sink to have hit the table

    # m: a gripper carries an object only from within this of its grasp point (imagined steps). Recorded
    # carries start 3.0 cm from it (median; 99 % within 5.3 cm in ACT's rollouts); the few "carried" frames
    # farther off are 5 mm nudges of a resting cube beside a still, distant gripper.
    CARRY_REACH = 0.08
    CARRY_MARGIN = 0.001  # m: how much nearer the truth than the free modes a carried mode must be to win
    CARRY_TOLERANCE = 0.005  # m: a carried mode this near the truth wins outright where the object moved ...
    CARRY_MOVED = 0.005  # m: ... at least this far in the frame (it went with the gripper: a grasp held)
    CARRY_AIRBORNE = 0.05  # m: ... or an object this high (off the table) kept its place in a grasp, ...
    CARRY_RELEASE = 0.02  # ... while that gripper opened by no more than this (normalized opening, 0..1)
    WTA_SPREAD = 0.05  # share of the pose loss spread over every mode (keeps losing modes trained)

    def step_supervised(
        self,
        latent: torch.Tensor,
        chunk: torch.Tensor,
        env: torch.Tensor | None,
        next_state: torch.Tensor | None = None,
        before: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training: one step ahead (B,M,·) and the pose loss (B,M) against the true next pose env (B,E).

        With several modes, the mode nearest the truth is scored and continues the unroll (winner takes
        all, `WTA_SPREAD` to the other free modes; a gripper's carried mode learns only where it won, as it
        is metres off for a cube far from that gripper), and the odds learn which mode won. `before`, the
        true normalized (state, pose) of the frame the step starts from, tells from the data alone which
        gripper carried the object (`carried_by`); without it, the carried candidates' own error does."""
        if latent.dim() == 2:
            latent = latent[:, None].expand(-1, self.cfg.head.ensemble, -1)
        if env is None or self.modes == 1:
            nxt = self.step(latent, chunk)
            if env is None:
                return nxt, nxt.new_zeros(nxt.shape[:2])
            return nxt, pose_error(self._pose(nxt), env[:, None])
        # The carried candidates move with the TRUE next joints: whether a gripper carried the object is
        # then judged by what the object did, not blurred by the head's own proprio error (~1 cm at the
        # grasp point), which let the free mode win most carries and learn a cube that half-follows.
        z, state, poses, logits = self._step_parts(latent, chunk, next_state)
        err = pose_error(poses, env[:, None, None])  # (B,M,K)
        free = self.free_modes  # carried modes learn only as winners
        # A carried mode wins only where it beats the free ones by more than CARRY_MARGIN of position: where
        # nothing moves every mode is right, and "carried by a gripper" must not be learnt from such ties.
        handicap = torch.zeros(self.modes, device=err.device)
        if self.kinematic:
            margin = (self.CARRY_MARGIN / self.pose_std[:3]).pow(2).sum() / self.cfg.env_state_dim
            handicap[free + self.still :] = margin
        best = (err + handicap).argmin(-1)  # (B,M)
        if self.kinematic:
            # An object that moved with a gripper (its carried candidate within CARRY_TOLERANCE) was carried,
            # even where a free mode came nearer: a free mode that wins held lifts learns the average of held
            # and slipped grasps, a cube that half-follows the fingers, and the odds never learn "held".
            first = free + self.still
            if before is not None and next_state is not None:
                ok = self.carried_by(*before, next_state, env)[:, None].expand(-1, err.shape[1], -1)
            else:
                std, E = self.pose_std[:3], self.cfg.env_state_dim
                off = ((poses[..., :3] - env[:, None, None, :3]) * std).norm(dim=-1)  # (B,M,K) metres
                moved = ((env[:, None, :3] - latent[..., -E:][..., :3]) * std).norm(dim=-1)  # (B,M)
                ok = (off[..., first:] < self.CARRY_TOLERANCE) & (moved[..., None] > self.CARRY_MOVED)
            carried = first + err[..., first:].masked_fill(~ok, float("inf")).argmin(-1)
            best = torch.where(ok.any(-1), carried, best)
        won = err.gather(-1, best[..., None])[..., 0]
        loss = (1 - self.WTA_SPREAD) * won + self.WTA_SPREAD * err[..., :free].mean(-1)
        loss = loss + F.cross_entropy(logits.flatten(0, 1), best.flatten(), reduction="none").view_as(won)
        return torch.cat([z, state, _take(poses, best)], dim=-1), loss

    def carried_by(
        self, state: torch.Tensor, env: torch.Tensor, next_state: torch.Tensor, next_env: torch.Tensor
    ) -> torch.Tensor:
        """(B,G) bool: which gripper carried the object from one recorded frame to the next (normalized
        state (B,S) and pose (B,E) of both): the object ended within CARRY_TOLERANCE of where the gripper's
        motion takes it rigidly, and either it moved over CARRY_MOVED (it went with the gripper), or it is
        off the table (above CARRY_AIRBORNE), within CARRY_REACH of that gripper's grasp point, and the
        gripper did not open by over CARRY_RELEASE of its range (a pausing hand still holds it).

        Without the second case, 45 % of the recorded frames with the cube in mid-air had no carrier (the
        hand paused), the free mode learnt that a lifted cube may fall from a closed hand, and an imagined
        episode that drew it there dropped the cube at the handover."""
        joints = lambda x: x * self.joint_std + self.joint_mean  # noqa: E731
        position = lambda x: (x * self.pose_std + self.pose_mean)[..., :3]  # noqa: E731
        before, after = position(env)[:, None], position(next_env)[:, None]  # (B,1,3)
        raw, raw1 = joints(state), joints(next_state)
        point, rot = self.fk(raw)  # (B,G,3), (B,G,3,3)
        rel = (rot.transpose(-1, -2) @ (before - point)[..., None])[..., 0]
        point1, rot1 = self.fk(raw1)
        rigid = point1 + (rot1 @ rel[..., None])[..., 0]
        moved = (after - before).norm(dim=-1) > self.CARRY_MOVED
        held = self._holds(before[..., 2], rel.norm(dim=-1), (raw1 - raw)[:, self.grippers])  # (B,G)
        return ((rigid - after).norm(dim=-1) < self.CARRY_TOLERANCE) & (moved | held)

    def _pose(self, latent: torch.Tensor) -> torch.Tensor:
        """The normalized object pose (...,E) a latent holds (carried) or predicts."""
        if self.carried and self.cfg.env_state_dim:
            return latent[..., self.cfg.head.latent_dim + self.cfg.state_dim :]
        return self.env_out(latent[..., : self.cfg.head.latent_dim] if self.carried else latent)

    def decode(self, latent: torch.Tensor, imagined: bool = False) -> dict[str, torch.Tensor]:
        """From latents (...,latent_size): normalized state and object state, reward logits, success logit.
        `imagined`: a frame of imagination, where `head.held_success` grounds success in the state."""
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        state = latent[..., L : L + S] if self.carried else self.state_out[self.cfg.robot](latent)
        if self.contact:
            flat = latent[:, None] if latent.dim() == 2 else latent  # (B,M,·)
            out = self.outcome_net(self.geometry(flat).flatten(-2))
            out = out[:, 0] if latent.dim() == 2 else out
            reward, success = out[..., :-1], out[..., -1]
        else:
            outcome = torch.cat([latent, self.relations(latent)], dim=-1) if self.kinematic else latent
            reward, success = self.reward_out(outcome), self.success_out(outcome).squeeze(-1)
        if imagined and self.cfg.head.success_touch >= 0 and self.contact:  # in place of the nets and held
            sure = torch.full_like(success, self.SURE)
            success = torch.where(self.touch_success(latent), sure, -sure)
        elif imagined and self.cfg.head.held_success:
            success = success + self.held(latent).float().clamp_min(1e-4).log()
        return {
            "state": state,
            "env_state": self._pose(latent),
            "reward_logits": reward,
            "success_logit": success,
        }

    def touch_success(self, latent: torch.Tensor) -> torch.Tensor:
        """`head.success_touch`: (...) whether the object is clear of the table (its centre more than LANDING
        above its resting height) and a finger of gripper `head.success_touch` touches it (`touches`): with
        `head.touch_finger`, that finger only."""
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        _, rot, position, rel = self._grasp(latent)
        opening = (latent[..., L : L + S] * self.joint_std + self.joint_mean)[..., self.grippers]
        finger = self.cfg.head.touch_finger
        touched = self.touches(rel, rot, self._object_axes(latent), opening, finger)
        return touched[..., self.cfg.head.success_touch] & (
            position[..., 2] > self.fk.table_top + self.fk.object_rest + self.LANDING
        )

    def touches(
        self,
        rel: torch.Tensor,
        rot: torch.Tensor,
        faces: torch.Tensor,
        opening: torch.Tensor,
        finger: int = -1,
    ) -> torch.Tensor:
        """(...,G) whether a finger of each gripper touches the object: the object (a box of half-size
        `object_rest` about `rel` (...,G,3) in each gripper's frame, its axes `faces` (...,3,3) as columns),
        bounded along the gripper's axes (`rot` (...,G,3,3)), overlaps the box of a finger's geometry at the
        gripper's raw `opening` (...,G) (`GraspKinematics.fingers_at`) grown by TOUCH_MARGIN. `finger` >= 0:
        only that finger (its index in the MJCF's order, `GraspKinematics.finger_names`); -1: any."""
        turned = rot.transpose(-1, -2) @ faces[..., None, :, :]  # the object's axes in each gripper's frame
        reach = self.fk.object_rest * turned.abs().sum(-1)
        lower, upper = self.fk.fingers_at(opening)  # (...,G,F,3)
        low = (rel + reach)[..., None, :] >= lower - self.TOUCH_MARGIN
        high = (rel - reach)[..., None, :] <= upper + self.TOUCH_MARGIN
        each = (low & high).all(-1)  # (...,G,F)
        if self.cfg.head.touch_outline:  # in the faces' plane: the object's outline, the fingers' tapered one
            axes = self.fk.face_axes
            corners = turned @ (self.fk.object_rest * CORNERS.to(rel)).T
            outline = (rel[..., axes, None] + corners[..., axes, :]).transpose(-1, -2)  # (...,G,8,2)
            across = (low & high)[..., self.fk.closing_axis]
            each = across & self.fk.overlaps_faces(outline, self.TOUCH_MARGIN)[..., None]
        return each.any(-1) if finger < 0 else each[..., finger]

    SURE = 10.0  # the success logit of a certain verdict (head.success_touch)
    # m: the finger boxes' growth that best matched the recordings' success (studies/touch_success.py)
    TOUCH_MARGIN = 0.0

    def held(self, latent: torch.Tensor) -> torch.Tensor:
        """(...) whether a gripper holds the object in this state: one closed (below HOLD_CLOSED) with the
        object between its fingers (`gripped`), clear of the table (its centre more than LANDING above its
        resting height)."""
        L, S = self.cfg.head.latent_dim, self.cfg.state_dim
        _, _, position, rel = self._grasp(latent)
        opening = (latent[..., L : L + S] * self.joint_std + self.joint_mean)[..., self.grippers]
        holding = (self.gripped(rel) > 0.5) & (opening < self.HOLD_CLOSED)  # (...,G)
        clear = position[..., 2] > self.fk.table_top + self.fk.object_rest + self.LANDING
        return holding.any(-1) & clear

    def outcome_spread(self, metres: bool = False) -> torch.Tensor | None:
        """(B,) how far apart the ensemble members' own expected object positions after the last `step` lie
        (each member's odds over the pose modes, before one mode is picked for all of them): the norm of
        their std in metres, or its mean over x, y, z in normalized units. The picked mode moves every member
        alike (a rigid hold, the still mode), so the members' spread after a step misses where they
        disagree about the outcome; this does not. With `head.doubt`, plus DOUBT_SCALE (m) times the
        episode's doubt (`_track_doubt`). None before a step or without pose modes."""
        if self._outcomes is None:
            return None
        spread = self._outcomes.std(1)  # (B,3) normalized
        out = (spread * self.pose_std[:3]).norm(dim=-1) if metres else spread.mean(-1)
        if self._doubt is not None and self._doubt.shape == out.shape:  # head.doubt
            scale = self.DOUBT_SCALE if metres else self.DOUBT_SCALE / self.pose_std[:3].mean()
            out = out + scale * self._doubt
        return out

    def forget_outcomes(self) -> None:
        """Drop the last step's outcomes and the episode's doubt (a new imagined episode starts)."""
        self._outcomes = self._carrier = None
        self._doubt = None

    # head.doubt: how far from each rule's edge a grasp is still in doubt (a Gaussian of this width), and
    # the uncertainty (m) full doubt adds: a grasp decided the wrong way puts the cube centimetres off
    DOUBT_WIDTH = {"balance": 0.005, "squeeze": 0.04, "capture": 0.1, "across": 0.005}
    DOUBT_SCALE = 0.05

    def _track_doubt(self, latent: torch.Tensor, chunk: torch.Tensor) -> None:
        """`head.doubt`: the episode's doubt (B,) in [0,1], the most it has been: for each gripper with the
        object between its fingers (`gripped`) at a frame's start, how near its grasp lies to the edge of
        each rule that is on (1 on the edge, falling as a Gaussian of DOUBT_WIDTH), and with `head.chance` or
        `head.odds_doubt`, how near even its odds are (4 p (1 - p))."""
        _, rot, _, rel = self._grasp(latent)
        near = self.gripped(rel).mean(1) > 0.5  # (B,G)
        edges = []
        if self.cfg.head.balance:
            margin = self.fk.balance_margin(rel, rot).mean(1) - self.cfg.head.balance_margin
            edges.append((margin / self.DOUBT_WIDTH["balance"]).pow(2))
        if self.cfg.head.squeeze:
            depth = self.stop_opening(latent).mean(1) - self._commands(chunk) - self.cfg.head.squeeze_depth
            edges.append((depth / self.DOUBT_WIDTH["squeeze"]).pow(2))
        if self.cfg.head.capture:
            edges.append((self._sweep_slack(latent, chunk)[0] / self.DOUBT_WIDTH["capture"]).pow(2))
        if self.cfg.head.pad_holds:
            across = (rel[..., self.fk.closing_axis] - self.fk.pad_centre[self.fk.closing_axis]).abs()
            edges.append(((across.mean(1) - self.HOLD_ACROSS) / self.DOUBT_WIDTH["across"]).pow(2))
        if self.odds:  # even odds: full doubt, falling as 4 p (1 - p)
            odds = self.take_odds(latent, chunk).mean(1)
            edges.append(-(4 * odds * (1 - odds)).clamp_min(1e-6).log())
        if not edges:
            return
        now = (torch.exp(-torch.stack(edges).amin(0)) * near).amax(-1)  # (B,)
        keep = self._doubt is not None and self._doubt.shape == now.shape
        self._doubt = torch.maximum(self._doubt, now) if keep else now

    @staticmethod
    def disagreement(decoded: dict[str, torch.Tensor]) -> torch.Tensor:
        """Uncertainty (B,) of member predictions (B,M,·): mean std of normalized state and object state."""
        spread = torch.cat([decoded["state"], decoded["env_state"]], dim=-1).std(dim=1)  # (B,S+E)
        return spread.mean(dim=-1)


# a cube's corners about its centre, in units of its half-size
CORNERS = torch.tensor([[x, y, z] for x in (-1.0, 1.0) for y in (-1.0, 1.0) for z in (-1.0, 1.0)])


def quat_matrix(q: torch.Tensor) -> torch.Tensor:
    """Rotation matrices (...,3,3) of (w, x, y, z) quaternions (...,4), normalized first."""
    w, x, y, z = (q / q.norm(dim=-1, keepdim=True).clamp_min(1e-9)).unbind(-1)
    rows = (
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)),
    )
    return torch.stack([torch.stack(r, dim=-1) for r in rows], dim=-2)


def _matrix_quat(m: torch.Tensor) -> torch.Tensor:
    """(w, x, y, z) unit quaternions (...,4) of rotation matrices (...,3,3): of the four ways to read one,
    the one with the largest (best conditioned) leading component."""
    t = m.diagonal(dim1=-2, dim2=-1)
    candidates = torch.stack(
        [
            torch.stack([1 + t.sum(-1), m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0],
                         m[..., 1, 0] - m[..., 0, 1]], -1),
            torch.stack([m[..., 2, 1] - m[..., 1, 2], 1 + t[..., 0] - t[..., 1] - t[..., 2],
                         m[..., 0, 1] + m[..., 1, 0], m[..., 0, 2] + m[..., 2, 0]], -1),
            torch.stack([m[..., 0, 2] - m[..., 2, 0], m[..., 0, 1] + m[..., 1, 0],
                         1 - t[..., 0] + t[..., 1] - t[..., 2], m[..., 1, 2] + m[..., 2, 1]], -1),
            torch.stack([m[..., 1, 0] - m[..., 0, 1], m[..., 0, 2] + m[..., 2, 0],
                         m[..., 1, 2] + m[..., 2, 1], 1 - t[..., 0] - t[..., 1] + t[..., 2]], -1),
        ],
        -2,
    )  # (...,4,4): row i has 4 q_i q_j; its i-th entry is 4 q_i^2  # fmt: skip
    best = candidates.diagonal(dim1=-2, dim2=-1).argmax(-1)  # (...)
    q = candidates.gather(-2, best[..., None, None].expand(*best.shape, 1, 4))[..., 0, :]
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return torch.where(q[..., :1] < 0, -q, q)


def turned_with(quat: torch.Tensor, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """(...,4) the orientation `quat` (w, x, y, z) turned as a frame turns from `before` to `after`
    (...,3,3), on the sign nearest `quat`."""
    turn = _matrix_quat(after @ before.transpose(-1, -2))
    out = _quat_product(turn, quat / quat.norm(dim=-1, keepdim=True).clamp_min(1e-9))
    return torch.where((out * quat).sum(-1, keepdim=True) < 0, -out, out)


def _quat_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The Hamilton product a b of (w, x, y, z) quaternions (...,4): the rotation b, then a."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        -1,
    )


def pose_error(pred: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Error (...) of normalized object poses (...,E): squared below one robust std per coordinate, linear
    above it (twice the Huber loss). Objects leave the workspace: a cube knocked off the table falls for
    metres, and under a squared error those few frames outweighed every centimetre of the rest (a cube
    nobody touched jittered by 1.5 cm per imagined frame)."""
    return 2 * F.huber_loss(pred, truth.expand_as(pred), reduction="none", delta=1.0).mean(-1)


def _take(poses: torch.Tensor, pick: torch.Tensor) -> torch.Tensor:
    """Each member's picked pose (B,M,E) from candidates (B,M,K,E) and picks (B,M)."""
    return poses.gather(2, pick[..., None, None].expand(-1, -1, 1, poses.shape[-1]))[:, :, 0]


class Judge(nn.Module):
    """Staged reward and success of the state one frame shows, from all its views."""

    def __init__(self, cfg: WorldModelConfig):
        super().__init__()
        self.trunk = conv_trunk(cfg.judge_width)
        width = cfg.num_views * 4 * cfg.judge_width
        self.head = nn.Sequential(nn.Linear(width, 128), nn.SiLU(), nn.Linear(128, cfg.reward_levels + 1))

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """images (B,V,3,H,W) in [-1,1] -> reward logits (B,levels), success logit (B,)."""
        B = images.shape[0]
        out = self.head(self.trunk(images.flatten(0, 1)).reshape(B, -1))
        return out[:, :-1], out[:, -1]
