"""Family 10, `table`: a table relay: the right sets the cube down at the table centre, the left picks it up.

How it acts. No hand-over in mid-air: the cube passes from hand to hand by way of the table. Each arm plays
a queue of Cartesian moves of its tool centre point (TCP); a move is a cubic Bezier arc (straight moves
are arcs with their control points on the line, transport moves bulge upward by a hump) timed by a cubic
ease, with the orientation slerped; every step the pose on the arc is solved by damped least-squares IK
(`arm.py`, a few iterations warm-started from the last solution) and the joint command moves toward it by
at most `JOINT_STEP` a step. The arms take turns: each phase ends on a clock, and the left starts on an
event (the right has let go and risen clear).

1. Right arm. It reads the cube pose, comes top-down over it (fingers along the side-face pair nearest
   world y), descends until its finger tips clear the table by `TIP_CLEARANCE`, closes, and carries the
   cube on an arc over a hump to hover above the set-down spot (`SPOT`, the table centre). There it reads
   the cube in its hand again (to learn the hold: TCP minus cube centre, gravity sag included), lowers it
   until the cube's bottom is `set_down_height` above the table (nominally on it), waits 12 steps for the
   lagging arm to put it down, opens fully, rises straight up and parks on the +x side.
2. Left arm. It goes early to a staging pose high above the table's left half and waits there. Once the
   right has risen clear it reads the cube where it now lies (position and yaw), comes top-down over it
   with its wrist turned a quarter turn, so that its fingers close on the other face pair (the one nearest
   world x, which the right never touched), descends to the same tip clearance, closes and lifts the cube.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `TableKnobs`; defaults = nominal) are failures of such a controller: a set-down spot off where
the right believes it puts the cube (`spot_dx`, `spot_dy`: a calibration error), a left that aims where the
cube was planned to lie instead of re-reading it (`left_reads_cube=False`), a set-down too high (the cube is
dropped, `set_down_height`), a right that opens while still lowering (`release_lead`), a right that backs
away along its finger axis at set-down height, sweeping the cube with a finger (`retreat_slide`), left grasp
offsets along the world axes (`left_offset_x/y/z`), too shallow a squeeze by the left (`left_squeeze`), a
left that ignores the cube's yaw (`ignore_yaw`: no setting uses it, the cube never turns here), rushed
phases (`timing_scale`) and slowly varying joint noise (`joint_noise`, `noise_tau`).
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
    smooth_noise,
    smoothstep,
)

EPISODE_STEPS = 400
SPOT = np.array([0.0, 0.50])  # where the cube is set down (x, y of its centre): the table centre
TIP_REACH = 0.029  # m, finger tips past the TCP (arm.py)
TIP_CLEARANCE = 0.006  # m between the finger tips and the table at a grasp
PRE_HEIGHT = 0.08  # m above the grasp pose where a hand lines up before it descends
HOVER = 0.10  # m above the set-down pose where the right reads the cube in its hand
HUMP = 0.08  # m the carry arc bulges above its higher end
RISE = 0.10  # m the right rises straight up after letting go
LIFT = 0.12  # m the left lifts the cube
STAGE_L = np.array([-0.22, 0.50, 0.22])  # the left's staging TCP, high over the table's left half
PARK_R = np.array([0.25, 0.50, 0.25])  # where the right parks its TCP
GRIP_STEPS = 10  # steps over which a gripper command ramps
JOINT_STEP = 0.1  # rad, the most a joint command moves in one step
DOWN = np.array([0.0, 0.0, -1.0])

# Nominal durations (steps); `timing_scale` scales every one.
R_REACH, R_DESCEND, R_CLOSE, R_CARRY, R_LOWER = 50, 25, 15, 60, 25  # right: to the cube ... lowering
R_OPEN, R_RISE, R_PARK = 10, 20, 40  # right: opening (the settle is `release_lead`), rising, parking
L_STAGE, L_REACH, L_DESCEND, L_CLOSE, L_LIFT = 60, 40, 25, 15, 30


@dataclass
class TableKnobs:
    """How the table-relay controller deviates from its nominal behaviour; defaults are the nominal one."""

    spot_dx: float = 0.0  # m, the right sets the cube down this far from SPOT along x (it believes: at SPOT)
    spot_dy: float = 0.0  # m, ... along y
    left_reads_cube: bool = True  # False: the left aims at SPOT (where the cube was to lie), not at the cube
    set_down_height: float = 0.0  # m, the cube's bottom above the table when the right stops and opens
    release_lead: int = -12  # steps before the end of the lowering at which the right starts to open (< 0:
    # that many steps after it: the nominal settle, in which the lagging arm puts the cube on the table)
    retreat_slide: float = 0.0  # m the open right hand first moves along its finger axis at set-down height
    left_offset_x: float = 0.0  # m, the left's grasp TCP off the cube centre along world x
    left_offset_y: float = 0.0  # m, ... along world y
    left_offset_z: float = 0.0  # m, ... up
    left_squeeze: float = GRIPPER_CLOSED  # the left's closing command (its pads touch the cube at ~0.6)
    ignore_yaw: bool = False  # the left closes along world x whatever the cube's yaw
    timing_scale: float = 1.0  # scales every duration (< 1: phases too short for the arms)
    joint_noise: float = 0.0  # rad, std of slowly varying noise on every arm joint command
    noise_tau: float = 10.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if self.set_down_height < 0:
            raise ValueError(f"set_down_height={self.set_down_height} must be >= 0 (above the table).")
        if self.timing_scale <= 0 or self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError("timing_scale and noise_tau must be > 0, joint_noise >= 0.")
        if not GRIPPER_CLOSED <= self.left_squeeze <= GRIPPER_OPEN:
            raise ValueError(f"left_squeeze={self.left_squeeze} must lie in [0, 1].")


class Arc:
    """A cubic Bezier move of a TCP over steps [t0, t0 + duration], eased by a cubic, orientation slerped.

    The control points sit `hump0` above the start and `hump1` above the goal: 0, 0 gives a straight line.
    """

    def __init__(self, t0: int, duration: float, p0, r0, p3, r1, hump0: float = 0.0, hump1: float = 0.0):
        self.t0, self.duration = t0, max(1, int(round(duration)))
        up = np.array([0.0, 0.0, 1.0])
        p0, p3 = np.asarray(p0, dtype=float), np.asarray(p3, dtype=float)
        if hump0 == 0.0 and hump1 == 0.0:  # a straight line, evenly parameterized
            self.points = [p0, p0 + (p3 - p0) / 3, p0 + 2 * (p3 - p0) / 3, p3]
        else:
            self.points = [p0, p0 + hump0 * up, p3 + hump1 * up, p3]
        self.slerp = Slerp([0.0, 1.0], Rotation.from_matrix(np.stack([r0, r1])))

    @property
    def end(self) -> int:
        return self.t0 + self.duration

    def pose(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        s = float(smoothstep((t - self.t0) / self.duration))
        b = [(1 - s) ** 3, 3 * s * (1 - s) ** 2, 3 * s * s * (1 - s), s**3]
        return sum(w * p for w, p in zip(b, self.points, strict=True)), self.slerp([s]).as_matrix()[0]


class Hand:
    """One arm: the present arc, IK per step warm-started from the last solution, a rate-limited command."""

    def __init__(self, arm: Arm, q: np.ndarray):
        self.arm = arm
        self.q = np.asarray(q, dtype=float)
        self.q_ik = self.q.copy()
        self.pos, self.rot = arm.fk(self.q)
        self.arc: Arc | None = None
        self.grip = GRIPPER_OPEN

    def move(self, t0: int, duration: float, goal, rot, hump0: float = 0.0, hump1: float = 0.0) -> Arc:
        """Start an arc at step t0 from the present commanded pose."""
        self.arc = Arc(t0, duration, self.pos, self.rot, goal, rot, hump0, hump1)
        return self.arc

    def step(self, t: int) -> None:
        if self.arc is not None:
            self.pos, self.rot = self.arc.pose(t)
        self.q_ik, _ = self.arm.ik(self.pos, self.rot, self.q_ik, iters=12, rot_weight=0.4, damping=0.015)
        self.q = self.q + np.clip(self.q_ik - self.q, -JOINT_STEP, JOINT_STEP)


def face_normal(cube: np.ndarray, along: np.ndarray) -> np.ndarray:
    """Unit horizontal normal of the cube's side-face pair nearest the axis `along`, signed like it."""
    yaw = cube_yaw(cube[3:7])
    normals = [np.array([np.cos(yaw + k * np.pi / 2), np.sin(yaw + k * np.pi / 2), 0.0]) for k in (0, 1)]
    n = max(normals, key=lambda v: abs(v @ along))
    return n * np.sign(n @ along)


class TableEpisode:
    """One episode: the right's pick-and-place and the left's pick from the table, stepped per observation."""

    def __init__(self, knobs: TableKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        self.right = Hand(right, state[7:13])
        self.left = Hand(left, state[:6])
        self.noise = smooth_noise(episode_rng(knobs.seed, cube), EPISODE_STEPS, 12, knobs.joint_noise,
                                  knobs.noise_tau)  # fmt: skip
        self.phase_r, self.phase_l = "start", "start"
        self.t_r = self.t_l = 0  # when the present phase of each arm started
        self.t_open = self.t_left_close = -1
        self.set_down_cube: np.ndarray | None = None  # the cube as the right let go of it (for the record)

    def _dur(self, steps: int) -> int:
        return max(1, int(round(steps * self.k.timing_scale)))

    # ------------------------------------------------------------------ geometry
    def _right_rot(self, cube: np.ndarray) -> np.ndarray:
        """Top-down, fingers along the cube's face pair nearest world y, signed as the unrolled wrist has."""
        heading = np.arctan2(cube[1] - RIGHT_BASE[1], cube[0] - RIGHT_BASE[0])
        natural = np.array([-np.sin(heading), np.cos(heading), 0.0])  # closing axis at wrist_rotate 0
        return rotation(DOWN, face_normal(cube, natural))

    def _left_rot(self, cube: np.ndarray) -> np.ndarray:
        """Top-down, fingers along the face pair nearest world x (a quarter turn of the wrist)."""
        if self.k.ignore_yaw:
            return rotation(DOWN, np.array([1.0, 0.0, 0.0]))
        return rotation(DOWN, face_normal(cube, np.array([1.0, 0.0, 0.0])))

    @staticmethod
    def _grasp_tcp(xy: np.ndarray) -> np.ndarray:
        """Top-down grasp TCP over a cube centred at `xy` on the table: the finger tips clear the table."""
        return np.array([xy[0], xy[1], TIP_CLEARANCE + TIP_REACH])

    # ------------------------------------------------------------------ step
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

    def _right_step(self, t: int, cube: np.ndarray) -> None:
        k, h, d = self.k, self.right, self._dur
        elapsed = t - self.t_r
        if self.t_open >= 0:  # once opening, the fingers open on their ramp whatever the phase
            h.grip = min(GRIPPER_OPEN, GRIPPER_CLOSED + (t - self.t_open) / GRIP_STEPS * GRIPPER_OPEN)
        if self.phase_r == "start":
            self.grasp_rot = self._right_rot(cube)
            pre = self._grasp_tcp(cube[:2]) + [0.0, 0.0, PRE_HEIGHT]
            h.move(t, d(R_REACH), pre, self.grasp_rot, hump0=0.05)
            self.phase_r, self.t_r = "reach", t
        elif self.phase_r == "reach" and t >= h.arc.end:
            self.grasp_rot = self._right_rot(cube)  # the cube has landed: read it again
            h.move(t, d(R_DESCEND), self._grasp_tcp(cube[:2]), self.grasp_rot)
            self.phase_r, self.t_r = "descend", t
        elif self.phase_r == "descend" and t >= h.arc.end:
            self.phase_r, self.t_r = "close", t
        elif self.phase_r == "close":
            h.grip = max(GRIPPER_CLOSED, GRIPPER_OPEN - elapsed / GRIP_STEPS)
            if elapsed >= d(R_CLOSE):
                self.hold = h.pos - cube[:3]  # TCP minus cube centre, as grasped
                spot = np.array([SPOT[0] + k.spot_dx, SPOT[1] + k.spot_dy, CUBE_HALF + k.set_down_height])
                self.hover = spot + self.hold + [0.0, 0.0, HOVER]
                self.spot = spot
                h.move(t, d(R_CARRY), self.hover, self.grasp_rot, hump0=HUMP, hump1=HUMP / 2)
                self.phase_r, self.t_r = "carry", t
        elif self.phase_r == "carry" and t >= h.arc.end + 3:
            self.hold = h.pos - cube[:3]  # read the cube in the hand: the hold as it hangs now
            self.lower = h.move(t, d(R_LOWER), self.spot + self.hold, h.rot)
            self.phase_r, self.t_r = "lower", t
        elif self.phase_r == "lower" and t >= self.lower.end - k.release_lead:
            self.phase_r, self.t_r, self.t_open = "release", t, t
        elif self.phase_r == "release":
            if elapsed >= d(R_OPEN) and t >= self.lower.end:
                self.set_down_cube = cube.copy()
                if k.retreat_slide:
                    slide = h.pos + k.retreat_slide * h.rot[:, 1]  # along the finger axis, at set-down height
                    h.move(t, d(R_RISE), slide, h.rot)
                    self.phase_r, self.t_r = "slide", t
                else:
                    h.move(t, d(R_RISE), h.pos + [0.0, 0.0, RISE], h.rot)
                    self.phase_r, self.t_r = "rise", t
        elif self.phase_r == "slide" and t >= h.arc.end:
            h.move(t, d(R_RISE), h.pos + [0.0, 0.0, RISE], h.rot)
            self.phase_r, self.t_r = "rise", t
        elif self.phase_r == "rise" and t >= h.arc.end:
            h.move(t, d(R_PARK), PARK_R, h.rot, hump0=0.03)
            self.phase_r, self.t_r = "park", t

    def _left_step(self, t: int, cube: np.ndarray) -> None:
        k, h, d = self.k, self.left, self._dur
        elapsed = t - self.t_l
        if self.phase_l == "start":
            h.move(t, d(L_STAGE), STAGE_L, self._left_rot(cube))
            self.phase_l, self.t_l = "stage", t
        elif self.phase_l == "stage" and self.phase_r == "park" and t >= h.arc.end:
            # The right has let go and risen clear: read where the cube lies now (or trust the plan).
            target = cube if k.left_reads_cube else np.array([*SPOT, CUBE_HALF, 1.0, 0.0, 0.0, 0.0])
            self.left_rot = self._left_rot(target)
            offset = np.array([k.left_offset_x, k.left_offset_y, k.left_offset_z])
            self.left_grasp = self._grasp_tcp(target[:2]) + offset
            h.move(t, d(L_REACH), self.left_grasp + [0.0, 0.0, PRE_HEIGHT], self.left_rot, hump1=0.03)
            self.phase_l, self.t_l = "reach", t
        elif self.phase_l == "reach" and t >= h.arc.end:
            h.move(t, d(L_DESCEND), self.left_grasp, self.left_rot)
            self.phase_l, self.t_l = "descend", t
        elif self.phase_l == "descend" and t >= h.arc.end:
            self.phase_l, self.t_l, self.t_left_close = "close", t, t
        elif self.phase_l == "close":
            h.grip = max(k.left_squeeze, GRIPPER_OPEN - elapsed / GRIP_STEPS)
            if elapsed >= d(L_CLOSE):
                h.move(t, d(L_LIFT), h.pos + [0.0, 0.0, LIFT], h.rot)
                self.phase_l, self.t_l = "lift", t


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.table:make_policy` with `TableKnobs` fields as kwargs."""
    return BimanualPolicy(TableKnobs(**kwargs), TableEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "shallow_squeeze": {"left_squeeze": 0.58},
    "servo_noise": {"joint_noise": 0.035},
    "servo_noise_heavy": {"joint_noise": 0.05},
    "dropped_blind": {"set_down_height": 0.20, "left_reads_cube": False},
    "shallower_squeeze": {"left_squeeze": 0.59},
    "offset_blind": {"spot_dx": 0.02, "left_reads_cube": False},
    "rushed": {"timing_scale": 0.36},
    "dropped_high_blind": {"set_down_height": 0.25, "left_reads_cube": False},
    "swept_blind": {"retreat_slide": 0.07, "left_reads_cube": False},
}
"""Named settings of `table`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families table --episodes 50 --detector-poses 0`, 50 ID + 50 OOD
episodes each, seed 0; also in measured.json). Success is measure.py's: reward 4 reached at some step.

| setting            | what goes wrong                                                    | ID    | OOD   |
|--------------------|--------------------------------------------------------------------|-------|-------|
| nominal            | nothing                                                            | 50/50 | 50/50 |
| shallow_squeeze    | the left closes only to 0.58 (its pads touch the cube at ~0.6):    | 48/50 | 43/50 |
|                    | a weak hold; now and then the pads slide up the cube as the hand   |       |       |
|                    | lifts, and it never leaves the table                               |       |       |
| servo_noise        | slowly varying joint noise, std 0.035 rad                          | 42/50 | 46/50 |
| servo_noise_heavy  | the same noise, std 0.05 rad                                       | 33/50 | 38/50 |
| dropped_blind      | the right opens with the cube 20 cm above the table: it lands      | 29/50 | 32/50 |
|                    | 1.5-2 cm toward -x (along the left's finger axis); the left aims   |       |       |
|                    | at the spot planned, not at the cube, and closes off-centre        |       |       |
| shallower_squeeze  | the left closes only to 0.59                                       | 25/50 | 20/50 |
| offset_blind       | the cube is set down 2 cm off the spot (+x, an uncalibrated right) | 17/50 | 17/50 |
|                    | and the left aims at the spot: a finger lands on the cube's top    |       |       |
| rushed             | every phase 0.36 times as long: the lagging right often closes     | 11/50 | 1/50  |
|                    | before it is down and never lifts the cube                         |       |       |
| dropped_high_blind | dropped from 25 cm: the cube bounces away, often tipped, and the   | 0/50  | 5/50  |
|                    | blind left closes on air                                           |       |       |
| swept_blind        | the open right backs away 7 cm along its finger axis at set-down   | 0/50  | 0/50  |
|                    | height, sweeping the cube 5 cm along -y; the blind left misses it  |       |       |

Not among the settings, since a left that reads the cube where it lies corrects them (10/10 ID and
10/10 OOD each in quick checks): a set-down 2 cm off (`spot_dx=0.02`), a drop from 15 cm
(`set_down_height=0.15`), a right that opens at the top of its lowering, 10 cm up (`release_lead=25`), a
right that sweeps the cube away (`retreat_slide=0.06`); nor left grasp offsets, which fail as a cliff:
`left_offset_x` (along its fingers) 1.6 cm 20/20, 1.7 cm 1/20; `left_offset_y` 2 cm 20/20, 4 cm 0/20 (the
fingers close beside the cube); `left_offset_z` 3.5 cm 20/20 (ID and OOD together, 10 + 10 episodes each).
"""
