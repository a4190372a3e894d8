"""Family 11, `nudge`: push, then grasp: the right shoves the cube to the table centre, picks it up there.

How it acts. Each arm plays a queue of straight Cartesian segments of its tool centre point (TCP), timed by
a minimum-jerk ease with the orientation slerped; every step the pose on the segment is solved by damped
least-squares IK (`arm.py`, warm-started from the last solution) and the joint command moves toward it by
at most `JOINT_STEP` a step. Phases end on a clock, and the left's take and the right's release on events.

1. Right arm, push (non-prehensile). It reads the cube pose, closes its fingers, and comes top-down to a
   point behind the cube on the line from the cube's centre to `SPOT` (the table centre), its finger tips
   `PUSH_TIP_HEIGHT` above the table and its closed finger pair held across that line. It then slides
   horizontally along the line at about `PUSH_SPEED` until the fingers' front face stands where the cube's
   near face should be with the cube centred on `SPOT`, waits for the cube to stop, backs off and rises.
2. Right arm, grasp. It reads the cube pose again where the push left it (position and yaw), comes top-down
   over it (fingers on the side-face pair nearest the wrist's natural closing axis), descends until its
   finger tips clear the table by `TIP_CLEARANCE`, closes and lifts the cube straight up to `HANDOVER`.
3. Hand-over in mid-air. The left waits, level, 12 cm to the -x side of the hand-over point, its wrist
   turned a quarter turn so its fingers close vertically. Once the right has arrived it reads the cube in
   the right's hand, slides in horizontally along +x until its TCP is on the cube's centre, and closes on
   the cube's top and bottom faces (which the right, holding the side faces, leaves free). Once the left
   has closed (`RELEASE_WAIT` steps later) the right opens, rises and parks; the left backs away toward -x
   and lifts the cube clear.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `NudgeKnobs`; defaults = nominal) are failures of such a controller: a push whose contact is
off the cube's centre line (`push_offset`: the cube turns as it goes), a push that goes too far
(`push_overshoot`) or too fast (`push_speed_scale`: the cube slides on past the pusher), a push too high on
the cube's face (`push_height`: it tips), a right that grasps where it meant to push the cube instead of
re-reading it (`reread=False`), the left's approach height and depth offsets (`left_offset_z`,
`left_offset_x`), too shallow a squeeze by the left (`left_squeeze`), a right that opens before the left
has closed (`release_lead`), rushed phases (`timing_scale`) and slowly varying joint noise (`joint_noise`,
`noise_tau`).
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
    RIGHT_BASE,
    BimanualPolicy,
    cube_yaw,
    episode_rng,
    minimum_jerk,
    smooth_noise,
)

EPISODE_STEPS = 400
SPOT = np.array([0.0, 0.50])  # where the push brings the cube's centre (x, y): the table centre
HANDOVER = np.array([0.0, 0.50, 0.20])  # where the right holds the cube's centre for the hand-over
TIP_REACH = 0.029  # m, finger tips past the TCP (arm.py)
TIP_CLEARANCE = 0.006  # m between the finger tips and the table at a grasp
PUSH_TIP_HEIGHT = 0.010  # m between the finger tips and the table while pushing
PUSHER_HALF = 0.012  # m from the TCP of the closed fingers to their front face, across the closing axis
PUSH_GAP = 0.03  # m between the pusher's front face and the cube's near face before the push
PUSH_SPEED = 0.25  # m/s, mean speed of the push
BACK_OFF = 0.03  # m the pusher backs away from the cube after the push
PRE_HEIGHT = 0.08  # m above a low pose where a hand lines up before it descends
LEFT_STANDOFF = 0.12  # m to the -x side of the cube where the left waits before it slides in
RELEASE_WAIT = 10  # steps after the left has finished closing before the right opens
PARK_R = np.array([0.25, 0.50, 0.30])  # where the right parks its TCP
GRIP_STEPS = 10  # steps over which a gripper command ramps
JOINT_STEP = 0.1  # rad, the most a joint command moves in one step
DOWN = np.array([0.0, 0.0, -1.0])
UP = np.array([0.0, 0.0, 1.0])
FPS = 50

# Nominal durations (steps); `timing_scale` scales every one.
R_REACH, R_DESCEND, R_SETTLE, R_BACK, R_RISE = 40, 20, 8, 12, 15  # right, push: to behind the cube ... rise
R_OVER, R_GRASP, R_CLOSE, R_LIFT, R_OPEN, R_AWAY = 25, 20, 15, 40, 10, 20  # right, grasp ... park
L_STAGE, L_IN, L_CLOSE, L_OUT = 80, 25, 15, 25  # left: staging, sliding in, closing, backing away


@dataclass
class NudgeKnobs:
    """How the push-then-grasp controller deviates from its nominal behaviour; defaults = the nominal one."""

    push_offset: float = 0.0  # m, the pusher's line runs this far beside the cube's centre (it turns)
    push_overshoot: float = 0.0  # m, the push goes this much farther than SPOT
    push_speed_scale: float = 1.0  # scales the push speed (> 1: the cube slides on past the pusher)
    push_height: float = PUSH_TIP_HEIGHT  # m, finger tips above the table while pushing
    reread: bool = True  # False: the right grasps at SPOT (where it meant to push the cube), yaw 0
    left_offset_x: float = 0.0  # m, the left's TCP this far past the cube centre along +x (its approach)
    left_offset_z: float = 0.0  # m, ... above the cube centre
    left_squeeze: float = GRIPPER_CLOSED  # the left's closing command (its pads touch the cube at ~0.6)
    release_lead: int = 0  # steps earlier than nominal at which the right opens (nominal: RELEASE_WAIT
    # steps after the left has finished closing; > RELEASE_WAIT: before the left's fingers are shut)
    timing_scale: float = 1.0  # scales every duration (< 1: phases too short for the arms)
    joint_noise: float = 0.0  # rad, std of slowly varying noise on every arm joint command
    noise_tau: float = 10.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if self.push_speed_scale <= 0 or self.push_height < 0:
            raise ValueError("push_speed_scale must be > 0 and push_height >= 0.")
        if self.timing_scale <= 0 or self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError("timing_scale and noise_tau must be > 0, joint_noise >= 0.")
        if not GRIPPER_CLOSED <= self.left_squeeze <= GRIPPER_OPEN:
            raise ValueError(f"left_squeeze={self.left_squeeze} must lie in [0, 1].")


class Segment:
    """A straight TCP move over steps [t0, t0 + duration], minimum-jerk in time, orientation slerped."""

    def __init__(self, t0: int, duration: int, p0, r0, p1, r1):
        self.t0, self.duration = t0, max(1, int(duration))
        self.p0, self.p1 = np.asarray(p0, dtype=float), np.asarray(p1, dtype=float)
        self.slerp = Slerp([0.0, 1.0], Rotation.from_matrix(np.stack([r0, r1])))

    @property
    def end(self) -> int:
        return self.t0 + self.duration

    def pose(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        s = float(minimum_jerk((t - self.t0) / self.duration))
        return self.p0 + s * (self.p1 - self.p0), self.slerp([s]).as_matrix()[0]


class Hand:
    """One arm: the present segment, IK warm-started from the last solution, a rate-limited command."""

    def __init__(self, arm: Arm, q: np.ndarray):
        self.arm = arm
        self.q = np.asarray(q, dtype=float)
        self.q_ik = self.q.copy()
        self.pos, self.rot = arm.fk(self.q)
        self.seg: Segment | None = None
        self.grip = GRIPPER_OPEN

    def move(self, t0: int, duration: int, goal, rot) -> Segment:
        self.seg = Segment(t0, duration, self.pos, self.rot, goal, rot)
        return self.seg

    def done(self, t: int) -> bool:
        return self.seg is None or t >= self.seg.end

    def step(self, t: int) -> None:
        if self.seg is not None:
            self.pos, self.rot = self.seg.pose(t)
        self.q_ik, _ = self.arm.ik(self.pos, self.rot, self.q_ik, iters=12, rot_weight=0.4, damping=0.015)
        self.q = self.q + np.clip(self.q_ik - self.q, -JOINT_STEP, JOINT_STEP)


def natural_closing(xy: np.ndarray) -> np.ndarray:
    """The right's top-down closing axis over `xy` at wrist_rotate 0: horizontal, across its heading."""
    heading = np.arctan2(xy[1] - RIGHT_BASE[1], xy[0] - RIGHT_BASE[0])
    return np.array([-np.sin(heading), np.cos(heading), 0.0])


def top_down(closing: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """Top-down orientation closing along `closing`, signed like the wrist's natural axis (no flip)."""
    natural = natural_closing(xy)
    return rotation(DOWN, closing if closing @ natural >= 0 else -closing)


class NudgeEpisode:
    """One episode: the right's push, re-read and grasp, the mid-air hand-over to the left."""

    def __init__(self, knobs: NudgeKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right = Hand(right, state[7:13])
        self.left = Hand(left, state[:6])
        self.noise = smooth_noise(episode_rng(knobs.seed, cube), EPISODE_STEPS, 12, knobs.joint_noise,
                                  knobs.noise_tau)  # fmt: skip
        self.phase_r, self.phase_l = "start", "start"
        self.t_r = self.t_l = 0
        self.t_left_closed = -1  # when the left finished closing
        self.t_release = -1  # when the right is to open (set as the left slides in)
        self.pushed_cube: np.ndarray | None = None  # the cube as the right read it after the push (record)
        self.left_rot = rotation(np.array([1.0, 0.0, 0.0]), UP)  # level along +x, fingers closing vertically

    def _dur(self, steps: float) -> int:
        return max(1, int(round(steps * self.k.timing_scale)))

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        cube = batch["observation.environment_state"][b][:7].astype(float)
        self._right_step(t, cube)
        self._left_step(t, cube)
        self.right.step(t)
        self.left.step(t)
        noise = self.noise[min(t, len(self.noise) - 1)]
        return np.concatenate([
            self.left.q + noise[:6], [self.left.grip], self.right.q + noise[6:], [self.right.grip],
        ])  # fmt: skip

    # ------------------------------------------------------------------ right arm
    def _plan_push(self, cube: np.ndarray) -> None:
        k = self.k
        line = SPOT - cube[:2]
        dist = float(np.linalg.norm(line))
        self.direction = line / dist if dist > 1e-6 else np.array([-1.0, 0.0])
        d3 = np.array([*self.direction, 0.0])
        side = np.array([-self.direction[1], self.direction[0], 0.0])  # across the line
        z = k.push_height + TIP_REACH
        back = CUBE_HALF + PUSHER_HALF  # TCP behind the cube's centre when the pusher touches its face
        self.push_rot = top_down(side, cube[:2])
        self.push_start = np.array([*cube[:2], z]) - d3 * (back + PUSH_GAP) + side * k.push_offset
        self.push_end = np.array([*SPOT, z]) - d3 * (back - k.push_overshoot) + side * k.push_offset
        length = float(np.linalg.norm(self.push_end - self.push_start))
        # Minimum-jerk peaks at 1.875x its mean speed; the mean is PUSH_SPEED.
        self.push_steps = max(8, int(round(length / (PUSH_SPEED * k.push_speed_scale) * FPS)))

    def _right_step(self, t: int, cube: np.ndarray) -> None:
        k, h, d = self.k, self.right, self._dur
        elapsed = t - self.t_r
        if self.phase_r == "start":
            self._plan_push(cube)
            h.grip = GRIPPER_CLOSED
            h.move(t, d(R_REACH), self.push_start + PRE_HEIGHT * UP, self.push_rot)
            self.phase_r, self.t_r = "reach", t
        elif self.phase_r == "reach" and h.done(t):
            h.move(t, d(R_DESCEND), self.push_start, self.push_rot)
            self.phase_r, self.t_r = "descend", t
        elif self.phase_r == "descend" and h.done(t):
            h.move(t, self._dur(self.push_steps), self.push_end, self.push_rot)
            self.phase_r, self.t_r = "push", t
        elif self.phase_r == "push" and h.done(t) and elapsed >= 0:
            self.phase_r, self.t_r = "settle", t
        elif self.phase_r == "settle" and elapsed >= d(R_SETTLE):
            back = h.pos - BACK_OFF * np.array([*self.direction, 0.0])
            h.move(t, d(R_BACK), back, self.push_rot)
            self.phase_r, self.t_r = "back", t
        elif self.phase_r == "back" and h.done(t):
            h.move(t, d(R_RISE), h.pos + PRE_HEIGHT * UP, self.push_rot)
            h.grip = GRIPPER_OPEN
            self.phase_r, self.t_r = "rise", t
        elif self.phase_r == "rise" and h.done(t):
            # Read the cube where the push left it (or trust the plan: at SPOT, unturned).
            self.pushed_cube = cube.copy()
            target = cube if k.reread else np.array([*SPOT, CUBE_HALF, 1.0, 0.0, 0.0, 0.0])
            yaw = cube_yaw(target[3:7])
            faces = [
                np.array([np.cos(yaw + j * np.pi / 2), np.sin(yaw + j * np.pi / 2), 0.0]) for j in (0, 1)
            ]
            natural = natural_closing(target[:2])
            self.grasp_rot = top_down(max(faces, key=lambda v: abs(v @ natural)), target[:2])
            self.grasp = np.array([*target[:2], TIP_CLEARANCE + TIP_REACH])
            h.move(t, d(R_OVER), self.grasp + PRE_HEIGHT * UP, self.grasp_rot)
            self.phase_r, self.t_r = "over", t
        elif self.phase_r == "over" and h.done(t):
            h.move(t, d(R_GRASP), self.grasp, self.grasp_rot)
            self.phase_r, self.t_r = "grasp", t
        elif self.phase_r == "grasp" and h.done(t):
            self.phase_r, self.t_r = "close", t
        elif self.phase_r == "close":
            h.grip = max(GRIPPER_CLOSED, GRIPPER_OPEN - elapsed / GRIP_STEPS)
            if elapsed >= d(R_CLOSE):
                hold = h.pos - cube[:3]  # TCP minus cube centre, as grasped
                h.move(t, d(R_LIFT), HANDOVER + hold, self.grasp_rot)
                self.phase_r, self.t_r = "lift", t
        elif self.phase_r == "lift" and h.done(t):
            self.phase_r, self.t_r = "hold", t
        elif self.phase_r == "hold" and 0 <= self.t_release <= t:
            self.phase_r, self.t_r = "open", t
        elif self.phase_r == "open":
            h.grip = min(GRIPPER_OPEN, elapsed / GRIP_STEPS)
            if elapsed >= d(R_OPEN):
                h.move(t, d(R_AWAY), h.pos + 0.08 * UP, h.rot)
                self.phase_r, self.t_r = "rise_clear", t
        elif self.phase_r == "rise_clear" and h.done(t):
            h.move(t, d(R_AWAY), PARK_R, h.rot)
            self.phase_r, self.t_r = "park", t

    # ------------------------------------------------------------------ left arm
    def _left_step(self, t: int, cube: np.ndarray) -> None:
        k, h, d = self.k, self.left, self._dur
        elapsed = t - self.t_l
        offset = np.array([k.left_offset_x, 0.0, k.left_offset_z])
        if self.phase_l == "start":
            h.move(t, d(L_STAGE), HANDOVER - [LEFT_STANDOFF, 0.0, 0.0], self.left_rot)
            self.phase_l, self.t_l = "stage", t
        elif self.phase_l == "stage" and h.done(t) and self.phase_r == "hold":
            # The right holds the cube up: read it in the right's hand, line up level with it, slide in.
            self.take = cube[:3] + offset
            h.move(t, d(L_IN) // 2, self.take - [LEFT_STANDOFF, 0.0, 0.0], self.left_rot)
            self.phase_l, self.t_l = "line_up", t
        elif self.phase_l == "line_up" and h.done(t):
            h.move(t, d(L_IN), self.take, self.left_rot)
            self.t_release = t + d(L_IN) + d(L_CLOSE) + RELEASE_WAIT - k.release_lead
            self.phase_l, self.t_l = "slide_in", t
        elif self.phase_l == "slide_in" and h.done(t):
            self.phase_l, self.t_l = "close", t
        elif self.phase_l == "close":
            h.grip = max(k.left_squeeze, GRIPPER_OPEN - elapsed / GRIP_STEPS)
            if elapsed >= d(L_CLOSE):
                self.t_left_closed = t
                self.phase_l, self.t_l = "wait", t
        elif self.phase_l == "wait" and self.phase_r in ("rise_clear", "park"):
            h.move(t, d(L_OUT), h.pos + [-0.08, 0.0, 0.05], h.rot)
            self.phase_l, self.t_l = "out", t


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.nudge:make_policy` with `NudgeKnobs` fields as kwargs."""
    return BimanualPolicy(NudgeKnobs(**kwargs), NudgeEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "push_off_centre": {"push_offset": 0.015},
    "left_high": {"left_offset_z": 0.02},
    "push_high": {"push_height": 0.035},
    "blind_grasp": {"reread": False},
    "fast_push": {"push_speed_scale": 3.0},
    "servo_noise": {"joint_noise": 0.04},
    "far_push_blind": {"push_overshoot": 0.03, "reread": False},
    "left_higher": {"left_offset_z": 0.025},
    "early_release": {"release_lead": 45},
}
"""Named settings of `nudge`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families nudge --episodes 50 --detector-poses 0`, 50 ID + 50 OOD
episodes each, seed 0; also in measured.json). Success is measure.py's: reward 4 reached at some step.

| setting         | what goes wrong                                                       | ID    | OOD   |
|-----------------|-----------------------------------------------------------------------|-------|-------|
| nominal         | nothing (the push is rough all the same: the cube often turns by up   | 50/50 | 49/50 |
|                 | to ~60 degrees or rides onto an edge and stops 1-5 cm from SPOT; the  |       |       |
|                 | re-read grasp takes it wherever it lies)                              |       |       |
| push_off_centre | the pusher's line runs 1.5 cm beside the cube's centre: it turns more | 50/50 | 48/50 |
| left_high       | the left closes 2 cm above the cube's centre                          | 47/50 | 47/50 |
| push_high       | the finger tips push 3.5 cm above the table, near the cube's top      | 39/50 | 41/50 |
|                 | edge: the cube turns and tumbles (in checks up to half a turn) and    |       |       |
|                 | stops up to ~10 cm from SPOT                                          |       |       |
| blind_grasp     | the right grasps at SPOT, unturned, instead of re-reading the cube    | 32/50 | 37/50 |
| fast_push       | the push three times as fast (peak ~1.4 m/s): the cube slides on      | 25/50 | 44/50 |
|                 | past SPOT, in checks by up to 23 cm, and the grasp there often fails |       |       |
| servo_noise     | slowly varying joint noise, std 0.04 rad                              | 22/50 | 19/50 |
| far_push_blind  | the push goes 3 cm past SPOT, and the right grasps at SPOT blind      | 20/50 | 24/50 |
| left_higher     | the left closes 2.5 cm above the cube's centre                        | 16/50 | 6/50  |
| early_release   | the right opens 45 steps early, before the left has begun to close:   | 2/50  | 2/50  |
|                 | the cube falls                                                        |       |       |

Not among the settings (10 ID + 10 OOD episodes each in quick checks): `left_offset_z=0.015` 20/20,
`left_offset_x=-0.03` 20/20, `left_squeeze=0.55` 20/20 and 0.63 4/10 ID, `release_lead=20` and 30 20/20,
`timing_scale=0.5` 18/20 and 0.35 0/10 ID, `joint_noise=0.06` 0/20, `push_offset=0.015` with
`reread=False` 10/20, `push_speed_scale=3` with `reread=False` 9/20.
"""
