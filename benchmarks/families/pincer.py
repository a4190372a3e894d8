"""Family 4, `pincer`: a Cartesian servo with a low side grasp, a wrist roll and a take from above.

How it acts. Nothing is planned ahead: each arm runs a small state machine whose phases set a target pose
for its tool centre point (TCP), and a proportional servo moves the commanded pose a fraction `servo_gain`
of the remaining error toward that target every step, capped at a phase speed (m/s) and turn rate (rad/s).
The commanded pose is turned into joint targets by a few damped least-squares IK iterations (`arm.py`)
warm-started from the last ones (each joint target moves at most `JOINT_STEP` per step). So the hand moves
at constant speed while far and slows exponentially when near, and every phase ends when its target is
reached, not at a fixed time. Near a grasp the servo aims past the target by the measured sag (commanded
minus measured TCP, from the reported joint angles), so the real fingers, not the commanded ones, arrive.

1. Right arm. It comes at the cube's +x face nearly horizontally (pitch 18 degrees, steeper only where the
   arm cannot reach that low, near its base), heading between its reach direction and the face normal,
   fingers closing on the cube's y faces and holding its outer part. While it comes in, it re-reads the
   cube pose from `observation.environment_state` every step and servos to where the cube is now. It
   closes, then lifts while rolling the wrist a quarter turn about the approach axis: the fingers end up
   above and below the cube.
2. The right hand carries the cube high and to the left (cube centre at `HANDOVER`, higher and nearer the
   left arm than either other family's hand-over), turning level on the way, pointing along -x.
3. Left arm. It comes top-down over the cube, reading the cube's pose every step and lining its fingers
   up with the cube face pair nearest the world y axis, descends on the cube's far (-x) part beside the
   right fingers, and closes; then the right hand opens and backs off along its approach, and the left
   lifts the cube away.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `PincerKnobs`; defaults = nominal) are failures of such a servo controller: a grasp point off
along the face normal, sideways or in height, a wrist roll error at the grasp, fingers that close too
slowly for the lift, a carry so fast it shakes the cube loose, a release before the left hand holds it,
a left hand that misses the cube or pinches it too shallow, a servo gain too low to arrive in time, and
per-step joint noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    rotvec_matrix,
    smooth_noise,
)

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
HANDOVER = np.array([-0.08, 0.50, 0.30])  # where the right hand presents the cube centre (m, world)
RIGHT_DEPTH = 0.036  # m from the right TCP back to the cube centre along the approach: an outer grip
LEFT_SETBACK = 0.026  # m the left TCP sits from the cube centre toward the left (away from the right hand)
STANDOFF = 0.05  # m back along the approach where the right hand lines up before moving in
HOVER = 0.09  # m above its grasp point where the left hand lines up before descending
LIFT = 0.10  # m the cube is lifted (while the wrist rolls) before the carry
# Grasp pitches tried in turn (degrees below horizontal): the lowest the arm reaches is used.
PITCHES_DEG = (18.0, 22.0, 26.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0)
CLOSE_DWELL = 14  # steps the right hand waits after it starts closing before it lifts
LEFT_DWELL = 14  # steps the left hand waits after it starts closing before the right lets go
FACE_PULL = 0.4  # how far the right approach turns from the reach direction to the face normal
MAX_TURN = np.radians(8.0)  # ... but at most this far (rad): beyond, the forearm roll sags
LIMIT_MARGIN = 0.08  # rad a planned grasp keeps every joint from its limits
IK_TOLERANCE = 0.012  # m (+ 0.3 m/rad): the IK's soft forearm-roll term leaves a few mm
SAG_FILTER = 0.1  # per step, low-pass of the measured sag
SAG_MAX = 0.02  # m, the most the fine servo corrects
JOINT_STEP = 0.06  # rad, the most a joint target moves in one step (3 rad/s)
ARRIVE = 0.003  # m: a phase's target counts as reached within this distance ...
ARRIVE_ANGLE = 0.05  # ... and this angle (rad)


@dataclass
class PincerKnobs:
    """How the servo controller deviates from its nominal behaviour; the defaults are the nominal one."""

    grasp_offset_normal: float = 0.0  # m the right grasp point lies deeper along the approach (< 0: short)
    grasp_offset_side: float = 0.0  # m the right grasp point is off along the finger closing axis
    grasp_offset_height: float = 0.0  # m the right grasp point is off along world z (+ = higher)
    roll_error_deg: float = 0.0  # degrees of wrist roll error at the grasp: fingers tilted on the faces
    grip_ramp: int = 8  # steps the right fingers take to close; > CLOSE_DWELL: the lift starts half-open
    close_to: float = GRIPPER_CLOSED  # right gripper command when closed (~0.6 only touches the cube)
    carry_speed: float = 0.35  # m/s, speed cap of the carry (JOINT_STEP caps it too: ~3 m/s is loose)
    carry_gain: float = 0.0  # servo gain of the carry (fraction per step); 0 = servo_gain
    early_release: float = 0.0  # m: > 0, the right opens once the left is this close to its grasp point
    left_offset_x: float = 0.0  # m added to the left hand's grasp point along world x
    left_offset_y: float = 0.0  # m added along world y
    left_shallow: float = 0.0  # m the left hand stops above its grasp depth (a shallow pinch)
    servo_gain: float = 0.12  # fraction of the remaining error the commanded pose moves per step
    speed: float = 0.30  # m/s, speed cap of the free moves (reach, hover, retreat)
    joint_noise: float = 0.0  # rad, std of per-step noise on every arm joint target
    noise_tau: float = 2.0  # steps, correlation time of that noise (~white)
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if not 0.0 < self.servo_gain <= 1.0 or not 0.0 <= self.carry_gain <= 1.0:
            raise ValueError(
                f"servo_gain={self.servo_gain} must be in (0, 1] and carry_gain={self.carry_gain} in [0, 1]."
            )
        if self.speed <= 0 or self.carry_speed <= 0:
            raise ValueError(f"speed={self.speed} and carry_speed={self.carry_speed} must be > 0 (m/s).")
        if self.grip_ramp < 1:
            raise ValueError(f"grip_ramp={self.grip_ramp} must be >= 1 step.")
        if not 0.0 <= self.close_to <= 1.0:
            raise ValueError(f"close_to={self.close_to} must be a gripper command in [0, 1] (0 = closed).")
        if self.early_release < 0 or self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError(
                f"early_release={self.early_release} and joint_noise={self.joint_noise} must be >= 0, "
                f"noise_tau={self.noise_tau} > 0."
            )


def _rotvec(R: np.ndarray) -> np.ndarray:
    """Rotation vector (axis * angle) of the rotation matrix R."""
    cos = np.clip((np.trace(R) - 1) / 2, -1.0, 1.0)
    angle = np.arccos(cos)
    v = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    if angle < 1e-9:
        return 0.5 * v
    if np.pi - angle < 1e-4:  # near a half turn: the axis from the symmetric part
        axis = np.sqrt(np.clip((np.diag(R) + 1) / 2, 0.0, None))
        axis *= np.sign(v + (v == 0))
        return angle * axis / np.linalg.norm(axis)
    return angle * v / (2 * np.sin(angle))


def _quat_matrix(quat_wxyz: np.ndarray) -> np.ndarray:
    w, x, y, z = np.asarray(quat_wxyz, dtype=float) / np.linalg.norm(quat_wxyz)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


class Servo:
    """One arm's commanded TCP pose, moved toward a target by a capped proportional law, played by IK."""

    def __init__(self, arm: Arm, q: np.ndarray, gain: float):
        self.arm, self.q, self.gain = arm, np.asarray(q, dtype=float), gain
        self.pos, self.rot = arm.fk(self.q)
        self.sag = np.zeros(3)  # low-passed commanded minus measured TCP position (servo sag and lag)

    def measure(self, q_measured: np.ndarray) -> None:
        """Update the sag estimate from the joint angles the arm reports."""
        measured, _ = self.arm.fk(np.asarray(q_measured, dtype=float))
        self.sag += SAG_FILTER * (self.pos - measured - self.sag)

    def step(
        self,
        pos: np.ndarray,
        rot: np.ndarray,
        speed: float,
        turn: float,
        gain: float = 0.0,
        fine: bool = False,
    ) -> None:
        """Move the commanded pose toward (pos, rot): `gain` of the error, at most speed*DT and turn*DT.

        `fine`: aim past the target by the measured sag (at most SAG_MAX), so the real TCP lands on it.
        """
        k = gain or self.gain
        pos = self.aim(pos, fine)
        dp = k * (pos - self.pos)
        n = np.linalg.norm(dp)
        if n > speed * DT:
            dp *= speed * DT / n
        dr = k * _rotvec(rot @ self.rot.T)
        n = np.linalg.norm(dr)
        if n > turn * DT:
            dr *= turn * DT / n
        self.pos = self.pos + dp
        self.rot = rotvec_matrix(dr) @ self.rot
        q, _ = self.arm.ik(self.pos, self.rot, self.q, iters=10)
        self.q = self.q + np.clip(q - self.q, -JOINT_STEP, JOINT_STEP)  # no jump to another IK branch

    def aim(self, pos: np.ndarray, fine: bool) -> np.ndarray:
        """Where the commanded TCP must go for the real one to reach `pos` (`fine`: sag corrected)."""
        if not fine:
            return pos
        n = np.linalg.norm(self.sag)
        return pos + self.sag * min(1.0, SAG_MAX / max(n, 1e-9))

    def error(self, pos: np.ndarray, rot: np.ndarray) -> tuple[float, float]:
        """Distance (m) and angle (rad) from the commanded pose to (pos, rot)."""
        return float(np.linalg.norm(pos - self.pos)), float(np.linalg.norm(_rotvec(rot @ self.rot.T)))

    def at(self, pos: np.ndarray, rot: np.ndarray, tol: float = ARRIVE, fine: bool = False) -> bool:
        d, a = self.error(self.aim(pos, fine), rot)
        return d < tol and a < ARRIVE_ANGLE


class PincerEpisode:
    """One episode: the two arms' state machines, stepped on every observation."""

    def __init__(self, knobs: PincerKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right = Servo(right, state[7:13], knobs.servo_gain)
        self.left = Servo(left, state[:6], knobs.servo_gain)
        self.right_phase, self.left_phase = "reach", "wait"
        self.right_grip, self.left_grip = GRIPPER_OPEN, GRIPPER_OPEN
        self.right_clock = self.left_clock = 0  # steps spent in the current phase

        # The lowest pitch at which the arm reaches both the stand-off and the grasp with its joints clear
        # of their limits (the cubes nearest its base need a steeper approach).
        self.pitch = np.radians(PITCHES_DEG[-1])
        home_pos, home_rot = self.right.pos, self.right.rot
        for deg in PITCHES_DEG:
            pos, rot = self._grasp_pose(cube, np.radians(deg))
            q, err = self.right.q, 0.0
            path = [(1 - s) * home_pos + s * (pos - STANDOFF * rot[:, 0]) for s in np.linspace(0.2, 1, 5)]
            for s, p in zip(np.linspace(0.2, 1, 5), path, strict=True):  # continuation along the reach
                q, err_off = right.ik(p, rotvec_matrix(s * _rotvec(rot @ home_rot.T)) @ home_rot, q, iters=40)
            q_off = q
            q, err = right.ik(pos, rot, q_off, iters=100)
            clear = all(
                np.all(qq - right.lower > LIMIT_MARGIN) and np.all(right.upper - qq > LIMIT_MARGIN)
                for qq in (q_off, q)
            )
            if max(err, err_off) < IK_TOLERANCE and clear:
                self.pitch = np.radians(deg)
                break
        # At the hand-over the right gripper points level along -x, rolled a quarter turn: fingers above and
        # below the cube. The roll happens during the lift, about the approach axis (the wrist-rotate joint).
        self.present_rot = gripper_rot(np.pi, 0.0, np.pi / 2)
        self.hold = np.array([RIGHT_DEPTH, 0.0, 0.0])  # cube centre in the right TCP frame (until lifted)
        self.noise = smooth_noise(episode_rng(knobs.seed, cube), EPISODE_STEPS, 12, knobs.joint_noise,
                                  knobs.noise_tau)  # fmt: skip
        self.t = 0

    # ------------------------------------------------------------ targets
    def _grasp_pose(self, cube: np.ndarray, pitch: float, with_errors: bool = False):
        """Right TCP pose at the grasp of the cube at `cube` (7,): along the +x face normal, pitched down."""
        # Between the arm's reach direction (a wrist that needs no forearm roll) and the cube's +x face
        # normal (fingers square to the faces): FACE_PULL of the way toward the face normal.
        reach = float(np.arctan2(cube[1] - RIGHT_BASE[1], cube[0] - RIGHT_BASE[0]))
        face = reach + (np.pi + cube_yaw(cube[3:7]) - reach + np.pi / 4) % (np.pi / 2) - np.pi / 4
        heading = reach + np.clip(FACE_PULL * (face - reach), -MAX_TURN, MAX_TURN)
        roll = np.radians(self.k.roll_error_deg) if with_errors else 0.0
        rot = gripper_rot(heading, pitch, roll)
        centre = np.array([cube[0], cube[1], CUBE_HALF])
        pos = centre - RIGHT_DEPTH * rot[:, 0]
        if with_errors:
            pos = pos + self.k.grasp_offset_normal * rot[:, 0] + self.k.grasp_offset_side * rot[:, 1]
            pos = pos + [0.0, 0.0, self.k.grasp_offset_height]
        return pos, rot

    def _left_grasp(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Left TCP pose on the cube as it is now: top-down, closing across the face pair nearest world y."""
        R = _quat_matrix(cube[3:7])
        across = R[:, int(np.argmax(np.abs(R[1, :])))]  # cube axis nearest world y
        across = np.array([across[0], across[1], 0.0])
        across /= np.linalg.norm(across)
        along = np.array([across[1], -across[0], 0.0])  # horizontal, perpendicular: toward +x or -x
        if along[0] > 0:
            along = -along
        rot = np.stack([[0.0, 0.0, -1.0], across, np.cross([0.0, 0.0, -1.0], across)], axis=1)
        pos = (
            cube[:3]
            + LEFT_SETBACK * along
            + [self.k.left_offset_x, self.k.left_offset_y, self.k.left_shallow]
        )
        return pos, rot

    # ------------------------------------------------------------ one step
    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        cube = batch["observation.environment_state"][b][:7].astype(float)
        state = batch["observation.state"][b]
        self.left.measure(state[:6])
        self.right.measure(state[7:13])
        self._right_step(cube)
        self._left_step(cube)
        noise = self.noise[min(t, len(self.noise) - 1)]
        return np.concatenate([
            self.left.q + noise[:6], [self.left_grip], self.right.q + noise[6:], [self.right_grip],
        ])  # fmt: skip

    def _right_phase(self, name: str) -> None:
        self.right_phase, self.right_clock = name, 0

    def _left_phase(self, name: str) -> None:
        self.left_phase, self.left_clock = name, 0

    def _right_step(self, cube: np.ndarray) -> None:
        k, s, phase = self.k, self.right, self.right_phase
        self.right_clock += 1
        if phase in ("reach", "insert"):  # servo on the cube as it is now
            pos, rot = self._grasp_pose(cube, self.pitch, with_errors=True)
            if phase == "reach":
                pos = pos - STANDOFF * rot[:, 0]
                s.step(pos, rot, k.speed, 2.0)
                if s.at(pos, rot, tol=0.006):
                    self._right_phase("insert")
            else:
                s.step(pos, rot, 0.12, 1.0, fine=True)
                if s.at(pos, rot, fine=True) or self.right_clock > 60:
                    self.grasp_pos, self.grasp_rot = s.pos.copy(), s.rot.copy()
                    self._right_phase("close")
        elif phase == "close":
            self.right_grip = GRIPPER_OPEN + (k.close_to - GRIPPER_OPEN) * min(
                1.0, self.right_clock / k.grip_ramp
            )
            s.step(self.grasp_pos, self.grasp_rot, 0.1, 1.0)
            if self.right_clock >= CLOSE_DWELL:
                self._right_phase("lift")
        elif phase == "lift":  # up, rolling the wrist on the way
            self.right_grip = GRIPPER_OPEN + (k.close_to - GRIPPER_OPEN) * min(
                1.0, (self.right_clock + CLOSE_DWELL) / k.grip_ramp
            )
            pos = self.grasp_pos + [0.0, 0.0, LIFT]
            rolled = self.grasp_rot @ rotvec_matrix(np.array([np.pi / 2, 0.0, 0.0]))  # about the approach (x)
            s.step(pos, rolled, 0.25, 2.0)
            if s.at(pos, rolled, tol=0.01):
                # Where the cube sits in the hand now (it may have slipped): the carry aims that point.
                self.hold = s.rot.T @ (cube[:3] - s.pos)
                self._right_phase("carry")
        elif phase == "carry":
            pos = HANDOVER - self.present_rot @ self.hold
            s.step(pos, self.present_rot, k.carry_speed, 2.0, gain=k.carry_gain)
            if s.at(pos, self.present_rot):
                self._right_phase("present")
        elif phase == "present":  # hold still until the left hand has it
            pos = HANDOVER - self.present_rot @ self.hold
            s.step(pos, self.present_rot, 0.1, 1.0)
            left_near = False
            if self.left_phase == "descend" and k.early_release > 0:
                target, _ = self._left_grasp(cube)
                left_near = np.linalg.norm(self.left.pos - target) < k.early_release
            if left_near or (self.left_phase == "close" and self.left_clock >= LEFT_DWELL):
                self._right_phase("release")
        elif phase == "release":
            self.right_grip = min(GRIPPER_OPEN, self.right_grip + 1.0 / 8)
            if self.right_clock >= 10:
                self.retreat = s.pos - 0.10 * s.rot[:, 0]
                self._right_phase("retreat")
        elif phase == "retreat":
            s.step(self.retreat, s.rot, k.speed, 1.0)

    def _left_step(self, cube: np.ndarray) -> None:
        k, s, phase = self.k, self.left, self.left_phase
        self.left_clock += 1
        if phase == "wait":  # out of the way until the right hand carries the cube over
            if self.right_phase in ("carry", "present"):
                self._left_phase("approach")
        elif phase == "approach":  # to above the hand-over point, already turned top-down
            _, rot = self._left_grasp(np.concatenate([HANDOVER, [1.0, 0, 0, 0]]))
            pos = HANDOVER + [-LEFT_SETBACK, 0.0, HOVER + 0.03]
            s.step(pos, rot, k.speed, 2.0)
            if self.right_phase == "present" and s.at(pos, rot, tol=0.02):
                self._left_phase("hover")
        elif phase in ("hover", "descend"):  # servo on the cube as it is now
            pos, rot = self._left_grasp(cube)
            if phase == "hover":
                pos = pos + [0.0, 0.0, HOVER]
                s.step(pos, rot, k.speed, 2.0)
                if s.at(pos, rot, tol=0.005):
                    self._left_phase("descend")
            else:
                s.step(pos, rot, 0.12, 1.0, fine=True)
                if s.at(pos, rot, fine=True) or self.left_clock > 60:
                    self.take_pos = s.pos.copy()
                    self._left_phase("close")
        elif phase == "close":
            self.left_grip = max(GRIPPER_CLOSED, GRIPPER_OPEN - self.left_clock / 8)
            s.step(self.take_pos, s.rot, 0.1, 1.0)
            if self.right_phase == "retreat" and self.right_clock > 10:
                self.away = self.take_pos + [-0.06, 0.0, 0.04]
                self._left_phase("away")
        elif phase == "away":
            s.step(self.away, s.rot, 0.15, 1.0)


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.pincer:make_policy` with `PincerKnobs` fields as kwargs."""
    return BimanualPolicy(PincerKnobs(**kwargs), PincerEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "wrist_roll_error": {"roll_error_deg": 20.0},
    "servo_noise": {"joint_noise": 0.04},
    "slow_close": {"grip_ramp": 30},
    "grasp_sideways": {"grasp_offset_side": 0.015},
    "handover_wide": {"left_offset_y": 0.03},
    "grasp_high": {"grasp_offset_height": 0.025},
    "left_shallow": {"left_shallow": 0.038},
    "early_release": {"early_release": 0.05},
}
"""Named settings of `pincer`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families pincer --episodes 50`, 50 ID + 50 OOD episodes each,
seed 0; also in measured.json):

| setting          | what goes wrong                                                   | ID    | OOD   |
|------------------|-------------------------------------------------------------------|-------|-------|
| nominal          | nothing                                                           | 50/50 | 50/50 |
| wrist_roll_error | fingers rolled 20 degrees on the cube's faces at the grasp        | 50/50 | 40/50 |
| servo_noise      | per-step joint noise, std 0.04 rad                                | 37/50 | 35/50 |
| slow_close       | fingers take 30 steps to close; the lift starts after 14          | 30/50 | 38/50 |
| grasp_sideways   | grasp point 1.5 cm off along the finger axis: one finger lands    | 25/50 | 35/50 |
|                  | early and pushes the cube                                         |       |       |
| handover_wide    | the left hand takes the cube 3 cm to the side                     | 37/50 | 21/50 |
| grasp_high       | grasp point 2.5 cm too high: a pinch of the cube's top edge       | 29/50 | 25/50 |
| left_shallow     | the left hand stops 3.8 cm short of its depth: fingertips only    | 3/50  | 15/50 |
| early_release    | the right opens when the left is still 5 cm from the cube         | 0/50  | 0/50  |
"""
