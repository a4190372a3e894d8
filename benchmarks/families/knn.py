"""Family 28, `knn`: a nonparametric retrieval policy that replays blends of its own stored demonstrations.

How it acts: nothing is fitted. Every `chunk` steps (8 by default) the policy reads `observation.state`
(14 joints and grippers) and the cube position from `observation.environment_state` (never an image) and
compares them with every stored demonstration (in the spirit of VINN / nearest-neighbour behaviour
retrieval). Each demonstration is represented by its step, within `window` steps of the episode's clock,
that minimises the distance sqrt(|joints - joints_d|^2 + cube_weight^2 |cube - cube_d|^2 + (time_weight
dt)^2) (radians, metres, steps); the k nearest demonstrations are blended with softmax weights
exp(-(d - d_min) / temperature), and the blend of their next `chunk` actions (absolute joint targets and
gripper commands, from each one's matched step on) is played open loop before the next query. At t = 0
all demonstrations share the home pose, so the first query picks the demonstrations whose cubes lay
nearest; later ones follow the arm along them.

The teacher (`TeacherEpisode`, `teacher_keyframes`): joint keyframes solved once by IK (`arm.py`, top-down
poses solved at roll 0 first, then rolled) from the cube's first reading, smoothstep between keyframes,
grippers ramped over 14 steps. The right comes top-down over the cube, heading from its base, wrist rolled
so that its fingers close across the cube's x faces (the roll unwrapped, so it varies continuously with the
cube position), descends 9 cm to hold the cube's upper part (TCP 1.6 cm above its centre), lifts straight
to 14 cm and carries it, still top-down, to a hand-over with the cube centre at (0.02, 0.50, 0.25). The left
comes in from -x pointing 15 degrees above +x, rising into the cube, and pinches its y faces below the
right's fingers (TCP 0.9 cm below the centre, 0.8 cm short of it, so its tips stop inside the far face);
the right opens once the left has closed and backs up and away; the left withdraws 6 cm with the cube.

Demonstrations (`knn_demos.npz`, 0.7 MB): 100 episodes of the teacher in the reference world, state-only,
340 steps each (float16 observed states, commanded actions and observed cube positions), only successful
ones kept (all 100 are). Demo i starts from the cube at Halton point i + 1 (bases 2, 3) of the box x in
[-0.03, 0.23], y in [0.37, 0.63] (gym-aloha's ID box plus 3 cm, so the OOD ring's outer 2 cm lies beyond
every demo), jittered by up to 4 mm with SeedSequence([12345, i]): seeds apart from the benchmark's
episodes, and any first few demos spread over the whole box. Regenerate, deterministically, with
`python benchmarks/families/knn.py` (`write_demos`, about 15 s).

Knobs (`KnnKnobs`) are what a user of such a retrieval policy sets or gets wrong: k, how many demos are kept
(few demos: poor coverage of the cube poses, worse for OOD ones), the weight on the cube position against
the joints (0: joints only, blind to where the cube is), the time weight and matching window, the blend
temperature (large: a plain mean of the k), the chunk length / re-query period, smooth action noise, and a
stale cube reading (it lags `cube_delay` steps and reports the ID box centre until its first frame arrives).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from families.arm import Arm
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    RIGHT_BASE,
    BimanualPolicy,
    EpisodeBatch,
    checked_knobs,
    episode_rng,
    gripper_rot,
    play_teacher,
    smooth_noise,
    smoothstep,
    wrap_pi,
)

DEMO_FILE = Path(__file__).with_name("knn_demos.npz")
DEMO_SEED = 12345  # demonstration i starts from a cube drawn with SeedSequence([DEMO_SEED, i])
DEMO_BOX = ((-0.03, 0.23), (0.37, 0.63))  # m, x and y range of the demonstration cubes: ID box + 3 cm
DEMO_JITTER = 0.004  # m, per-demo jitter of its Halton point
N_DEMOS = 100  # demonstrations recorded (only the teacher's successes are kept)
DEMO_STEPS = 340  # steps recorded per demonstration; the teacher is done and holding by then
EPISODE_STEPS = 400

# ------------------------------------------------------------------------------------ teacher geometry
GRIP_HEIGHT = 0.016  # m, right TCP above the cube centre at the grasp: its finger tips 1.3 cm below it
PRE_GRASP = 0.09  # m, the right's descent starts this far above the grasp point
LIFT_Z = 0.14  # m, TCP height after the straight lift
HANDOVER = np.array([0.02, 0.50, 0.25])  # m, cube centre at the hand-over
LEFT_LOW = 0.009  # m, the left's TCP below the cube centre: it pinches the lower half
LEFT_SHORT = 0.008  # m, the left's TCP short of the cube centre along +x: tips stop inside the far face
LEFT_PRE = 0.10  # m, the left's final approach starts this far back along -x
TILT_UP = np.deg2rad(15.0)  # the left's approach points this far above +x (it rises into the cube)
# Keyframe steps (50 Hz) of each arm: (step, name). Grippers ramp over GRIP_RAMP steps from the step named.
RIGHT_TIMES = {"home": 0, "above": 55, "grasp": 85, "close": 88, "lift": 128, "handover": 180,
               "open": 262, "retreat": 300}  # fmt: skip
LEFT_TIMES = {"home": 150, "pre": 205, "take": 232, "close": 236, "back": 330}  # fmt: skip
GRIP_RAMP = 14


def right_angles(cube_xy: np.ndarray) -> tuple[float, float]:
    """(heading, roll) of the top-down right gripper over `cube_xy`: heading from the right's base to the
    cube, roll turning the fingers across the cube's x faces (closing along world x). The roll is kept near
    -pi/2, not wrapped, so that it varies continuously with the cube position (demos can be blended)."""
    dx, dy = np.asarray(cube_xy, dtype=float) - RIGHT_BASE[:2]
    heading = float(np.arctan2(dy, dx))
    return heading, wrap_pi(heading + np.pi / 2)


def solve_top_down(arm: Arm, pos: np.ndarray, heading: float, roll: float, q0: np.ndarray) -> np.ndarray:
    """Joints of a top-down gripper at `pos`: IK at roll 0 first, then rolled from the wrist-turned seed
    (solving the rolled pose straight from home lands in the flipped-forearm branch)."""
    q, _ = arm.ik(pos, gripper_rot(heading, np.pi / 2, 0.0), q0, iters=300)
    q, _ = arm.ik(pos, gripper_rot(heading, np.pi / 2, roll), q + [0, 0, 0, 0, 0, roll], iters=300)
    return q


def left_rot() -> np.ndarray:
    """The left's gripper at the take: pointing TILT_UP above +x, fingers across the cube's y faces."""
    return gripper_rot(0.0, -TILT_UP, 0.0)


def teacher_keyframes(cube_xy: np.ndarray, left: Arm, right: Arm, home: np.ndarray) -> dict:
    """{"right"|"left": [(step, q (6,), gripper)]}: the teacher's keyframes, IK solved once, in order."""
    x, y = cube_xy
    grasp = np.array([x, y, CUBE_HALF + GRIP_HEIGHT])
    angles, over = right_angles(cube_xy), right_angles(HANDOVER[:2])
    hand = HANDOVER + [0.0, 0.0, GRIP_HEIGHT]
    goals = [("above", grasp + [0, 0, PRE_GRASP], angles), ("grasp", grasp, angles),
             ("lift", np.array([x, y, LIFT_Z]), angles), ("handover", hand, over),
             ("retreat", hand + [0.03, 0.0, 0.08], over)]  # fmt: skip
    q, qs = home[7:13].astype(float), {"home": home[7:13].astype(float)}
    for name, pos, (heading, roll) in goals:
        q = solve_top_down(right, pos, heading, roll, q - [0, 0, 0, 0, 0, q[5]])
        qs[name] = q
    qs["close"], qs["open"] = qs["grasp"], qs["handover"]
    grips = {"home": GRIPPER_OPEN, "above": GRIPPER_OPEN, "grasp": GRIPPER_OPEN, "close": GRIPPER_CLOSED,
             "lift": GRIPPER_CLOSED, "handover": GRIPPER_CLOSED, "open": GRIPPER_OPEN,
             "retreat": GRIPPER_OPEN}  # fmt: skip
    out = {"right": [(RIGHT_TIMES[n], qs[n], grips[n]) for n in RIGHT_TIMES]}
    Rl = left_rot()
    approach = Rl[:, 0]
    take = HANDOVER + [0.0, 0.0, -LEFT_LOW] - LEFT_SHORT * approach
    q, ql = home[:6].astype(float), {"home": home[:6].astype(float)}
    for name, pos in (("pre", take - LEFT_PRE * approach), ("take", take), ("back", take - [0.06, 0, 0])):
        q, _ = left.ik(pos, Rl, q, iters=200)
        ql[name] = q
    ql["close"] = ql["take"]
    lgrips = {"home": GRIPPER_OPEN, "pre": GRIPPER_OPEN, "take": GRIPPER_OPEN, "close": GRIPPER_CLOSED,
              "back": GRIPPER_CLOSED}  # fmt: skip
    out["left"] = [(LEFT_TIMES[n], ql[n], lgrips[n]) for n in LEFT_TIMES]
    return out


def keyframe_command(frames: list, t: int) -> np.ndarray:
    """(7,) joints + gripper at step `t`: joints smoothstep between keyframes, gripper ramps after each."""
    q, grip = frames[0][1], frames[0][2]
    for (t0, q0, g0), (t1, q1, g1) in zip(frames[:-1], frames[1:], strict=True):
        if t >= t1:
            q, grip = q1, g1
            continue
        if t >= t0:
            q = q0 + smoothstep((t - t0) / (t1 - t0)) * (q1 - q0)
            grip = g0
        break
    for t0, _, g0 in frames:  # a gripper change starts at its keyframe and ramps over GRIP_RAMP steps
        previous = [g for s, _, g in frames if s < t0]
        if previous and previous[-1] != g0 and t0 <= t < t0 + GRIP_RAMP:
            grip = previous[-1] + (g0 - previous[-1]) * (t - t0) / GRIP_RAMP
    return np.append(q, grip)


class TeacherEpisode:
    """The scripted teacher for one episode: keyframes solved on the first cube reading, then replayed."""

    def __init__(self, knobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        from gym_aloha.constants import START_ARM_POSE

        home = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0])
        self.frames = teacher_keyframes(cube[:2], left, right, home)

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        return np.concatenate([keyframe_command(self.frames["left"], t),
                               keyframe_command(self.frames["right"], t)])  # fmt: skip


def make_teacher() -> BimanualPolicy:
    """The scripted teacher as a policy (no knobs)."""
    return BimanualPolicy(None, TeacherEpisode)


# ------------------------------------------------------------------------------------- demonstrations
def radical_inverse(i: int, base: int) -> float:
    """Van der Corput: the digits of i in `base` mirrored about the point (Halton's sequence, one axis)."""
    out, scale = 0.0, 1.0 / base
    while i > 0:
        i, digit = divmod(i, base)
        out, scale = out + digit * scale, scale / base
    return out


def demo_poses(n: int, first: int = 0) -> np.ndarray:
    """(n, 7) cube poses of demonstrations first..first+n-1 over DEMO_BOX.

    Demo i sits at Halton point i + 1 (bases 2, 3), so that any first few demos spread over the whole box,
    jittered by up to DEMO_JITTER with SeedSequence([DEMO_SEED, i]) and clipped to the box.
    """
    (x0, x1), (y0, y1) = DEMO_BOX
    out = []
    for i in range(first, first + n):
        rng = np.random.default_rng(np.random.SeedSequence([DEMO_SEED, i]))
        u = np.array([radical_inverse(i + 1, 2), radical_inverse(i + 1, 3)])
        x, y = np.array([x0, y0]) + u * [x1 - x0, y1 - y0] + rng.uniform(-DEMO_JITTER, DEMO_JITTER, 2)
        out.append([np.clip(x, x0, x1), np.clip(y, y0, y1), 0.05, 1.0, 0.0, 0.0, 0.0])
    return np.array(out)


def record_demos(n: int, first: int = 0, num_envs: int = 10) -> dict[str, np.ndarray]:
    """Play the teacher in the reference world from demonstrations first..first+n-1, keep its successes.

    Returns float16 `states` (N, DEMO_STEPS, 14) (what each step observed), `actions` (N, DEMO_STEPS, 14)
    (what the teacher commanded at it), `cubes` (N, DEMO_STEPS, 3) (the cube position observed) and int
    `index` (N,) (the demonstration's seed index i).
    """
    played = play_teacher(make_teacher(), demo_poses(n, first), DEMO_STEPS, num_envs)
    kept = np.nonzero(played["success"])[0]
    stored = lambda key: played[key][:, kept].transpose(1, 0, 2).astype(np.float16)  # noqa: E731
    return {"states": stored("states"), "actions": stored("actions"), "cubes": stored("cubes")[..., :3],
            "index": (first + kept).astype(np.int64)}  # fmt: skip


def write_demos(path: Path = DEMO_FILE) -> None:
    """Regenerate the stored demonstrations (`python benchmarks/families/knn.py`), deterministic."""
    np.savez_compressed(path, **record_demos(N_DEMOS))


# ------------------------------------------------------------------------------------------ retrieval
@dataclass
class KnnKnobs:
    """How the retrieval policy is set up; the defaults are the nominal one."""

    k: int = 4  # demonstrations blended per query (each contributes its best-matching step)
    demos: int = N_DEMOS  # demonstrations kept: the first `demos` stored ones
    cube_weight: float = 10.0  # rad per metre: weight of the cube position in the distance, joints weigh 1
    time_weight: float = 0.003  # per step: weight of the time offset between the query and a demo step
    window: int = 40  # steps: a demo step is matched only within this many steps of the query's time
    temperature: float = 0.15  # softmax weights exp(-(d - d_min) / temperature); large = plain mean
    chunk: int = 8  # actions of the blended chunk played open loop before the next query
    action_noise: float = 0.0  # rad, std of smooth (OU, 10 steps) noise added to the arm joint commands
    cube_delay: int = 0  # steps the cube reading lags; before the first arrives it reads the ID box centre
    seed: int = 0  # seeds the action noise together with the episode's first observation

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k={self.k} must be >= 1.")
        if self.demos < 1:
            raise ValueError(f"demos={self.demos} must be >= 1.")
        if self.cube_weight < 0 or self.time_weight < 0:
            raise ValueError(f"cube_weight={self.cube_weight}, time_weight={self.time_weight} must be >= 0.")
        if self.window < 0:
            raise ValueError(f"window={self.window} must be >= 0.")
        if self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature} must be > 0.")
        if self.chunk < 1:
            raise ValueError(f"chunk={self.chunk} must be >= 1.")
        if self.action_noise < 0:
            raise ValueError(f"action_noise={self.action_noise} must be >= 0.")
        if self.cube_delay < 0:
            raise ValueError(f"cube_delay={self.cube_delay} must be >= 0.")


class Library:
    """Demonstrations as arrays: states, actions (N, T, 14) and cube positions (N, T, 3), float64."""

    def __init__(self, states: np.ndarray, actions: np.ndarray, cubes: np.ndarray):
        self.states = np.asarray(states, dtype=float)
        self.actions = np.asarray(actions, dtype=float)
        self.cubes = np.asarray(cubes, dtype=float)

    @classmethod
    def load(cls, demos: int, path: Path = DEMO_FILE) -> Library:
        with np.load(path) as f:
            if demos > len(f["states"]):
                raise ValueError(f"demos={demos}: only {len(f['states'])} demonstrations are stored.")
            return cls(f["states"][:demos], f["actions"][:demos], f["cubes"][:demos])

    def neighbours(
        self, knobs: KnnKnobs, t: int, state: np.ndarray, cube: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The k nearest demonstrations: indices (k,), matched steps (k,), distances (k,), nearest first.

        Each demonstration is represented by its step within `window` of `t` that minimises
        sqrt(|joints - state|^2 + cube_weight^2 |cube - cube_d|^2 + (time_weight (s - t))^2).
        """
        T = self.states.shape[1]
        steps = np.arange(max(0, min(t, T - 1) - knobs.window), min(T, t + knobs.window + 1))
        d2 = ((self.states[:, steps] - state) ** 2).sum(-1)
        d2 = d2 + knobs.cube_weight**2 * ((self.cubes[:, steps] - cube) ** 2).sum(-1)
        d2 = d2 + (knobs.time_weight * (steps - t)) ** 2
        best = d2.argmin(1)
        dist = np.sqrt(d2[np.arange(len(d2)), best])
        order = np.argsort(dist, kind="stable")[: knobs.k]
        return order, steps[best[order]], dist[order]

    def chunk(self, knobs: KnnKnobs, t: int, state: np.ndarray, cube: np.ndarray) -> np.ndarray:
        """(chunk, 14) blend of the neighbours' next actions from their matched steps on."""
        idx, steps, dist = self.neighbours(knobs, t, state, cube)
        weights = np.exp(-(dist - dist[0]) / knobs.temperature)
        weights = weights / weights.sum()
        T = self.actions.shape[1]
        ahead = np.minimum(steps[:, None] + np.arange(knobs.chunk), T - 1)  # (k, chunk)
        return np.einsum("k,kcd->cd", weights, self.actions[idx[:, None], ahead])


PRIOR_CUBE = np.array([0.10, 0.50, CUBE_HALF])  # what a delayed cube reading reports before its first frame


class KnnEpisode:
    """One episode: every `chunk` steps, query the library and queue the blended chunk of actions."""

    def __init__(self, knobs: KnnKnobs, library: Library, cube: np.ndarray):
        self.knobs, self.library = knobs, library
        self.seen: list[np.ndarray] = []  # cube positions observed so far, for the delayed reading
        rng = episode_rng(knobs.seed, cube)
        self.noise = smooth_noise(rng, EPISODE_STEPS + knobs.chunk, 12, knobs.action_noise, 10.0)
        self.queue: list[np.ndarray] = []

    def reading(self) -> np.ndarray:
        """The cube position the policy reads now: `cube_delay` steps old, the prior before that."""
        t = len(self.seen) - 1 - self.knobs.cube_delay
        return self.seen[t] if t >= 0 else PRIOR_CUBE

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        self.seen.append(batch["observation.environment_state"][b][:3].astype(float))
        if not self.queue:
            state = batch["observation.state"][b].astype(float)
            self.queue = list(self.library.chunk(self.knobs, t, state, self.reading()))
        action = self.queue.pop(0).copy()
        noise = self.noise[min(t, len(self.noise) - 1)]
        action[:6] += noise[:6]
        action[7:13] += noise[6:]
        return action


class KnnPolicy(EpisodeBatch):
    """LeRobot-style policy: `reset()`, `select_action(batch) -> (B, 14)`; the library is loaded once."""

    def __init__(self, knobs: KnnKnobs, library: Library | None = None):
        self.knobs = knobs
        self.library = library if library is not None else Library.load(knobs.demos)
        super().__init__(self._plan)

    def _plan(self, b: int, batch: dict) -> KnnEpisode:
        return KnnEpisode(self.knobs, self.library, batch["observation.environment_state"][b][:7])


def make_policy(**kwargs) -> KnnPolicy:
    """Import-path factory: `families.knn:make_policy` with `KnnKnobs` fields as kwargs."""
    return KnnPolicy(checked_knobs(KnnKnobs, "knn", kwargs))


# Named settings for measure.py: runs a retrieval-policy user would make, from careful to careless.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "single": {"k": 1},
    "noise": {"action_noise": 0.02},
    "low_cube_weight": {"cube_weight": 0.2},
    "mean20": {"k": 20, "temperature": 100.0},
    "demos20": {"demos": 20},
    "demos8": {"demos": 8},
    "stale_cube": {"cube_delay": 90},
    "long_chunk_late": {"chunk": 100, "cube_delay": 2},
    "joints_only": {"cube_weight": 0.0},
}

"""Named settings of `knn`. Measured success in the reference world (`python benchmarks/families/measure.py
--families knn --episodes 25 --detector-poses 0`, 25 ID + 25 OOD episodes each, seed 0):

| setting             | what the user did                                               | ID    | OOD   |
|---------------------|-----------------------------------------------------------------|-------|-------|
| nominal             | k 4, 100 demos, cube weight 10 rad/m, temperature 0.15, chunk 8 | 25/25 | 23/25 |
| single              | k 1: replays the single nearest demo, no interpolation          | 25/25 | 18/25 |
| noise               | smooth joint-command noise, 0.02 rad std                        | 19/25 | 17/25 |
| low_cube_weight     | cube weight 0.2 rad/m: joints decide after the first query      | 23/25 | 13/25 |
| mean20              | k 20, a plain mean: the blend pulls toward the box centre       | 24/25 | 7/25  |
| demos20             | only the first 20 demos kept                                    | 20/25 | 8/25  |
| demos8              | only the first 8 demos kept                                     | 12/25 | 1/25  |
| stale_cube          | cube reading 90 steps late (ID box centre until it arrives)     | 9/25  | 2/25  |
| long_chunk_late     | 100-step open-loop chunks, cube reading 2 steps late            | 2/25  | 0/25  |
| joints_only         | cube weight 0: retrieval blind to where the cube is             | 1/25  | 0/25  |
"""


if __name__ == "__main__":
    write_demos()
