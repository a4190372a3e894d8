"""Embodiment specs: what a robot is, as data the rest of the library reads.

A spec names the joints of the action/state vector, their limits (with where each limit comes from), the
gripper convention, the cameras and the control rate. The world model projects actions and proprio through
per-embodiment layers keyed by `EmbodimentSpec.name`, the recorder checks actions against `action_dim`, and
the physics checker (later) reads the limits from here.

The ALOHA spec is read from gym-aloha's MJCF rather than typed by hand, so it cannot drift from the model
that plays "reality".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

# Interbotix publishes the ViperX 300 6DOF description as vx300s.urdf.xacro; every arm joint there carries
# `<limit velocity="${pi}">`. gym-aloha's MJCF has no velocity limits, so this is the one number we add.
VX300S_ARM_VELOCITY_LIMIT = math.pi
VX300S_VELOCITY_SOURCE = (
    "Interbotix interbotix_xsarm_descriptions/urdf/vx300s.urdf.xacro: <limit velocity='${pi}'> on every arm "
    "joint; the normalized gripper channel has no published velocity limit (inf)"
)


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
    velocity_limits: tuple[float, ...]  # max |velocity| per dimension (rad/s; gripper units/s)
    velocity_source: str  # where the velocity limits come from
    gripper_indices: tuple[int, ...]  # dimensions that are grippers
    gripper_convention: str  # what a gripper value means
    cameras: tuple[str, ...]  # every camera the robot (or its model) has
    default_cameras: tuple[str, ...]  # the cameras recorded and modelled unless told otherwise
    control_hz: int  # rate at which actions are sent
    model_xml: str | None = None  # MJCF for forward kinematics, when one exists

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        for field in ("position_lower", "position_upper", "velocity_limits"):
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

    @property
    def control_dt(self) -> float:
        return 1.0 / self.control_hz


def aloha_spec(model_xml: str | Path | None = None) -> EmbodimentSpec:
    """The bimanual ALOHA (two ViperX 300s) as gym-aloha models it, read from its MJCF."""
    import mujoco
    from gym_aloha import constants

    xml = Path(model_xml) if model_xml else constants.ASSETS_DIR / "bimanual_viperx_transfer_cube.xml"
    model = mujoco.MjModel.from_xml_path(str(xml))
    arm_joints = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")

    names, lower, upper, vel = [], [], [], []
    for side in ("left", "right"):
        for joint in arm_joints:
            lo, hi = model.joint(f"vx300s_{side}/{joint}").range
            names.append(f"{side}_{joint}")
            lower.append(float(lo))
            upper.append(float(hi))
            vel.append(VX300S_ARM_VELOCITY_LIMIT)
        # The gripper action is gym-aloha's normalized finger opening: 0 closed, 1 open.
        names.append(f"{side}_gripper")
        lower.append(0.0)
        upper.append(1.0)
        vel.append(math.inf)

    cameras = tuple(model.camera(i).name for i in range(model.ncam))
    return EmbodimentSpec(
        name="aloha",
        joint_names=tuple(names),
        position_lower=tuple(lower),
        position_upper=tuple(upper),
        position_source=f"joint ranges of {xml.name} (gym-aloha MJCF); grippers 0..1 by convention",
        velocity_limits=tuple(vel),
        velocity_source=VX300S_VELOCITY_SOURCE,
        gripper_indices=(6, 13),
        gripper_convention=(
            "normalized finger opening, 0 = closed, 1 = open (gym-aloha PUPPET_GRIPPER_POSITION_CLOSE/OPEN)"
        ),
        cameras=cameras,
        default_cameras=("top", "left_wrist", "right_wrist"),
        control_hz=int(round(1.0 / constants.DT)),
        model_xml=str(xml),
    )


KNOWN_ROBOTS = ("aloha",)


def robot_spec(name: str) -> EmbodimentSpec:
    """The spec of a known robot by name; raises a one-line error naming the known ones otherwise."""
    if name == "aloha":
        return aloha_spec()
    raise ValueError(
        f"Unknown robot '{name}'. Known robots: {', '.join(KNOWN_ROBOTS)}. "
        "Pass one of these, or add an EmbodimentSpec in r2s2r/robots/spec.py."
    )
