"""Configuration of the world model: one dataclass, three presets.

The world model sees each camera at `image_height x image_width` pixels (the recordings are resized to
this; imagined frames are resized back to the logs' size for policies), cut into `patch_size` patches.
It predicts the next frame of every view from `context_frames` frames of every view and the action chunk
between frames (`frame_stride` control steps at the dataset's control rate).

Presets: `tiny()` for tests (seconds on a CPU), `small()` trains on a 2-core CPU to a useful model in
about an hour, `base()` is sized for one GPU.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from r2s2r.errors import DamagedFileError
from r2s2r.files import atomic_write_text, read_json

CONFIG_VERSION = 2  # written into config.json; files without one are version 1 (flat head fields)


@dataclass
class StateHeadConfig:
    """The state-dynamics head: what it reads, what its latent carries, and how an imagined step moves it."""

    latent_dim: int = 128  # size of the learnt part of the latent
    hidden: int = 256  # hidden width of its MLPs
    ensemble: int = 5  # dynamics members; their disagreement is the uncertainty
    reads_cameras: bool = True  # encode the views through a conv trunk; False: proprio and object pose only
    reads_objects: bool = True  # also encode the observed object pose (observation.environment_state)
    object_dropout: float = 0.25  # training: share of encodings that hide the object pose (cameras only)
    carries_state: bool = True  # the latent carries normalized proprio and object pose, stepped by changes
    pose_modes: int = 1  # free object-pose changes predicted per step; one is drawn per imagined episode
    kinematics: bool = True  # relate the object to each gripper's grasp point; add a "carried by g" mode each
    still_mode: bool = False  # add a pose mode "the object stays exactly where it is"
    arm_targets: bool = (
        False  # imagined frames end with the arm joints at the chunk's last target (no weights)
    )
    # With arm_targets: the arms end each frame where a tracking model fitted to the data puts them (behind
    # the last target by a linear map of the targets' last moves, per joint; fitted, not trained).
    arm_tracking: bool = False
    holds: bool = False  # imagined steps: a closed gripper holding an airborne object keeps it (no weights)
    # Contact outcomes (how far each gripper closes, the carry / still odds, reward and success) read only
    # the object's geometry relative to each gripper and its commands, never the latent or the arms' joints:
    # what a grasp does then does not depend on which controller brought the gripper there.
    contact: bool = False
    # With contact: a gripper stops closing on, and carries, only an object between its pads (a box in its
    # frame from the MJCF's fingers); elsewhere it closes as it would on nothing.
    pads: bool = False
    pad_overlap: float = 0.005  # m: how far the object must overlap the pads' faces to count as between them
    falls: bool = False  # imagined steps: an object in mid-air that no gripper can hold lands (no weights)
    # With pads, imagined steps: a gripper closing on an object between its pads stops where the pads meet
    # it (its width across the closing axis, from the MJCF's finger travel; no weights).
    stops: bool = False
    # With pads, imagined steps (no weights): a gripper starts to carry an object only where the object's
    # centre lies over its pads' faces across gravity; held off-centre, it turns out of the grip as it is
    # lifted.
    balance: bool = False
    # m: with balance, how far inside the pads' faces across gravity the object's centre must lie (negative:
    # outside them); the default is StateDynamicsHead.BALANCE_MARGIN.
    balance_margin: float = 0.003
    # With pads and holds, imagined steps: a closed gripper holds the object only between its pads, and
    # rigidly (no slip accumulates frame after frame while it carries it).
    pad_holds: bool = False
    # With pad_holds and balance: a gripper closing on an object between its pads and balanced there holds
    # it from that frame on, on the table too (the learnt odds alone can leave it behind when a fast grasp
    # closes and lifts within one frame).
    takes: bool = False
    # With pads, imagined steps: success only while a closed gripper holds the object between its pads, clear
    # of the table (the outcome net's success alone can be read where nothing holds it).
    held_success: bool = False
    # With pads, imagined steps: each gripper follows its commands through the frame as a servo fitted to the
    # data (a gain, a top speed and a dead band per control step; `grip_servo` buffer, fitted not trained),
    # not as the grasp nets predict from the frame's last command alone.
    grip_servo: bool = False
    # With pads, imagined steps (no weights): a gripper carries or takes an object only if it starts the frame
    # no narrower than the object: closed fingers cannot come round it, they rest on it.
    capture: bool = False
    # With pads, imagined steps (no weights): a gripper carries or takes an object only if it is commanded at
    # least SQUEEZE of its range past where its pads meet the object: a light squeeze lets the object slip.
    squeeze: bool = False
    # raw opening: with squeeze, how far past where its pads meet the object a gripper must be commanded; the
    # default is StateDynamicsHead.SQUEEZE.
    squeeze_depth: float = 0.04
    # With pad_holds, imagined steps (no weights): a held object turns rigidly with its gripper (without it
    # the free modes' predicted turn, which drifted through a carry until the fingers met it askew).
    turns: bool = False
    # With pads, imagined steps (no weights): the uncertainty rises where an episode's grasp came near the
    # edge of a grasp rule that is on (balance, squeeze, capture, the hold across the fingers), and stays up
    # for the rest of the episode: the rules decide with certainty where the data says either outcome.
    doubt: bool = False
    # With takes, imagined steps: a grasp takes and holds the object with the odds the data gives its room
    # (balance margin and squeeze depth; `grasp_odds` buffer, fitted not trained),
    # drawn once per gripper and episode, instead of by head.balance's hard edge: grasps near an edge
    # succeed in some episodes and fail in others, as they do on the robot.
    chance: bool = False
    # With takes and doubt, imagined steps: the uncertainty rises where a grasp's fitted odds (`grasp_odds`,
    # fitted as for head.chance) are near even, while the rules still decide the grasp (head.chance decides
    # it by the odds too).
    odds_doubt: bool = False
    # With arm_targets and pads, imagined steps (no weights): the observations between model frames follow
    # the commands one control step at a time (the arms by the tracking model on the frame's targets so far,
    # the grippers by the fitted servo, stopped where their pads meet the object, a held object rigidly with
    # its gripper), instead of repeating the frame's start until the next frame; each frame ends as before.
    substeps: bool = False
    # With substeps, imagined steps (no weights): a finger (the box of its geometry in the MJCF) that moves
    # into an object resting on the table, and is not closing on it, pushes it out of its way along the
    # table, control step by control step, between frames and at the frame's end; an object no finger
    # reaches moves as the free modes predict.
    pushes: bool = False
    # m: with pushes, how far inside a finger's box an object may have lain a step earlier and still count
    # as lying at its face, so that the finger's next step goes on pushing it (a frame's start re-places
    # the fingers from the frame's predicted end, a few millimetres off the last control step's; the default
    # is StateDynamicsHead.PUSH_TOUCH).
    push_touch: float = 0.001
    # With substeps and pad_holds, imagined steps (no weights): an object in mid-air that no gripper holds
    # through the frame falls freely from the control step its holder's command opens past the holder's
    # opening (at once if nothing held it), until the table stops it or a closing gripper's pads meet it
    # round it (caught: carried from that step); between frames and at the frame's end alike.
    drops: bool = False
    # With pad_holds, imagined steps (no weights): fingers on an object between them (within ON_SLACK of
    # the opening where their pads meet it) that squeeze it end the frame resting on it, no wider than that
    # opening plus a margin read off the recordings; with substeps, fingers on it close no further between
    # frames either.
    rests: bool = False
    # With pads, imagined steps (no weights): a gripper open round an object between its pads closes (or
    # opens) through the frame as the fitted servo (`grip_servo`) follows its commands, and stops where its
    # pads meet the object, in place of the grasp nets' prediction there.
    closes: bool = False
    # With contact, imagined frames (no weights): success is the reference world's own test, on the imagined
    # state: the object clear of the table and touched by a finger (the box of its geometry in the MJCF) of
    # this gripper (its index among the robot's grasp frames; ALOHA transfer-cube: 0, the left), in place
    # of the grasp nets' success and head.held_success; -1: off.
    success_touch: int = -1
    # With success_touch: only this finger of that gripper counts (its index in the MJCF's order,
    # GraspKinematics.finger_names), as the reference world names one finger geom; -1: any finger.
    touch_finger: int = -1
    # With success_touch: in the plane of the pads' faces, the touch compares the object's outline with the
    # fingers' own (their faces' convex hull in the MJCF: ALOHA's taper from 61 mm wide at the base to 10 mm
    # at the tips), not with the box bounding each finger; across the faces, the boxes as before.
    touch_outline: bool = False

    def __post_init__(self) -> None:
        self._check_sizes()
        self._check_rules()

    def _check_sizes(self) -> None:
        """Refuse sizes and edges out of range."""
        if not 1 <= self.pose_modes <= 8:
            raise ValueError(f"head.pose_modes={self.pose_modes} must be in 1..8.")
        if not 0.0 <= self.object_dropout < 1.0:
            raise ValueError(f"head.object_dropout={self.object_dropout} must be in [0, 1).")
        if self.ensemble < 1 or self.latent_dim < 1 or self.hidden < 1:
            raise ValueError("head.ensemble, head.latent_dim and head.hidden must all be >= 1.")
        if self.contact and not (self.kinematics and self.carries_state):
            raise ValueError("head.contact=True needs head.kinematics=True and head.carries_state=True.")
        if self.pads and not self.contact:
            raise ValueError("head.pads=True needs head.contact=True.")
        if not 0.0 <= self.pad_overlap < 0.05:
            raise ValueError(f"head.pad_overlap={self.pad_overlap} must be in [0, 0.05) m.")
        if not -0.02 <= self.balance_margin <= 0.02:
            raise ValueError(f"head.balance_margin={self.balance_margin} must be in [-0.02, 0.02] m.")
        if not 0.0 <= self.squeeze_depth <= 0.5:
            raise ValueError(f"head.squeeze_depth={self.squeeze_depth} must be in [0, 0.5] of the range.")
        if not 0.0 <= self.push_touch < 0.02:
            raise ValueError(f"head.push_touch={self.push_touch} must be in [0, 0.02) m.")

    def _check_rules(self) -> None:
        """Refuse a rule switched on without the rules it builds on."""
        for rule in (
            "stops",
            "balance",
            "pad_holds",
            "held_success",
            "grip_servo",
            "capture",
            "squeeze",
            "doubt",
        ):
            if getattr(self, rule) and not self.pads:
                raise ValueError(f"head.{rule}=True needs head.pads=True.")
        if self.turns and not self.pad_holds:
            raise ValueError("head.turns=True needs head.pad_holds=True.")
        if self.pad_holds and not self.holds:
            raise ValueError("head.pad_holds=True needs head.holds=True.")
        if self.takes and not (self.pad_holds and self.balance):
            raise ValueError("head.takes=True needs head.pad_holds=True and head.balance=True.")
        if self.chance and not self.takes:
            raise ValueError("head.chance=True needs head.takes=True.")
        if self.odds_doubt and not (self.takes and self.doubt):
            raise ValueError("head.odds_doubt=True needs head.takes=True and head.doubt=True.")
        if self.substeps and not (self.arm_targets and self.pads):
            raise ValueError("head.substeps=True needs head.arm_targets=True and head.pads=True.")
        if self.pushes and not self.substeps:
            raise ValueError("head.pushes=True needs head.substeps=True.")
        if self.drops and not (self.substeps and self.pad_holds):
            raise ValueError("head.drops=True needs head.substeps=True and head.pad_holds=True.")
        if self.success_touch >= 0 and not self.contact:
            raise ValueError("head.success_touch >= 0 needs head.contact=True.")
        if self.success_touch < -1:
            raise ValueError(
                f"head.success_touch={self.success_touch} must be -1 (off) or a gripper's index."
            )
        if self.touch_finger < -1 or (self.touch_finger >= 0 and self.success_touch < 0):
            raise ValueError(
                f"head.touch_finger={self.touch_finger} must be -1 (any finger) or, with head.success_touch"
                " >= 0, a finger's index in the MJCF's order."
            )
        if self.touch_outline and self.success_touch < 0:
            raise ValueError("head.touch_outline=True needs head.success_touch >= 0 (the touch it draws).")
        if self.rests and not self.pad_holds:
            raise ValueError("head.rests=True needs head.pad_holds=True.")
        if self.closes and not self.pads:
            raise ValueError("head.closes=True needs head.pads=True.")
        if self.arm_tracking and not self.arm_targets:
            raise ValueError("head.arm_tracking=True needs head.arm_targets=True.")


@dataclass
class EmbodimentConfig:
    """Another robot whose data the denoiser learns from, beside the model's own (`WorldModelConfig.robot`):
    its action and proprio projections, view embeddings and joint tokens are its own, the rest is shared."""

    robot: str  # its name in r2s2r/robots/spec.py
    action_dim: int
    state_dim: int
    cameras: tuple[str, ...]  # its views, in this order
    frame_stride: int  # its control steps per model frame (the model's frame rate is shared)
    arm_sketch: bool = False  # its arms are sketched (a robot with arm chains and joint-target actions)

    def __post_init__(self) -> None:
        self.cameras = tuple(self.cameras)
        if not self.cameras or min(self.action_dim, self.state_dim, self.frame_stride) < 1:
            raise ValueError(
                f"embodiment '{self.robot}' needs cameras and action_dim, state_dim, frame_stride >= 1."
            )


# Version 1 wrote the head's fields flat, under these names.
V1_HEAD_FIELDS = {
    "latent_dim": "latent_dim", "head_hidden": "hidden", "ensemble": "ensemble",
    **{f"head_{name}": name for name in (
        "reads_cameras", "reads_objects", "object_dropout", "carries_state", "pose_modes", "kinematics",
        "still_mode", "arm_targets", "holds",
    )},
}  # fmt: skip
# Version-1 fields added after checkpoints were published, with the value that reproduces what those
# checkpoints were trained as: a version-1 config.json that lacks one loads with this value.
V1_MISSING_DEFAULTS = {
    "head_reads_objects": False, "head_carries_state": False, "head_kinematics": False,
    "head_still_mode": False, "head_arm_targets": False, "head_holds": False, "context_tokens": True,
    "relative_actions": False, "view_balance": 0.0, "arm_sketch": False, "object_sketch": False,
}  # fmt: skip
# Version-1 options that version 2 no longer has: a checkpoint that turned one on cannot be read as it was.
V1_REMOVED = {"head_tracks_commands": False, "head_mode_grippers": False}


@dataclass
class WorldModelConfig:
    """Everything that fixes the world model's architecture and the data it expects."""

    robot: str = "aloha"  # embodiment whose action/proprio projections the model holds
    action_dim: int = 14  # size of one action (from the robot spec)
    state_dim: int = 14  # size of observation.state (from the robot spec)
    env_state_dim: int = 7  # size of observation.environment_state; 0 if the data has none
    cameras: tuple[str, ...] = ("top", "left_wrist", "right_wrist")  # views, in this order
    image_height: int = 48  # model resolution (frames are resized to it)
    image_width: int = 64
    patch_size: int = 8  # pixels per side of one token's patch
    context_frames: int = 2  # K frames the model conditions on
    frame_stride: int = 10  # control steps between model frames (50 Hz / 10 = 5 Hz)
    width: int = 192  # transformer width D
    depth: int = 6  # transformer blocks
    heads: int = 6  # attention heads
    mlp_ratio: float = 4.0  # hidden size of each block's MLP, as a multiple of width
    stack_context: bool = True  # each target patch also reads the same patch of the K context frames
    # (channel-stacked, as DIAMOND's UNet)
    joint_tokens: bool = True  # every joint's action chunk and proprio is a token of each frame too, so
    # image patches can attend to the joints they show (adaLN alone is global per frame)
    context_tokens: bool = False  # the context frames' patches are tokens too; False: only the target's
    # patches (each stacked with its context) and every frame's joint tokens, a sequence 2.3x shorter
    relative_actions: bool = True  # joint-target actions: also read each target relative to the proprio of
    # the frame it leads from, in units of RELATIVE_UNIT action std
    arm_sketch: bool = True  # joint-target actions: each target patch also reads stick figures of the arms
    # (robots/arm_sketch.py) at the last context frame and at the chunk's last targets
    object_sketch: bool = False  # with arm_sketch: the sketch also draws each object's box, at the last
    # context frame and where the state head puts it in the imagined frame
    object_jitter: float = 0.01  # training only: std (m) of a random shift of the sketched object boxes
    view_balance: float = 1.0  # training only: each view's loss share is scaled by its running squared change
    # per frame to the power -view_balance (0: every pixel counts alike)
    context_noise: float = 0.2  # max noise level put on context frames in training (robust rollouts)
    mean_fraction: float = 0.5  # share of training samples at pure noise, where the conditional mean that
    # one-step sampling reads is learnt
    predict_delta: bool = True  # denoise the change from the last context frame: standing still is free
    delta_scale: float = 0.25  # the change (pixels in [-1,1]) is divided by this so its spread is near 1
    data_std: float = 0.5  # typical spread of what is generated, for the denoiser's preconditioning
    sampling_steps: int = 1  # flow-matching Euler steps per imagined frame (1 reads the conditional mean)
    reward_levels: int = 5  # staged reward values 0..reward_levels-1 (transfer-cube: 0..4)
    head: StateHeadConfig = field(default_factory=StateHeadConfig)  # the state-dynamics head
    embodiments: list[EmbodimentConfig] = field(default_factory=list)  # other robots the denoiser knows
    # (pretraining on several robots); the head and the judge serve `robot` and `task` only
    tasks: tuple[str, ...] = ()  # tasks with a learnt embedding (their datasets' task texts); () = none
    task: str = ""  # the task the head and judge serve, one of `tasks` (or "" when `tasks` is empty)
    judge_width: int = 32  # success/reward judge: channels of its first conv layer
    state_loss_weight: float = 1.0  # weight of the state-dynamics head's loss in the total
    judge_loss_weight: float = 0.5  # weight of the judge's loss in the total

    def __post_init__(self) -> None:
        self.cameras = tuple(self.cameras)
        if isinstance(self.head, dict):
            self.head = StateHeadConfig(**self.head)
        self.embodiments = [e if isinstance(e, EmbodimentConfig) else EmbodimentConfig(**e)
                            for e in self.embodiments]  # fmt: skip
        self.tasks = tuple(self.tasks)
        self._check_embodiments()
        if not self.cameras:
            raise ValueError("cameras is empty; the world model needs at least one view.")
        for side in ("image_height", "image_width"):
            if getattr(self, side) % self.patch_size:
                raise ValueError(
                    f"{side}={getattr(self, side)} is not a multiple of patch_size={self.patch_size}; "
                    "pick sizes that the patch divides."
                )
        if not self.context_tokens and not self.stack_context:
            raise ValueError(
                "context_tokens=False needs stack_context=True: otherwise the target frame sees no context."
            )
        if self.relative_actions and self.state_dim != self.action_dim:
            raise ValueError(
                f"relative_actions needs actions that are joint targets (action_dim={self.action_dim} == "
                f"state_dim={self.state_dim}); turn it off for this robot."
            )
        if self.width % self.heads:
            raise ValueError(f"width={self.width} must be divisible by heads={self.heads}.")
        if self.context_frames < 1 or self.frame_stride < 1 or self.sampling_steps < 1:
            raise ValueError("context_frames, frame_stride and sampling_steps must all be >= 1.")
        if not 0.0 <= self.context_noise < 1.0:
            raise ValueError(f"context_noise={self.context_noise} must be in [0, 1).")
        if self.arm_sketch and self.state_dim != self.action_dim:  # the targets are drawn as joints
            raise ValueError(
                f"arm_sketch needs actions that are joint targets (action_dim={self.action_dim} == "
                f"state_dim={self.state_dim}); turn it off for this robot."
            )
        if self.sketched_objects and self.env_state_dim % 7:
            raise ValueError(
                f"object_sketch draws 7-D object poses (position, quaternion), but env_state_dim="
                f"{self.env_state_dim} is not a multiple of 7; set object_sketch=False for this data."
            )
        if self.object_jitter < 0:
            raise ValueError(f"object_jitter={self.object_jitter} must be >= 0 metres.")
        if not 0.0 <= self.view_balance <= 2.0:
            raise ValueError(f"view_balance={self.view_balance} must be in [0, 2].")
        if not 0.0 <= self.mean_fraction <= 1.0:
            raise ValueError(f"mean_fraction={self.mean_fraction} must be in [0, 1].")
        if not self.head.reads_cameras and not (self.head.reads_objects and self.env_state_dim > 0):
            raise ValueError(
                "head.reads_cameras=False leaves the state head blind to the object: it needs "
                "head.reads_objects=True and env_state_dim > 0 (an observed object pose)."
            )

    def _check_embodiments(self) -> None:
        names = [self.robot] + [e.robot for e in self.embodiments]
        if len(set(names)) != len(names):
            raise ValueError(f"embodiments {names} name a robot twice; each robot is listed once.")
        if self.relative_actions and any(e.action_dim != e.state_dim for e in self.embodiments):
            raise ValueError("relative_actions needs every embodiment's actions to be joint targets.")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"tasks {list(self.tasks)} name a task twice.")
        if (self.task or self.tasks) and self.task not in self.tasks:
            raise ValueError(f"task {self.task!r} is not one of tasks {list(self.tasks)}.")

    # ------------------------------------------------------------------ derived
    @property
    def robots(self) -> list[str]:
        """Every robot the denoiser knows, the model's own first."""
        return [self.robot] + [e.robot for e in self.embodiments]

    def embodiment(self, robot: str | None = None) -> EmbodimentConfig:
        """The dims, views and frame stride of `robot` (None: the model's own)."""
        if robot in (None, self.robot):
            own = self.arm_sketch
            return EmbodimentConfig(self.robot, self.action_dim, self.state_dim, self.cameras,
                                    self.frame_stride, own)  # fmt: skip
        for e in self.embodiments:
            if e.robot == robot:
                return e
        raise ValueError(
            f"the model knows robots {self.robots}, not '{robot}'; pretrain with data of '{robot}' first "
            "(no action or proprio projection exists for it)."
        )

    @property
    def task_index(self) -> int:
        """Row of `task` in the task embedding; -1 when the model has none."""
        return self.tasks.index(self.task) if self.tasks else -1

    @property
    def num_views(self) -> int:
        return len(self.cameras)

    @property
    def sketched_objects(self) -> int:
        """Objects the sketch draws: with arm_sketch and object_sketch, one per 7-D object pose."""
        return self.env_state_dim // 7 if self.arm_sketch and self.object_sketch else 0

    @property
    def patches_per_frame(self) -> int:
        return (self.image_height // self.patch_size) * (self.image_width // self.patch_size)

    @property
    def tokens_per_frame(self) -> int:
        """Sequence length of one frame in the denoiser: every view's patches, plus the joint tokens."""
        joints = self.action_dim + self.state_dim if self.joint_tokens else 0
        return self.num_views * self.patches_per_frame + joints

    @property
    def sequence_length(self) -> int:
        """Tokens in one denoiser pass: every frame's (context_tokens) or only the target's patches, and every
        frame's joint tokens."""
        frames, patches = self.context_frames + 1, self.num_views * self.patches_per_frame
        if self.context_tokens:
            return frames * self.tokens_per_frame
        return patches + frames * (
            self.tokens_per_frame - patches
        )  # the target's patches, every frame's joints

    @property
    def patch_dim(self) -> int:
        return 3 * self.patch_size**2

    @property
    def chunk_dim(self) -> int:
        return self.frame_stride * self.action_dim

    @property
    def action_features(self) -> int:
        """Values the denoiser reads per joint and control step: a target, and its offset from the proprio."""
        return 2 if self.relative_actions else 1

    @property
    def camera_keys(self) -> list[str]:
        return [f"observation.images.{c}" for c in self.cameras]

    # ------------------------------------------------------------------ presets
    @classmethod
    def tiny(cls, **overrides) -> WorldModelConfig:
        """Tests: 2 views of 32x32, 2 layers of width 32; a forward pass takes milliseconds."""
        base = dict(
            cameras=("top", "left_wrist"), image_height=32, image_width=32, patch_size=8, width=32, depth=2,
            heads=2, judge_width=8, sampling_steps=2, frame_stride=5, mean_fraction=0.25,
            head=dict(latent_dim=32, hidden=64, ensemble=3),
        )  # fmt: skip
        return cls._preset(base, overrides)

    @classmethod
    def small(cls, **overrides) -> WorldModelConfig:
        """The 2-core CPU preset: 3 views of 48x64, 6 layers of width 192 (5.6 M parameters), 5 frames/s.

        A frame every 10 control steps (0.2 s) instead of 5: the arms move further per frame, so what the
        actions do is a larger part of each training target, and a 1 s rollout is 5 frames, not 10. Half
        the training samples sit at pure noise: one-step sampling, the default for evaluation, reads
        exactly that prediction."""
        return cls._preset({}, overrides)

    @classmethod
    def base(cls, **overrides) -> WorldModelConfig:
        """One GPU: 3 views of 96x128 (the recordings' size), 12 layers of width 512."""
        base = dict(
            image_height=96, image_width=128, patch_size=8, width=512, depth=12, heads=8, judge_width=64,
            head=dict(latent_dim=256, hidden=512),
        )  # fmt: skip
        return cls._preset(base, overrides)

    @classmethod
    def _preset(cls, base: dict, overrides: dict) -> WorldModelConfig:
        """`base` with `overrides`: a `head` dict merges into the preset's head field by field, a
        StateHeadConfig replaces it."""
        head = overrides.get("head", {})
        if not isinstance(head, StateHeadConfig):
            head = {**base.get("head", {}), **head}
        return cls(**{**base, **overrides, "head": head})

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict:
        d = asdict(self)
        d["cameras"] = list(self.cameras)
        d["tasks"] = list(self.tasks)
        for e in d["embodiments"]:
            e["cameras"] = list(e["cameras"])
        return d

    def save(self, directory: str | Path) -> None:
        text = json.dumps({"config_version": CONFIG_VERSION, **self.to_dict()}, indent=2)
        atomic_write_text(Path(directory, "config.json"), text)

    @classmethod
    def load(cls, directory: str | Path) -> WorldModelConfig:
        path = Path(directory, "config.json")
        if not path.is_file():
            raise FileNotFoundError(
                f"no config.json in {directory}; point at a directory written by save_pretrained."
            )
        raw = read_json(path, "the checkpoint is damaged: copy it again, or re-save or retrain it.")
        version = raw.pop("config_version", 1) if isinstance(raw, dict) else None
        if not isinstance(version, int):
            raise DamagedFileError(
                f"{path} is not a world model's config; point at a world model checkpoint."
            )
        if version > CONFIG_VERSION:
            raise ValueError(f"{path} is config version {version}, newer than this r2s2r's; upgrade r2s2r.")
        if version == 1:
            raw = upgrade_v1(raw, path)
        known = {f.name for f in fields(cls)}
        head_known = {f.name for f in fields(StateHeadConfig)}
        unknown = sorted(set(raw) - known) + [
            f"head.{k}" for k in sorted(set(raw.get("head", {})) - head_known)
        ]
        if unknown:
            raise ValueError(
                f"{path} has fields {unknown} this version of r2s2r does not know; upgrade r2s2r or retrain."
            )
        return cls(**raw)

    def differences(self, other: WorldModelConfig) -> dict[str, tuple]:
        """Fields whose values differ, head fields as `head.<name>`: name -> (self's value, other's value)."""
        a, b = _flat(self.to_dict()), _flat(other.to_dict())
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


def _flat(d: dict) -> dict:
    return {**{k: v for k, v in d.items() if k != "head"}, **{f"head.{k}": v for k, v in d["head"].items()}}


def upgrade_v1(raw: dict, path: Path) -> dict:
    """A version-1 config (flat head fields, some absent in older files) as version 2's fields."""
    raw = {**V1_MISSING_DEFAULTS, **raw}
    for name, kept in V1_REMOVED.items():
        if raw.pop(name, kept) != kept:
            raise ValueError(
                f"{path} turns on {name}, an option r2s2r no longer has; refine a new head from this "
                "checkpoint with r2s2r-refine-head, or run it with r2s2r 0.1."
            )
    head = {new: raw.pop(old) for old, new in V1_HEAD_FIELDS.items() if old in raw}
    return {**raw, "head": head}
