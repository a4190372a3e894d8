"""Family 33, `probe`: a tactile search grasp, as a controller built around a poor cube reading.

How it acts. The cube reading it gets is coarse, like a cheap camera: it reads the cube's x, y once, when the
cube has landed (`READ`), with a per-episode bias (`reading_bias`, std per axis, the same all episode) and a
per-reading noise (`reading_noise`); it never reads the cube's height (it lies on the table). It grasps where
it believes the cube is and judges the grasp by feel, from the right's proprio in `observation.state`: a
finger opening (normalized, 0 closed, 1 open) at or below `hold_threshold` means the fingers closed on
nothing (fully shut reads ~0.2), one at or above `WIDE` (0.8) that they stand on something wider than the
cube, one between them that they hold the 4 cm cube (~0.45-0.75); and a TCP that came to rest over `LANDED`
above its grasp (forward kinematics of the measured joints) stands on the cube's top with a finger, so it
does not close at all. On a miss it opens, rises, and comes down again at the next offset of a search
pattern around its first guess (a cross, then the diagonals, `search_step` apart, the first steps along the
fingers' closing axis, where a grasp tolerates least), up to `max_tries` grasps; with `reread` it reads the
cube again (fresh noise, same bias) before each retry, so it follows a cube its last try has shoved. The left
checks its take the same way and searches along its own closing axis (`left_tries` takes). Every move is a
minimum-jerk line of the tool centre point (TCP), the gripper's heading, pitch and roll interpolated
alongside, solved by damped least-squares IK every step (`arm.py`), except the two transits from the start
pose (IK once, minimum-jerk in joint space); `speed` scales every duration. Phases end on the clock or on a
judgment, never on a reading of the cube.

Geometry (world frame, metres):
1. Right arm. Top-down, fingers closing along world y (the cube's y faces), its TCP `GRASP_HEIGHT` above
   the cube's centre (tips ~6 mm above the table): hover `HOVER` above, straight down, close to `squeeze`,
   judge after `GRIP` steps. After a judged hold: straight up `LIFT`, then a carry to the hand-over point
   `HANDOVER` just left of centre, turning the wrist an eighth turn (`TURN`, clockwise seen from above) on
   the way: its fingers end on the faces whose normals point along 45 degrees, the other pair is free.
2. Left arm. It stages back along its approach while the right searches. It never reads the cube: it takes
   the cube where the right's measured joints (forward kinematics) say the right's fingers hold it. It comes
   in diagonally, heading 45 degrees (from the -x, -y side toward +x, +y), nearly level (`TAKE_PITCH`, under
   the right's hand), fingers closing horizontally across the free faces, its TCP `TAKE_BELOW` under the
   cube's centre; the right's near finger passes between its open fingers. Where the cube sits along the
   right's pads is unknown (the pads are wider than a grasp's tolerance), and that is the left's closing
   axis, so the left's take is itself a search.
3. Release. Once the left judges its take held, the right opens, dwells and rises away along +x, and the
   left draws the cube back toward its own side. A known flaw, kept: a cube the right holds ~1.5 cm or more
   off the middle of its pads is met by a left finger tip on the way in and shoved; the left still closes
   on it in the air (the task's success is reached there), but may lose it once the right lets go.

State-only: reads `observation.state` and `observation.environment_state` (the latter once, or once per
retry with `reread`, through the biased reader), never an image. Kwargs (see `ProbeKnobs`; defaults =
nominal, a bad reader with search) are what an engineer building this controller sets or gets wrong: the
reader's bias and noise, the search step, the number of tries of each hand, the judging threshold, the
squeeze, the speed of every move and whether it re-reads. How failing settings fail: a bad reader with one
try closes beside the cube or lands a finger on it and gives up; a tiny search step comes down again where
it missed; a threshold below the fully shut opening takes a miss for a hold and carries nothing to the left;
one near the held opening takes most holds for misses and opens on the cube until its tries run out; a light
squeeze reads as a hold but lets the cube slip out on the lift or the carry; a slow controller (0.4x) is
still on its way when the 8 s episode ends. Settings were tuned on the reference world's success only (left
finger on the cube, off the table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from families.arm import Arm
from families.common import (
    CUBE_HALF,
    GRIPPER_OPEN,
    BimanualPolicy,
    checked_knobs,
    episode_rng,
    gripper_rot,
    minimum_jerk,
    refuse_invalid,
)

EPISODE_STEPS = 400
READ = 10  # step: the cube has landed; the reader is looked at now (and before retries with `reread`)
GRASP_HEIGHT = 0.015  # m: the right's TCP above the cube's centre (finger tips 2.9 cm below the TCP)
LANDED = 0.01  # m: a TCP stopped higher above its grasp than this stands on the cube with a finger (a miss)
WIDE = 0.8  # normalized opening at and above which closed fingers stand on something wider than the cube
HOVER = 0.06  # m: the right hovers this far above its grasp between tries
LIFT = 0.06  # m: straight lift after a judged hold
HANDOVER = np.array([-0.02, 0.5, 0.22])  # m: where the cube's centre is carried to
TURN = np.pi / 4  # rad: the right turns the cube this far about the vertical (clockwise seen from above)
TAKE_PITCH = 0.1  # rad: the left's approach below horizontal, nearly level: under the right's hand
TAKE_BELOW = 0.008  # m: the left's TCP under the cube's centre: the lower part of the free faces
STANDOFF = 0.08  # m: the left stages, and backs out between takes, this far back along its approach
RETREAT = np.array([0.06, 0.0, 0.06])  # m: the right's way out after letting go
DRAW_BACK = np.array([-0.05, 0.0, 0.02])  # m: the left draws the cube toward its side
# Right gripper angles (heading, pitch, roll; `gripper_rot`): top-down closing along y; after the carry's
# quarter turn, closing along x.
GRASP_ANGLES = np.array([np.pi, np.pi / 2, 0.0])
OFFER_ANGLES = np.array([np.pi, np.pi / 2, TURN])
# The left's heading that makes its horizontal closing axis the normal of the faces the right left free.
TAKE_ANGLES = np.array([np.pi / 2 - TURN, TAKE_PITCH, 0.0])
# Search offsets in units of `search_step`: (x, y) for the right (y first: the fingers close along y, where
# a 6.9 cm opening around a 4 cm cube leaves +-1.45 cm), along y only for the left.
RIGHT_SEARCH = ((0, 0), (0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, -1), (1, -1), (-1, 1))
LEFT_SEARCH = (0, 1, -1, 2, -2)
# Durations in steps at `speed` = 1 (50 Hz); three right tries and a hand-over fit 400 steps.
STEPS = {
    "reach": 50, "descend": 16, "grip": 14, "open": 6, "rise": 12, "shift": 12, "lift": 18, "carry": 45,
    "settle": 5, "stage": 60, "go_in": 25, "left_grip": 12, "release": 8, "away": 20,
}  # fmt: skip


@dataclass
class ProbeKnobs:
    """How the tactile search controller deviates from its nominal tuning; defaults = nominal."""

    reading_bias: float = 0.012  # m, std per axis of the reader's per-episode bias on the cube's x, y
    reading_noise: float = 0.003  # m, std per axis of each reading's own noise
    search_step: float = 0.016  # m, spacing of the search pattern (both hands)
    max_tries: int = 3  # grasps the right tries before it gives up (1: no search)
    left_tries: int = 3  # takes the left tries
    hold_threshold: float = 0.42  # normalized finger opening above which closed fingers hold the cube
    squeeze: float = 0.0  # closed gripper command of both hands (0: hardest; ~0.6 touches the cube)
    speed: float = 1.0  # scales every move's speed (durations divided by it)
    reread: bool = False  # read the cube again (same bias, fresh noise) before each retry
    seed: int = 0  # seeds the reader's bias and noise together with the episode's first observation

    def __post_init__(self) -> None:
        checks = {
            "reading_bias": 0.0 <= self.reading_bias <= 0.1,
            "reading_noise": 0.0 <= self.reading_noise <= 0.1,
            "search_step": 0.0 <= self.search_step <= 0.05,
            "max_tries": 1 <= self.max_tries <= len(RIGHT_SEARCH),
            "left_tries": 1 <= self.left_tries <= len(LEFT_SEARCH),
            "hold_threshold": -0.5 <= self.hold_threshold <= 1.5,
            "squeeze": 0.0 <= self.squeeze <= 1.0,
            "speed": 0.2 <= self.speed <= 5.0,
            "reread": isinstance(self.reread, bool),
        }
        refuse_invalid(self, checks)

    def steps(self, phase: str) -> int:
        """A phase's duration at this speed, at least 2 steps."""
        return max(2, int(round(STEPS[phase] / self.speed)))


# ------------------------------------------------------------------------------------------------- moves
@dataclass
class Move:
    """One move of one arm from step `start` over `steps`: a TCP line (p, angles) or a joint move (q).

    A hold is a line from a pose to itself; `then` is called at its end to choose the next move.
    """

    start: int
    steps: int
    p0: np.ndarray  # TCP (3,) or joints (6,)
    p1: np.ndarray
    a0: np.ndarray | None = None  # gripper heading, pitch, roll (rad) at p0; None: a joint move
    a1: np.ndarray | None = None
    then: object = None  # callable(t, state, cube) or None: stay at the end

    def fraction(self, t: int) -> float:
        return float(minimum_jerk((t - self.start) / self.steps))

    def done(self, t: int) -> bool:
        return t >= self.start + self.steps

    def pose(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Where a line's TCP and gripper angles are at step t."""
        f = self.fraction(t)
        return self.p0 + f * (self.p1 - self.p0), self.a0 + f * (self.a1 - self.a0)


def grasp_point(xy: np.ndarray) -> np.ndarray:
    """The right's TCP when it grasps a cube believed at `xy`: `GRASP_HEIGHT` above the centre."""
    return np.array([xy[0], xy[1], CUBE_HALF + GRASP_HEIGHT])


def left_take(centre: np.ndarray, offset: float) -> np.ndarray:
    """The left's TCP for a take on a cube centred at `centre`, `offset` along its closing axis."""
    return centre + offset * gripper_rot(*TAKE_ANGLES)[:, 1] + np.array([0.0, 0.0, -TAKE_BELOW])


def held_centre(right: Arm, q_right: np.ndarray) -> np.ndarray:
    """Where the cube's centre is if the right, at measured joints `q_right`, holds it as it grasped:
    `GRASP_HEIGHT` further along its approach axis than its TCP."""
    tcp, R = right.fk(q_right)
    return tcp + GRASP_HEIGHT * R[:, 0]


# ----------------------------------------------------------------------------------------------- episode
class ProbeEpisode:
    """One episode: each arm runs a chain of moves, the next one chosen when the last ends (by the clock,
    or by judging a finger opening)."""

    def __init__(self, knobs: ProbeKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k, self.arms = knobs, {"left": left, "right": right}
        self.rng = episode_rng(knobs.seed, state, cube)
        self.bias = self.rng.normal(0.0, knobs.reading_bias, 2)
        self.q = {"left": state[:6].copy(), "right": state[7:13].copy()}
        self.grip = {"left": GRIPPER_OPEN, "right": GRIPPER_OPEN}
        self.moves = {
            "left": self.hold("left", 0, READ, self.stage),
            "right": self.hold("right", 0, READ, self.first_read),
        }
        self.tries = {"left": 0, "right": 0}
        self.guess: np.ndarray | None = None  # the cube's x, y as read: the centre of the right's search
        self.offered: int | None = None  # step the right arrived at the hand-over with a judged hold
        self.left_at: np.ndarray | None = None  # the left's staging TCP, back along its approach
        self.take: np.ndarray | None = None  # the left's TCP on its current take
        # The judgments: (step, what, finger opening, how far above its grasp the right's TCP stood).
        self.events: list[tuple[int, str, float, float]] = []

    def read(self, cube: np.ndarray) -> np.ndarray:
        """The cube's x, y as the coarse reader gives it."""
        return cube[:2] + self.bias + self.rng.normal(0.0, self.k.reading_noise, 2)

    def hold(self, side: str, t: int, steps: int, then=None, p=None, a=None) -> Move:
        """Stay where the last move ended (joints, or the given pose) for `steps`."""
        if p is None:
            return Move(t, steps, self.q[side], self.q[side], then=then)
        return Move(t, steps, p, p, a, a, then)

    def line(self, side: str, t: int, phase: str, p0, a0, p1, a1, then=None) -> Move:
        return Move(t, self.k.steps(phase), np.asarray(p0, float), np.asarray(p1, float), a0, a1, then)

    # ------------------------------------------------------------------------------------- right arm
    def target(self, i: int) -> np.ndarray:
        """The right's grasp TCP on try i: the search pattern's i-th offset around the guess."""
        return grasp_point(self.guess + self.k.search_step * np.array(RIGHT_SEARCH[i], dtype=float))

    def first_read(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        self.guess = self.read(cube)
        hover = self.target(0) + [0.0, 0.0, HOVER]
        q, _ = self.arms["right"].ik(hover, gripper_rot(*GRASP_ANGLES), self.q["right"], iters=300)
        return Move(t, self.k.steps("reach"), self.q["right"].copy(), q, then=self.descend)

    def descend(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        grasp = self.target(self.tries["right"])
        return self.line("right", t, "descend", grasp + [0, 0, HOVER], GRASP_ANGLES, grasp, GRASP_ANGLES,
                         self.close)  # fmt: skip

    def close(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        """Close, unless the TCP came to rest `LANDED` above the grasp: then a finger stands on the cube's
        top, and closing would only shove it; that is a miss already."""
        grasp = self.target(self.tries["right"])
        stood = self.stood(state, grasp)
        if stood > LANDED:  # back off to where it stands at once: pressing on, the finger squirts it away
            return self.miss(t, "right_touch", float(state[13]), stood, grasp + [0.0, 0.0, stood])
        self.grip["right"] = self.k.squeeze
        return self.hold("right", t, self.k.steps("grip"), self.judge, grasp, GRASP_ANGLES)

    def judge(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        """Hold or miss, by the right's finger opening and how high its TCP stopped."""
        opening, grasp = float(state[13]), self.target(self.tries["right"])
        stood = self.stood(state, grasp)
        if not (self.k.hold_threshold < opening < WIDE and stood < LANDED):
            return self.miss(t, "right_miss", opening, stood)
        self.events.append((t, "right_hold", opening, stood))
        up = grasp + [0.0, 0.0, LIFT]
        return self.line("right", t, "lift", grasp, GRASP_ANGLES, up, GRASP_ANGLES, self.carry)

    def stood(self, state: np.ndarray, grasp: np.ndarray) -> float:
        """How far above the grasp the right's TCP is, by its measured joints (forward kinematics)."""
        return float(self.arms["right"].fk(state[7:13].astype(float))[0][2] - grasp[2])

    def miss(self, t: int, what: str, opening: float, stood: float, p: np.ndarray | None = None) -> Move:
        """Open at `p` (default: where the last move ended), and unless its tries are spent, rise and go on
        with the search."""
        self.events.append((t, what, opening, stood))
        self.grip["right"] = GRIPPER_OPEN
        end, a = self.moves["right"].pose(t)
        p = end if p is None else p
        if self.tries["right"] + 1 >= self.k.max_tries:
            return self.hold("right", t, 1, None, p, a)
        self.tries["right"] += 1
        return self.hold("right", t, self.k.steps("open"), self.rise, p, a)

    def rise(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        """Back up to the last try's hover; then, re-reading if asked, on to the next offset's hover."""
        p, _ = self.moves["right"].pose(t)
        hover = self.target(self.tries["right"] - 1) + [0.0, 0.0, HOVER]
        return self.line("right", t, "rise", p, GRASP_ANGLES, hover, GRASP_ANGLES, self.shift)

    def shift(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        """From the last try's hover to the next one's, around a fresh reading with `reread`."""
        was = self.target(self.tries["right"] - 1) + [0.0, 0.0, HOVER]
        if self.k.reread:
            self.guess = self.read(cube)
        now = self.target(self.tries["right"]) + [0.0, 0.0, HOVER]
        return self.line("right", t, "shift", was, GRASP_ANGLES, now, GRASP_ANGLES, self.descend)

    def carry(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        """To the hand-over, turning the wrist `TURN` about the vertical on the way."""
        up = self.target(self.tries["right"]) + [0.0, 0.0, LIFT]
        offer = HANDOVER + [0.0, 0.0, GRASP_HEIGHT]
        return self.line("right", t, "carry", up, GRASP_ANGLES, offer, OFFER_ANGLES, self.offer)

    def offer(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        self.offered = t
        return self.hold("right", t, 1, None, HANDOVER + [0.0, 0.0, GRASP_HEIGHT], OFFER_ANGLES)

    def let_go(self, t: int) -> None:
        """The left holds: the right opens, dwells, and rises away along +x."""
        self.grip["right"] = GRIPPER_OPEN
        offer = HANDOVER + [0.0, 0.0, GRASP_HEIGHT]

        def away(t: int, state: np.ndarray, cube: np.ndarray) -> Move:
            return self.line("right", t, "away", offer, OFFER_ANGLES, offer + RETREAT, OFFER_ANGLES)

        self.moves["right"] = self.hold("right", t, self.k.steps("release"), away, offer, OFFER_ANGLES)

    # -------------------------------------------------------------------------------------- left arm
    def stage(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        """Back along the approach from the take at the planned hand-over, while the right searches."""
        take = left_take(HANDOVER, 0.0)
        R = gripper_rot(*TAKE_ANGLES)
        q, _ = self.arms["left"].ik(take - STANDOFF * R[:, 0], R, self.q["left"], iters=300)
        self.left_at = take - STANDOFF * R[:, 0]
        return Move(t, self.k.steps("stage"), self.q["left"].copy(), q, then=self.await_offer)

    def await_offer(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        if self.offered is None or t < self.offered + self.k.steps("settle"):
            return self.hold("left", t, 1, self.await_offer, self.left_at, TAKE_ANGLES)
        return self.go_in(t, state, cube)

    def go_in(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        """In along the approach to the take on the cube where the right's measured joints put it."""
        centre = held_centre(self.arms["right"], state[7:13].astype(float))
        offset = self.k.search_step * LEFT_SEARCH[self.tries["left"]]
        self.take = left_take(centre, offset)
        return self.line(
            "left", t, "go_in", self.left_at, TAKE_ANGLES, self.take, TAKE_ANGLES, self.left_close
        )

    def left_close(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        self.grip["left"] = self.k.squeeze
        return self.hold("left", t, self.k.steps("left_grip"), self.left_judge, self.take, TAKE_ANGLES)

    def left_judge(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        """Hold or miss, by the left's finger opening; on a miss, open, back out and take again."""
        opening = float(state[6])
        held = self.k.hold_threshold < opening < WIDE
        self.events.append((t, "left_hold" if held else "left_miss", opening, 0.0))
        if held:
            self.let_go(t)
            wait = self.k.steps("release") + self.k.steps("left_grip")
            return self.hold("left", t, wait, self.draw_back, self.take, TAKE_ANGLES)
        self.grip["left"] = GRIPPER_OPEN
        if self.tries["left"] + 1 >= self.k.left_tries:
            return self.hold("left", t, 1, None, self.take, TAKE_ANGLES)
        self.tries["left"] += 1
        R = gripper_rot(*TAKE_ANGLES)
        self.left_at = self.take - STANDOFF * R[:, 0]
        return self.line("left", t, "rise", self.take, TAKE_ANGLES, self.left_at, TAKE_ANGLES, self.go_in)

    def draw_back(self, t: int, state: np.ndarray, cube: np.ndarray) -> Move:
        return self.line("left", t, "away", self.take, TAKE_ANGLES, self.take + DRAW_BACK, TAKE_ANGLES)

    # ---------------------------------------------------------------------------------------- stepping
    def command(self, side: str, t: int) -> np.ndarray:
        """The arm's joint command at step t from its current move (IK every step on lines)."""
        move = self.moves[side]
        if move.a0 is None:
            self.q[side] = move.p0 + move.fraction(t) * (move.p1 - move.p0)
        else:
            pos, angles = move.pose(t)
            self.q[side], _ = self.arms[side].ik(pos, gripper_rot(*angles), self.q[side], iters=30, tol=2e-4)
        return self.q[side]

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        state = batch["observation.state"][b].astype(float)
        cube = batch["observation.environment_state"][b][:7].astype(float)
        for side in ("right", "left"):
            move = self.moves[side]
            if move.done(t) and move.then is not None:
                self.moves[side] = move.then(t, state, cube)
        q_left, q_right = self.command("left", t), self.command("right", t)
        return np.concatenate([q_left, [self.grip["left"]], q_right, [self.grip["right"]]])


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.probe:make_policy` with `ProbeKnobs` fields as kwargs."""
    return BimanualPolicy(checked_knobs(ProbeKnobs, "probe", kwargs), ProbeEpisode)


# Named settings for measure.py, as an engineer building a tactile search controller would run them.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "good_reader": {"reading_bias": 0.002, "reading_noise": 0.001},
    "no_search": {"max_tries": 1},
    "bad_reader": {"reading_bias": 0.02},
    "tiny_step": {"reading_bias": 0.02, "search_step": 0.003},
    "blind_reader": {"reading_bias": 0.04},
    "low_threshold": {"hold_threshold": 0.15},
    "high_threshold": {"hold_threshold": 0.75},
    "light_squeeze": {"squeeze": 0.535},
    "slow": {"speed": 0.4},
}
