"""Family 17, `teleop`: a simulated human teleoperator driving the follower arms through a leader.

How it acts. One operator drives both arms, one hand each, and sees the scene (the cube pose, each
gripper's pose: forward kinematics of `observation.state`) `delay` steps late. Each hand's intended position
is a sum of overlapping minimum-jerk sub-movements (Flash & Hogan; Meyer's optimised sub-movements): a
sub-movement aims at the remaining error as perceived (the delayed goal minus where the delayed hand will
end once the sub-movements already under way have played out: an efference copy that allows for the
practised `LEARNED_DELAY`, so a slower reaction makes it overshoot), covers only `undershoot`
of it, and lasts a Fitts-like time that grows with the distance (`hurry` shortens it). A new corrective
sub-movement starts every 8 to 15 steps (160-300 ms, drawn each time) while the perceived error exceeds
2 mm; a phase ends once the perceived hand is within `tolerance` of its goal (or on a timeout), and the
hand stops where it is when the operator decides to squeeze. The wrist turns by one minimum-jerk rotation
per phase. Physiological tremor, 8-12 Hz band-limited noise of `tremor` metres RMS per axis (growing by
`fatigue` over the episode), is added to the hand; the leader's pose is mapped to the follower's joints by
damped least-squares IK every step (`arm.py`), and the joint command follows through a first-order
low-pass (leader-follower lag, `LAG` s).

1. Right arm. Comes at the cube from the front corner of its own side: its gripper points 45 degrees
   between -x and +y, pitched 60 degrees down, the wrist rolled so that, seen from above, the fingers
   close across the cube's x faces (the pair nearest world x, squared to the cube's yaw; the pitched
   approach tilts them ~20 degrees off the horizontal). It lines up `PRE` back along its approach, goes in
   until its tool centre point (TCP) is over the cube's centre as the operator judges it (`depth_bias`
   misjudges the cube's depth, along world +y, the operator's line of sight), raised until the lower
   finger tip clears the table, stops, and closes by feel: it squeezes at a steady rate until the measured
   finger opening stops shrinking, then holds the grip `squeeze` past that stall point. It lifts, then
   carries the cube while pitching its wrist up to 25 degrees (same heading, same faces held), so that
   the cube's centre (as seen in the hand after the lift) comes to `HANDOVER`: left of the table's centre,
   in front of the shoulders' line, 25 cm up.
2. Left arm. Once the right carries, the left lines up below the hand-over on the right's own approach
   axis, pointing up it (25 degrees up, toward +x and -y), its fingers crossed at right angles with the
   right's, on the cube's other pair of side faces; it follows the cube as it settles, then goes in
   coaxially until its finger tips are `TIP_GAP` short of the right's (each hand then holds one half of
   the cube; `take_depth` stops it that much shorter), stops and closes by feel the same way.
3. Release. The right opens once the operator sees (delayed) the left's finger opening below
   `release_opening` and unchanged for `release_wait` steps; it then backs out up its axis and the left
   draws the cube down its own axis toward its side. With `release_reach` > 0 the operator instead lets
   go as soon as the left's hand is seen that close to where it will take the cube.

State-only: the policy reads `observation.state` and `observation.environment_state`, never an image.
Kwargs (see `TeleopKnobs`; defaults = nominal) are operator flaws at different stages: a slow reaction
(`delay`), short sub-movements (`undershoot`), a shaky (`tremor`) or tiring (`fatigue`) hand, impatience
(`tolerance`: squeezes before the hand has got there), a misjudged cube depth (`depth_bias`), a weak
squeeze (`squeeze`), hurried sub-movements (`hurry`), a shallow take (`take_depth`), and a right that lets
go before the left has closed (`release_opening`, `release_wait`, `release_reach`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from families.arm import Arm, rotation
from families.common import GRIPPER_OPEN, BimanualPolicy, episode_rng, minimum_jerk

EPISODE_STEPS = 400
DT = 0.02  # s per control step (50 Hz)
HANDOVER = np.array([-0.08, 0.45, 0.25])  # cube centre at the hand-over (m): left of centre, mid-height
RIGHT_HEADING = np.radians(135.0)  # the right's approach points 45 degrees between -x and +y ...
RIGHT_PITCH = np.radians(60.0)  # ... pitched this far down at the grasp ...
CARRY_PITCH = np.radians(25.0)  # ... and this far at the hand-over (the wrist pitches up on the carry)
LEFT_PITCH = np.radians(20.0)  # the left's approach points along +x, pitched this far down
PRE = 0.07  # m back along its approach where the right lines up
STANDOFF = 0.06  # m back along its approach where the left lines up
TIP_REACH = 0.029  # m, finger tips past the TCP (arm.py)
TIP_CLEARANCE = 0.008  # m between the right's finger tips and the table at the grasp
HALF_OPEN = 0.035  # m from the TCP to each open finger's pad, along the closing axis
LIFT = 0.12  # m the right lifts before it carries
LAG = 0.05  # s, time constant of the leader-follower low-pass on the joint command
LEARNED_DELAY = 8  # steps of delay the operator's efference copy allows for (a practised operator's)
FOLLOW_LAG = 4  # steps the operator has learned the follower trails the leader by
CORRECT_EVERY = (8, 15)  # steps between the starts of sub-movements (drawn uniformly, inclusive)
MIN_CORRECTION = 0.002  # m: a perceived error below this starts no sub-movement
SUB_BASE, SUB_PER_M = 0.25, 1.5  # s: a sub-movement lasts SUB_BASE + SUB_PER_M * distance (times hurry)
TURN_TIME = 0.6  # s over which the wrist turns to a phase's orientation
TIMEOUT = 60  # steps after which a phase ends whatever its perceived error
GRIP_RATE = 0.04  # command units per step at which the operator squeezes or opens a grip
STALL_STEPS = 3  # steps the measured opening must change by less than STALL_CHANGE to count as stalled
STALL_CHANGE = 0.004
CLOSE_DWELL = 6  # steps the operator keeps squeezing after the stall before moving on
RETREAT = 0.08  # m the right backs out along its approach after it has let go
DRAW_BACK = 0.06  # m the left draws the cube back down its axis once the right has let go
TIP_GAP = 0.006  # m the left's finger tips stop short of the right's
TREMOR_BAND = (8.0, 12.0)  # Hz
DOWN = np.array([0.0, 0.0, -1.0])
UP = np.array([0.0, 0.0, 1.0])
PLUS_X = np.array([1.0, 0.0, 0.0])
PLUS_Y = np.array([0.0, 1.0, 0.0])


@dataclass
class TeleopKnobs:
    """The operator's flaws; defaults = the nominal operator."""

    delay: int = 8  # steps (160 ms) by which the operator sees the scene late (LEARNED_DELAY: allowed for)
    undershoot: float = 0.9  # fraction of the perceived remaining error each sub-movement covers
    tremor: float = 0.0015  # m RMS per axis of 8-12 Hz hand tremor
    fatigue: float = 0.0  # the tremor's amplitude grows by this factor over the episode (linearly)
    tolerance: float = 0.006  # m: a phase ends once the perceived hand is this close to its goal
    depth_bias: float = 0.0  # m the operator misjudges the cube's depth (its y) by, grasping that far off
    squeeze: float = 0.6  # command units the operator squeezes past the stall (0.6: all the way closed)
    hurry: float = 1.0  # scales every sub-movement's duration (< 1: hurried)
    take_depth: float = 0.0  # m the left stops short of the cube's centre along its approach
    release_opening: float = 0.8  # the right opens once the left's seen opening is below this ...
    release_wait: int = 3  # ... and has held still (seen) for this many steps
    release_reach: float = 0.0  # > 0: the right opens once the left's hand is seen this close to its take
    seed: int = 0  # seeds the per-episode randomness together with the episode's first observation

    def __post_init__(self) -> None:
        if self.delay < 0 or self.release_wait < 0:
            raise ValueError("delay and release_wait must be >= 0.")
        if not 0 < self.undershoot <= 1.5:
            raise ValueError(f"undershoot={self.undershoot} must lie in (0, 1.5].")
        if self.release_reach < 0:
            raise ValueError(f"release_reach={self.release_reach} must be >= 0.")
        if self.tremor < 0 or self.fatigue < 0 or self.tolerance <= 0 or self.hurry <= 0:
            raise ValueError("tremor and fatigue must be >= 0, tolerance and hurry > 0.")
        if not 0 <= self.squeeze <= 1 or not 0 < self.release_opening <= 1:
            raise ValueError("squeeze must lie in [0, 1], release_opening in (0, 1].")


def band_noise(rng: np.random.Generator, steps: int, band: tuple[float, float] = TREMOR_BAND) -> np.ndarray:
    """(steps, 3) noise with unit RMS per axis whose spectrum lies only in `band` (Hz), at 50 Hz."""
    freqs = np.fft.rfftfreq(steps, DT)
    inside = (freqs >= band[0]) & (freqs <= band[1])
    spectrum = np.zeros((len(freqs), 3), dtype=complex)
    spectrum[inside] = rng.normal(size=(inside.sum(), 3)) + 1j * rng.normal(size=(inside.sum(), 3))
    noise = np.fft.irfft(spectrum, n=steps, axis=0)
    return noise / noise.std(axis=0, keepdims=True)


def face_closing(cube_quat: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """The cube's face normal nearest `direction`, flattened onto the table plane (unit)."""
    q = np.asarray(cube_quat, dtype=float)
    R = Rotation.from_quat([*q[1:], q[0]]).as_matrix() if np.linalg.norm(q) > 1e-6 else np.eye(3)
    best = max((s * R[:, i] for i in range(3) for s in (1.0, -1.0)), key=lambda n: n @ direction)
    flat = best - best[2] * UP
    return flat / np.linalg.norm(flat) if np.linalg.norm(flat) > 0.3 else np.asarray(direction, float)


def approach(heading: float, pitch: float) -> np.ndarray:
    """Unit approach direction: along `heading` in the table plane, tilted down by `pitch`."""
    return np.array([np.cos(pitch) * np.cos(heading), np.cos(pitch) * np.sin(heading), -np.sin(pitch)])


class Hand:
    """One of the operator's hands on its leader arm, and the follower arm it drives.

    The intended hand position is `start` plus a sum of minimum-jerk sub-movements (start step, duration
    in steps, displacement); tremor is added on top; IK maps it to joints, a low-pass to the command.
    """

    def __init__(self, arm: Arm, q: np.ndarray, knobs: TeleopKnobs, rng: np.random.Generator, tremor):
        self.arm, self.k, self.rng = arm, knobs, rng
        self.q_ik = np.asarray(q, dtype=float)
        self.q_cmd = self.q_ik.copy()
        self.start, self.rot = arm.fk(self.q_ik)
        self.subs: list[tuple[int, int, np.ndarray]] = []
        self.turn: tuple[int, Slerp, int] | None = None
        self.tremor = tremor  # (EPISODE_STEPS, 3) m
        self.history = deque(maxlen=LEARNED_DELAY + FOLLOW_LAG + 1)  # intended positions, oldest first
        self.goal: np.ndarray | None = None  # where the perceived controlled point should go
        self.phase, self.clock = "wait", 0
        self.next_correction = 0
        self.grip = GRIPPER_OPEN
        self.grip_goal = GRIPPER_OPEN
        self.stall: float | None = None  # measured opening at which the squeeze stalled
        self.openings: list[float] = []  # measured openings felt while squeezing
        self.perceived_error = np.inf

    def intended(self, t: int) -> np.ndarray:
        """The hand position the operator means at step `t` (no tremor)."""
        pos = self.start.copy()
        for t0, n, d in self.subs:
            pos += minimum_jerk((t - t0) / n) * d
        return pos

    def endpoint(self) -> np.ndarray:
        """Where the sub-movements under way will have carried the hand."""
        return self.start + sum((d for _, _, d in self.subs), np.zeros(3))

    def go(self, phase: str, goal: np.ndarray | None, rot: np.ndarray | None, t: int) -> None:
        """Enter `phase` aiming at `goal` (None: stay) and turning the wrist to `rot` (None: keep it)."""
        self.phase, self.clock, self.goal = phase, 0, goal
        self.next_correction = t
        if rot is not None:
            now = self._rot_at(t)
            if rot[:, 1] @ now[:, 1] < 0:  # the fingers are symmetric: take the nearer sign
                rot = rot.copy()
                rot[:, 1:] *= -1
            slerp = Slerp([0.0, 1.0], Rotation.from_matrix(np.stack([now, rot])))
            self.turn = (t, slerp, max(1, int(TURN_TIME * self.k.hurry / DT)))

    def freeze(self, t: int) -> None:
        """Stop the hand where it means to be now: the sub-movements under way are cut short."""
        self.start, self.subs, self.goal = self.intended(t), [], None

    def _rot_at(self, t: int) -> np.ndarray:
        if self.turn is None:
            return self.rot
        t0, slerp, n = self.turn
        return slerp([float(minimum_jerk((t - t0) / n))]).as_matrix()[0]

    def step(self, t: int, seen_point: np.ndarray | None) -> np.ndarray:
        """One step: maybe start a corrective sub-movement, then the follower's joint command (6,).

        `seen_point` is the controlled point (the TCP) as seen `delay` steps ago.
        """
        self.history.append(self.intended(t))
        if self.goal is not None and seen_point is not None:
            then = self.history[0]  # what the operator believes they meant when the seen frame was taken
            predicted = seen_point + self.endpoint() - then  # ... plus what is still to come
            self.perceived_error = float(np.linalg.norm(self.goal - seen_point))
            if t >= self.next_correction:
                error = self.goal - predicted
                dist = float(np.linalg.norm(error))
                if dist > MIN_CORRECTION:
                    n = max(4, int(round((SUB_BASE + SUB_PER_M * dist) * self.k.hurry / DT)))
                    self.subs.append((t, n, self.k.undershoot * error))
                self.next_correction = t + int(self.rng.integers(CORRECT_EVERY[0], CORRECT_EVERY[1] + 1))
        fatigue = 1.0 + self.k.fatigue * t / EPISODE_STEPS
        target = self.intended(t) + self.k.tremor * fatigue * self.tremor[min(t, len(self.tremor) - 1)]
        rot = self._rot_at(t)
        self.q_ik, _ = self.arm.ik(target, rot, self.q_ik, iters=30, rot_weight=0.4)
        alpha = 1.0 - np.exp(-DT / LAG)
        self.q_cmd = self.q_cmd + alpha * (self.q_ik - self.q_cmd)
        self.grip += float(np.clip(self.grip_goal - self.grip, -GRIP_RATE, GRIP_RATE))
        self.clock += 1
        return self.q_cmd

    def compact(self, t: int) -> None:
        """Fold sub-movements that have ended into `start` (keeps `intended` cheap)."""
        done = [s for s in self.subs if t - s[0] >= s[1]]
        if done:
            self.start = self.start + sum((d for _, _, d in done), np.zeros(3))
            self.subs = [s for s in self.subs if t - s[0] < s[1]]

    def squeezing(self, opening: float) -> bool:
        """Close by feel: squeeze down at GRIP_RATE until the measured opening stops shrinking, then hold
        `squeeze` past that stall point. Returns True once the grip is set."""
        if self.stall is None:
            self.grip_goal = 0.0
            self.openings.append(opening)
            recent = self.openings[-STALL_STEPS - 1 :]
            if (
                len(recent) > STALL_STEPS
                and np.all(np.abs(np.diff(recent)) < STALL_CHANGE)
                and self.clock > 4
            ):
                self.stall = float(opening)
                self.grip_goal = max(0.0, self.stall - self.k.squeeze)
                self.grip = max(self.grip, self.grip_goal)  # a weak squeeze eases off to its level
                self.clock = 0
            return False
        return self.clock >= CLOSE_DWELL


class TeleopEpisode:
    """One episode of the operator: the right's pitched diagonal grasp, carry, the left's take, release."""

    def __init__(self, knobs: TeleopKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k = knobs
        rng = episode_rng(knobs.seed, cube)
        self.right = Hand(right, state[7:13], knobs, rng, band_noise(rng, EPISODE_STEPS))
        self.left = Hand(left, state[:6], knobs, rng, band_noise(rng, EPISODE_STEPS))
        self.seen = deque(maxlen=knobs.delay + 1)  # (state, cube) frames, oldest first
        self.hold = np.zeros(3)  # the cube's centre in the right's gripper frame, seen after the lift
        self.carry_rot = np.eye(3)
        self.left_still = 0  # steps in a row the left's seen opening has held still below release_opening
        self.seen_left_opening = 1.0
        self.left_axis = -approach(RIGHT_HEADING, RIGHT_PITCH)
        self.t = 0

    def _right_grasp(self, cube: np.ndarray, back: float) -> tuple[np.ndarray, np.ndarray]:
        a = approach(RIGHT_HEADING, RIGHT_PITCH)
        rot = rotation(a, face_closing(cube[3:7], PLUS_X))
        centre = cube[:3] + self.k.depth_bias * PLUS_Y
        # The tilted fingers' lower tip sits TIP_REACH out along the approach and half the opening down the
        # closing axis: the TCP is raised until it clears the table by TIP_CLEARANCE.
        low = TIP_REACH * np.sin(RIGHT_PITCH) + HALF_OPEN * abs(rot[2, 1])
        centre[2] = max(centre[2], TIP_CLEARANCE + low)
        return centre - back * a, rot

    def _left_take(self, cube: np.ndarray, right_tcp: np.ndarray, back: float) -> np.ndarray:
        """The left's TCP on the right's approach axis, seen from below: its finger tips `TIP_GAP` short of
        the right's finger tips (or of the cube's centre, whichever comes first), `back` (plus
        `take_depth`) further down that axis, lined up with the cube's centre across it."""
        a = self.left_axis
        along = min(cube @ a, right_tcp @ a - TIP_REACH - TIP_GAP) - self.k.take_depth - back
        return cube - (cube @ a) * a + (along - TIP_REACH) * a

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        cube = batch["observation.environment_state"][b][:7].astype(float)
        state = batch["observation.state"][b].astype(float)
        if not np.all(np.isfinite(cube)):
            cube = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0])
        self.seen.append((state, cube))
        seen_state, seen_cube = self.seen[0]  # the operator's view: `delay` steps old
        seen_right = self.right.arm.fk(seen_state[7:13])[0]
        seen_left = self.left.arm.fk(seen_state[:6])[0]
        self._right_step(t, state, seen_state, seen_cube, seen_right)
        self._left_step(t, state, seen_state, seen_cube, seen_right)
        q_right = self.right.step(t, seen_right)
        q_left = self.left.step(t, seen_left)
        self.right.compact(t)
        self.left.compact(t)
        return np.concatenate([q_left, [self.left.grip], q_right, [self.right.grip]])

    def _arrived(self, h: Hand) -> bool:
        return (h.clock > 5 and h.perceived_error < self.k.tolerance) or h.clock > TIMEOUT

    def _right_step(self, t, state, seen_state, seen_cube, seen_tcp) -> None:
        h = self.right
        if h.phase == "wait":
            pos, rot = self._right_grasp(seen_cube, PRE)
            h.go("reach", pos, rot, t)
        elif h.phase == "reach":
            h.goal = self._right_grasp(seen_cube, PRE)[0]  # follows the cube as it is seen
            if self._arrived(h):
                h.go("descend", self._right_grasp(seen_cube, 0.0)[0], None, t)
        elif h.phase == "descend":
            h.goal = self._right_grasp(seen_cube, 0.0)[0]
            if self._arrived(h):
                h.freeze(t)
                h.go("close", None, None, t)
        elif h.phase == "close" and h.squeezing(state[13]):
            pos = h.intended(t) + LIFT * UP
            h.go("lift", pos, None, t)
        elif h.phase == "lift" and self._arrived(h):
            seen_rot = h.arm.fk(seen_state[7:13])[1]
            hold = seen_rot.T @ (seen_cube[:3] - seen_tcp)  # the operator sees where the cube sits in hand
            self.hold = hold if np.linalg.norm(hold) < 0.05 else np.zeros(3)
            self.carry_rot = rotation(approach(RIGHT_HEADING, CARRY_PITCH), h._rot_at(t)[:, 1])
            h.go("carry", HANDOVER - self.carry_rot @ self.hold, self.carry_rot, t)
        elif h.phase == "carry" and self._arrived(h):
            h.go("present", HANDOVER - self.carry_rot @ self.hold, None, t)
        elif h.phase == "present":
            opening = seen_state[6]
            left, reach = self.left, self.k.release_reach
            if reach > 0 and left.phase == "insert" and left.perceived_error < reach:
                h.grip_goal = GRIPPER_OPEN  # an impatient operator lets go on seeing the left's hand arrive
                h.go("release", None, None, t)
            elif left.phase in ("close", "hold"):  # the operator is squeezing with the left: watch it
                still = abs(opening - self.seen_left_opening) < STALL_CHANGE
                self.left_still = self.left_still + 1 if still and opening < self.k.release_opening else 0
                if opening < self.k.release_opening and self.left_still >= self.k.release_wait:
                    h.grip_goal = GRIPPER_OPEN
                    h.go("release", None, None, t)
            self.seen_left_opening = opening
        elif h.phase == "release" and h.grip >= GRIPPER_OPEN - 1e-6:
            h.go("retreat", h.intended(t) - RETREAT * self.carry_rot[:, 0] + 0.03 * UP, None, t)

    def _left_step(self, t, state, seen_state, seen_cube, seen_right) -> None:
        h, r = self.left, self.right
        if h.phase == "wait" and r.phase == "carry":
            r_rot = self.carry_rot
            self.left_axis = -r_rot[:, 0]  # up the right's approach axis, from below
            rot = rotation(self.left_axis, np.cross(self.left_axis, r_rot[:, 1]))  # fingers crossed
            h.go("stage", self._left_take(HANDOVER, HANDOVER, STANDOFF), rot, t)
        elif h.phase == "stage":
            if r.phase != "carry":  # the cube has come to rest where the operator looks at it
                h.goal = self._left_take(seen_cube[:3], seen_right, STANDOFF)
            if r.phase == "present" and self._arrived(h):
                h.go("insert", self._left_take(seen_cube[:3], seen_right, 0.0), None, t)
        elif h.phase == "insert":
            h.goal = self._left_take(seen_cube[:3], seen_right, 0.0)
            if self._arrived(h):
                h.freeze(t)
                h.go("close", None, None, t)
        elif h.phase == "close" and h.squeezing(state[6]):
            h.go("hold", None, None, t)
        elif h.phase == "hold" and r.phase == "retreat" and r.clock > 5:
            h.go(
                "draw_back", h.intended(t) - DRAW_BACK * self.left_axis + np.array([-0.04, 0.0, 0.0]), None, t
            )


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.teleop:make_policy` with `TeleopKnobs` fields as kwargs."""
    return BimanualPolicy(TeleopKnobs(**kwargs), TeleopEpisode)


# Named settings for measure.py; measured success rates are in the docstring below and in measured.json.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "tired_hand": {"fatigue": 10.0},
    "shaky_hand": {"tremor": 0.009},
    "short_reach": {"undershoot": 0.3},
    "early_release": {"release_reach": 0.06},
    "hurried": {"hurry": 0.25},
    "impatient": {"tolerance": 0.07},
    "misjudged_depth": {"depth_bias": 0.02},
    "slow_reaction": {"delay": 20},
    "weak_squeeze": {"squeeze": 0.15},
}
"""Named settings of `teleop`, from nominal to hopeless. Measured success in the reference world
(`python benchmarks/families/measure.py --families teleop --episodes 25 --detector-poses 0`, 25 ID + 25 OOD
episodes each, seed 0). Success is measure.py's: reward 4 (the left's finger on the cube, off the table)
reached at some step.

| setting         | what goes wrong (every setting lifts the cube in >= 96 % of episodes)  | ID    | OOD   |
|-----------------|-----------------------------------------------------------------------|-------|-------|
| nominal         | nothing: 160 ms late, 0.9 undershoot, 1.5 mm tremor                   | 25/25 | 25/25 |
| short_reach     | each sub-movement covers 30 % of the error: many corrections, slow    | 22/25 | 22/25 |
| tired_hand      | tremor grows to 11x (16 mm RMS) by the episode's end, at the take     | 20/25 | 22/25 |
| shaky_hand      | 9 mm RMS tremor all along: the take misses or knocks the cube         | 17/25 | 16/25 |
| early_release   | the right lets go on seeing the left's hand 6 cm from its take: the   | 17/25 | 10/25 |
|                 | cube falls, sometimes onto the left's open fingers (a success)        |       |       |
| impatient       | phases end 7 cm from their goal as seen: squeezes high on the cube    | 16/25 | 11/25 |
| hurried         | sub-movements 4x shorter: overshooting hands, lost at the hand-over   | 15/25 | 10/25 |
| misjudged_depth | the cube seen 2 cm deeper (+y): held off-centre, lost at the take     | 9/25  | 9/25  |
| slow_reaction   | 400 ms late while its efference copy allows for 160 ms: corrections   | 6/25  | 2/25  |
|                 | overshoot, mostly lost or missed at the take                          |       |       |
| weak_squeeze    | held only 0.15 past the stall: lifted, then slips out                 | 0/25  | 0/25  |

Not among the settings (10 ID + 10 OOD episodes each in quick checks): `delay` 14 16/20, `undershoot` 0.5
20/20, `tremor` 0.006 16/20, `fatigue` 5 20/20, `tolerance` 0.03 and 0.05 20/20, `hurry` 0.4 17/20,
`depth_bias` 0.03 0/20 (lifted by the fingers' edge, lost at the take), `squeeze` 0.25 8/20, `take_depth`
0.015 20/20, 0.02 16/20 and 0.025 5/20, `release_reach` 0.03 18/20 and 0.1 0/20.
"""
