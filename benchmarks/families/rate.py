"""Family 7, `rate`: a resolved-rate controller, a 45-degree grasp from the right's own side, a level take.

How it acts. Each arm runs a state machine whose phases name a target pose for its tool centre point (TCP).
There is no setpoint trajectory and no IK solve: every step, for each arm, a private MuJoCo model is posed
at the reported joint angles, the TCP's 6x6 Jacobian is read there with `mujoco.mj_jac`, and a Cartesian
twist proportional to the measured pose error (`gain` per second on position and orientation, capped at
`speed` m/s times the phase's share and at `TURN` rad/s) is mapped to joint rates by a damped
pseudo-inverse (`DAMPING`); the rate vector is scaled down until every joint is within `QDOT_MAX`. The
joint command integrates those rates, command += DT * rates, kept within `TETHER` of the reported joints.
(A command re-anchored every step at the reported joints, reported + DT * rates, barely moves this arm:
its servos fight heavy joint friction, `frictionloss` 30-60, and a lead of one 20 ms period moves the
waist at 12 % and the shoulder at 20 % of the asked rate, and sags under gravity; the integrated command
is what a resolved-rate controller sends to position servos.) A phase ends once the measured TCP is within
its arrival tolerance of the target and the orientation within `ARRIVE_DEG`, after at least `MIN_STEPS`,
or on its timer (`MAX_STEPS` of the phase) whatever the error.

1. Right arm. It reads the cube pose and picks, of the cube's four side-face normals, the one nearest its
   own reach direction (from its base, at +x, toward the cube) as the heading of its approach: the
   gripper comes down at `PITCH_DEG` (45 degrees) below horizontal from the right's own side, its fingers
   closing across the two faces square to that heading. It lines up `STANDOFF` back along the approach,
   moves in until the TCP sits `RIGHT_DEPTH` short of the cube centre (the finger tips just clear the
   table), closes, lifts `LIFT` straight up and carries the cube, still flat and still held at 45 degrees,
   to a low hand-over point `HANDOVER` near the table centre (cube centre aimed 15 cm above the table;
   it hangs in the fingers to ~12 cm).
2. Left arm. Level (approach along +x) and rolled a quarter turn so its fingers close vertically, it
   lines up `LEFT_STANDOFF` short of the hand-over, then, once the right hand has arrived, reads where the
   cube is and slides in until its TCP is `LEFT_DEPTH` short of the cube centre, one pad on the cube's top
   face and one on its bottom face (the right fingers hold the side faces, the right palm sits up and
   back toward +x), and closes. `RELEASE_AFTER` steps after the left starts closing the right hand opens
   and backs off along its approach; the left then lifts the cube away toward its own side.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `RateKnobs`; defaults = nominal) are failures such a controller can have: a partial close of
the right gripper (commanded to a wider opening than the cube needs), a yaw error of the grasp (fingers
across the cube at an angle to its faces), a Cartesian gain so high that the servo lag makes it overshoot
and ring, a speed cap so low that the phases run out of time, a right hand that lets go before the left
has closed, a hand-over point off where the left expects it, a biased grasp point, and noise on the twist.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np
from scipy.spatial.transform import Rotation

from families.arm import Arm
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    RIGHT_BASE,
    BimanualPolicy,
    cube_yaw,
    episode_rng,
    gripper_rot,
    smooth_noise,
)

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
QDOT_MAX = np.array(
    [1.5, 1.5, 2.0, 3.0, 3.0, 3.0]
)  # rad/s cap of each joint's rate (the whole vector scales)
TETHER = (
    0.15  # rad: the joint command stays this close to the reported joints (a blocked arm winds up no more)
)
DAMPING = 0.02  # damping of the pseudo-inverse (m, and m per rad of orientation)
TURN = 2.5  # rad/s cap of the orientation part of the twist
PITCH_DEG = 45.0  # the right approach's pitch below horizontal
HANDOVER = np.array([0.0, 0.50, 0.15])  # cube centre at the hand-over (m, world): table centre, low
RIGHT_DEPTH = 0.003  # m the right TCP stops short of the cube centre along its approach (tips off the table)
LEFT_DEPTH = 0.010  # m the left TCP stops short of the cube centre along +x
STANDOFF = 0.08  # m back along the approach where the right hand lines up
LEFT_STANDOFF = 0.09  # m short of the hand-over (along -x) where the left hand lines up
LIFT = 0.08  # m the right hand lifts straight up before carrying
RETREAT = 0.08  # m the right hand backs off along its approach after letting go
GRIP_STEPS = 8  # steps over which a gripper command ramps closed or open
CLOSE_DWELL = 8  # steps a closed right hand waits before lifting
RELEASE_AFTER = 18  # steps after the left starts closing at which the right starts opening
ARRIVE, FINE_ARRIVE = 0.012, 0.005  # m: arrival tolerance of free moves and of moves onto the cube
ARRIVE_DEG = 4.0  # degrees of orientation error allowed at arrival
MIN_STEPS = 5  # a phase lasts at least this many steps
# Linear speed cap of each phase, as a fraction of the `speed` knob (free moves: the whole of it).
SPEED_SHARE = {"descend": 0.25, "insert": 0.25, "lift": 0.3, "carry": 0.6, "retreat": 0.4, "away": 0.4}
MAX_STEPS = {"reach": 70, "descend": 45, "lift": 35, "carry": 70, "hover": 80, "insert": 45}


@dataclass
class RateKnobs:
    """How the resolved-rate controller deviates from its nominal behaviour; defaults are the nominal one."""

    gain: float = 5.0  # 1/s, twist per unit pose error (m -> m/s, rad -> rad/s)
    speed: float = 0.5  # m/s cap of the linear twist
    close_to: float = GRIPPER_CLOSED  # right gripper command when closed (~0.6 only touches the 4 cm cube)
    grasp_yaw_deg: float = 0.0  # degrees the right heading is turned about the vertical off the face normal
    grasp_offset_x: float = (
        0.0  # m, bias of the right grasp point along world x (along the approach's heading)
    )
    grasp_offset_y: float = 0.0  # m, bias of the right grasp point along world y (the closing axis)
    release_after: int = (
        RELEASE_AFTER  # steps after the left starts closing that the right opens (< 0: before)
    )
    handover_dx: float = 0.0  # m the right presents the cube off HANDOVER along x (the left aims at HANDOVER)
    handover_dz: float = 0.0  # m the right presents the cube off HANDOVER along z
    twist_noise: float = 0.0  # m/s std of slowly varying noise on the linear twist (rad/s x 3 on the angular)
    noise_tau: float = 8.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if self.gain <= 0 or self.speed <= 0:
            raise ValueError(f"gain={self.gain} and speed={self.speed} must be > 0.")
        if not GRIPPER_CLOSED <= self.close_to <= GRIPPER_OPEN:
            raise ValueError(f"close_to={self.close_to} must be in [0, 1] (0 closed, 1 open).")
        if self.twist_noise < 0 or self.noise_tau <= 0:
            raise ValueError(
                f"twist_noise={self.twist_noise} must be >= 0 and noise_tau={self.noise_tau} > 0."
            )


class RateArm:
    """One arm's resolved-rate loop: Jacobian at the reported joints, twist toward a target, joint rates."""

    def __init__(self, arm: Arm, knobs: RateKnobs):
        self.arm, self.k = arm, knobs
        self._jacp = np.zeros((3, arm.model.nv))
        self._jacr = np.zeros((3, arm.model.nv))
        self.pos, self.rot = np.zeros(3), np.eye(3)  # measured TCP pose at the last step
        self.target, self.target_rot = np.zeros(3), np.eye(3)
        self.tolerance = ARRIVE
        self.grip = GRIPPER_OPEN
        self.phase, self.clock = "wait", 0
        self.q_cmd: np.ndarray | None = None  # the integrated joint command (None until the first step)

    def go(self, phase: str, pos: np.ndarray | None = None, rot: np.ndarray | None = None,
           tolerance: float = ARRIVE) -> None:  # fmt: skip
        """Enter `phase`; with a pose, make it the target (rotation: the nearer of the two finger signs)."""
        self.phase, self.clock, self.tolerance = phase, 0, tolerance
        if pos is not None:
            self.target = np.asarray(pos, dtype=float)
        if rot is not None:
            rot = np.array(rot, dtype=float)
            if rot[:, 1] @ self.rot[:, 1] < 0:  # the fingers are symmetric: turn the shorter way
                rot[:, 1:] *= -1
            self.target_rot = rot

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        """(6,6) TCP Jacobian (linear rows, then angular) at joints `q`; also updates the measured pose."""
        self.pos, self.rot = self.arm.fk(q)
        mujoco.mj_comPos(self.arm.model, self.arm.data)
        mujoco.mj_jac(self.arm.model, self.arm.data, self._jacp, self._jacr, self.pos, self.arm.body)
        return np.concatenate([self._jacp[:, self.arm.dof_idx], self._jacr[:, self.arm.dof_idx]])

    def step(self, q: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Joint command: last command + DT * damped-pinv(J) @ twist, J at the reported joints."""
        self.clock += 1
        J = self.jacobian(q)
        v = self.k.gain * (self.target - self.pos)
        speed = self.k.speed * SPEED_SHARE.get(self.phase, 1.0)
        v *= min(1.0, speed / max(float(np.linalg.norm(v)), 1e-9))
        w = self.k.gain * self.rot_error()
        w *= min(1.0, TURN / max(float(np.linalg.norm(w)), 1e-9))
        twist = np.concatenate([v, w]) + noise
        qdot = J.T @ np.linalg.solve(J @ J.T + DAMPING**2 * np.eye(6), twist)
        qdot *= min(1.0, float(np.min(QDOT_MAX / np.maximum(np.abs(qdot), 1e-9))))  # keeps the direction
        if self.q_cmd is None:
            self.q_cmd = np.array(q, dtype=float)
        self.q_cmd = np.clip(self.q_cmd + DT * qdot, q - TETHER, q + TETHER)
        return self.q_cmd.copy()

    def rot_error(self) -> np.ndarray:
        """Rotation vector (rad, world) that turns the measured gripper onto the target orientation."""
        return Rotation.from_matrix(self.target_rot @ self.rot.T).as_rotvec()

    @property
    def arrived(self) -> bool:
        """Within tolerance of the target after MIN_STEPS, or the phase's timer has run out."""
        if self.clock >= MAX_STEPS.get(self.phase, 10**9):
            return True
        near = np.linalg.norm(self.target - self.pos) < self.tolerance
        turned = np.degrees(np.linalg.norm(self.rot_error())) < ARRIVE_DEG
        return self.clock >= MIN_STEPS and near and turned


class RateEpisode:
    """One episode: the two arms' phase machines, each driving its resolved-rate loop."""

    def __init__(self, knobs: RateKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right, self.left = RateArm(right, knobs), RateArm(left, knobs)
        self.right.jacobian(state[7:13])
        self.left.jacobian(state[:6])
        self.right.target, self.right.target_rot = self.right.pos.copy(), self.right.rot.copy()
        self.left.target, self.left.target_rot = self.left.pos.copy(), self.left.rot.copy()
        self.grasp_rot = np.eye(3)
        self.hold = np.array([RIGHT_DEPTH, 0.0, 0.0])  # cube centre in the right gripper frame
        self.left_closed_at = -1  # the episode step at which the left hand started closing
        scale = np.array([1.0] * 3 + [3.0] * 3)
        self.noise = smooth_noise(episode_rng(knobs.seed, cube), EPISODE_STEPS, 12, knobs.twist_noise,
                                  knobs.noise_tau).reshape(EPISODE_STEPS, 2, 6) * scale  # fmt: skip
        pos, self.grasp_rot = self._grasp_pose(cube)
        self.right.go("reach", pos - STANDOFF * self.grasp_rot[:, 0], self.grasp_rot)

    def _grasp_pose(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Right TCP pose at the grasp: 45 degrees down, heading along the face normal nearest the reach."""
        reach = np.arctan2(cube[1] - RIGHT_BASE[1], cube[0] - RIGHT_BASE[0])
        yaw = cube_yaw(cube[3:7])
        heading = yaw + np.pi / 2 * np.round((reach - yaw) / (np.pi / 2))
        heading += np.radians(self.k.grasp_yaw_deg)
        rot = gripper_rot(heading, np.radians(PITCH_DEG), 0.0)
        centre = np.array([cube[0] + self.k.grasp_offset_x, cube[1] + self.k.grasp_offset_y, CUBE_HALF])
        return centre - RIGHT_DEPTH * rot[:, 0], rot

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        cube = batch["observation.environment_state"][b][:7].astype(float)
        state = batch["observation.state"][b].astype(float)
        noise = self.noise[min(t, EPISODE_STEPS - 1)]
        q_right = self.right.step(state[7:13], noise[1])
        q_left = self.left.step(state[:6], noise[0])
        self._right_step(t, cube)
        self._left_step(t, cube)
        return np.concatenate([q_left, [self.left.grip], q_right, [self.right.grip]])

    def _right_step(self, t: int, cube: np.ndarray) -> None:
        k, h = self.k, self.right
        if h.phase == "reach" and h.arrived:
            pos, self.grasp_rot = self._grasp_pose(cube)  # re-read: the cube has landed by now
            h.go("descend", pos, self.grasp_rot, FINE_ARRIVE)
        elif h.phase == "descend" and h.arrived:
            h.go("close")
        elif h.phase == "close":
            s = min(1.0, h.clock / GRIP_STEPS)
            h.grip = GRIPPER_OPEN + (k.close_to - GRIPPER_OPEN) * s
            if h.clock >= GRIP_STEPS + CLOSE_DWELL:
                h.go("lift", h.pos + [0.0, 0.0, LIFT])
        elif h.phase == "lift" and h.arrived:
            hold = h.rot.T @ (cube[:3] - h.pos)  # where the cube sits in the hand
            self.hold = hold if np.linalg.norm(hold - self.hold) < 0.03 else self.hold
            present = HANDOVER + [k.handover_dx, 0.0, k.handover_dz]
            h.go("carry", present - h.target_rot @ self.hold)
        elif h.phase == "carry" and h.arrived:
            h.go("present")
        elif h.phase == "present":
            opens = self.left_closed_at >= 0 and t >= self.left_closed_at + k.release_after
            early = k.release_after < 0 and self.left.phase == "insert" and h.clock > 5
            if opens or early:
                h.go("release")
        elif h.phase == "release":
            h.grip = min(GRIPPER_OPEN, h.grip + (GRIPPER_OPEN - GRIPPER_CLOSED) / GRIP_STEPS)
            if h.clock >= GRIP_STEPS:
                h.go("retreat", h.pos - RETREAT * h.rot[:, 0])

    def _left_step(self, t: int, cube: np.ndarray) -> None:
        h = self.left
        if h.phase == "wait" and self.right.phase == "carry":
            h.go("hover", HANDOVER - [LEFT_DEPTH + LEFT_STANDOFF, 0.0, 0.0], gripper_rot(0.0, 0.0, np.pi / 2))
        elif h.phase == "hover" and h.arrived and self.right.phase in ("present", "release", "retreat"):
            # The left aims at where it expects the cube (HANDOVER), refined by the cube pose it reads now.
            h.go("insert", cube[:3] - [LEFT_DEPTH, 0.0, 0.0], tolerance=FINE_ARRIVE)
        elif h.phase == "insert" and h.arrived:
            self.left_closed_at = t
            h.go("close")
        elif h.phase == "close":
            h.grip = max(GRIPPER_CLOSED, GRIPPER_OPEN - h.clock / GRIP_STEPS)
            if self.right.phase == "retreat" and self.right.clock > 8:
                h.go("away", h.pos + [-0.06, 0.0, 0.06])


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.rate:make_policy` with `RateKnobs` fields as kwargs."""
    return BimanualPolicy(RateKnobs(**kwargs), RateEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "yaw_error": {"grasp_yaw_deg": 40.0},
    "handover_high": {"handover_dz": 0.045},
    "overshoot": {"gain": 40.0},
    "twist_noise": {"twist_noise": 0.06},
    "grasp_bias": {"grasp_offset_y": 0.012},
    "grasp_bias_far": {"grasp_offset_y": 0.016},
    "partial_close": {"close_to": 0.55},
    "early_release": {"release_after": -1},
    "slow": {"speed": 0.15},
}
"""Named settings of `rate`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families rate --episodes 50 --detector-poses 0`, 50 ID + 50 OOD
episodes each, seed 0; also in measured.json):

| setting        | what goes wrong                                                          | ID    | OOD   |
|----------------|--------------------------------------------------------------------------|-------|-------|
| yaw_error      | fingers turned 40 degrees off the faces (measured on the recorded joints) | 50/50 | 50/50 |
|                | yet the grasp holds: this controller shrugs it off                       |       |       |
| nominal        | nothing (its 5 ID misses never lift the cube; cause not yet diagnosed)    | 45/50 | 50/50 |
| handover_high  | the cube presented 4.5 cm above where the left expects it; the left       | 45/50 | 50/50 |
|                | re-reads the cube pose before it slides in                               |       |       |
| overshoot      | Cartesian gain 40/s: the servo lag makes the arm overshoot and ring      | 41/50 | 31/50 |
| grasp_bias     | right grasp point 12 mm off along the closing axis (world y)             | 27/50 | 30/50 |
| twist_noise    | slowly varying noise on the twist, std 0.06 m/s (0.18 rad/s)             | 28/50 | 26/50 |
| grasp_bias_far | the same bias, 16 mm                                                     | 21/50 | 26/50 |
| partial_close  | right gripper closed only to 0.55 (0.6 touches the cube): a weak squeeze | 10/50 | 13/50 |
| early_release  | the right hand opens while the left is still sliding in: the cube falls  | 0/50  | 0/50  |
| slow           | speed cap 0.15 m/s: the phases time out, the left never gets the cube    | 0/50  | 0/50  |
"""
