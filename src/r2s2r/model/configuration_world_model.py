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
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from r2s2r.files import atomic_write_text

# Fields added after checkpoints were published, with the value that reproduces what those checkpoints
# were trained as: a config.json that lacks one loads with this value, not the current default.
PRE_FIELD_DEFAULTS = {
    "head_reads_objects": False, "head_carries_state": False, "head_kinematics": False,
    "head_tracks_commands": False, "head_still_mode": False, "head_mode_grippers": False,
    "head_arm_targets": False, "head_holds": False, "context_tokens": True, "relative_actions": False,
    "view_balance": 0.0, "arm_sketch": False, "object_sketch": False,
}  # fmt: skip


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
    # (channel-stacked, as DIAMOND's UNet): "what was here" is local, not left for attention to find
    joint_tokens: bool = True  # also give every joint's action chunk and proprio its own token in each
    # frame, so that image patches can attend to the joints they show (adaLN alone is global per frame)
    context_tokens: bool = False  # the context frames' patches are tokens of the sequence too. False: only
    # the target frame's patches (each with its stacked context) and every frame's joint tokens attend, a
    # sequence 2.3x shorter in `small` (228 tokens instead of 516), training 4x faster on the CPU: the context
    # still reaches every target patch at its own place (needs stack_context), and the rest of the frame
    # through the target's tokens
    relative_actions: bool = True  # with joint-target actions (state_dim == action_dim): the denoiser also
    # reads every chunk's targets relative to the proprio of the frame it leads from, (target - position) in
    # units of RELATIVE_UNIT action std, next to the absolute targets. An arm whose targets stay where it is
    # reads as zeros: in absolute (normalized) terms a frame's motion is a tenth of the joints' spread, and
    # the wrist views of idle arms drifted
    arm_sketch: bool = True  # with joint-target actions and the robot's MJCF: each target patch also reads
    # a stick figure of each arm in its view (robots/arm_sketch.py), drawn by forward kinematics from the
    # joints at the last context frame and from the chunk's last targets, where position-controlled arms
    # will be: where an arm appears need not be learnt from pixels (`small` at 3,000 steps: +1.4 dB over
    # copy-last at 1 s in the top view and +1.1 in the left wrist's, on top of view_balance)
    object_sketch: bool = False  # with arm_sketch and object poses in the data: the sketch also draws each
    # object's box (the MJCF's free bodies, in the order of observation.environment_state) at the last
    # context frame and where the state head puts it in the imagined frame (in training: where it really
    # is, moved by `object_jitter`). The video then shows the cube where the head tracks it, and the judge,
    # which reads the video, sees the handover the head predicts
    object_jitter: float = 0.01  # training only: std in metres of one random shift of both object boxes of
    # a sample, so the denoiser learns to draw the object near, not exactly at, the head's guess (its error
    # is 1-3 cm over 6 s), reading the context frames for the rest
    view_balance: float = 1.0  # training only: each view's share of the denoising loss is scaled by its
    # typical squared change per frame to the power -view_balance (running mean over batches, weights
    # averaging 1). 0: every pixel counts alike, and the wrist views, whose frames change 10x more than the
    # top view's, take 95 % of the gradient; 1: every view's error counts relative to its own change, as
    # PSNR gains over copy-last-frame do (`small` at 3,000 steps: top view +1.1 dB at 1 s, left wrist -0.3)
    context_noise: float = 0.2  # max noise level put on context frames in training (robust rollouts)
    mean_fraction: float = 0.5  # share of training samples at pure noise: the conditional mean, which
    # few-step sampling starts from, is learnt directly instead of from the logit-normal's thin tail
    predict_delta: bool = True  # denoise the change from the last context frame: standing still is free
    delta_scale: float = 0.25  # the change (pixels in [-1,1]) is divided by this so its spread is near 1
    data_std: float = 0.5  # typical spread of what is generated, for the denoiser's preconditioning
    sampling_steps: int = 1  # flow-matching Euler steps per imagined frame. 1 reads the conditional mean that
    # the pure-noise share of training (mean_fraction) teaches: `small`'s open loop on 32 held-out episodes
    # scored 27.1 / 18.6 / 19.7 dB at 1 s (top / left / right wrist) and 94 % outcome agreement with 1 step,
    # 21.8 / 17.2 / 17.4 dB and 81 % with 6 (each step adds sampling noise the model never learnt to remove)
    latent_dim: int = 128  # state-dynamics head: size of the compact latent
    head_hidden: int = 256  # state-dynamics head: hidden width of its MLPs
    ensemble: int = 5  # state-dynamics head: members whose disagreement is the uncertainty
    reward_levels: int = 5  # staged reward values 0..reward_levels-1 (transfer-cube: 0..4)
    head_reads_objects: bool = True  # the head's encoder also reads the observed object pose
    # (observation.environment_state) where an observation has it: an imagined episode then starts from
    # where the cube really is instead of from what 48x64 pixels say (cm off), which decides grasps
    head_object_dropout: float = 0.25  # share of training encodings that hide the object pose, so the head
    # still starts well from cameras alone (a robot without a pose estimate)
    head_carries_state: bool = True  # the head's latent carries the normalized proprio and object pose
    # explicitly, stepped by predicted changes (a still cube stays exactly where it was), instead of
    # squeezing them through a normalized latent and reading them back out
    head_pose_modes: int = 1  # with a carried pose: how many alternative pose changes the head predicts
    # per step (2: e.g. carried along by the gripper or left behind), one picked per imagined episode by
    # the predicted odds, instead of one change that averages them
    head_kinematics: bool = True  # with a carried pose: the head relates the object to each gripper's
    # grasp point (forward kinematics of the robot's MJCF, robots/kinematics.py): it reads where the cube is
    # in every gripper's frame, and besides its free pose changes it predicts "carried rigidly by gripper g"
    # (one more pose mode per gripper, picked by the predicted odds), so a held cube moves with the fingers
    # instead of lagging behind them
    head_still_mode: bool = False  # with a carried pose: one more pose mode, "the object stays exactly where
    # it is" (no learnt change), picked by the predicted odds like the others: a cube nobody touches does not
    # jitter (the free change drifted it ~1 cm per imagined frame). Off by default: it ranked the zoo worse
    head_mode_grippers: bool = False  # with several pose modes: each mode after the first also predicts the
    # gripper openings, so "stopped at the cube's width, carried" is one outcome where one shared opening
    # averaged "held" and "shut on air" (closed on air, the imagined fingers stopped at half width, which the
    # head read as a grasp). Off by default: it ranked the zoo worse (benchmarks/head.py)
    head_tracks_commands: bool = False  # with carried proprio and actions that are joint targets (as
    # state_dim == action_dim): the next proprio is predicted as the chunk's last commanded target plus a
    # learnt change (position-controlled joints track their targets), not as the last proprio plus one.
    # Off by default: the last target alone lands half as far from the next grasp point as the kinematic
    # head's own guess (0.6 vs 1.2 cm), but the head trained with it ranked the zoo worse (benchmarks/head.py)
    head_arm_targets: bool = False  # with carried proprio and joint-target actions: every imagined frame ends
    # with the arm joints exactly at the chunk's last commanded target, nothing learnt (the grippers still
    # learn theirs: one shut on a cube stops at its width). Position-controlled arms reach their targets
    # within a frame: 0.3 cm at the grasp point in the recordings, where the learnt change drifted 1.2-1.5
    # cm, as much as the grasp offsets that decide whether a lift holds. Weights are unchanged by it, so it
    # can be switched on for a trained head (config.json)
    head_holds: bool = False  # kinematic head, imagined steps: a hold is a hold. A cube in mid-air within
    # reach of a closed gripper that does not open in the frame stays in that hand (its carried mode is
    # taken whatever the odds: the rule the training labels follow), and a carried cube moves rigidly with
    # its gripper, within the labels' CARRY_TOLERANCE. Without it an episode's one draw loses a held cube at
    # the first frame whose odds of "free" rise above it, and the carried modes' learnt change, unconstrained
    # outside the frames they won, moved lifted cubes centimetres off the fingers. No weights: it can be
    # switched on for a trained head (config.json)
    head_reads_cameras: bool = True  # the head's encoder reads the views through its conv trunk. False: a
    # head over proprio and the observed object pose only (it needs observation.environment_state), which
    # refines and evaluates on state-only recordings (no video rendered or decoded), 100x cheaper to record
    judge_width: int = 32  # success/reward judge: channels of its first conv layer
    state_loss_weight: float = 1.0  # weight of the state-dynamics head's loss in the total
    judge_loss_weight: float = 0.5  # weight of the judge's loss in the total

    def __post_init__(self) -> None:
        self.cameras = tuple(self.cameras)
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
        if self.context_frames < 1 or self.frame_stride < 1 or self.ensemble < 1 or self.sampling_steps < 1:
            raise ValueError("context_frames, frame_stride, ensemble and sampling_steps must all be >= 1.")
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
        if not 1 <= self.head_pose_modes <= 8:
            raise ValueError(f"head_pose_modes={self.head_pose_modes} must be in 1..8.")
        if not self.head_reads_cameras and not (self.head_reads_objects and self.env_state_dim > 0):
            raise ValueError(
                "head_reads_cameras=False leaves the state head blind to the object: it needs "
                "head_reads_objects=True and env_state_dim > 0 (an observed object pose)."
            )
        if not 0.0 <= self.head_object_dropout < 1.0:
            raise ValueError(f"head_object_dropout={self.head_object_dropout} must be in [0, 1).")

    # ------------------------------------------------------------------ derived
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
            heads=2, latent_dim=32, head_hidden=64, ensemble=3, judge_width=8, sampling_steps=2,
            frame_stride=5, mean_fraction=0.25,
        )  # fmt: skip
        return cls(**{**base, **overrides})

    @classmethod
    def small(cls, **overrides) -> WorldModelConfig:
        """The 2-core CPU preset: 3 views of 48x64, 6 layers of width 192 (5.6 M parameters), 5 frames/s.

        A frame every 10 control steps (0.2 s) instead of 5: the arms move further per frame, so what the
        actions do is a larger part of each training target, and a 1 s rollout is 5 frames, not 10. Half
        the training samples sit at pure noise: one-step sampling, the default for evaluation, reads
        exactly that prediction."""
        return cls(**overrides)

    @classmethod
    def base(cls, **overrides) -> WorldModelConfig:
        """One GPU: 3 views of 96x128 (the recordings' size), 12 layers of width 512."""
        base = dict(
            image_height=96, image_width=128, patch_size=8, width=512, depth=12, heads=8, latent_dim=256,
            head_hidden=512, judge_width=64,
        )  # fmt: skip
        return cls(**{**base, **overrides})

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict:
        d = asdict(self)
        d["cameras"] = list(self.cameras)
        return d

    def save(self, directory: str | Path) -> None:
        atomic_write_text(Path(directory, "config.json"), json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, directory: str | Path) -> WorldModelConfig:
        path = Path(directory, "config.json")
        if not path.is_file():
            raise FileNotFoundError(
                f"no config.json in {directory}; point at a directory written by save_pretrained."
            )
        raw = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(
                f"{path} has fields {unknown} this version of r2s2r does not know; upgrade r2s2r or retrain."
            )
        for name, before in PRE_FIELD_DEFAULTS.items():  # files older than a field: its old behaviour
            raw.setdefault(name, before)
        return cls(**raw)

    def differences(self, other: WorldModelConfig) -> dict[str, tuple]:
        """Fields whose values differ: name -> (self's value, other's value)."""
        a, b = self.to_dict(), other.to_dict()
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]}
