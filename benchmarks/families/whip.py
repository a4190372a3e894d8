"""Family 32, `whip`: time-optimal, acceleration-limited moves, as a controller tuned for cycle time.

How it acts. Every move runs on the time-optimal profile under a velocity limit `speed` and an acceleration
limit `accel`: full acceleration, coast at the limit (if the move is long enough to reach it), full
deceleration (bang-coast-bang; a triangle when the move is too short to reach the speed). A jerk limit is
the classic FIR shaping: the trapezoidal velocity is averaged over a window of `blend` seconds, which keeps
both limits, ramps the acceleration over `blend` and lengthens the move by exactly `blend`. Transits from
the start pose are PTP moves (a straight line in joint space, all six joints on one profile, synchronised
to the joint with the farthest to go; the goal solved once by damped least-squares IK, `arm.py`); every
move near the cube is a LIN move (a straight line of the tool centre point, TCP, the orientation turned
along the geodesic, solved by IK every step, warm-started), so the cube itself rides the profile. No
move waits for an event: each starts when the one before it ends (plus a dwell), as short as the limits
allow; only the left's take is planned late, on the cube read where it hangs.

Geometry (world frame, metres):
1. Right arm. From its own side: heading -x, pitched `GRASP_PITCH` (~69 degrees) down, fingers unrolled
   so they close along world y, on the cube's y faces; the TCP on the approach axis through the cube's
   centre, `grasp_height` above it (tips ~5 mm past the centre: it holds the upper +x part of the faces).
   PTP to `ABOVE` back along the approach, LIN in, `dwell` steps, close to `squeeze`, `grip` steps, LIN
   `LIFT` straight up, then one LIN carry, orientation unchanged, that puts the cube's centre at the
   hand-over point (`handover_x`, `HANDOVER_Y`, `handover_z`), and holds.
2. Left arm. Heading +x, pitched `TAKE_PITCH` (~29 degrees) down from above its own side, fingers along
   world y: PTP to a staging pose `STANDOFF` back along its approach while the right grasps; `SETTLE` steps
   after the right has arrived it reads the cube (the planned point if the reading is not within `TRUST`
   of it) and goes in LIN until its TCP is `TAKE_BACK` on -x of the cube's centre and `TAKE_BELOW` under
   it: it pinches the lower -x part of the same y faces, under the right's finger tips.
3. Release. The left closes to `squeeze` and grips; the right opens, waits `RELEASE_DWELL` steps and backs
   off `BACK_OFF` along its approach, while the left draws the cube `DRAW_BACK` back along its own.

State-only: reads `observation.state` and `observation.environment_state`, never an image. Kwargs (see
`WhipKnobs`; defaults = nominal) are what an engineer tuning cycle time sets or gets wrong: the
acceleration and velocity limits, the jerk-limiting blend (0: bang-bang, the acceleration jumps), the
closed gripper command of both hands (the fingers touch the cube near 0.6; above ~0.55 they barely press),
how high on the cube the right grasps (a fingertip hold), the dwells before closing and before lifting, the
hand-over point, and a noisy cube reading. Hard profiles fling the cube: at 45-100 m/s^2 with little or
no blend the servos overshoot and the cube slips out of the right's pads on the lift or the carry and
falls before the left arrives; a light squeeze or a fingertip hold lets it slip out at far lower
accelerations. Settings were tuned on the reference world's success only (left finger on the cube, off
the table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from families.arm import Arm
from families.common import (
    GRIPPER_OPEN,
    BimanualPolicy,
    checked_knobs,
    episode_rng,
    gripper_rot,
    refuse_invalid,
    rotvec_matrix,
)

EPISODE_STEPS = 400
DT = 0.02  # s: one control step (50 Hz)
READ = 10  # step: the cube has landed, the plan is made on what is read then
GRASP_PITCH = 1.2  # rad: the right's approach below horizontal
ABOVE = 0.07  # m: the right's pre-grasp, back along its approach
LIFT = 0.05  # m: the straight lift before the carry
HANDOVER_Y = 0.5  # m: world y of the hand-over point
STANDOFF = 0.10  # m: the left stages this far back along its approach from its take
TAKE_PITCH = 0.5  # rad: the left comes down from above its own side
TAKE_BACK = 0.02  # m: the left's TCP this far -x of the cube's centre (its tips ~5 mm past it)
TAKE_BELOW = 0.01  # m: and this far below it, its pads under the right's finger tips
TRUST = 0.06  # m: the left believes the cube it reads at the hand-over only this close to the planned point
BACK_OFF = 0.10  # m: the right backs off along its approach after letting go
DRAW_BACK = 0.06  # m: the left draws the cube back along its approach
# Turning counts as moving a point this far out (m per rad): a LIN move's length covers its rotation too.
ROT_RADIUS = 0.1
# PTP moves: a joint radian counts as this many metres of TCP travel (the arm is ~0.35-0.6 m long), so one
# pair of limits serves both kinds of move.
JOINT_REACH = 0.4
SETTLE = 6  # steps: the right dwells at the hand-over before the left reads the cube
RELEASE_DWELL = 8  # steps: the right stays open before it backs off


@dataclass
class WhipKnobs:
    """How the cycle-time tuning deviates from its nominal values; defaults = nominal."""

    accel: float = 3.0  # m/s^2, acceleration limit of every move (TCP, or joint radians x JOINT_REACH)
    speed: float = 0.6  # m/s, velocity limit
    blend: float = 0.08  # s, FIR window that limits jerk (0: bang-bang, the acceleration jumps)
    squeeze: float = 0.0  # closed gripper command of both hands (0: hardest; ~0.6 touches the cube)
    grasp_height: float = 0.022  # m, the right's TCP above the cube's centre (higher: a fingertip hold)
    dwell: int = 4  # steps at the grasp before closing (the servos still settle)
    grip: int = 12  # steps between closing and lifting (the fingers still close)
    handover_x: float = 0.0  # m, world x of the hand-over point
    handover_z: float = 0.24  # m, world z of the hand-over point
    cube_noise: float = 0.0  # m, std of the error on every cube reading (x, y, z)
    seed: int = 0  # seeds the cube-reading noise together with the episode's first observation

    def __post_init__(self) -> None:
        checks = {
            "accel": 0.05 <= self.accel <= 100.0,
            "speed": 0.01 <= self.speed <= 5.0,
            "blend": 0.0 <= self.blend <= 1.0,
            "squeeze": 0.0 <= self.squeeze <= 1.0,
            "grasp_height": -0.01 <= self.grasp_height <= 0.05,
            "dwell": 0 <= self.dwell <= 100,
            "grip": 0 <= self.grip <= 100,
            "handover_x": -0.25 <= self.handover_x <= 0.25,
            "handover_z": 0.08 <= self.handover_z <= 0.45,
            "cube_noise": self.cube_noise >= 0,
        }
        refuse_invalid(self, checks)


# ------------------------------------------------------------------------------------------------ profile
class WhipProfile:
    """Time-optimal distance s(t) over `length` under |v| <= speed, |a| <= accel, jerk-limited by `blend`.

    The bang-coast-bang trapezoid p(t) is the fastest rest-to-rest move under both limits; the blended
    profile is its moving average over the last `blend` seconds, (P(t) - P(t - blend)) / blend with P the
    antiderivative of p, which keeps the velocity and acceleration within the limits and ends `blend` later.
    """

    def __init__(self, length: float, speed: float, accel: float, blend: float = 0.0):
        self.length, self.accel, self.blend = float(length), float(accel), float(blend)
        if self.length <= speed * speed / accel:  # too short to reach the speed limit: a triangle
            self.t_acc = np.sqrt(self.length / accel)
            self.t_coast = 0.0
        else:
            self.t_acc = speed / accel
            self.t_coast = (self.length - speed * speed / accel) / speed
        self.v_peak = accel * self.t_acc
        self.t_end = 2 * self.t_acc + self.t_coast  # the trapezoid's duration
        self.duration = self.t_end + self.blend

    def trapezoid(self, t: float) -> float:
        """p(t): distance travelled at time t (s) on the unblended profile."""
        a, ta, t2, T = self.accel, self.t_acc, self.t_acc + self.t_coast, self.t_end
        if t <= 0:
            return 0.0
        if t < ta:
            return 0.5 * a * t * t
        if t < t2:
            return 0.5 * a * ta * ta + self.v_peak * (t - ta)
        if t < T:
            return self.length - 0.5 * a * (T - t) ** 2
        return self.length

    def integral(self, t: float) -> float:
        """P(t) = the integral of p from 0 to t (piecewise cubic)."""
        a, ta, t2, T, L = self.accel, self.t_acc, self.t_acc + self.t_coast, self.t_end, self.length
        if t <= 0:
            return 0.0
        if t < ta:
            return a * t**3 / 6
        P_ta = a * ta**3 / 6
        if t < t2:
            return P_ta + 0.5 * a * ta * ta * (t - ta) + 0.5 * self.v_peak * (t - ta) ** 2
        P_t2 = P_ta + 0.5 * a * ta * ta * self.t_coast + 0.5 * self.v_peak * self.t_coast**2
        if t < T:  # the integral of L - a (T - s)^2 / 2 is L s + a (T - s)^3 / 6
            return P_t2 + L * (t - t2) + a * ((T - t) ** 3 - (T - t2) ** 3) / 6
        return P_t2 + L * (T - t2) - a * (T - t2) ** 3 / 6 + L * (t - T)

    def __call__(self, t: float) -> float:
        """s(t), from 0 at t <= 0 to `length` at t >= `duration`."""
        if self.length <= 0:
            return 0.0
        if self.blend <= 0:
            return self.trapezoid(t)
        return (self.integral(t) - self.integral(t - self.blend)) / self.blend


def rotation_log(R: np.ndarray) -> np.ndarray:
    """Rotation vector (axis times angle, angle in [0, pi]) of the rotation matrix R; inverse of
    `rotvec_matrix`."""
    angle = float(np.arccos(np.clip((np.trace(R) - 1) / 2, -1.0, 1.0)))
    if angle < 1e-9:
        return np.zeros(3)
    if np.pi - angle > 1e-6:
        axis = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]) / (2 * np.sin(angle))
        return angle * axis
    # a half turn: R = 2 k k^T - I, so the axis is the largest column of (R + I) / 2, normalised
    S = (R + np.eye(3)) / 2
    axis = S[:, int(np.argmax(np.diag(S)))]
    return angle * axis / np.linalg.norm(axis)


# ------------------------------------------------------------------------------------------------- moves
@dataclass
class Move:
    """One move of one arm from step `start`: LIN (TCP pose to pose) or PTP (joints to joints)."""

    start: int
    profile: WhipProfile
    kind: str  # "lin" or "ptp"
    p0: np.ndarray  # LIN: TCP positions (3,); PTP: joint angles (6,)
    p1: np.ndarray
    R0: np.ndarray | None = None  # LIN: gripper orientations (3,3)
    turn: np.ndarray | None = None  # LIN: rotation vector from R0 to the goal, in R0's frame

    @property
    def end(self) -> int:
        """The first step at which the move has arrived (its command stays at the goal from then on)."""
        return self.start + int(np.ceil(self.profile.duration / DT - 1e-9))

    def fraction(self, t: int) -> float:
        length = self.profile.length
        return 1.0 if length <= 0 else self.profile((t - self.start) * DT) / length


def lin(start: int, p0: np.ndarray, R0: np.ndarray, p1: np.ndarray, R1: np.ndarray, k: WhipKnobs) -> Move:
    """A straight TCP line with the orientation turned along the geodesic, on one time-optimal profile."""
    turn = rotation_log(R0.T @ R1)
    length = max(float(np.linalg.norm(p1 - p0)), ROT_RADIUS * float(np.linalg.norm(turn)))
    profile = WhipProfile(length, k.speed, k.accel, k.blend)
    return Move(start, profile, "lin", np.asarray(p0, float), np.asarray(p1, float), R0, turn)


def ptp(start: int, q0: np.ndarray, q1: np.ndarray, k: WhipKnobs) -> Move:
    """All six joints on one profile, synchronised to the joint with the farthest to go."""
    length = JOINT_REACH * float(np.abs(q1 - q0).max())
    profile = WhipProfile(length, k.speed, k.accel, k.blend)
    return Move(start, profile, "ptp", np.asarray(q0, float), np.asarray(q1, float))


def lin_pose(move: Move, t: int) -> tuple[np.ndarray, np.ndarray]:
    """TCP position and orientation of a LIN move at step t."""
    f = move.fraction(t)
    return move.p0 + f * (move.p1 - move.p0), move.R0 @ rotvec_matrix(f * move.turn)


# ---------------------------------------------------------------------------------------------- geometry
def right_grasp(cube: np.ndarray, k: WhipKnobs) -> tuple[np.ndarray, np.ndarray]:
    """The right's grasp: TCP (3,) and rotation (3,3), from the cube's +x side, closing on its y faces.

    The TCP lies on the approach axis through the cube's centre, `grasp_height` above it.
    """
    R = gripper_rot(np.pi, GRASP_PITCH, 0.0)  # heading -x, unrolled: the fingers close along world y
    return cube[:3] - k.grasp_height / np.sin(GRASP_PITCH) * R[:, 0], R


def left_take(cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The left's take: heading +x, pitched `TAKE_PITCH`, fingers closing along world y, on the lower -x
    part of the faces the right holds."""
    R = gripper_rot(0.0, TAKE_PITCH, 0.0)
    return cube[:3] + np.array([-TAKE_BACK, 0.0, -TAKE_BELOW]), R


def handover_point(k: WhipKnobs) -> np.ndarray:
    """Where the cube's centre is carried to."""
    return np.array([k.handover_x, HANDOVER_Y, k.handover_z])


# ----------------------------------------------------------------------------------------------- episode
class WhipEpisode:
    """One episode: both arms' moves, planned at `READ`; the left's take and the release at the hand-over."""

    def __init__(self, knobs: WhipKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k, self.arms = knobs, {"left": left, "right": right}
        self.rng = episode_rng(knobs.seed, state, cube)
        self.start = {"left": state[:6].copy(), "right": state[7:13].copy()}
        self.q = dict(self.start)
        self.moves: dict[str, list[Move]] = {"left": [], "right": []}
        self.grip = {"left": GRIPPER_OPEN, "right": GRIPPER_OPEN}
        self.events: dict[str, int] = {}  # step -> what happens: close_right, take, close_left, release
        self.read_at_take: np.ndarray | None = None

    def read(self, cube: np.ndarray) -> np.ndarray:
        """The cube's centre as read (3,), with the reading's error."""
        return cube[:3] + self.rng.normal(0.0, self.k.cube_noise, 3)

    def plan(self, cube: np.ndarray) -> None:
        """The right's grasp, lift and carry and the left's staging, from the cube's centre (3,)."""
        k, right, left = self.k, self.arms["right"], self.arms["left"]
        grasp, R = right_grasp(cube, k)
        pre = grasp - ABOVE * R[:, 0]
        q_pre, _ = right.ik(pre, R, self.start["right"], iters=300)
        reach = ptp(READ, self.start["right"], q_pre, k)
        approach = lin(reach.end, pre, R, grasp, R, k)
        close = approach.end + k.dwell
        up = grasp + [0.0, 0.0, LIFT]
        lift = lin(close + k.grip, grasp, R, up, R, k)
        carry = lin(lift.end, up, R, handover_point(k) + (grasp - cube), R, k)
        self.moves["right"] = [reach, approach, lift, carry]
        self.events = {"close_right": close, "take": carry.end + SETTLE}
        stage, R_left = left_take(handover_point(k))
        stage = stage - STANDOFF * R_left[:, 0]
        q_stage, _ = left.ik(stage, R_left, self.start["left"], iters=300)
        self.moves["left"] = [ptp(READ, self.start["left"], q_stage, k)]
        self.stage = (stage, R_left)

    def plan_take(self, cube: np.ndarray) -> None:
        """The left goes in on the cube read where it hangs; the right lets go once the left grips."""
        k = self.k
        seen = self.read(cube)
        target = seen if np.linalg.norm(seen - handover_point(k)) < TRUST else handover_point(k)
        self.read_at_take = target
        take, R_left = left_take(target)
        go_in = lin(self.events["take"], *self.stage, take, R_left, k)
        close = go_in.end + k.dwell
        release = close + k.grip
        self.events.update(close_left=close, release=release)
        hand = self.moves["right"][-1]
        back = hand.p1 - BACK_OFF * hand.R0[:, 0]
        leave = release + RELEASE_DWELL
        self.moves["right"].append(lin(leave, hand.p1, hand.R0, back, hand.R0, k))
        self.moves["left"] += [go_in, lin(leave, take, R_left, take - DRAW_BACK * R_left[:, 0], R_left, k)]

    def joints(self, side: str, t: int) -> np.ndarray:
        """The arm's joint command at step t: the latest move that has started, or the start pose."""
        started = [m for m in self.moves[side] if m.start <= t]
        if not started:
            return self.start[side]
        move = started[-1]
        if move.kind == "ptp":
            self.q[side] = move.p0 + move.fraction(t) * (move.p1 - move.p0)
        else:
            pos, R = lin_pose(move, t)
            self.q[side], _ = self.arms[side].ik(pos, R, self.q[side], iters=30, tol=2e-4)
        return self.q[side]

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        t = min(t, EPISODE_STEPS - 1)
        cube = batch["observation.environment_state"][b][:7].astype(float)
        if t == READ:
            self.plan(self.read(cube))
        if t == self.events.get("take"):
            self.plan_take(cube)
        if t == self.events.get("close_right"):
            self.grip["right"] = self.k.squeeze
        if t == self.events.get("close_left"):
            self.grip["left"] = self.k.squeeze
        if t == self.events.get("release"):
            self.grip["right"] = GRIPPER_OPEN
        q_left, q_right = self.joints("left", t), self.joints("right", t)
        return np.concatenate([q_left, [self.grip["left"]], q_right, [self.grip["right"]]])


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.whip:make_policy` with `WhipKnobs` fields as kwargs."""
    return BimanualPolicy(checked_knobs(WhipKnobs, "whip", kwargs), WhipEpisode)


# Named settings for measure.py, as an engineer tuning cycle time would run them.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "brisk": {"accel": 8.0, "speed": 1.2},
    "hard_stop": {"accel": 45.0, "speed": 3.0, "blend": 0.02},
    "bang_bang": {"accel": 60.0, "speed": 3.0, "blend": 0.0},
    "reckless": {"accel": 100.0, "speed": 5.0, "blend": 0.0},
    "light_squeeze": {"squeeze": 0.555},
    "barely_closed": {"squeeze": 0.57},
    "fingertip_fast": {"grasp_height": 0.045, "accel": 25.0, "speed": 2.5, "blend": 0.0},
    "noisy_cube": {"cube_noise": 0.012},
    "slow_cycle": {"accel": 0.8, "speed": 0.22},
}
