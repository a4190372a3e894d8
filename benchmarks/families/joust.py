"""Family 16, `joust`: a cyclic joint-space re-planner under guarded moves; a nose-to-nose hand-over.

How it acts. Each arm runs a finite-state machine of guarded moves. A move names a goal pose of the tool
centre point (TCP), which may depend on the cube pose. Every `replan_period` steps (and at every phase
change) the arm re-reads the cube pose and its measured joints, solves the goal by damped least-squares IK
(`arm.py`, warm-started on its last solution) and lays a fresh quintic in joint space from where its
command is now, with the command's present velocity, to the solution at rest; its duration comes from the
largest joint travel and a peak joint speed (`SPEED`). Between replans the arm plays that quintic: a
receding-horizon planner that follows a moving goal. A move ends on its guard: the measured TCP (forward
kinematics of `observation.state`) within `arrive_tol` of the goal, or on its timeout (`TIMEOUT` steps past
its plan's end), whichever comes first; no phase waits on a clock alone.

1. Right arm. Comes down top-down on the cube, fingers across the face pair nearest world y, closes to
   `squeeze`, lifts straight up, then pitches its gripper up by a quarter turn while it carries: at the
   hand-over its gripper is level and points along world -x, straight at the left arm's shoulder, holding
   the cube by the same two faces. The cube is so rolled a quarter turn in hand: the faces that were its x
   faces now face up and down. The hand-over sits on the line between the two shoulders (y = 0.5), over
   the table centre, 25 cm up, the cube's centre placed there from where it is measured in the hand.
2. Left arm. Waits level along +x, its wrist turned a quarter turn so that its fingers close vertically,
   `STANDOFF` short of the hand-over; once the right has settled it re-reads the cube, lines up and slides
   in coaxially, nose to nose with the right, until its TCP is on the cube's centre, then closes on the
   top and bottom faces: the two grippers' fingers cross at right angles.
3. Release. The right opens only once the left's measured finger opening has come down to
   `release_opening` (the 4 cm cube stops it at ~0.64) and has held still; it then backs out along +x and
   rises, and the left draws the cube back toward its own side.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `JoustKnobs`; defaults = nominal) are flaws at different stages: a biased or noisy reading of
the cube before the grasp (`reach_bias`, `reach_noise`), impatient guards that end a move before the arm
has arrived (`arrive_tol`), a weak squeeze (`squeeze`), rushed joint moves (`speed_scale`), a stale
receding horizon (`replan_period`), a left that takes off the cube's centre (`take_height`, `take_noise`) or
short of it (`take_depth`), and a right that lets go before the left has closed (`release_opening`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from families.arm import Arm, rotation
from families.common import (
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    BimanualPolicy,
    episode_rng,
)

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
HANDOVER = np.array([0.0, 0.5, 0.25])  # cube centre at the hand-over (m, world): between the two shoulders
SPEED = {"descend": 0.8, "insert": 0.8, "lift": 1.2}  # rad/s, peak joint speed of those moves
FREE_SPEED = 2.8  # rad/s, peak joint speed of the other moves
MIN_STEPS = 12  # shortest quintic (steps): a replan never jerks the arm
TIMEOUT = 25  # steps past a plan's end after which a move ends whatever its error
IK_ITERS = 80
TIP_REACH = 0.029  # m, finger tips past the TCP (arm.py)
TIP_CLEARANCE = 0.008  # m between the right's finger tips and the table at the grasp
PRE_HEIGHT = 0.08  # m above the grasp where the right lines up
LIFT = 0.10  # m the right lifts straight up before it carries
STANDOFF = 0.12  # m back along its approach where the left lines up
GRIP_STEPS = 8  # steps over which a gripper command ramps
CLOSE_DWELL = 8  # steps a closed right waits before lifting
SETTLE = 10  # steps the right holds still at the hand-over before the left reads the cube
HOLD_STILL = 0.004  # a left finger opening that changes by less than this per step has stopped ...
HOLD_STEPS = 3  # ... for this many steps in a row
BACK_OFF = np.array([0.08, 0.0, 0.06])  # m the right moves after it has let go
DRAW_BACK = np.array([-0.06, 0.0, 0.0])  # m the left draws the cube back after the right has let go
DOWN = np.array([0.0, 0.0, -1.0])
UP = np.array([0.0, 0.0, 1.0])
PLUS_X = np.array([1.0, 0.0, 0.0])
PLUS_Y = np.array([0.0, 1.0, 0.0])


@dataclass
class JoustKnobs:
    """How the re-planning jouster deviates from its nominal behaviour; defaults = nominal."""

    replan_period: int = 8  # steps between replans (the receding horizon's cycle)
    speed_scale: float = 1.0  # scales every peak joint speed
    arrive_tol: float = 0.008  # m, the measured TCP's distance to its goal that ends a guarded move
    reach_bias: float = 0.0  # m along world y, added to the cube position the right reads to grasp
    reach_noise: float = 0.0  # m, std (x and y) of the right's per-episode error reading the cube to grasp
    squeeze: float = GRIPPER_CLOSED  # the right's closed gripper command (~0.6 only touches the cube)
    take_height: float = 0.0  # m the left's TCP sits above the cube's centre at the take
    take_noise: float = 0.0  # m, std of a per-episode error of the left's take height
    take_depth: float = 0.0  # m the left's TCP stops short of the cube's centre along +x
    release_opening: float = 0.75  # the right opens once the left's measured opening is below this, still
    release_lead: int = 0  # > 0: the right opens this many steps before the left's slide-in is due to end
    seed: int = 0  # seeds the per-episode errors together with the episode's first observation

    def __post_init__(self) -> None:
        if self.replan_period < 1 or self.speed_scale <= 0 or self.arrive_tol <= 0:
            raise ValueError("replan_period must be >= 1, speed_scale and arrive_tol > 0.")
        if self.reach_noise < 0 or self.take_noise < 0 or self.release_lead < 0:
            raise ValueError("reach_noise, take_noise and release_lead must be >= 0.")
        if not GRIPPER_CLOSED <= self.squeeze <= GRIPPER_OPEN:
            raise ValueError(f"squeeze={self.squeeze} must lie in [0, 1].")
        if not 0 < self.release_opening <= 1:
            raise ValueError(f"release_opening={self.release_opening} must lie in (0, 1].")


def quat_matrix(quat_wxyz: np.ndarray) -> np.ndarray:
    """Rotation matrix (3,3) of a (w, x, y, z) quaternion (identity if the quaternion is degenerate)."""
    q = np.asarray(quat_wxyz, dtype=float)
    if not np.all(np.isfinite(q)) or np.linalg.norm(q) < 1e-6:
        return np.eye(3)
    return Rotation.from_quat([*q[1:], q[0]]).as_matrix()


def level_closing(cube_rot: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """The cube's face normal nearest `direction`, flattened onto the table plane: the closing axis of a
    top-down grasp. A cube tipped so that no face normal is near level falls back on `direction`."""
    normals = [s * cube_rot[:, i] for i in range(3) for s in (1.0, -1.0)]
    best = max(normals, key=lambda n: n @ direction)
    flat = best - best[2] * UP
    return flat / np.linalg.norm(flat) if np.linalg.norm(flat) > 0.3 else np.asarray(direction, float)


def quintic(q0: np.ndarray, v0: np.ndarray, q1: np.ndarray, T: float, t: float) -> tuple:
    """Position and velocity at time `t` of the quintic from (q0, v0, acceleration 0) to (q1, at rest)
    over `T` seconds."""
    s = min(max(t / T, 0.0), 1.0)
    h = s**3 * (10 - 15 * s + 6 * s * s)  # carries q0 to q1
    hv = s - 6 * s**3 + 8 * s**4 - 3 * s**5  # carries the initial velocity, gone at the end
    dh = 30 * s**2 * (1 - s) ** 2
    dhv = 1 - 18 * s**2 + 32 * s**3 - 15 * s**4
    q = q0 + v0 * T * hv + (q1 - q0) * h
    v = v0 * dhv + (q1 - q0) * dh / T
    return q, v


class Replanner:
    """One arm: a guarded move toward a goal pose, re-solved and re-planned every `replan_period` steps."""

    def __init__(self, arm: Arm, q: np.ndarray, knobs: JoustKnobs):
        self.arm, self.k = arm, knobs
        self.q_cmd, self.v_cmd = np.asarray(q, dtype=float), np.zeros(6)
        self.q_goal = self.q_cmd.copy()
        self.goal = None  # callable: cube pose (7,) -> (pos, rot) of the TCP, or None to hold still
        self.goal_pos, self.goal_rot = arm.fk(self.q_cmd)
        self.reachable = self.goal_pos.copy()
        self.grip, self.grip_goal = GRIPPER_OPEN, GRIPPER_OPEN
        self.phase, self.clock = "wait", 0
        self.plan = (self.q_cmd, np.zeros(6), self.q_cmd, 1.0)
        self.plan_t, self.plan_end = 0.0, 0
        self.error = np.inf  # m between the measured TCP and the goal, at the last step
        self.ik_error = 0.0
        self.replans = 0
        self._due = False

    def go(self, phase: str, goal=None) -> None:
        """Enter `phase` with the goal function `goal` (None: hold the present goal)."""
        self.phase, self.clock = phase, 0
        if goal is not None:
            self.goal = goal
        self._due = True

    def _replan(self, cube: np.ndarray) -> None:
        if self.goal is not None:
            pos, rot = self.goal(cube)
            if rot[:, 1] @ self.goal_rot[:, 1] < 0:  # the fingers are symmetric: take the nearer sign
                rot = rot.copy()
                rot[:, 1:] *= -1
            q, err = self.arm.ik(pos, rot, self.q_goal, iters=IK_ITERS, rot_weight=0.4)
            if np.all(np.isfinite(q)):  # an unreachable goal leaves the nearest solution IK found
                self.q_goal, self.ik_error = q, err
                self.goal_pos, self.goal_rot = pos, rot
                self.reachable, _ = self.arm.fk(q)  # where the solution puts the TCP: the guard's aim
        if self._due:  # a new move: its deadline from the largest joint travel and the peak speed
            speed = SPEED.get(self.phase, FREE_SPEED) * self.k.speed_scale
            travel = float(np.max(np.abs(self.q_goal - self.q_cmd)))
            self.plan_end = self.clock + int(np.ceil(1.875 * travel / speed / DT))  # a quintic's peak/mean
        T = max(MIN_STEPS, self.plan_end - self.clock) * DT  # a replan keeps the move's deadline
        self.plan, self.plan_t = (self.q_cmd.copy(), self.v_cmd.copy(), self.q_goal.copy(), T), 0.0
        self.replans += 1
        self._due = False

    def step(self, cube: np.ndarray, q_measured: np.ndarray) -> np.ndarray:
        """One 50 Hz step: replan if due, play the plan, measure the distance to the goal."""
        if self._due or self.clock % self.k.replan_period == 0:
            self._replan(cube)
        self.plan_t += DT
        self.q_cmd, self.v_cmd = quintic(*self.plan, self.plan_t)
        pos, _ = self.arm.fk(q_measured)
        self.error = float(np.linalg.norm(pos - self.reachable))
        self.grip += float(np.clip(self.grip_goal - self.grip, -1 / GRIP_STEPS, 1 / GRIP_STEPS))
        self.clock += 1
        return self.q_cmd

    @property
    def arrived(self) -> bool:
        """The guard: the measured TCP is within `arrive_tol` of the goal (of the nearest pose IK reaches
        toward it), or the move has timed out."""
        if self.clock < MIN_STEPS // 2:
            return False
        return self.error < self.k.arrive_tol or self.clock >= self.plan_end + TIMEOUT


class JoustEpisode:
    """One episode: the right's top-down grasp and level carry, the left's coaxial take, guarded release."""

    def __init__(self, knobs: JoustKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right = Replanner(right, state[7:13], knobs)
        self.left = Replanner(left, state[:6], knobs)
        rng = episode_rng(knobs.seed, cube)
        self.reach_error = np.array([0.0, knobs.reach_bias, 0.0])
        self.reach_error[:2] += rng.normal(0.0, knobs.reach_noise, 2)
        self.take_error = knobs.take_height + rng.normal(0.0, knobs.take_noise)
        self.still_steps = 0  # steps in a row the left's opening has held still below `release_opening`
        self.opening = 1.0
        self.early = False  # the right was told to let go by `release_lead`, before the left closed
        self.hold = None  # the cube's centre in the right's gripper frame, measured after the lift
        self.right.go("reach", lambda c: self._grasp_pose(c, PRE_HEIGHT))

    def _grasp_pose(self, cube: np.ndarray, above: float) -> tuple[np.ndarray, np.ndarray]:
        """Top-down TCP pose on the cube as the right reads it, fingers across the face pair nearest world
        y, tips `TIP_CLEARANCE` clear of the table, `above` higher."""
        closing = level_closing(quat_matrix(cube[3:7]), PLUS_Y)
        xy = cube[:2] + self.reach_error[:2]
        return np.array([xy[0], xy[1], TIP_CLEARANCE + TIP_REACH + above]), rotation(DOWN, closing)

    def _carry_pose(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The right's level TCP pose, pointing along -x, that puts the cube's centre (as held, measured in
        the hand after the lift) on HANDOVER; the fingers keep the faces they hold."""
        rot = rotation(-PLUS_X, self.right.goal_rot[:, 1])
        return HANDOVER - rot @ self.hold, rot

    def _take_pose(self, centre: np.ndarray, standoff: float) -> tuple[np.ndarray, np.ndarray]:
        """The left's level TCP pose along +x, fingers closing vertically, `standoff` (plus `take_depth`)
        short of `centre` and `take_height` (plus its per-episode error) above it."""
        pos = centre - (standoff + self.k.take_depth) * PLUS_X + self.take_error * UP
        return pos, rotation(PLUS_X, UP)

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        """Both arms' command (14,) at step `t`, from the cube pose and the measured joints now."""
        cube = batch["observation.environment_state"][b][:7].astype(float)
        state = batch["observation.state"][b].astype(float)
        if not np.all(np.isfinite(cube)):
            cube = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0])
        self._right_step(cube, state)
        self._left_step(state)
        q_left = self.left.step(cube, state[:6])
        q_right = self.right.step(cube, state[7:13])
        return np.concatenate([q_left, [self.left.grip], q_right, [self.right.grip]])

    def _right_step(self, cube: np.ndarray, state: np.ndarray) -> None:
        h = self.right
        if h.phase == "reach" and h.arrived:
            h.go("descend", lambda c: self._grasp_pose(c, 0.0))
        elif h.phase == "descend" and h.arrived:
            h.grip_goal = self.k.squeeze
            here = h.arm.fk(state[7:13])[0]
            h.go("close", lambda c: (here, h.goal_rot))  # stops where the guard found it and closes
        elif h.phase == "close" and h.clock >= GRIP_STEPS + CLOSE_DWELL:
            lifted = h.goal_pos + LIFT * UP
            h.go("lift", lambda c: (lifted, h.goal_rot))
        elif h.phase == "lift" and h.arrived:
            pos, rot = h.arm.fk(state[7:13])
            self.hold = rot.T @ (cube[:3] - pos)  # where the cube sits in the hand
            if np.linalg.norm(self.hold) > 0.06:  # not in the hand: carry an empty grasp's centre
                self.hold = np.array([0.017, 0.0, 0.0])
            pose = self._carry_pose(cube)
            h.go("carry", lambda c: pose)
        elif h.phase == "carry" and h.arrived:
            h.go("present")
        elif h.phase == "present" and (self.still_steps >= HOLD_STEPS or self.early):
            h.grip_goal = GRIPPER_OPEN
            h.go("release")
        elif h.phase == "release" and h.clock >= GRIP_STEPS:
            away = h.goal_pos + BACK_OFF
            h.go("retreat", lambda c: (away, h.goal_rot))

    def _left_step(self, state: np.ndarray) -> None:
        h, r = self.left, self.right
        if h.phase == "wait" and r.phase == "carry":
            h.go("stage", lambda c: self._take_pose(HANDOVER, STANDOFF))
        elif h.phase == "stage" and h.arrived and r.phase == "present" and r.clock >= SETTLE:
            h.go("line_up", lambda c: self._take_pose(c[:3], STANDOFF))
        elif h.phase == "line_up" and h.arrived:
            h.go("insert", lambda c: self._take_pose(c[:3], 0.0))
        elif h.phase == "insert" and not h.arrived:
            lead = self.k.release_lead
            self.early = self.early or (lead > 0 and h.clock > 0 and h.plan_end - h.clock <= lead)
        elif h.phase == "insert" and h.arrived:
            h.grip_goal = GRIPPER_CLOSED
            pose = (h.arm.fk(state[:6])[0], h.goal_rot)
            h.go("close", lambda c: pose)  # stops where the guard found it and closes
        elif h.phase == "close" and r.phase not in ("release", "retreat"):
            change, self.opening = abs(self.opening - state[6]), state[6]
            below = state[6] < self.k.release_opening and change < HOLD_STILL
            self.still_steps = self.still_steps + 1 if h.clock > 2 and below else 0
        elif h.phase == "close" and r.phase == "retreat" and r.clock >= 10:
            back = h.goal_pos + DRAW_BACK
            h.go("away", lambda c: (back, h.goal_rot))


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.joust:make_policy` with `JoustKnobs` fields as kwargs."""
    return BimanualPolicy(JoustKnobs(**kwargs), JoustEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "loose_guard": {"arrive_tol": 0.025},
    "shaky_take": {"take_noise": 0.02},
    "misread_cube": {"reach_noise": 0.025},
    "high_take": {"take_height": 0.015},
    "soft_squeeze": {"squeeze": 0.53},
    "impatient_guard": {"arrive_tol": 0.045},
    "early_release": {"release_lead": 30},
    "slipping_squeeze": {"squeeze": 0.56},
    "offset_reach": {"reach_bias": 0.03},
}
"""Named settings of `joust`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families joust --episodes 25 --detector-poses 0`, 25 ID + 25 OOD
episodes each, seed 0; also in measured.json). Success is measure.py's: reward 4 reached at some step.

| setting          | what goes wrong                                                      | ID    | OOD   |
|------------------|----------------------------------------------------------------------|-------|-------|
| nominal          | nothing: grasped top-down, turned level, taken nose to nose          | 25/25 | 25/25 |
| loose_guard      | moves end 2.5 cm from their goal; the held goal still gets reached   | 25/25 | 25/25 |
| shaky_take       | the left's take height off by a random 2 cm (std) per episode        | 17/25 | 21/25 |
| misread_cube     | the right reads the cube 2.5 cm (std, x and y) off per episode: its  | 12/25 | 8/25  |
|                  | fingers come down on the cube's top or grasp an edge                 |       |       |
| impatient_guard  | moves end 4.5 cm from their goal: the right closes while still       | 10/25 | 24/25 |
|                  | coming down, high on the cube, and often loses it                    |       |       |
| soft_squeeze     | the right closes only to 0.53: lifted, mostly slips out on the turn  | 7/25  | 6/25  |
| high_take        | the left pinches 1.5 cm above the cube's centre: a finger lands on   | 3/25  | 7/25  |
|                  | the right's fingers' edge, the take mostly misses                    |       |       |
| early_release    | the right opens 30 steps before the left's slide-in ends: dropped    | 0/25  | 0/25  |
| slipping_squeeze | the right closes only to 0.56: lifted, then lost on the carry        | 0/25  | 0/25  |
| offset_reach     | the right reads the cube 3 cm off along y: a finger lands on its top | 0/25  | 0/25  |

Not among the settings (10 ID + 10 OOD episodes each in quick checks): `speed_scale` 3 20/20 and 8 19/20
(the servos, not the planned speed, bound the moves), `replan_period` 30 and 80 20/20, `release_opening`
0.92 and 0.97 20/20, `release_lead` 20 20/20 and 25 0/20, `take_depth` 0.035 20/20 and 0.05 0/20, `squeeze`
0.5 20/20, `reach_bias` 0.015 20/20 and 0.02 14/20, `take_height` 0.01 19/20 and 0.02 1/20, `arrive_tol` 0.03
19/20 and 0.05 3/20, `take_noise` 0.015 17/20, `reach_noise` 0.015 16/20.
"""
