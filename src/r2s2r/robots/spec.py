"""Embodiment specs: what a robot is, as data the rest of the library reads.

A spec names the joints of the action/state vector, their limits (with where each limit comes from), the
gripper convention, the cameras and the control rate. The world model projects actions and proprio through
per-embodiment layers keyed by `EmbodimentSpec.name`, the recorder checks actions against `action_dim`, and
the physics checker (`robots/checker.py`) reads the limits from here.

The ALOHA spec is read from gym-aloha's MJCF rather than typed by hand, so it cannot drift from the model
that plays "reality".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Velocity and acceleration limits. Interbotix publishes `<limit velocity="${pi}">` for every ViperX 300s arm
# joint (vx300s.urdf.xacro), but gym-aloha's MJCF enforces no velocity limit and its stiff position servos
# move faster: the demonstrators' recordings reach 20 rad/s averaged over 0.1 s, and single 20 ms steps
# reach 50 rad/s when contacts kick a joint. The limits below are therefore the envelope of the robot we
# actually model: per joint, the largest |velocity| and |acceleration| averaged over LIMIT_WINDOW seconds in
# the 160 training episodes of benchmarks/train_small.py's dataset, times 1.25 (printed by
# `python benchmarks/checker.py --calibrate`). A trajectory faster than this is faster than the reference
# robot ever moved under its own servos.
LIMIT_WINDOW = 0.1  # s over which velocities and accelerations are averaged (the world model's frame period)
# fmt: off
ALOHA_VELOCITY_LIMITS = (
    1.7, 15.6, 21.3, 22.9, 12.0, 25.4, 10.3,  # left: waist ... wrist_rotate (rad/s), gripper (units/s)
    30.1, 11.5, 9.0, 20.1, 19.7, 25.8, 14.4,  # right
)
ALOHA_ACCELERATION_LIMITS = (
    21.4, 180.4, 304.3, 219.1, 143.6, 271.1, 177.4,  # left (rad/s^2; gripper units/s^2)
    335.0, 142.1, 78.4, 228.5, 226.4, 293.6, 170.4,  # right
)
# fmt: on
ALOHA_LIMIT_SOURCE = (
    "envelope of the reference world's training recordings: max over 160 episodes of |dq|, |d2q| averaged "
    "over 0.1 s, x1.25 (benchmarks/checker.py --calibrate); the Interbotix datasheet's pi rad/s is exceeded "
    "by gym-aloha's servos"
)
# The normalized gripper state: 0 closed, 1 open by convention, but gym-aloha's soft finger limits
# (solimp="2 1 0.01") let the fingers squeeze or spring far past them under contact: the recordings reach
# -0.70 (finger position -9 mm: the fingers pressed through each other) and 1.85 (a grasp springing
# open). The range is that envelope, widened by a quarter of the 0..1 span at each end.
ALOHA_GRIPPER_STATE_RANGE = (-0.95, 2.1)


@dataclass(frozen=True)
class EmbodimentSpec:
    """A robot, as the data and the models see it.

    All per-joint tuples follow the order of the action vector, which is also the order of
    `observation.state` (LeRobot's ALOHA convention: joint positions are absolute targets).
    """

    name: str  # registry key, also the name of the world model's per-embodiment projections
    joint_names: tuple[str, ...]  # one per action/state dimension, in vector order
    position_lower: tuple[float, ...]  # lower position limit per dimension (rad; gripper in its own units)
    position_upper: tuple[float, ...]  # upper position limit per dimension
    position_source: str  # where the position limits come from
    velocity_limits: tuple[
        float, ...
    ]  # max |velocity| per dimension over limit_window (rad/s; gripper units/s)
    velocity_source: str  # where the velocity (and acceleration) limits come from
    gripper_indices: tuple[int, ...]  # dimensions that are grippers
    gripper_convention: str  # what a gripper value means
    cameras: tuple[str, ...]  # every camera the robot (or its model) has
    default_cameras: tuple[str, ...]  # the cameras recorded and modelled unless told otherwise
    control_hz: int  # rate at which actions are sent
    model_xml: str | None = None  # MJCF for forward kinematics, when one exists
    acceleration_limits: tuple[
        float, ...
    ] = ()  # max |acceleration| per dimension over limit_window; () = none
    limit_window: float = LIMIT_WINDOW  # s over which velocity and acceleration limits are averaged
    gripper_state_range: tuple[float, float] = (0.0, 1.0)  # what a gripper *state* can read (commands: 0..1)

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        if not self.acceleration_limits:
            object.__setattr__(self, "acceleration_limits", (math.inf,) * n)
        for field in ("position_lower", "position_upper", "velocity_limits", "acceleration_limits"):
            if len(getattr(self, field)) != n:
                raise ValueError(
                    f"EmbodimentSpec '{self.name}': {field} has {len(getattr(self, field))} entries "
                    f"but there are {n} joint_names; give one value per joint."
                )
        missing = [c for c in self.default_cameras if c not in self.cameras]
        if missing:
            raise ValueError(
                f"EmbodimentSpec '{self.name}': default_cameras {missing} are not among "
                f"cameras {self.cameras}."
            )

    @property
    def action_dim(self) -> int:
        return len(self.joint_names)

    @property
    def state_dim(self) -> int:
        return len(self.joint_names)

    def checked_actions(self, actions, num_envs: int, meaning: str) -> np.ndarray:
        """`actions` as a float array (num_envs, action_dim), or a ValueError naming the expected shape
        (what one action is: `meaning`) or the envs whose actions are not finite."""
        actions = np.asarray(actions, dtype=float)
        if actions.shape != (num_envs, self.action_dim):
            raise ValueError(
                f"actions has shape {actions.shape}, expected ({num_envs}, {self.action_dim}): {meaning}."
            )
        if not np.isfinite(actions).all():
            bad = sorted(set(np.nonzero(~np.isfinite(actions))[0].tolist()))
            raise ValueError(f"actions for env(s) {bad} contain NaN or inf; the policy produced them.")
        return actions


def aloha_spec(model_xml: str | Path | None = None) -> EmbodimentSpec:
    """The bimanual ALOHA (two ViperX 300s) as gym-aloha models it, read from its MJCF."""
    import mujoco
    from gym_aloha import constants

    xml = Path(model_xml) if model_xml else constants.ASSETS_DIR / "bimanual_viperx_transfer_cube.xml"
    model = mujoco.MjModel.from_xml_path(str(xml))
    arm_joints = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")

    names, lower, upper = [], [], []
    for side in ("left", "right"):
        for joint in arm_joints:
            lo, hi = model.joint(f"vx300s_{side}/{joint}").range
            names.append(f"{side}_{joint}")
            lower.append(float(lo))
            upper.append(float(hi))
        # The gripper action is gym-aloha's normalized finger opening: 0 closed, 1 open.
        names.append(f"{side}_gripper")
        lower.append(0.0)
        upper.append(1.0)

    cameras = tuple(model.camera(i).name for i in range(model.ncam))
    return EmbodimentSpec(
        name="aloha",
        joint_names=tuple(names),
        position_lower=tuple(lower),
        position_upper=tuple(upper),
        position_source=f"joint ranges of {xml.name} (gym-aloha MJCF); grippers 0..1 by convention",
        velocity_limits=ALOHA_VELOCITY_LIMITS,
        velocity_source=ALOHA_LIMIT_SOURCE,
        gripper_indices=(6, 13),
        gripper_convention=(
            "normalized finger opening, 0 = closed, 1 = open (gym-aloha PUPPET_GRIPPER_POSITION_CLOSE/OPEN)"
        ),
        cameras=cameras,
        default_cameras=("top", "left_wrist", "right_wrist"),
        control_hz=int(round(1.0 / constants.DT)),
        model_xml=str(xml),
        acceleration_limits=ALOHA_ACCELERATION_LIMITS,
        gripper_state_range=ALOHA_GRIPPER_STATE_RANGE,
    )


# PushT (gym-pusht): a disc pushed by a PD-controlled target in a 512x512 arena; world units are the pixels
# of gym-pusht's 512x512 drawing (x right, y down). Its action space is Box(0, 512, (2,)).
PUSHT_ARENA = 512.0  # side of the arena (world units = pixels of gym-pusht's native drawing)
PUSHT_CONTROL_HZ = 10  # gym-pusht's control rate (10 physics substeps of 0.01 s per action)
PUSHT_EPISODE_LENGTH = 300  # control steps per episode: gym-pusht's TimeLimit, 30 s at 10 Hz
PUSHT_OOD_MARGIN = 40.0  # width (world units) of the out-of-distribution ring around gym-pusht's reset box


def pusht_spec() -> EmbodimentSpec:
    """gym-pusht's point pusher: action and state are the agent's 2-D position (target / actual)."""
    return EmbodimentSpec(
        name="pusht",
        joint_names=("agent_x", "agent_y"),
        position_lower=(0.0, 0.0),
        position_upper=(PUSHT_ARENA, PUSHT_ARENA),
        position_source="gym-pusht's action_space Box(0, 512); the walls keep the agent within ~[20, 491]",
        velocity_limits=(math.inf, math.inf),
        velocity_source="none: gym-pusht's PD agent (k_p=100, k_v=20) has no speed limit",
        gripper_indices=(),
        gripper_convention="none: the agent is a disc of radius 15 that only pushes",
        cameras=("top",),
        default_cameras=("top",),
        control_hz=PUSHT_CONTROL_HZ,
        gripper_state_range=(0.0, 0.0),
    )


KNOWN_ROBOTS = ("aloha", "pusht")


def robot_spec(name: str) -> EmbodimentSpec:
    """The spec of a known robot by name; raises a one-line error naming the known ones otherwise."""
    if name == "aloha":
        return aloha_spec()
    if name == "pusht":
        return pusht_spec()
    raise ValueError(
        f"Unknown robot '{name}'. Known robots: {', '.join(KNOWN_ROBOTS)}. "
        "Pass one of these, or add an EmbodimentSpec in r2s2r/robots/spec.py."
    )
