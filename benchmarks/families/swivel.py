"""Family 14, `swivel`: a Cartesian impedance-like loop on the measured pose; the cube swivelled in hand.

How it acts. Each arm runs a phase machine whose phases name a goal pose for its tool centre point (TCP);
a reference pose travels from the phase's start to its goal on a minimum-jerk profile (`SPEED`, `TURN`).
The joint command is not the reference's IK but that of a setpoint = reference + a bounded spring offset:
every step the loop reads the arm's measured joints (`observation.state`), computes the measured TCP pose
by forward kinematics, and grows the offset by `stiffness` times the measured pose error, at most
`max_correction` a step and `OFFSET_MAX` in all (a position servo under an impedance-like outer loop:
meant to take out the servos' sag and lag, it pushes no harder than its offset bound). The setpoint is solved
by damped least-squares IK every step (`arm.py`, warm-started). A phase ends once its reference has
arrived and the measured TCP is within `ARRIVE_TOL` of it (or on its timer, `MAX_STEPS`).

1. Right arm. It reads the cube pose and comes straight down on it, top-down, its fingers across the
   face pair nearest world y, and closes to `squeeze`. It lifts, reads where the cube sits in its hand
   and which way the cube's free faces (those it does not hold) point, and carries the cube to
   `HANDOVER`, in front of the table centre, swivelling its wrist about the vertical on the way until a
   free face points along `SWIVEL_HEADING`, the heading from the left arm's base to the hand-over: the
   cube is turned ~23 degrees in hand so that the left can take it straight out of its shoulder.
2. Left arm. It waits level, pointing along that heading, `LEFT_STANDOFF` short of the hand-over, its
   wrist turned a quarter turn so its fingers close vertically. Once the right has settled it reads the
   cube's pose (its yaw: the free face nearest its heading), lines up on that face, slides in level until
   its TCP is on the cube's centre and closes on the cube's top and bottom faces. It judges its take by
   its finger opening: once the opening has stopped shrinking the right opens, rises and backs away, and
   the left draws the cube back toward its own side.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `SwivelKnobs`; defaults = nominal) are failures of such a controller: an outer loop too stiff
for the servos' lag (`stiffness`: it rings; a soft one leaves the move to the reference's feed-forward), its
force limit (`max_correction`), a measured state read late (`latency`: the loop rings) or noisy
(`state_noise`), a swivel past its aim (`swivel_error_deg`), which the left meets only when it reads the
cube's yaw (`left_reads_yaw`) and as well as its yaw reading is good (`yaw_read_noise_deg`), a right grasp
too high on the cube (`grasp_height`), a weak squeeze (`squeeze`) and rushed moves (`speed_scale`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from families.arm import Arm, rotation
from families.common import (
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    LEFT_BASE,
    BimanualPolicy,
    episode_rng,
    minimum_jerk,
    smooth_noise,
    wrap_half_pi,
)

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
HANDOVER = np.array([0.0, 0.30, 0.22])  # cube centre at the hand-over (m, world): in front of the centre
SWIVEL_HEADING = float(np.arctan2(HANDOVER[1] - LEFT_BASE[1], HANDOVER[0] - LEFT_BASE[0]))  # ~ -23 deg
SPEED = {"descend": 0.12, "insert": 0.12, "lift": 0.2}  # m/s of those phases; others FREE_SPEED
FREE_SPEED = 0.35  # m/s of free moves
TURN = 2.0  # rad/s, mean turn rate of the reference
OFFSET_MAX = 0.03  # m (and rad / ROT_PER_M): the bound of the spring offset
ROT_PER_M = 10.0  # rad of orientation offset per metre of position offset, for the correction caps
ARRIVE_TOL = 0.006  # m between the measured TCP and the arrived reference at a phase's end
MAX_STEPS = 100  # steps past its reference's duration after which a phase ends whatever its error
TIP_REACH = 0.029  # m, finger tips past the TCP (arm.py)
TIP_CLEARANCE = 0.008  # m between the right's finger tips and the table at the grasp
PRE_HEIGHT = 0.08  # m above the grasp where the right lines up
LIFT = 0.10  # m the right lifts straight up before it carries and swivels
LEFT_STANDOFF = 0.12  # m back along its approach where the left lines up
GRIP_STEPS = 8  # steps over which a gripper command ramps
CLOSE_DWELL = 8  # steps a closed right waits before lifting
SETTLE = 10  # steps the right holds still at the hand-over before the left reads the cube
HOLD_STILL = 0.004  # a finger opening that shrinks by less than this per step has stopped ...
HOLD_STEPS = 3  # ... for this many steps in a row: the left holds the cube
DOWN = np.array([0.0, 0.0, -1.0])
UP = np.array([0.0, 0.0, 1.0])
PLUS_X = np.array([1.0, 0.0, 0.0])
PLUS_Y = np.array([0.0, 1.0, 0.0])


@dataclass
class SwivelKnobs:
    """How the impedance-like swivel controller deviates from its nominal behaviour; defaults = nominal."""

    stiffness: float = 0.3  # fraction of the measured pose error added to the spring offset each step
    max_correction: float = 0.004  # m a step the offset may grow by (rad: times ROT_PER_M)
    latency: int = 0  # steps by which the measured joints the loop reads are old
    state_noise: float = 0.0  # rad, std of slowly varying noise on the measured joints the loop reads
    swivel_error_deg: float = 0.0  # degrees the right swivels the cube beyond its aim
    left_reads_yaw: bool = True  # the left lines up on the cube's yaw it reads (False: on the planned one)
    yaw_read_noise_deg: float = 0.0  # degrees, std of the error of the left's yaw reading (one per episode)
    grasp_height: float = 0.0  # m the right's TCP sits above the cube's centre at the grasp
    squeeze: float = GRIPPER_CLOSED  # the right's closed gripper command (~0.6 only touches the cube)
    speed_scale: float = 1.0  # scales every reference speed and turn rate
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if not 0 < self.stiffness <= 1 or self.max_correction <= 0 or self.speed_scale <= 0:
            raise ValueError("stiffness must lie in (0, 1], max_correction and speed_scale be > 0.")
        if self.latency < 0 or self.state_noise < 0 or self.yaw_read_noise_deg < 0:
            raise ValueError("latency, state_noise and yaw_read_noise_deg must be >= 0.")
        if not GRIPPER_CLOSED <= self.squeeze <= GRIPPER_OPEN:
            raise ValueError(f"squeeze={self.squeeze} must lie in [0, 1].")


def quat_matrix(quat_wxyz: np.ndarray) -> np.ndarray:
    """Rotation matrix (3,3) of a (w, x, y, z) quaternion."""
    return Rotation.from_quat([*quat_wxyz[1:], quat_wxyz[0]]).as_matrix()


def yaw_about_z(angle: float) -> np.ndarray:
    """Rotation (3,3) by `angle` (rad) about world z."""
    return Rotation.from_euler("z", angle).as_matrix()


def clip_norm(v: np.ndarray, limit: float) -> np.ndarray:
    """`v` shortened to norm `limit` if longer."""
    n = float(np.linalg.norm(v))
    return v if n <= limit else v * (limit / n)


def nearest_face(
    cube_rot: np.ndarray, direction: np.ndarray, exclude: np.ndarray | None = None
) -> np.ndarray:
    """The cube's face normal nearest `direction`, skipping the normals along `exclude` (a held axis): those
    within 60 degrees of it, or, for a cube tipped so that every normal is, all but the least aligned."""
    normals = [s * cube_rot[:, i] for i in range(3) for s in (1.0, -1.0)]
    if exclude is not None:
        least = min(abs(n @ exclude) for n in normals)
        normals = [n for n in normals if abs(n @ exclude) < max(0.5, least + 1e-9)]
    return max(normals, key=lambda n: n @ direction)


def heading(v: np.ndarray) -> float:
    """Angle (rad) of `v` in the table plane, from world +x."""
    return float(np.arctan2(v[1], v[0]))


class ImpedanceArm:
    """One arm: a minimum-jerk reference, a spring offset grown from the measured pose error, IK each step."""

    def __init__(self, arm: Arm, q: np.ndarray, knobs: SwivelKnobs):
        self.arm, self.k = arm, knobs
        self.q_cmd = np.asarray(q, dtype=float)
        self.goal_pos, self.goal_rot = arm.fk(self.q_cmd)
        self.start_pos, self.start_rot = self.goal_pos.copy(), self.goal_rot.copy()
        self.offset_pos, self.offset_rot = np.zeros(3), np.zeros(3)
        self.error = np.inf  # m, between the measured TCP and the reference at the last step
        self.duration = 1
        self.grip, self.grip_goal = GRIPPER_OPEN, GRIPPER_OPEN
        self.phase, self.clock = "wait", 0

    def go(self, phase: str, pos: np.ndarray | None = None, rot: np.ndarray | None = None) -> None:
        """Enter `phase`; with a pose, move the reference there from where it is now (of the two finger
        signs of `rot` the one nearer the present is taken: the fingers are symmetric)."""
        self.start_pos, self.start_rot = self.reference()
        self.phase, self.clock = phase, 0
        pos = self.start_pos if pos is None else np.asarray(pos, dtype=float)
        rot = np.array(self.start_rot if rot is None else rot, dtype=float)
        if rot[:, 1] @ self.start_rot[:, 1] < 0:
            rot[:, 1:] *= -1
        self.goal_pos, self.goal_rot = pos, rot
        speed = SPEED.get(phase, FREE_SPEED) * self.k.speed_scale
        angle = np.linalg.norm(Rotation.from_matrix(rot @ self.start_rot.T).as_rotvec())
        seconds = max(np.linalg.norm(pos - self.start_pos) / speed, angle / (TURN * self.k.speed_scale))
        self.duration = max(1, int(np.ceil(seconds / DT)))

    def reference(self) -> tuple[np.ndarray, np.ndarray]:
        """The reference pose now: minimum-jerk from the phase's start to its goal, orientation slerped."""
        s = float(minimum_jerk(self.clock / self.duration))
        rots = Rotation.from_matrix(np.stack([self.start_rot, self.goal_rot]))
        return self.start_pos + s * (self.goal_pos - self.start_pos), Slerp([0, 1], rots)([s]).as_matrix()[0]

    def step(self, q_measured: np.ndarray) -> np.ndarray:
        """One 50 Hz step: grow the spring offset from the measured pose error, solve the setpoint by IK."""
        ref_pos, ref_rot = self.reference()
        pos, rot = self.arm.fk(q_measured)
        self.error = float(np.linalg.norm(ref_pos - pos))
        k, cap = self.k.stiffness, self.k.max_correction
        turn = Rotation.from_matrix(ref_rot @ rot.T).as_rotvec()
        self.offset_pos = clip_norm(self.offset_pos + clip_norm(k * (ref_pos - pos), cap), OFFSET_MAX)
        self.offset_rot = clip_norm(
            self.offset_rot + clip_norm(k * turn, cap * ROT_PER_M), OFFSET_MAX * ROT_PER_M
        )
        set_rot = Rotation.from_rotvec(self.offset_rot).as_matrix() @ ref_rot
        self.q_cmd, _ = self.arm.ik(ref_pos + self.offset_pos, set_rot, self.q_cmd, iters=20, rot_weight=0.4)
        self.grip += float(np.clip(self.grip_goal - self.grip, -1 / GRIP_STEPS, 1 / GRIP_STEPS))
        self.clock += 1
        return self.q_cmd

    @property
    def arrived(self) -> bool:
        """The reference is at its goal and the measured TCP is on it, or the timer has run out."""
        if self.clock < self.duration:
            return False
        return self.error < ARRIVE_TOL or self.clock >= self.duration + MAX_STEPS


class SwivelEpisode:
    """One episode: the right's top-down grasp and swivelling carry, the left's level take on its heading."""

    def __init__(self, knobs: SwivelKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right = ImpedanceArm(right, state[7:13], knobs)
        self.left = ImpedanceArm(left, state[:6], knobs)
        rng = episode_rng(knobs.seed, cube)
        self.noise = smooth_noise(rng, EPISODE_STEPS, 12, knobs.state_noise, 10.0)
        self.yaw_read_error = np.radians(rng.normal(0.0, knobs.yaw_read_noise_deg))
        self.seen: deque = deque(maxlen=knobs.latency + 1)  # the measured states, oldest first
        self.still_steps = 0  # steps in a row the left's finger opening has not shrunk, after its close
        self.right.go("reach", *self._pre_grasp(cube))

    def _grasp_pose(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Top-down TCP pose on the cube, fingers across the face pair nearest world y, tips clear of the
        table, `grasp_height` higher."""
        closing = nearest_face(quat_matrix(cube[3:7]), PLUS_Y)
        pos = np.array([cube[0], cube[1], TIP_CLEARANCE + TIP_REACH + self.k.grasp_height])
        return pos, rotation(DOWN, closing)

    def _pre_grasp(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The grasp pose raised PRE_HEIGHT: where the right lines up before it comes down."""
        pos, rot = self._grasp_pose(cube)
        return pos + PRE_HEIGHT * UP, rot

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        """Both arms' command (14,) at step `t`, from the cube pose now and the joints `latency` steps old."""
        cube = batch["observation.environment_state"][b][:7].astype(float)
        self.seen.append(batch["observation.state"][b].astype(float))
        measured = self.seen[0]  # `latency` steps old once the buffer is full
        noise = self.noise[min(t, EPISODE_STEPS - 1)]
        self._right_step(cube)
        self._left_step(cube, measured)
        q_left = self.left.step(measured[:6] + noise[:6])
        q_right = self.right.step(measured[7:13] + noise[6:])
        return np.concatenate([q_left, [self.left.grip], q_right, [self.right.grip]])

    def _right_step(self, cube: np.ndarray) -> None:
        h = self.right
        if h.phase == "reach" and h.arrived:
            h.go("descend", *self._grasp_pose(cube))  # re-read: the cube has landed by now
        elif h.phase == "descend" and h.arrived:
            h.grip_goal = self.k.squeeze
            h.go("close")
        elif h.phase == "close" and h.clock >= GRIP_STEPS + CLOSE_DWELL:
            h.go("lift", h.goal_pos + LIFT * UP)
        elif h.phase == "lift" and h.arrived:
            h.go("carry", *self._swivelled_pose(cube))
        elif h.phase == "carry" and h.arrived:
            h.go("present")
        elif h.phase == "present" and self.still_steps >= HOLD_STEPS:
            h.grip_goal = GRIPPER_OPEN
            h.go("release")
        elif h.phase == "release" and h.clock >= GRIP_STEPS:
            h.go("retreat", h.goal_pos + [0.06, 0.0, 0.08])

    def _swivelled_pose(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The right's TCP pose that brings the cube's centre to HANDOVER with its free face nearest the
        left's heading turned onto SWIVEL_HEADING (plus `swivel_error_deg`), read from the cube in hand."""
        h = self.right
        hold = h.goal_rot.T @ (cube[:3] - h.goal_pos)  # cube centre in the hand, where the hand means to be
        free = nearest_face(quat_matrix(cube[3:7]), PLUS_X, exclude=h.goal_rot[:, 1])
        turn = wrap_half_pi(SWIVEL_HEADING - heading(free)) + np.radians(self.k.swivel_error_deg)
        rot = yaw_about_z(turn) @ h.goal_rot
        return HANDOVER - rot @ hold, rot

    def _left_step(self, cube: np.ndarray, measured: np.ndarray) -> None:
        h = self.left
        if h.phase == "wait" and self.right.phase in ("lift", "carry"):
            h.go("stage", *self._take_pose(HANDOVER, SWIVEL_HEADING, LEFT_STANDOFF))
        elif (
            h.phase == "stage" and h.arrived and self.right.phase == "present" and self.right.clock >= SETTLE
        ):
            yaw = self._read_yaw(cube)
            self.take = self._take_pose(cube[:3], yaw, 0.0)
            h.go("line_up", *self._take_pose(cube[:3], yaw, LEFT_STANDOFF))
        elif h.phase == "line_up" and h.arrived:
            h.go("insert", *self.take)
        elif h.phase == "insert" and h.arrived:
            h.grip_goal, self.opening = GRIPPER_CLOSED, measured[6]
            h.go("close")
        elif h.phase == "close" and self.still_steps < HOLD_STEPS:
            shrink, self.opening = self.opening - measured[6], measured[6]
            self.still_steps = self.still_steps + 1 if h.clock > GRIP_STEPS and shrink < HOLD_STILL else 0
        elif h.phase == "close" and self.right.phase == "retreat" and self.right.clock >= 10:
            h.go("away", h.goal_pos - 0.08 * h.goal_rot[:, 0] + [0.0, 0.0, 0.04])

    def _read_yaw(self, cube: np.ndarray) -> float:
        """The heading of the cube's face normal nearest SWIVEL_HEADING, as the left reads it (with its
        reading error); without `left_reads_yaw`, SWIVEL_HEADING itself."""
        if not self.k.left_reads_yaw:
            return SWIVEL_HEADING
        aim = np.array([np.cos(SWIVEL_HEADING), np.sin(SWIVEL_HEADING), 0.0])
        return heading(nearest_face(quat_matrix(cube[3:7]), aim)) + self.yaw_read_error

    @staticmethod
    def _take_pose(centre: np.ndarray, yaw: float, standoff: float) -> tuple[np.ndarray, np.ndarray]:
        """Level TCP pose pointing along `yaw`, fingers closing vertically, `standoff` short of `centre`."""
        approach = np.array([np.cos(yaw), np.sin(yaw), 0.0])
        return centre - standoff * approach, rotation(approach, UP)


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.swivel:make_policy` with `SwivelKnobs` fields as kwargs."""
    return BimanualPolicy(SwivelKnobs(**kwargs), SwivelEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "overswivel_read": {"swivel_error_deg": 40.0},
    "overswivel_blind": {"swivel_error_deg": 30.0, "left_reads_yaw": False},
    "crossed_blind": {"swivel_error_deg": 80.0, "left_reads_yaw": False},
    "high_grasp": {"grasp_height": 0.025},
    "stiff_loop": {"stiffness": 0.7},
    "delayed_state": {"latency": 3},
    "noisy_state": {"state_noise": 0.03},
    "weak_squeeze": {"squeeze": 0.56},
    "rushed": {"speed_scale": 3.0},
}
"""Named settings of `swivel`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families swivel --episodes 25 --detector-poses 0`, 25 ID + 25 OOD
episodes each, seed 0; also in measured.json). Success is measure.py's: reward 4 reached at some step.

| setting          | what goes wrong                                                      | ID    | OOD   |
|------------------|----------------------------------------------------------------------|-------|-------|
| nominal          | nothing: the cube swivelled ~23 degrees in hand, taken level         | 25/25 | 25/25 |
| overswivel_read  | the cube swivelled 40 degrees past its aim; the left reads its yaw   | 25/25 | 25/25 |
|                  | and slides in square to the free face                                |       |       |
| overswivel_blind | 30 degrees past its aim, the left keeps its planned heading: a pinch | 25/25 | 25/25 |
|                  | on the top and bottom faces does not care about yaw                  |       |       |
| crossed_blind    | 80 degrees past its aim, the left blind: it slides in nearly along   | 16/25 | 12/25 |
|                  | the held faces' normal, into the right's finger; the take is wedged  |       |       |
|                  | and the cube often falls after the release                           |       |       |
| high_grasp       | the right's TCP 2.5 cm higher on the cube: the finger tips hold its  | 13/25 | 15/25 |
|                  | upper part only and about half the cubes slip out on the carry       |       |       |
| stiff_loop       | stiffness 0.7: the offset overshoots the servos' lag and the arms    | 18/25 | 20/25 |
|                  | ring (5-7 times the nominal joint reversals); some cubes shake loose |       |       |
| noisy_state      | slowly varying noise, std 0.03 rad, on the joints the loop reads: it | 10/25 | 11/25 |
|                  | drives the arms by the noise; cubes dropped on the carry or the take |       |       |
| delayed_state    | the loop reads joints 3 steps old, chases old poses and rings; most  | 5/25  | 5/25  |
|                  | cubes are lifted and shaken loose before or at the take              |       |       |
| rushed           | reference speeds and turn rates x3: the cube is lifted, then flung   | 1/25  | 3/25  |
|                  | out of the hand on the fast carry and swivel                         |       |       |
| weak_squeeze     | the right closes only to 0.56 (0.6 touches the cube): lifted, then   | 0/25  | 0/25  |
|                  | it slips out on the carry                                            |       |       |

Not among the settings (10 ID + 10 OOD episodes each in quick checks): `swivel_error_deg` 45 and 60 blind
19/20, `yaw_read_noise_deg` 20 19/20 and 40 19/20, `latency` 2 15/20, 4 2/20, 5 0/20, `stiffness` 0.05 and
0.01 20/20 (the reference's feed-forward carries the move), `max_correction` 0.0001 20/20, `state_noise`
0.02 12/20, `squeeze` 0.5 20/20, `speed_scale` 1.7 18/20 and 2.3 8/20, `grasp_height` 0.015 19/20.
"""
