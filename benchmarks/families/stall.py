"""Family 8, `stall`: joint-space cubic splines planned per phase, and a grasp by feel.

How it acts. Each arm runs a phase machine. When a phase starts, it reads the cube pose, turns a few
Cartesian via-points (a line of them where the hand must move straight) into joint angles by damped
least-squares IK (`arm.py`), and plays a clamped cubic spline through them in joint space; each segment is
timed by its largest joint distance over a per-joint speed (`QDOT`, `QDOT_FINE` near the cube), scaled by
`timing_scale`. Nothing is solved while the arm moves. A moving phase ends when its spline has run out.

Grasp by feel (`Feel`), both hands. The gripper command falls at `close_rate` per step; the reported
opening is watched, and once the command leads it by `LEAD`, `stall_steps` consecutive steps with the
opening moving less than `stall_eps` make a stall (the fingers stopped on something). The command then
jumps to the stalled opening minus `squeeze`. A few steps later the hand judges its hold: a stalled
opening in [`held_low`, `held_high`] is "I hold the cube" (a 4 cm cube stops the fingers at ~0.6; an empty
close stalls at the closed stop, ~0.07). Judged empty, the hand re-opens and tries once more (`reapproach`);
after that it gives up and opens.

1. Right arm. It comes at the cube from the front of the table: heading +y (the cube face normal nearest
   it), pitched `PITCH_DEG` (45) down, fingers closing across the cube's x faces, with its forearm rolled
   (~-0.8 rad) so the gripper can point along +y while the arm reaches along -x. It lines up `STANDOFF`
   back, goes in along the approach, feels its grasp. Held: it lifts `LIFT` and carries the cube to
   `HANDOVER`, on the left half of the table ~21 cm above it, turning on the way to heading 110 degrees
   and pitching its approach up to 45 degrees above horizontal: the cube rides on its finger tips, turned
   a quarter turn about the finger axis. Judged empty: it re-opens, backs off and re-approaches once,
   aimed `DEEPER` farther along the approach (an empty close means the cube lay beyond the fingers).
2. Left arm. While the right carries, it hovers over the expected hand-over. Once the right has arrived it
   reads the cube pose and takes the free face pair that is most nearly horizontal (not the faces the right
   holds), coming down from above tilted `LEFT_TILT_DEG` in from its own side, and feels its take; judged
   empty, it re-opens, rises and comes again once. Only when the left's feel says held does the right
   open and back off; the left then lifts the cube away.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `StallKnobs`; defaults = nominal) are failures of such a controller: a stall detector too
eager (fires while the fingers are still closing: a light hold), a wrong "held" band (passes an empty
close, or fails a good hold), too little or no extra squeeze, a slow close, the re-approach disabled, a
biased cube estimate (the hand stops short), a hand-over point moved, the phase timing scaled, and
slowly varying noise on the joint commands.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.interpolate import CubicSpline

from families.arm import Arm
from families.common import CUBE_HALF, GRIPPER_CLOSED, GRIPPER_OPEN, BimanualPolicy, episode_rng, smooth_noise

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
QDOT = np.array([1.3, 1.3, 1.6, 2.0, 2.3, 2.8])  # rad/s: the average joint speed a phase is timed to
QDOT_FINE = 0.45  # share of QDOT on moves that end on the cube (inserting the fingers, taking it)
MIN_SEGMENT = 6  # steps: the shortest segment between two via-points
PITCH_DEG = 45.0  # right approach, degrees below horizontal
FRONT = np.pi / 2  # the right approaches along +y: from the front edge of the table toward the cube
PRESENT_HEADING = np.radians(110.0)  # right heading at the hand-over (turned a little toward the left arm)
PRESENT_PITCH_DEG = -45.0  # right approach at the hand-over, degrees below horizontal (< 0: pointing up)
HANDOVER = np.array([-0.07, 0.44, 0.21])  # cube centre at the hand-over (m): left half, mid height
HOLD_BACK = 0.008  # m the right TCP stays short of the cube centre along its approach (tips off the table)
DEEPER = 0.015  # m farther along the approach a re-approach goes in: an empty close left the cube beyond
STANDOFF = 0.07  # m back along the approach where a hand lines up before it goes in
LIFT = 0.06  # m the right lifts straight up before it carries
LEFT_TILT_DEG = 15.0  # left approach, degrees away from straight down, tilted in from the left's own side
LEFT_DEPTH = 0.022  # m the left TCP stays short of the cube centre along its approach
HOVER = 0.08  # m back along its approach where the left lines up
LEAD = 0.1  # the command must be this far below the opening before the fingers can count as stalled
REOPEN_STEPS = 8  # steps over which a gripper opens
# Branch seed of the right IK: forearm rolled ~-0.8 rad, wrist bent up, so that the gripper can point along
# +y while the arm reaches along -x (the same branch at the grasp and at the hand-over).
RIGHT_SEED = np.array([0.3, 0.6, -0.5, -0.8, 1.5, 1.5])
LEFT_SEED = np.array([0.0, -0.2, 0.4, 0.0, 0.8, 0.0])
HOME = np.array([0.0, -0.96, 1.16, 0.0, -0.3, 0.0])  # the arms' start pose (gym-aloha's)


@dataclass
class StallKnobs:
    """How the feel-grasping controller deviates from its nominal behaviour; the defaults are nominal."""

    close_rate: float = 0.04  # normalized gripper command removed per step while closing
    stall_eps: float = 0.004  # opening change per step below which the fingers count as still
    stall_steps: int = 3  # consecutive still steps that make a stall
    squeeze: float = 0.5  # command below the stalled opening once stalled (0: no extra squeeze)
    held_low: float = 0.4  # a stalled opening in [held_low, held_high] means "I hold the cube"
    held_high: float = 0.85
    reapproach: bool = True  # an empty close re-opens and re-approaches once
    cube_offset_x: float = 0.0  # m, bias of the cube estimate along world x
    cube_offset_y: float = 0.0  # m, bias of the cube estimate along world y (the right approach)
    handover_dz: float = 0.0  # m added to the hand-over height (the left aims at the cube it reads)
    handover_dx: float = 0.0  # m added to the hand-over x (- = farther toward the left arm)
    timing_scale: float = 1.0  # every phase's duration is scaled by this (< 1: faster)
    joint_noise: float = 0.0  # rad, std of slowly varying noise on every arm joint command
    noise_tau: float = 5.0  # steps, correlation time of that noise
    seed: int = 0  # seeds the noise together with the episode's first observation

    def __post_init__(self) -> None:
        if self.close_rate <= 0 or self.stall_steps < 1 or self.stall_eps < 0 or self.squeeze < 0:
            raise ValueError("close_rate must be > 0, stall_steps >= 1, stall_eps and squeeze >= 0.")
        if not self.held_low <= self.held_high:
            raise ValueError(f"held_low={self.held_low} must be <= held_high={self.held_high}.")
        if self.timing_scale <= 0 or self.joint_noise < 0 or self.noise_tau <= 0:
            raise ValueError("timing_scale and noise_tau must be > 0, joint_noise >= 0.")


def _face_heading(quat_wxyz: np.ndarray, wanted: float) -> float:
    """The cube's side-face normal (heading, rad) nearest `wanted`."""
    w, x, y, z = quat_wxyz
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return float(wanted + ((yaw - wanted + np.pi / 4) % (np.pi / 2) - np.pi / 4))


def _cube_axes(quat_wxyz: np.ndarray) -> np.ndarray:
    """(3,3) columns = the cube's face normals in the world, from its (w, x, y, z) quaternion."""
    w, x, y, z = quat_wxyz / np.linalg.norm(quat_wxyz)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def _grip_rot(approach: np.ndarray, closing: np.ndarray) -> np.ndarray:
    """Gripper orientation (columns approach, closing, third), the closing axis squared to the approach."""
    a = approach / np.linalg.norm(approach)
    c = closing - a * (a @ closing)
    c /= np.linalg.norm(c)
    return np.stack([a, c, np.cross(a, c)], axis=1)


def _front_rot(heading: float, pitch: float) -> np.ndarray:
    """Right gripper: approach along `heading`, `pitch` below horizontal, fingers closing horizontally."""
    a = np.array([np.cos(pitch) * np.cos(heading), np.cos(pitch) * np.sin(heading), -np.sin(pitch)])
    return _grip_rot(a, np.array([-np.sin(heading), np.cos(heading), 0.0]))


class JointSpline:
    """A clamped cubic spline in joint space through via-points, each segment timed by its joint distance."""

    def __init__(self, vias: list[np.ndarray], speed: float, scale: float):
        vias = [np.asarray(v, dtype=float) for v in vias]
        knots = [0.0]
        for a, b in zip(vias[:-1], vias[1:], strict=True):
            # A clamped cubic peaks at 1.5x its average speed: time the segment to its slowest joint.
            steps = max(MIN_SEGMENT, 1.5 * float(np.max(np.abs(b - a) / (speed * QDOT))) / DT)
            knots.append(knots[-1] + steps * scale)
        self.duration = knots[-1]
        self.spline = CubicSpline(knots, np.stack(vias), bc_type="clamped") if len(vias) > 1 else None
        self.end = vias[-1]

    def at(self, t: float) -> np.ndarray:
        if self.spline is None or t >= self.duration:
            return self.end.copy()
        return self.spline(max(t, 0.0))


class Feel:
    """A gripper that closes at a constant rate until its fingers stall, squeezes, and judges the hold."""

    def __init__(self, k: StallKnobs):
        self.k = k
        self.command = GRIPPER_OPEN
        self.openings: list[float] = []
        self.stall: float | None = None  # the opening at which the fingers stopped
        self.after = 0  # steps since the stall
        self.still = 0  # consecutive steps the opening has not changed

    def _moved(self) -> float:
        return abs(self.openings[-1] - self.openings[-2]) if len(self.openings) > 1 else np.inf

    def step(self, opening: float) -> None:
        k = self.k
        self.openings.append(opening)
        if self.stall is None:
            self.command = max(GRIPPER_CLOSED, self.command - k.close_rate)
            # Count still steps only while the command leads the fingers: before that they have no cause
            # to move (the finger joints' friction holds them until the command is well past them).
            self.still = (
                self.still + 1 if self._moved() < k.stall_eps and opening - self.command > LEAD else 0
            )
            if self.still >= k.stall_steps:
                self.stall = opening
                self.command = max(GRIPPER_CLOSED, opening - k.squeeze)
        else:
            self.after += 1

    @property
    def judged(self) -> bool:
        """Stalled and settled for a few steps: the verdict is ready."""
        return self.stall is not None and self.after >= 4

    @property
    def held(self) -> bool:
        return self.stall is not None and self.k.held_low <= self.stall <= self.k.held_high


class Limb:
    """One arm: a joint-space spline per phase, a gripper command, a phase name and its clock."""

    def __init__(self, arm: Arm, q: np.ndarray, scale: float):
        self.arm, self.scale = arm, scale
        self.q = np.asarray(q, dtype=float)
        self.path = JointSpline([self.q], 1.0, scale)
        self.grip = GRIPPER_OPEN
        self.phase, self.clock = "wait", 0
        self.feel: Feel | None = None

    def go(self, phase: str, vias: list[np.ndarray] | None = None, speed: float = 1.0) -> None:
        self.phase, self.clock = phase, 0
        self.path = JointSpline([self.q, *(vias or [])], speed, self.scale)

    @property
    def moved(self) -> bool:
        return self.clock >= self.path.duration

    def step(self) -> None:
        self.clock += 1
        self.q = self.path.at(self.clock)

    def solve(self, pos: np.ndarray, rot: np.ndarray, seed: np.ndarray) -> np.ndarray:
        q, _ = self.arm.ik(pos, rot, seed, iters=150, roll_weight=0.0)
        return q

    def line(self, start: np.ndarray, end: np.ndarray, rot: np.ndarray, seed: np.ndarray, n: int = 3):
        """Joint via-points along the straight TCP line start -> end (IK continued from `seed`)."""
        vias, q = [], seed
        for s in np.linspace(0.0, 1.0, n + 1)[1:]:
            q = self.solve(start + s * (end - start), rot, q)
            vias.append(q)
        return vias


class StallEpisode:
    """One episode: both arms' phase machines with their feel grasps, stepped on every observation."""

    def __init__(self, k: StallKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = k
        self.right = Limb(right, state[7:13], k.timing_scale)
        self.left = Limb(left, state[:6], k.timing_scale)
        self.attempt, self.left_attempt = 1, 1
        self.release = False  # the left's feel says held: the right may let go
        self.grasp_rot = _front_rot(FRONT, np.radians(PITCH_DEG))
        self.noise = smooth_noise(episode_rng(k.seed, cube), EPISODE_STEPS, 12, k.joint_noise, k.noise_tau)
        self.handover = HANDOVER + [k.handover_dx, 0.0, k.handover_dz]
        self._reach(cube)

    # ------------------------------------------------------------------ right arm
    def _grasp(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Right TCP pose at the grasp from the (biased) cube estimate: in from the front, square to it."""
        heading = _face_heading(cube[3:7], FRONT)
        rot = _front_rot(heading, np.radians(PITCH_DEG))
        centre = np.array([cube[0] + self.k.cube_offset_x, cube[1] + self.k.cube_offset_y, CUBE_HALF])
        return centre - (HOLD_BACK - DEEPER * (self.attempt - 1)) * rot[:, 0], rot

    def _reach(self, cube: np.ndarray) -> None:
        pos, rot = self._grasp(cube)
        h = self.right
        stand = pos - STANDOFF * rot[:, 0]
        q_stand = h.solve(stand, rot, RIGHT_SEED)
        q_above = h.solve(stand + [0.0, 0.0, 0.05], rot, q_stand)
        h.go("reach", [q_above, q_stand])

    def _right_step(self, cube: np.ndarray, opening: float) -> None:
        k, h = self.k, self.right
        if h.phase == "reach" and h.moved:
            pos, self.grasp_rot = self._grasp(cube)  # the cube has landed by now: plan the insertion on it
            start = pos - STANDOFF * self.grasp_rot[:, 0]
            h.go("insert", h.line(start, pos, self.grasp_rot, h.q), speed=QDOT_FINE)
        elif h.phase == "insert" and h.moved:
            h.feel = Feel(k)
            h.go("feel")
        elif h.phase == "feel":
            h.feel.step(opening)
            h.grip = h.feel.command
            if h.feel.judged:
                if h.feel.held:
                    pos, _ = h.arm.fk(h.q)
                    lift = pos + [0.0, 0.0, LIFT]
                    rot = _front_rot(PRESENT_HEADING, np.radians(PRESENT_PITCH_DEG))
                    hold = self.grasp_rot.T @ (np.array([cube[0], cube[1], CUBE_HALF]) - pos)
                    present = self.handover - rot @ hold
                    q_lift = h.solve(lift, self.grasp_rot, h.q)
                    h.go("carry", [q_lift, h.solve(present, rot, q_lift)])
                elif k.reapproach and self.attempt < 2:
                    h.go("reopen")
                else:
                    h.go("give_up")
        elif h.phase == "reopen":
            h.grip = min(GRIPPER_OPEN, h.grip + (GRIPPER_OPEN - GRIPPER_CLOSED) / REOPEN_STEPS)
            if h.clock >= REOPEN_STEPS:
                pos, _ = h.arm.fk(h.q)
                h.go("backoff", h.line(pos, pos - STANDOFF * self.grasp_rot[:, 0], self.grasp_rot, h.q, 2))
        elif h.phase == "backoff" and h.moved:
            self.attempt += 1
            self._reach(cube)
        elif h.phase == "give_up":
            h.grip = min(GRIPPER_OPEN, h.grip + (GRIPPER_OPEN - GRIPPER_CLOSED) / REOPEN_STEPS)
        elif h.phase == "carry" and h.moved:
            h.go("present")
        elif h.phase == "present" and self.release:
            h.go("release")
        elif h.phase == "release":
            h.grip = min(GRIPPER_OPEN, h.grip + (GRIPPER_OPEN - GRIPPER_CLOSED) / REOPEN_STEPS)
            if h.clock >= REOPEN_STEPS:
                pos, rot = h.arm.fk(h.q)
                back = pos - STANDOFF * rot[:, 0] + [0.0, 0.0, 0.03]
                h.go("retreat", [h.solve(back, rot, h.q)])

    # ------------------------------------------------------------------ left arm
    def _take(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Left TCP pose on the held cube: fingers across the free face pair that is most nearly horizontal,
        the approach tilted `LEFT_TILT_DEG` from straight down, in from the left's own side."""
        axes = _cube_axes(cube[3:7])
        right_closing = self.right.arm.fk(self.right.q)[1][:, 1]
        free = [i for i in range(3) if i != int(np.argmax(np.abs(axes.T @ right_closing)))]
        closing = axes[:, min(free, key=lambda i: abs(axes[2, i]))]
        closing = closing * np.sign(closing[1] or 1.0)
        tilt = np.radians(LEFT_TILT_DEG)
        side = np.cross([0.0, 0.0, 1.0], closing)  # horizontal, square to the closing axis
        side *= np.sign(side[0] or 1.0)  # pointing +x: from the left arm toward the right
        rot = _grip_rot(np.sin(tilt) * side - np.cos(tilt) * np.array([0.0, 0.0, 1.0]), closing)
        return cube[:3] - LEFT_DEPTH * rot[:, 0], rot

    def _left_step(self, cube: np.ndarray, opening: float) -> None:
        k, h = self.k, self.left
        if h.phase == "wait" and self.right.phase == "carry":
            guess = np.concatenate([self.handover, [np.cos(PRESENT_HEADING / 2 - np.pi / 4), 0, 0,
                                                    np.sin(PRESENT_HEADING / 2 - np.pi / 4)]])  # fmt: skip
            pos, rot = self._take(guess)
            h.go("hover", [h.solve(pos - HOVER * rot[:, 0], rot, LEFT_SEED)])
        elif h.phase == "hover" and h.moved and self.right.phase == "present":
            pos, rot = self._take(cube)
            start = pos - HOVER * rot[:, 0]
            h.go("descend", [h.solve(start, rot, h.q), *h.line(start, pos, rot, h.q)], speed=QDOT_FINE)
        elif h.phase == "descend" and h.moved:
            h.feel = Feel(k)
            h.go("feel")
        elif h.phase == "feel":
            h.feel.step(opening)
            h.grip = h.feel.command
            if h.feel.judged:
                if h.feel.held:
                    self.release = True
                    h.go("hold")
                elif k.reapproach and self.left_attempt < 2:
                    h.go("reopen")
                else:
                    h.go("give_up")
        elif h.phase in ("reopen", "give_up"):
            h.grip = min(GRIPPER_OPEN, h.grip + (GRIPPER_OPEN - GRIPPER_CLOSED) / REOPEN_STEPS)
            if h.phase == "reopen" and h.clock >= REOPEN_STEPS:
                self.left_attempt += 1
                pos, rot = h.arm.fk(h.q)
                h.go("hover", [h.solve(pos - HOVER * rot[:, 0], rot, h.q)])
        elif h.phase == "hold" and self.right.phase == "retreat" and self.right.moved:
            pos, rot = h.arm.fk(h.q)
            h.go("away", [h.solve(pos + [-0.04, 0.0, 0.04], rot, h.q)])

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        cube = batch["observation.environment_state"][b][:7].astype(float)
        state = batch["observation.state"][b].astype(float)
        self.right.step()
        self.left.step()
        self._right_step(cube, float(state[13]))
        self._left_step(cube, float(state[6]))
        noise = self.noise[min(t, len(self.noise) - 1)]
        return np.concatenate([
            self.left.q + noise[:6], [self.left.grip], self.right.q + noise[6:], [self.right.grip],
        ])  # fmt: skip


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.stall:make_policy` with `StallKnobs` fields as kwargs."""
    return BimanualPolicy(StallKnobs(**kwargs), StallEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "slow_close": {"close_rate": 0.01},
    "rushed": {"timing_scale": 0.5},
    "servo_noise": {"joint_noise": 0.03},
    "band_strict": {"held_high": 0.607},
    "short_reach": {"cube_offset_y": -0.035},
    "short_reach_band_wide": {"cube_offset_y": -0.035, "held_low": 0.0},
    "eager_stall": {"stall_eps": 0.03},
    "eager_stall_light": {"stall_eps": 0.03, "squeeze": 0.3},
    "band_inverted": {"held_low": 0.0, "held_high": 0.3},
}
"""Named settings of `stall`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families stall --episodes 50 --detector-poses 0`, 50 ID + 50 OOD
episodes each, seed 0; also in measured.json). Success is measure.py's: reward 4 reached at some step.

| setting               | what goes wrong                                                   | ID    | OOD   |
|-----------------------|-------------------------------------------------------------------|-------|-------|
| nominal               | nothing                                                           | 50/50 | 50/50 |
| rushed                | every phase timed at half its duration                            | 50/50 | 50/50 |
| slow_close            | fingers close at a quarter of the rate: phases run late           | 50/50 | 43/50 |
| short_reach_band_wide | cube estimate 3.5 cm short in y, and any stall counts as held     | 37/50 | 38/50 |
| servo_noise           | slowly varying joint noise, std 0.03 rad                          | 35/50 | 38/50 |
| band_strict           | "held" only up to 0.607 open: good holds are often judged empty   | 22/50 | 28/50 |
| short_reach           | cube estimate 3.5 cm short in y: closes short of or on the cube's |       |       |
|                       | edge, re-approaches once                                          | 24/50 | 21/50 |
| eager_stall           | stall counted at < 0.03 change per step: stops while still        | 12/50 | 8/50  |
|                       | closing, a light hold                                             |       |       |
| eager_stall_light     | the eager stall with a 0.3 squeeze: the fingers barely touch      | 0/50  | 0/50  |
| band_inverted         | "held" band [0, 0.3]: every good hold judged empty, never carried | 0/50  | 0/50  |
"""
