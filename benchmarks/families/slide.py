"""Family 34, `slide`: the right drags the cube along the table to the left, which picks it up from there.

How it acts. The cube never travels through the air in the right hand. The right comes top-down over the
cube, its fingers closing on the pair of faces whose normal lies nearest world y, low on the cube (the
finger tips `drag_height` above the table), closes to `squeeze` and drags the cube along the table in a
straight line toward the drag target (`target_x`, `target_y`; at most `drag_length`), the cube kept on the
table and the fingers closed on it. At the end it opens, waits, rises 10 cm straight up and returns to its
start pose in joint space. Meanwhile the left has gone to a staging pose behind and above the target;
once the right's hand has left the space over the cube it reads the cube pose again where the cube now
lies (`reread`), comes top-down on the face pair whose normal lies nearest its own heading (its wrist
turned about a quarter turn: it pinches the faces the right left free), closes and lifts 10 cm.

Motion. Each arm's first move (start pose to the right's pre-grasp, to the left's staging pose) is a
joint-space minimum-jerk move, its goal solved once by damped least-squares IK (`arm.py`; a quarter-turned
wrist is solved from the unrolled solution); every later move is a straight line of the tool centre point
(TCP) at a fixed top-down orientation, eased by the cubic smoothstep and solved by IK at every step,
warm-started. The drag lasts its length over `drag_speed` (the mean speed; the peak is 1.5 times that).
While it drags, the right's commanded height is trimmed by an integral of its height error (its TCP by FK
on the measured joints, aimed 2 mm under the grasp, bounded to 1 cm): the servos sag less as the arm
stretches, and untrimmed the hand rides up ~7 mm and carries the cube clear of the table; trimmed, the
cube's bottom stays within ~2 mm of the table (the env sees it touch the table for part of the drag).
The schedule is fixed at `READ` from the cube pose then, except the left's pick, planned on the cube read
once the right has cleared; the events fall on steps, not on sensed contact.

Geometry (world frame, metres). The table top is z = 0, the cube's centre 2 cm up. The TCP sits 2.9 cm
inside the finger tips, so a drag height h puts the right's TCP at z = h + 0.029 and its pads on the
cube's side faces from h up to the top. The drag target (-0.03, 0.5) lies 0.44 m from the left's base;
the left's top-down reach (tips 5 mm above the table) ends near x = 0.16, so a cube that stays where it
started in the ID box's +x quarter, or in the OOD ring's +x side, is out of its reach.

State-only: reads `observation.state` and `observation.environment_state`, never an image. Kwargs (see
`SlideKnobs`; defaults = nominal) are what an engineer setting up such a drag sets or gets wrong, and how it
fails in the reference world: without the re-read the left goes down where the cube lay before the drag
(nearly always empty table); a light squeeze (~0.6 just touches the cube) lets the pads slide over the cube,
which stays where it was, and a drag height of 5 cm (the trim takes 1 cm off) leaves the pads at its top edge:
both fail where the cube was left beyond the left's reach; a drag height of -2 cm presses the finger tips onto
the table, whose friction holds the fingers open until the hand moves, so a fast drag has left the cube behind
before they shut; a release long before the drag ends (`release_shift` < 0) leaves the cube short, where the
open hand went on without it; a short `drag_length` leaves the cubes far on +x out of reach; a target at x =
0.18, the edge of the left's reach, has the left arrive stretched, knock the cube and hold it up only now and
then; a slow drag ends so late that the left runs out of episode before it lifts, the long drags first; a left
grasp offset of ~2 cm along its finger axis puts a pad on the cube's top. A fast drag alone (0.6 m/s) tips the
cube in the pads but brings it along. Settings were tuned on the reference world's success only (left finger
on the cube, cube off the table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from families.arm import Arm
from families.common import (
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    LEFT_BASE,
    RIGHT_BASE,
    BimanualPolicy,
    checked_knobs,
    cube_yaw,
    gripper_rot,
    minimum_jerk,
    piecewise,
    refuse_invalid,
    smoothstep,
    top_down_roll,
)

EPISODE_STEPS = 400
DT = 0.02  # s: one control step (50 Hz)
READ = 10  # step: the cube has landed; the right's plan is made on what is read then
TIP = 0.029  # m: the finger tips lie this far beyond the TCP along the approach
ABOVE = 0.08  # m: pre-grasp height above the grasp, for both hands
PRE_AT, DOWN_AT = 60, 85  # steps: the right reaches its pre-grasp, then its grasp (and closes)
TRIM_GAIN = 0.2  # per step: integral gain of the dragging hand's height trim
TRIM_MAX = 0.01  # m: the trim's bound (a hand held up by the table must not wind it up)
BEAR = 0.002  # m: the trim aims the hand this far below its grasp height, bearing on the cube
GRIP = 15  # steps between the close and the drag: the fingers still close
OPEN_WAIT = 8  # steps the right stays open before it rises (its fingers still open)
RISE, RISE_BY = 20, 0.10  # steps and metres of the right's straight rise off the cube
HOME = 40  # steps of the right's joint-space return to its start pose after the rise
# Steps into the right's return at which the left sets off: its hand has left the space over the cube.
CLEAR_AFTER = 25
STAGE_AT = 120  # step: the left reaches its staging pose
STAGE_BY = np.array([-0.12, 0.0, 0.14])  # m: the left waits this far behind and above the drag target
TAKE_HEIGHT = 0.005  # m: the left's tips above the table at its grasp
TO_PRE, DOWN, HOLD, LIFT_STEPS = 25, 20, 15, 30  # steps of the left's pick
LIFT = 0.10  # m: the left lifts the cube this far


@dataclass
class SlideKnobs:
    """How the drag-and-pick deviates from its nominal tuning; defaults = nominal."""

    squeeze: float = GRIPPER_CLOSED  # the right's closed command (0: hardest; ~0.6 touches the cube)
    drag_speed: float = 0.15  # m/s, mean speed of the drag (peak 1.5x)
    drag_height: float = 0.005  # m, the right's finger tips above the table (< 0: pressed into it)
    target_x: float = -0.03  # m, world x where the drag puts the cube's centre
    target_y: float = 0.5  # m, world y of the drag target
    drag_length: float = 1.0  # m, the most the drag covers toward the target (it stops short if longer)
    reread: bool = True  # False: the left picks where the cube lay before the drag (read at `READ`)
    release_shift: int = 5  # steps from the drag's end to the right's opening (< 0: while still dragging)
    left_offset: float = 0.0  # m, the left's grasp moved along its finger axis
    left_squeeze: float = GRIPPER_CLOSED  # the left's closed command

    def __post_init__(self) -> None:
        checks = {
            "squeeze": 0.0 <= self.squeeze <= 1.0,
            "drag_speed": 0.01 <= self.drag_speed <= 3.0,
            "drag_height": -0.02 <= self.drag_height <= 0.05,
            "target_x": -0.2 <= self.target_x <= 0.3,
            "target_y": 0.3 <= self.target_y <= 0.7,
            "drag_length": 0.0 <= self.drag_length <= 1.0,
            "release_shift": -100 <= self.release_shift <= 100,
            "left_offset": -0.05 <= self.left_offset <= 0.05,
            "left_squeeze": 0.0 <= self.left_squeeze <= 1.0,
        }
        refuse_invalid(self, checks)


# -------------------------------------------------------------------------------------------- geometry
def face_yaw(cube: np.ndarray, axis_yaw: float) -> float:
    """Yaw of the cube's face normal (7-vector pose) nearest the horizontal axis `axis_yaw`.

    The four side normals repeat every quarter turn, so the offset is wrapped to [-pi/4, pi/4).
    """
    offset = (cube_yaw(cube[3:7]) - axis_yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4
    return float(axis_yaw + offset)


def top_down_ik(arm: Arm, pos: np.ndarray, heading: float, roll: float, q0: np.ndarray) -> np.ndarray:
    """Joints that put the TCP at `pos`, top-down at `heading`, turned `roll` about the approach.

    Solved unrolled first, then from that solution with the wrist rotated by the roll either way (its
    axis is the approach axis), keeping the better: from the start pose straight to a quarter-turned
    wrist, damped least squares stalls in a fold of the arm, while the unrolled solution is one joint
    away from the answer.
    """
    q, _ = arm.ik(pos, gripper_rot(heading, np.pi / 2, 0.0), q0, iters=300)
    best, best_err = q, np.inf
    for sign in (1.0, -1.0):
        seed = q.copy()
        seed[5] += sign * roll
        q_roll, err = arm.ik(pos, gripper_rot(heading, np.pi / 2, roll), seed, iters=300)
        if err < best_err:
            best, best_err = q_roll, err
    return best


def heading_from(base: np.ndarray, point: np.ndarray) -> float:
    """Heading (rad) in the table plane from an arm's base to `point`."""
    return float(np.arctan2(point[1] - base[1], point[0] - base[0]))


def right_grasp(cube: np.ndarray, k: SlideKnobs) -> tuple[np.ndarray, float, float]:
    """The right's drag grasp on the cube pose (7,): TCP (3,), heading and roll of a top-down gripper
    closing on the faces whose normal lies nearest world y, the finger tips `drag_height` above the table."""
    heading = heading_from(RIGHT_BASE, cube)
    roll = top_down_roll(heading, face_yaw(cube, np.pi / 2))
    return np.array([cube[0], cube[1], k.drag_height + TIP]), heading, roll


def drag_end(cube: np.ndarray, k: SlideKnobs) -> np.ndarray:
    """Where the drag puts the cube's centre (x, y): the target, or `drag_length` toward it if it lies
    farther."""
    start, target = cube[:2], np.array([k.target_x, k.target_y])
    distance = float(np.linalg.norm(target - start))
    return target if distance <= k.drag_length else start + k.drag_length / distance * (target - start)


def left_grasp(cube: np.ndarray, k: SlideKnobs) -> tuple[np.ndarray, float, float]:
    """The left's pick on the cube pose (7,): top-down, closing on the faces whose normal lies nearest its
    heading (the pair the right left free), tips `TAKE_HEIGHT` above the table, moved `left_offset` along
    its finger axis. Returns the TCP (3,), heading and roll."""
    heading = heading_from(LEFT_BASE, cube)
    roll = top_down_roll(heading, face_yaw(cube, heading))
    closing = gripper_rot(heading, np.pi / 2, roll)[:, 1]
    return np.array([cube[0], cube[1], TAKE_HEIGHT + TIP]) + k.left_offset * closing, heading, roll


def drag_steps(length: float, k: SlideKnobs) -> int:
    """Control steps of a drag of `length` m at the mean speed `drag_speed` (at least one)."""
    return max(1, int(np.ceil(length / k.drag_speed / DT - 1e-9)))  # 1e-9: 2.0 s is 100 steps, not 101


# --------------------------------------------------------------------------------------------- episode
class SlideEpisode:
    """One episode: the right's grasp, drag and retreat and the left's staging planned at `READ`, the
    left's pick planned once the right has cleared, on the cube read then (or at `READ` without
    `reread`)."""

    def __init__(self, knobs: SlideKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k, self.arms = knobs, {"left": left, "right": right}
        self.start = {"left": state[:6].copy(), "right": state[7:13].copy()}
        self.q = dict(self.start)
        self.first_q: dict[str, np.ndarray] = {}  # joint goals of the first (joint-space) move
        self.first_end: dict[str, int] = {}
        self.keys: dict[str, tuple[list[int], list[np.ndarray]]] = {}
        self.rot: dict[str, np.ndarray] = {}
        self.grip = {"left": GRIPPER_OPEN, "right": GRIPPER_OPEN}
        self.events: dict[str, int] = {}
        self.read_at: np.ndarray | None = None  # the cube pose the right's plan was made on
        self.picked_on: np.ndarray | None = None  # the cube pose the left's pick was planned on
        self.risen: np.ndarray | None = None  # the right's joints at the top of its rise
        self.z_trim = 0.0  # m, integral trim of the right's commanded height while it drags

    def plan(self, cube: np.ndarray) -> None:
        """The right's drag and retreat and the left's staging, from the cube pose (7,)."""
        k, right, left = self.k, self.arms["right"], self.arms["left"]
        self.read_at = cube.copy()
        grasp, heading, roll = right_grasp(cube, k)
        end_xy = drag_end(cube, k)
        end = np.array([*end_xy, grasp[2]])
        pull0 = DOWN_AT + GRIP
        pull1 = pull0 + drag_steps(float(np.linalg.norm(end_xy - cube[:2])), k)
        release = max(pull1 + k.release_shift, DOWN_AT + 1)
        rise0 = max(release + OPEN_WAIT, pull1)
        pre = grasp + [0.0, 0.0, ABOVE]
        self.first_q["right"] = top_down_ik(right, pre, heading, roll, self.start["right"])
        self.first_end["right"] = PRE_AT
        self.keys["right"] = ([PRE_AT, DOWN_AT, pull0, pull1, rise0, rise0 + RISE],
                              [pre, grasp, grasp, end, end, end + [0.0, 0.0, RISE_BY]])  # fmt: skip
        self.rot["right"] = gripper_rot(heading, np.pi / 2, roll)
        home = rise0 + RISE
        self.events = {"close_right": DOWN_AT, "release": release, "home": home, "clear": home + CLEAR_AFTER}
        target = np.array([*end_xy, cube[2], *cube[3:7]])
        stage, heading, roll = left_grasp(target, k)
        stage = stage + STAGE_BY
        self.first_q["left"] = top_down_ik(left, stage, heading, roll, self.start["left"])
        self.first_end["left"] = STAGE_AT
        self.keys["left"] = ([STAGE_AT], [stage])
        self.rot["left"] = gripper_rot(heading, np.pi / 2, roll)

    def plan_pick(self, cube: np.ndarray) -> None:
        """The left's pick from its staging pose on the cube pose (7,): over it, down, close, lift."""
        self.picked_on = cube.copy()
        grasp, heading, roll = left_grasp(cube, self.k)
        t0, stage = self.events["clear"], self.keys["left"][1][0]
        pre, up = grasp + [0.0, 0.0, ABOVE], grasp + [0.0, 0.0, LIFT]
        t_pre, t_down = t0 + TO_PRE, t0 + TO_PRE + DOWN
        lift0 = t_down + HOLD
        # The stage's orientation was planned on the drag target; the pick turns to the cube's actual faces.
        self.keys["left"] = ([t0, t_pre, t_down, lift0, lift0 + LIFT_STEPS], [stage, pre, grasp, grasp, up])
        self.rot["left"] = gripper_rot(heading, np.pi / 2, roll)
        self.events["close_left"] = t_down

    def trim_height(self, t: int, state: np.ndarray) -> None:
        """Integrate the right hand's height error, measured by FK on its joints, while it drags.

        The servos sag less as the arm stretches toward the target, so the dragging hand rides up a few
        millimetres and carries the cube just clear of the table; the trim holds it `BEAR` under its grasp.
        """
        times, points = self.keys["right"]
        if times[2] <= t < self.events["release"]:
            measured, _ = self.arms["right"].fk(state[7:13])
            error = points[1][2] - BEAR - measured[2]
            self.z_trim = float(np.clip(self.z_trim + TRIM_GAIN * error, -TRIM_MAX, TRIM_MAX))

    def joints(self, side: str, t: int) -> np.ndarray:
        """The arm's joint command at step t: the first move in joint space, IK on the TCP lines, and for
        the right, once it has risen off the cube, a joint-space return to its start pose."""
        if side not in self.first_q:
            return self.start[side]
        if t < self.first_end[side]:
            ends = [READ, self.first_end[side]]
            self.q[side] = piecewise(ends, [self.start[side], self.first_q[side]], t, minimum_jerk)
            return self.q[side]
        home = self.events["home"]
        if side == "right" and t >= home:
            self.risen = self.q[side] if self.risen is None else self.risen
            return piecewise([home, home + HOME], [self.risen, self.start[side]], t, minimum_jerk)
        times, points = self.keys[side]
        pos = piecewise(times, points, t, smoothstep)
        if side == "right" and times[2] <= t < self.events["release"]:
            pos[2] += self.z_trim
        self.q[side], _ = self.arms[side].ik(pos, self.rot[side], self.q[side], iters=30, tol=2e-4)
        return self.q[side]

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        t = min(t, EPISODE_STEPS - 1)
        cube = batch["observation.environment_state"][b][:7].astype(float)
        if t == READ:
            self.plan(cube)
        if "home" in self.events:
            self.trim_height(t, batch["observation.state"][b].astype(float))
        if t == self.events.get("clear"):
            self.plan_pick(cube if self.k.reread else self.read_at)
        if t == self.events.get("close_right"):
            self.grip["right"] = self.k.squeeze
        if t == self.events.get("release"):
            self.grip["right"] = GRIPPER_OPEN
        if t == self.events.get("close_left"):
            self.grip["left"] = self.k.left_squeeze
        q_left, q_right = self.joints("left", t), self.joints("right", t)
        return np.concatenate([q_left, [self.grip["left"]], q_right, [self.grip["right"]]])


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.slide:make_policy` with `SlideKnobs` fields as kwargs."""
    return BimanualPolicy(checked_knobs(SlideKnobs, "slide", kwargs), SlideEpisode)


# Named settings for measure.py, as an engineer setting up the drag would run them.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "stale_reading": {"reread": False},
    "crawling_drag": {"drag_speed": 0.035},
    "far_target": {"target_x": 0.18},
    "left_offset": {"left_offset": 0.018},
    "light_squeeze": {"squeeze": 0.6},
    "early_release": {"release_shift": -70},
    "pressed_fast": {"drag_height": -0.02, "drag_speed": 0.6},
    "fingertip_drag": {"drag_height": 0.05},
    "slow_drag": {"drag_speed": 0.05},
}
