"""Family 5, `relay`: velocity-limited Cartesian moves, a grasp from the far side, a take on top and bottom.

How it acts. Each arm runs a state machine whose phases are straight Cartesian moves of the tool centre
point (TCP) with a trapezoidal speed profile (a phase speed and acceleration; the orientation turns with
the same progress). A move is planned when its phase starts, from the cube pose read then from
`observation.environment_state`, and played by a few damped least-squares IK iterations per step (`arm.py`)
warm-started from the last ones (each joint target moves at most `JOINT_STEP` per step). The phase ends
when the profile has run out and the measured TCP (forward kinematics of the reported joint angles) is
within `ARRIVE` of the goal, or `SETTLE` steps later at most.

1. Right arm. It swings over the cube to its far (-x) side and comes down on it tilted back toward its own
   base by `BACK_TILT` (the approach points down and toward +x), fingers closing across the cube's y
   faces, and holds its upper part. It closes, lifts straight up, and carries the cube, still hanging
   under the tilted fingers, to a low hand-over point `HANDOVER` on its own side of the table.
2. Left arm. It waits level beside the hand-over, gripper horizontal along +x and rolled a quarter turn,
   so that its fingers close vertically. Once the right hand holds still, it reads where the cube is and
   slides in from -x, one finger over the cube's top face and one under its bottom face, between the right
   fingers, and pinches; a fixed number of steps after its planned arrival the right hand opens and backs
   off up along its approach, and the left pulls the cube away.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `RelayKnobs`; defaults = nominal) are failures of such a controller: a yaw error of the grasp,
a grasp point off along the approach, a squeeze too weak to hold, a lift too fast and jerky for the grip, a
hand-over too high or too low, a left take point off in height or too shallow, a right hand that lets go
before the left holds, and servo noise on the joints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from families.arm import Arm
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    BimanualPolicy,
    cube_yaw,
    episode_rng,
    gripper_rot,
    smooth_noise,
    wrap_half_pi,
)

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
BACK_TILT = np.radians(15.0)  # the right approach leans this far past vertical, back toward the right arm
HANDOVER_XY = np.array([0.10, 0.50])  # where the cube centre is handed over (m, world), right of centre
RIGHT_DEPTH = 0.025  # m from the right TCP to the cube centre along the approach: the tips just past it
LEFT_DEPTH = 0.024  # m from the left TCP to the cube centre along +x: the left tips just past the centre
STANDOFF = 0.06  # m back along the approach where each hand lines up before moving in
LIFT = 0.08  # m the right hand lifts straight up before carrying
RETREAT = 0.08  # m the right hand backs off along its approach after letting go
GRIP_STEPS = 10  # steps over which a gripper closes or opens
CLOSE_DWELL = 10  # steps the right hand waits, closed, before lifting
RELEASE_AFTER = 25  # steps after the left hand's planned arrival at which the right hand opens
SPEED, ACCEL = 0.40, 1.5  # m/s and m/s^2 of the free moves
FINE_SPEED, FINE_ACCEL = 0.10, 0.5  # ... and of the moves onto the cube
JOINT_STEP = 0.15  # rad, the most a joint target moves in one step: no jump to another IK branch
HOLD_SLIP = 0.05  # m: a cube farther than this from the right TCP after the lift is not in the hand
ARRIVE = 0.006  # m: a move ends when the measured TCP is this close to its goal ...
SETTLE = 40  # ... or this many steps after its profile has run out


@dataclass
class RelayKnobs:
    """How the relay controller deviates from its nominal behaviour; the defaults are the nominal one."""

    grasp_yaw_error_deg: float = 0.0  # degrees the right gripper is turned about the vertical at the grasp
    grasp_offset_approach: float = 0.0  # m the right grasp point lies deeper along the approach (< 0: short)
    squeeze: float = GRIPPER_CLOSED  # right gripper command when closed (~0.6 only touches the 4 cm cube)
    lift_speed: float = 0.15  # m/s, top speed of the right hand's lift
    lift_accel: float = 0.6  # m/s^2 of the lift: a large value jerks the cube in the fingers
    handover_height: float = 0.17  # m, height of the cube centre at the hand-over
    left_offset_z: float = 0.0  # m added to the left take point along world z (+ = higher)
    left_shallow: float = 0.0  # m the left hand stops short of its take point along its approach
    release_lead: int = 0  # steps the right hand opens earlier than nominal (< 0: later)
    joint_noise: float = 0.0  # rad, std of noise on every arm joint target
    noise_tau: float = 10.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if not 0.0 <= self.squeeze <= 1.0:
            raise ValueError(f"squeeze={self.squeeze} must be a gripper command in [0, 1] (0 = closed).")
        if self.lift_speed <= 0 or self.lift_accel <= 0:
            raise ValueError(f"lift_speed={self.lift_speed} and lift_accel={self.lift_accel} must be > 0.")
        if not 0.06 <= self.handover_height <= 0.40:
            raise ValueError(f"handover_height={self.handover_height} must be in [0.06, 0.40] m.")
        if self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError(
                f"joint_noise={self.joint_noise} must be >= 0 and noise_tau={self.noise_tau} > 0."
            )


class Move:
    """A straight Cartesian TCP move with a trapezoidal speed profile; the orientation slerps alongside."""

    def __init__(
        self,
        pos0: np.ndarray,
        rot0: np.ndarray,
        pos1: np.ndarray,
        rot1: np.ndarray,
        speed: float,
        accel: float,
    ):
        self.pos0, self.pos1, self.rot1 = np.asarray(pos0, float), np.asarray(pos1, float), rot1
        self.length = float(np.linalg.norm(self.pos1 - self.pos0))
        self.speed, self.accel = speed, accel
        # A triangle profile when the move is too short to reach top speed.
        self.ramp = min(speed / accel, np.sqrt(self.length / accel))
        top = accel * self.ramp
        self.duration = 2 * self.ramp + (self.length - accel * self.ramp**2) / max(top, 1e-9)
        self.turn = Slerp([0.0, 1.0], Rotation.from_matrix(np.stack([rot0, rot1])))
        self.steps = max(1, int(np.ceil(self.duration / DT)))

    def progress(self, t: float) -> float:
        """Fraction of the length covered at time `t` (s) after the start."""
        if self.length < 1e-9:
            return 1.0
        t = min(max(t, 0.0), self.duration)
        a, r, T = self.accel, self.ramp, self.duration
        if t < r:
            d = 0.5 * a * t * t
        elif t < T - r:
            d = 0.5 * a * r * r + a * r * (t - r)
        else:
            d = self.length - 0.5 * a * (T - t) ** 2
        return d / self.length

    def at(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Commanded TCP position (3,) and orientation (3,3) `step` control steps after the start."""
        s = self.progress(step * DT)
        return (1 - s) * self.pos0 + s * self.pos1, self.turn(s).as_matrix()


class Hand:
    """One arm: its joint targets, gripper command, current move and phase, stepped once per observation."""

    def __init__(self, arm: Arm, q: np.ndarray):
        self.arm, self.q = arm, np.asarray(q, dtype=float)
        self.pos, self.rot = arm.fk(self.q)
        self.grip = GRIPPER_OPEN
        self.phase, self.clock = "wait", 0
        self.move: Move | None = None
        self.measured = self.pos.copy()

    def start(
        self,
        phase: str,
        pos: np.ndarray | None = None,
        rot: np.ndarray | None = None,
        speed: float = SPEED,
        accel: float = ACCEL,
    ) -> None:
        """Enter `phase`; with a goal pose, plan a move there from the commanded pose."""
        self.phase, self.clock = phase, 0
        self.move = None if pos is None else Move(self.pos, self.rot, pos, rot, speed, accel)

    def step(self, q_measured: np.ndarray) -> None:
        """Advance the clock and the move; solve IK for the commanded pose."""
        self.clock += 1
        self.measured, _ = self.arm.fk(np.asarray(q_measured, dtype=float))
        if self.move is not None:
            self.pos, self.rot = self.move.at(self.clock)
            q, _ = self.arm.ik(self.pos, self.rot, self.q, iters=10)
            self.q = self.q + np.clip(q - self.q, -JOINT_STEP, JOINT_STEP)

    @property
    def arrived(self) -> bool:
        """The move has run its profile and the measured TCP is at its goal (or has had SETTLE steps)."""
        if self.move is None or self.clock < self.move.steps:
            return False
        near = np.linalg.norm(self.measured - self.move.pos1) < ARRIVE
        return near or self.clock >= self.move.steps + SETTLE


class RelayEpisode:
    """One episode: the two arms' state machines, stepped on every observation."""

    def __init__(self, knobs: RelayKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right = Hand(right, state[7:13])
        self.left = Hand(left, state[:6])
        self.handover = np.array([*HANDOVER_XY, knobs.handover_height])
        # The left hand is level along +x, rolled a quarter turn: its fingers close along world z.
        self.left_rot = gripper_rot(0.0, 0.0, np.pi / 2)
        # Right-hand clock (in "present") at which it opens; set when the left hand moves in.
        self.release_step = -1
        self.noise = smooth_noise(episode_rng(knobs.seed, cube), EPISODE_STEPS, 12, knobs.joint_noise,
                                  knobs.noise_tau)  # fmt: skip
        pos, rot = self._grasp_pose(cube)
        self.right.start("approach", pos - STANDOFF * rot[:, 0], rot)

    def _grasp_pose(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Right TCP pose at the grasp: tilted back past vertical, fingers across the cube's y faces."""
        # Heading pi with pitch pi/2 + BACK_TILT: the approach points down and toward +x. The heading turns
        # with the cube (modulo a quarter turn) so that the fingers stay square to a pair of faces.
        heading = np.pi + wrap_half_pi(cube_yaw(cube[3:7])) + np.radians(self.k.grasp_yaw_error_deg)
        rot = gripper_rot(heading, np.pi / 2 + BACK_TILT, 0.0)
        centre = np.array([cube[0], cube[1], CUBE_HALF])  # resting on the table, whatever z reads at t=0
        return centre - (RIGHT_DEPTH - self.k.grasp_offset_approach) * rot[:, 0], rot

    def _take_pose(self, cube: np.ndarray) -> np.ndarray:
        """Left TCP position on the cube as it is now: level, on its -x side."""
        return cube[:3] + [-LEFT_DEPTH - self.k.left_shallow, 0.0, self.k.left_offset_z]

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        cube = batch["observation.environment_state"][b][:7].astype(float)
        state = batch["observation.state"][b]
        self.right.step(state[7:13])
        self.left.step(state[:6])
        self._right_step(cube)
        self._left_step(cube)
        noise = self.noise[min(t, len(self.noise) - 1)]
        return np.concatenate([
            self.left.q + noise[:6], [self.left.grip], self.right.q + noise[6:], [self.right.grip],
        ])  # fmt: skip

    def _right_step(self, cube: np.ndarray) -> None:
        k, h = self.k, self.right
        if h.phase == "approach" and h.arrived:
            pos, rot = self._grasp_pose(cube)  # re-read: the cube has landed by now
            h.start("descend", pos, rot, FINE_SPEED, FINE_ACCEL)
        elif h.phase == "descend" and h.arrived:
            h.start("close")
        elif h.phase == "close":
            h.grip = GRIPPER_OPEN + (k.squeeze - GRIPPER_OPEN) * min(1.0, h.clock / GRIP_STEPS)
            if h.clock >= GRIP_STEPS + CLOSE_DWELL:
                h.start("lift", h.pos + [0.0, 0.0, LIFT], h.rot, k.lift_speed, k.lift_accel)
        elif h.phase == "lift" and h.arrived:
            # The carry aims where the cube sits in the hand now (it may have slipped); a cube that fell
            # out of the hand is not followed: the carry then aims the nominal grip.
            hold = h.rot.T @ (cube[:3] - h.measured)
            if np.linalg.norm(hold) > HOLD_SLIP:
                hold = np.array([RIGHT_DEPTH, 0.0, 0.0])
            h.start("carry", self.handover - h.rot @ hold, h.rot)
        elif h.phase == "carry" and h.arrived:
            h.start("present")
        elif h.phase == "present" and 0 <= self.release_step <= h.clock:
            h.start("release")
        elif h.phase == "release":
            h.grip = min(GRIPPER_OPEN, h.grip + (GRIPPER_OPEN - k.squeeze) / GRIP_STEPS)
            if h.clock >= GRIP_STEPS:
                h.start("retreat", h.pos - RETREAT * h.rot[:, 0], h.rot)

    def _left_step(self, cube: np.ndarray) -> None:
        h = self.left
        if h.phase == "wait" and self.right.phase == "carry":
            pos = self.handover + [-LEFT_DEPTH - STANDOFF, 0.0, 0.0]
            h.start("approach", pos, self.left_rot)
        elif h.phase == "approach" and h.arrived and self.right.phase == "present":
            h.start("insert", self._take_pose(cube), self.left_rot, FINE_SPEED, FINE_ACCEL)
            # The right hand opens a fixed time after the left hand's planned arrival.
            self.release_step = self.right.clock + h.move.steps + RELEASE_AFTER - self.k.release_lead
        elif h.phase == "insert" and h.arrived:
            h.start("close")
        elif h.phase == "close":
            h.grip = max(GRIPPER_CLOSED, GRIPPER_OPEN - h.clock / GRIP_STEPS)
            if self.right.phase == "retreat" and self.right.clock > 10:
                h.start("away", h.pos + [-0.06, 0.0, 0.03], h.rot)


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.relay:make_policy` with `RelayKnobs` fields as kwargs."""
    return BimanualPolicy(RelayKnobs(**kwargs), RelayEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "jerky_lift": {"lift_speed": 1.5, "lift_accel": 40.0},
    "handover_high": {"handover_height": 0.33},
    "servo_noise": {"joint_noise": 0.02},
    "weak_squeeze_jerky": {"squeeze": 0.55, "lift_speed": 1.0, "lift_accel": 20.0},
    "servo_noise_heavy": {"joint_noise": 0.04},
    "left_high": {"left_offset_z": 0.0235},
    "weak_squeeze": {"squeeze": 0.57},
    "early_release": {"release_lead": 60},
}
"""Named settings of `relay`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families relay --episodes 50 --detector-poses 0`, 50 ID + 50 OOD
episodes each, seed 0; also in measured.json):

| setting            | what goes wrong                                                 | ID    | OOD   |
|--------------------|-----------------------------------------------------------------|-------|-------|
| nominal            | nothing                                                         | 50/50 | 50/50 |
| jerky_lift         | lift at 1.5 m/s with 40 m/s^2: the cube is jerked in the grip   | 50/50 | 50/50 |
| handover_high      | hand-over 16 cm higher, at the tilted wrist's limit             | 46/50 | 31/50 |
| servo_noise        | slowly varying joint noise, std 0.02 rad                        | 40/50 | 39/50 |
| weak_squeeze_jerky | squeeze only to 0.55 and lift at 1 m/s with 20 m/s^2            | 45/50 | 17/50 |
| servo_noise_heavy  | the same noise, std 0.04 rad                                    | 22/50 | 22/50 |
| left_high          | the left take point 2.35 cm too high: its lower finger runs     | 14/50 | 25/50 |
|                    | into the cube's side instead of sliding under it                |       |       |
| weak_squeeze       | the right squeezes only to 0.57 (0.6 barely touches the cube)   | 9/50  | 0/50  |
| early_release      | the right opens 60 steps early, while the left is still moving  | 0/50  | 0/50  |
"""
