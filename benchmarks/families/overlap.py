"""Family 9, `overlap`: concurrent minimum-jerk trajectories and a hand-over caught in motion.

How it acts. The two arms do not take turns. Each arm plays time-parameterized Cartesian trajectories of
its tool centre point (TCP): minimum-jerk in position, slerp in orientation, each segment timed in steps
from the start of the episode; every step the pose on the trajectory is re-solved by damped
least-squares IK (`arm.py`, a few iterations warm-started from the last solution) and sent as the joint
command. Both arms' trajectories run at the same time.

1. Right arm. It reads the cube pose and picks, of the cube's two side-face pairs, the one whose normal
   is nearest the world y axis, so its fingers close along world y whatever the cube's yaw. It comes down
   nearly top-down (tilted `RIGHT_TILT_DEG` so its hand leans back over its own side, +x), its fingers
   set `RIGHT_SHIFT` toward +x so that they hold the cube's +x part, closes, lifts, and then carries the
   cube along a slow minimum-jerk path from above where it lay toward the table centre, rising from
   `meet_low` to `meet_high` (the meeting point moves: the hand-over happens on this path, not at its end).
2. Left arm. It sets off while the right is still closing: a minimum-jerk trajectory whose goal is not a
   fixed point but the cube as the left predicts it `predict_lead` steps ahead, from the velocity of the
   last cube poses (`velocity_window` steps apart). It comes from above, tilted `LEFT_TILT_DEG` in from
   its own side, fingers along the same face pair on the cube's free -x part, first to a stand-off above
   the moving cube, then onto it, and closes on it while both hands are still moving. Once its fingers
   have stopped closing (the reported opening stalls on the cube), the right opens and backs away; the
   left keeps following the cube's extrapolated path until the right has let go, then lifts it away.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `OverlapKnobs`; defaults = nominal) are failures of such a controller: the cube's motion not
predicted (the left aims where the cube was) or read late, a carry so fast the left cannot catch up, a left
that starts too late, a right that opens on a timer instead of on the left's fingers, a meeting path too
low, a grasp axis that ignores the cube's yaw, segment timings too short for the arms, and slowly varying
joint noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from families.arm import Arm, rotation
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    BimanualPolicy,
    cube_yaw,
    episode_rng,
    minimum_jerk,
    smooth_noise,
)

EPISODE_STEPS = 400
RIGHT_TILT_DEG = 10.0  # the right approach leans this far from vertical, hand back over +x
RIGHT_SHIFT = 0.015  # m the right fingers sit toward +x of the cube centre (they hold its +x part)
LEFT_TILT_DEG = 30.0  # the left approach leans this far from vertical, hand over its own side (-x)
LEFT_SHIFT = 0.025  # m the left fingers sit toward -x of the cube centre
LEFT_DEPTH = 0.012  # m from the left TCP to the cube centre along its approach
TIP_CLEARANCE = 0.006  # m between the lowest right finger corner and the table at the grasp
TIP_REACH, PLATE_HALF = 0.029, 0.030  # m: finger tips past the TCP, half-width of a finger plate
PRE_GRASP = 0.07  # m back along the approach where the right lines up above the cube
LEFT_STANDOFF = 0.08  # m back along the left approach where it first meets the moving cube
MEET_END_X, MEET_Y = -0.03, 0.50  # where the carry path ends (cube centre, world)
CARRY_SPEED = 0.04  # m/s, mean speed of the nominal carry
GRIP_STEPS = 10  # steps over which a gripper command ramps
STALL_EPS = 0.01  # the left's fingers have stopped: its opening changed less than this over STALL_SPAN
STALL_SPAN = 2
JOINT_STEP = 0.1  # rad, the most a joint command moves in one step (a servo-safe rate limit)
HOME = np.array([0.0, -0.96, 1.16, 0.0, -0.3, 0.0])

# Nominal timeline (steps from the episode start); `timing_scale` scales every duration.
R_APPROACH, R_DESCEND, R_CLOSE, R_LIFT = 45, 30, 15, 35  # right segments
CARRY_MIN = 150  # steps, the shortest nominal carry
L_START = 80  # the left sets off while the right is still closing
L_REACH, L_APPROACH = 90, 35  # left segments: to the stand-off, onto the cube
R_RELEASE, R_RETREAT = 6, 40  # right: opening, backing off
L_AWAY = 40


@dataclass
class OverlapKnobs:
    """How the overlapping controller deviates from its nominal behaviour; defaults are the nominal one."""

    predict_lead: float = 6.0  # steps ahead the left predicts the cube (0: aims where it is seen)
    velocity_window: int = 4  # steps between the two cube poses the left's velocity estimate uses
    observe_lag: int = 0  # steps by which the left's cube reading is stale (not compensated)
    carry_scale: float = 1.0  # scales the carry's duration (< 1: a faster hand-over)
    left_delay: int = 0  # steps the left sets off later than nominal
    release_timer: int = -1  # >= 0: the right opens this many steps after the left set off (nominally the
    # left starts closing 125 steps after it sets off), whatever the left's fingers do; < 0: it opens once
    # the left's fingers have stopped closing on the cube
    meet_low: float = 0.15  # m, height of the cube centre where the carry path starts
    meet_high: float = 0.22  # m, ... and where it ends
    ignore_yaw: bool = False  # both hands close along world y even when the cube's faces are turned
    timing_scale: float = 1.0  # scales every segment's duration (< 1: too short for the arms)
    joint_noise: float = 0.0  # rad, std of slowly varying noise on every arm joint command
    noise_tau: float = 8.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if self.velocity_window < 1 or self.observe_lag < 0 or self.left_delay < 0:
            raise ValueError(
                f"velocity_window={self.velocity_window} must be >= 1, observe_lag={self.observe_lag} and "
                f"left_delay={self.left_delay} >= 0."
            )
        if self.carry_scale <= 0 or self.timing_scale <= 0 or self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError("carry_scale, timing_scale and noise_tau must be > 0, joint_noise >= 0.")
        if min(self.meet_low, self.meet_high) <= CUBE_HALF:
            raise ValueError(
                f"meet_low={self.meet_low} and meet_high={self.meet_high} must be above the table."
            )


class Trajectory:
    """A minimum-jerk move of a TCP from a start pose to a goal pose over steps [t0, t0 + duration].

    The goal may be a function of the step (a moving goal): at progress s the position is start + mj(s) *
    (goal(t) - start), so once the move has run out it follows the goal exactly.
    """

    def __init__(self, t0: int, duration: int, pos0: np.ndarray, rot0: np.ndarray, goal, rot1: np.ndarray):
        self.t0, self.duration = t0, max(1, int(round(duration)))
        self.pos0 = np.asarray(pos0, dtype=float)
        fixed = None if callable(goal) else np.asarray(goal, dtype=float)
        self.goal = goal if fixed is None else (lambda t: fixed)
        self.slerp = Slerp([0.0, 1.0], Rotation.from_matrix(np.stack([rot0, rot1])))

    @property
    def end(self) -> int:
        return self.t0 + self.duration

    def pose(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        s = float(minimum_jerk((t - self.t0) / self.duration))
        return self.pos0 + s * (self.goal(t) - self.pos0), self.slerp([s]).as_matrix()[0]


class Hand:
    """One arm: a queue of trajectories, IK per step warm-started from the last solution, a gripper."""

    def __init__(self, arm: Arm, q: np.ndarray):
        self.arm = arm
        self.q = np.asarray(q, dtype=float)  # joint command
        self.q_ik = self.q.copy()  # IK solution of the trajectory pose (warm start of the next solve)
        self.pos, self.rot = arm.fk(self.q)
        self.traj: Trajectory | None = None
        self.grip = GRIPPER_OPEN

    def move(self, t0: int, duration: float, goal, rot: np.ndarray) -> Trajectory:
        """Start a trajectory at step t0 from the present commanded pose."""
        self.traj = Trajectory(t0, duration, self.pos, self.rot, goal, rot)
        return self.traj

    def step(self, t: int) -> None:
        if self.traj is not None:
            self.pos, self.rot = self.traj.pose(t)
        self.q_ik, _ = self.arm.ik(self.pos, self.rot, self.q_ik, iters=12, rot_weight=0.4, damping=0.015)
        self.q = self.q + np.clip(self.q_ik - self.q, -JOINT_STEP, JOINT_STEP)


class OverlapEpisode:
    """One episode: the right's grasp-and-carry and the left's moving catch, stepped on every observation."""

    def __init__(self, knobs: OverlapKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right = Hand(right, state[7:13])
        self.left = Hand(left, state[:6])
        self.cubes: list[np.ndarray] = []  # every cube pose seen (the left's prediction reads the last ones)
        self.noise = smooth_noise(episode_rng(knobs.seed, cube), EPISODE_STEPS, 12, knobs.joint_noise,
                                  knobs.noise_tau)  # fmt: skip
        self.phase_r, self.phase_l = "start", "wait"
        self.t_set_off = self.t_close_l = self.t_stall = self.t_open = -1
        self.frozen: tuple[np.ndarray, np.ndarray, int] | None = (
            None  # cube, velocity, step at the left close
        )
        self.openings: list[float] = []

    # ------------------------------------------------------------------ geometry
    def _closing_axis(self, cube: np.ndarray) -> np.ndarray:
        """Unit horizontal normal of the cube's side-face pair nearest world y (world y if ignore_yaw)."""
        if self.k.ignore_yaw:
            return np.array([0.0, 1.0, 0.0])
        yaw = cube_yaw(cube[3:7])
        normals = [np.array([np.cos(yaw + k * np.pi / 2), np.sin(yaw + k * np.pi / 2), 0.0]) for k in (0, 1)]
        n = max(normals, key=lambda v: abs(v[1]))
        return n * np.sign(n[1])

    @staticmethod
    def _tilted(closing: np.ndarray, tilt_deg: float, toward_x: float) -> tuple[np.ndarray, np.ndarray]:
        """(rotation, plate-width axis) of a gripper closing along `closing`, its approach tilted from
        straight down by `tilt_deg` in the plane square to the closing axis, the hand leaning to `toward_x`
        (+1: hand over +x, approach pointing -x and down; -1: the reverse)."""
        side = np.cross(closing, [0.0, 0.0, 1.0])  # horizontal, square to the closing axis
        side *= np.sign(side[0]) * toward_x  # points where the hand leans
        b = np.radians(tilt_deg)
        approach = -np.sin(b) * side - np.cos(b) * np.array([0.0, 0.0, 1.0])
        # The finger axis either way round is the same grasp: take the sign the wrist reaches unrolled
        # (the closing axis to the left of the approach's heading, as at roll 0).
        heading = np.arctan2(-side[1], -side[0])
        closing = closing * np.sign(closing @ [-np.sin(heading), np.cos(heading), 0.0])
        rot = rotation(approach, closing)
        width = np.cross(approach, rot[:, 1])
        width *= np.sign(width @ side)  # the plate-width axis, pointing where the hand leans
        return rot, width

    def _right_grasp(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rot, width = self._tilted(self._closing_axis(cube), RIGHT_TILT_DEG, +1.0)
        a = rot[:, 0]
        # Depth along the approach so that the lowest finger corner clears the table by TIP_CLEARANCE.
        low = TIP_REACH * (-a[2]) + PLATE_HALF * abs(width[2])
        tcp_z = TIP_CLEARANCE + low
        centre = np.array([cube[0], cube[1], CUBE_HALF]) + RIGHT_SHIFT * width
        depth = (tcp_z - centre[2]) / (-a[2])
        return centre - depth * a, rot

    def _left_rot(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._tilted(self._closing_axis(cube), LEFT_TILT_DEG, -1.0)

    def _predicted(self, t: int) -> np.ndarray:
        """Cube centre the left aims at: its (possibly stale) reading, extrapolated predict_lead steps."""
        k = self.k
        if self.frozen is not None:  # after the left's close: the path extrapolated from the close
            cube, v, t0 = self.frozen
            return cube + v * (t - t0 + k.predict_lead)
        i = max(0, len(self.cubes) - 1 - k.observe_lag)
        j = max(0, i - k.velocity_window)
        seen = self.cubes[i][:3]
        v = (seen - self.cubes[j][:3]) / max(1, i - j)
        return seen + v * k.predict_lead

    def _velocity(self) -> np.ndarray:
        i = max(0, len(self.cubes) - 1 - self.k.observe_lag)
        j = max(0, i - self.k.velocity_window)
        return (self.cubes[i][:3] - self.cubes[j][:3]) / max(1, i - j)

    # ------------------------------------------------------------------ step
    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        cube = batch["observation.environment_state"][b][:7].astype(float)
        state = batch["observation.state"][b].astype(float)
        self.cubes.append(cube)
        self.openings.append(float(state[6]))
        self._right_step(t, cube)
        self._left_step(t, cube)
        self.right.step(t)
        self.left.step(t)
        noise = self.noise[min(t, len(self.noise) - 1)]
        return np.concatenate([
            self.left.q + noise[:6], [self.left.grip], self.right.q + noise[6:], [self.right.grip],
        ])  # fmt: skip

    def _right_step(self, t: int, cube: np.ndarray) -> None:
        k, h, ts = self.k, self.right, self.k.timing_scale
        if self.phase_r == "start":
            self.grasp_pos, self.grasp_rot = self._right_grasp(cube)
            pre = self.grasp_pos - PRE_GRASP * self.grasp_rot[:, 0]
            self.seg = h.move(t, R_APPROACH * ts, pre, self.grasp_rot)
            self.phase_r = "approach"
        elif self.phase_r == "approach" and t >= self.seg.end:
            self.grasp_pos, self.grasp_rot = self._right_grasp(cube)  # the cube has landed: read it again
            self.seg = h.move(t, R_DESCEND * ts, self.grasp_pos, self.grasp_rot)
            self.phase_r = "descend"
        elif self.phase_r == "descend" and t >= self.seg.end:
            self.phase_r, self.t_grip = "close", t
        elif self.phase_r == "close":
            h.grip = max(GRIPPER_CLOSED, GRIPPER_OPEN - (t - self.t_grip) / GRIP_STEPS)
            if t - self.t_grip >= R_CLOSE * ts:
                # The carry path of the cube centre: up over where it lay, then a slow sweep to the centre.
                self.hold = self.grasp_pos - np.array([cube[0], cube[1], CUBE_HALF])  # TCP minus cube centre
                start = np.array([cube[0], cube[1], k.meet_low])
                end = np.array([MEET_END_X, MEET_Y, k.meet_high])
                self.seg = h.move(t, R_LIFT * ts, start + self.hold, self.grasp_rot)
                duration = max(CARRY_MIN, 50 * np.linalg.norm(end - start) / CARRY_SPEED) * ts * k.carry_scale
                self.carry = Trajectory(self.seg.end, duration, start, np.eye(3), end, np.eye(3))
                self.phase_r = "lift"
        elif self.phase_r == "lift" and t >= self.seg.end:
            self.seg = h.move(t, 1, lambda s: self.carry.pose(s)[0] + self.hold, self.grasp_rot)
            self.phase_r = "carry"
        elif self.phase_r == "carry" and self._release_now(t):
            self.phase_r, self.t_open = "release", t
        elif self.phase_r == "release":
            h.grip = min(GRIPPER_OPEN, GRIPPER_CLOSED + (t - self.t_open) / R_RELEASE)
            if t - self.t_open >= R_RELEASE:
                back = h.pos - 0.07 * h.rot[:, 0] + np.array([0.03, 0.0, 0.0])
                self.seg = h.move(t, R_RETREAT, back, h.rot)
                self.phase_r = "retreat"

    def _release_now(self, t: int) -> bool:
        if self.k.release_timer >= 0:
            return self.t_set_off >= 0 and t - self.t_set_off >= self.k.release_timer
        if self.t_close_l < 0:
            return False
        return self.t_stall >= 0

    def _left_step(self, t: int, cube: np.ndarray) -> None:
        k, h, ts = self.k, self.left, self.k.timing_scale
        start = int(round(L_START * ts)) + k.left_delay
        if self.phase_l == "wait" and t >= start:
            self.left_rot, width = self._left_rot(cube)
            self.left_offset = -LEFT_DEPTH * self.left_rot[:, 0] + LEFT_SHIFT * width  # TCP minus cube centre
            standoff = self.left_offset - LEFT_STANDOFF * self.left_rot[:, 0]
            self.lseg = h.move(t, L_REACH * ts, lambda s: self._predicted(s) + standoff, self.left_rot)
            self.phase_l, self.t_set_off = "reach", t
        elif self.phase_l == "reach" and t >= self.lseg.end:
            self.lseg = h.move(
                t, L_APPROACH * ts, lambda s: self._predicted(s) + self.left_offset, self.left_rot
            )
            self.phase_l = "approach"
        elif self.phase_l == "approach" and t >= self.lseg.end:
            self.frozen = (self.cubes[-1 - min(k.observe_lag, len(self.cubes) - 1)][:3].copy(),
                           self._velocity(), t - k.observe_lag)  # fmt: skip
            self.phase_l, self.t_close_l = "close", t
        elif self.phase_l == "close":
            h.grip = max(GRIPPER_CLOSED, GRIPPER_OPEN - (t - self.t_close_l) / GRIP_STEPS * 1.0)
            moved = abs(self.openings[-1] - self.openings[-1 - STALL_SPAN])
            if self.t_stall < 0 and t - self.t_close_l >= 4 and moved < STALL_EPS:
                self.t_stall = t
            if self.phase_r == "retreat" and t - self.t_open >= R_RELEASE + 4:
                away = h.pos + np.array([-0.08, 0.0, 0.06])
                self.lseg = h.move(t, L_AWAY, away, h.rot)
                self.phase_l = "away"


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.overlap:make_policy` with `OverlapKnobs` fields as kwargs."""
    return BimanualPolicy(OverlapKnobs(**kwargs), OverlapEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "no_prediction": {"predict_lead": 0},
    "stale_reading": {"observe_lag": 25},
    "rushed": {"timing_scale": 0.4},
    "servo_noise": {"joint_noise": 0.04},
    "fast_handover": {"carry_scale": 0.5},
    "fast_stale": {"carry_scale": 0.5, "observe_lag": 10},
    "servo_noise_heavy": {"joint_noise": 0.06},
    "timer_release": {"release_timer": 115},
    "left_late": {"left_delay": 190},
}
"""Named settings of `overlap`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families overlap --episodes 50 --detector-poses 0`, 50 ID + 50 OOD
episodes each, seed 0; also in measured.json). Success is measure.py's: reward 4 reached at some step.

| setting           | what goes wrong                                                     | ID    | OOD   |
|-------------------|---------------------------------------------------------------------|-------|-------|
| nominal           | nothing                                                             | 50/50 | 49/50 |
| no_prediction     | the left aims where the cube is seen, not ahead: the slow carry     | 50/50 | 48/50 |
|                   | (~5 cm/s at the take) leaves it a few mm behind, still on the cube  |       |       |
| stale_reading     | the left reads the cube 25 steps late, uncompensated               | 49/50 | 42/50 |
| rushed            | every segment 0.4 times as long: the arms lag their trajectories    | 43/50 | 50/50 |
| servo_noise       | slowly varying joint noise, std 0.04 rad                            | 36/50 | 38/50 |
| servo_noise_heavy | the same noise, std 0.06 rad                                        | 28/50 | 30/50 |
| fast_handover     | the carry in half the time: the cube is still fast, or decelerating |       |       |
|                   | against the left's linear extrapolation, when the left closes      | 22/50 | 28/50 |
| fast_stale        | that fast carry, and the left's cube reading 10 steps late          | 23/50 | 40/50 |
| timer_release     | the right opens 115 steps after the left set off, before the left   | 0/50  | 0/50  |
|                   | has started to close: the cube drops past its open fingers          |       |       |
| left_late         | the left sets off 190 steps late: time runs out before it closes    | 0/50  | 0/50  |

Not among the settings: aiming 15 steps ahead (`predict_lead=15`) misses the cube's -x part in ID (15/50) but
not in OOD (42/50); a meeting path 3 cm above the table (`meet_low=meet_high=0.03`, 10/10 ID in a quick
check) does not fail; `ignore_yaw` changes nothing here, since every cube starts and lands unturned.
"""
