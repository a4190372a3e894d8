"""What the held-out families share: gripper orientations, timing profiles, per-episode randomness, teachers.

A family's policy plans each episode of a lockstep batch on its first observation and then plays the plan;
`EpisodeBatch` below holds those per-episode plans so that a family only writes `plan(...)` for one
episode. Randomness (joint noise, detection noise) comes from `episode_rng(seed, observation)`, a pure
function of the policy's seed and what the episode showed first, so an episode plays the same whatever
batch it runs in.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable

import numpy as np
import torch

from families.arm import Arm

# The right arm's base sits at x = +0.469, the left at x = -0.469, both at y = 0.5 (gym-aloha's MJCF).
RIGHT_BASE = np.array([0.469, 0.5, 0.0])
LEFT_BASE = np.array([-0.469, 0.5, 0.0])
CUBE_HALF = 0.02  # the red cube is 4 cm wide
GRIPPER_OPEN = 1.0  # normalized gripper commands (gym-aloha: 0 closed, 1 open)
GRIPPER_CLOSED = 0.0


def gripper_rot(heading: float, pitch: float, roll: float) -> np.ndarray:
    """Gripper orientation (3,3) (columns: approach, closing, third axis) from three angles (rad).

    The approach axis points along `heading` (angle from world +x in the table plane), tilted down by
    `pitch` (pi/2: straight down). At `roll` = 0 the fingers close along the horizontal axis to the left
    of the heading; `roll` turns them about the approach axis (right-handed).
    """
    a = np.array([np.cos(pitch) * np.cos(heading), np.cos(pitch) * np.sin(heading), -np.sin(pitch)])
    c0 = np.array([-np.sin(heading), np.cos(heading), 0.0])
    c = c0 * np.cos(roll) + np.cross(a, c0) * np.sin(roll)  # Rodrigues, c0 is orthogonal to a
    return np.stack([a, c, np.cross(a, c)], axis=1)


def rotvec_matrix(v: np.ndarray) -> np.ndarray:
    """Rotation matrix of the rotation vector v (axis times angle; Rodrigues)."""
    angle = float(np.linalg.norm(v))
    if angle < 1e-12:
        return np.eye(3)
    k = v / angle
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def wrap_pi(angle: float) -> float:
    """`angle` in [-pi, pi)."""
    return float((angle + np.pi) % (2 * np.pi) - np.pi)


def wrap_half_pi(angle: float) -> float:
    """`angle` modulo pi, in [-pi/2, pi/2): a finger axis is the same axis either way round."""
    return float((angle + np.pi / 2) % np.pi - np.pi / 2)


def cube_yaw(quat_wxyz: np.ndarray) -> float:
    """Yaw (rad) of the cube's x face normal in the table plane, from its (w, x, y, z) quaternion."""
    w, x, y, z = quat_wxyz
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def top_down_roll(heading: float, closing_yaw: float) -> float:
    """Roll that makes a top-down gripper (pitch pi/2) at `heading` close along the axis `closing_yaw`."""
    # At pitch pi/2 the approach is -z, so a roll turns the closing axis clockwise seen from above.
    return wrap_half_pi(heading + np.pi / 2 - closing_yaw)


def smoothstep(s: np.ndarray | float) -> np.ndarray | float:
    """Cubic ease 3s^2 - 2s^3: zero velocity at both ends."""
    s = np.clip(s, 0.0, 1.0)
    return s * s * (3 - 2 * s)


def minimum_jerk(s: np.ndarray | float) -> np.ndarray | float:
    """Quintic 10s^3 - 15s^4 + 6s^5: zero velocity and acceleration at both ends (Flash & Hogan 1985)."""
    s = np.clip(s, 0.0, 1.0)
    return s**3 * (10 - 15 * s + 6 * s * s)


def piecewise(times: list[float], values: list[np.ndarray], t: float, ease: Callable) -> np.ndarray:
    """The value at time `t` of a path through `values` at `times` (ascending), eased on each segment."""
    if t <= times[0]:
        return np.asarray(values[0], dtype=float)
    for k in range(1, len(times)):
        if t < times[k]:
            s = ease((t - times[k - 1]) / (times[k] - times[k - 1]))
            return (1 - s) * np.asarray(values[k - 1], dtype=float) + s * np.asarray(values[k], dtype=float)
    return np.asarray(values[-1], dtype=float)


def checked_knobs(knobs: type, family: str, kwargs: dict):
    """`knobs(**kwargs)`, a family's knobs dataclass, refusing kwargs it has no field for by name."""
    known = {f.name for f in dataclasses.fields(knobs)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(f"{family}: unknown kwarg(s) {unknown}; known: {sorted(known)}.")
    return knobs(**kwargs)


def refuse_invalid(knobs, checks: dict[str, bool]) -> None:
    """Raise one ValueError naming every knob of `knobs` whose check in `checks` (name -> ok) failed."""
    bad = [name for name, ok in checks.items() if not ok]
    if bad:
        values = ", ".join(f"{n}={getattr(knobs, n)!r}" for n in bad)
        raise ValueError(f"{type(knobs).__name__}: invalid {values} (see the field comments for the ranges).")


def episode_rng(seed: int, *observed: np.ndarray) -> np.random.Generator:
    """A generator that depends only on the seed and the bytes of what the episode showed first."""
    digest = 0
    for array in observed:
        digest = zlib.crc32(np.ascontiguousarray(array).tobytes(), digest)
    return np.random.default_rng(np.random.SeedSequence([int(seed), digest]))


def smooth_noise(rng: np.random.Generator, steps: int, dims: int, scale: float, tau: float) -> np.ndarray:
    """(steps, dims) Ornstein-Uhlenbeck noise: stationary std `scale`, correlation time `tau` steps.

    Servo tracking error and cable drag wander slowly; white noise at 50 Hz would only shake the arm.
    """
    out = np.zeros((steps, dims))
    if scale <= 0:
        return out
    decay = np.exp(-1.0 / tau)
    x = rng.normal(0.0, scale, dims)
    for t in range(steps):
        out[t] = x
        x = decay * x + np.sqrt(1 - decay**2) * rng.normal(0.0, scale, dims)
    return out


class EpisodeBatch:
    """Per-episode plans of a lockstep batch: built from the first observation, then stepped together.

    `plan(b, batch)` returns an object with `action(t, batch, b) -> (14,)`; it is called once per episode
    on the first `select_action` after `reset()`.
    """

    def __init__(self, plan: Callable):
        self._plan = plan
        self.plans: list | None = None
        self.t = 0

    def reset(self) -> None:
        self.plans, self.t = None, 0

    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        state = batch["observation.state"]
        B = state.shape[0]
        numpy_batch = {k: v.detach().cpu().numpy() for k, v in batch.items() if isinstance(v, torch.Tensor)}
        if self.plans is None or len(self.plans) != B:
            self.plans = [self._plan(b, numpy_batch) for b in range(B)]
            self.t = 0
        actions = np.stack([plan.action(self.t, numpy_batch, b) for b, plan in enumerate(self.plans)])
        self.t += 1
        return torch.from_numpy(actions.astype(np.float32)).to(state.device)  # (B, 14)


class BimanualPolicy(EpisodeBatch):
    """LeRobot-style policy of both arms that reads the cube pose: `reset()`, `select_action(batch)` ->
    (B, 14). Each episode's plan is `episode(knobs, left, right, state, cube)`, built from the episode's first
    proprio and cube pose (the plan may read the pose again at every step); the two `Arm`s share one MuJoCo
    model."""

    def __init__(self, knobs, episode: Callable):
        self.knobs, self.episode = knobs, episode
        self.right = Arm("right")
        self.left = Arm("left", model=self.right.model)
        super().__init__(self._plan_episode)

    def _plan_episode(self, b: int, batch: dict):
        state = batch["observation.state"][b].astype(float)
        cube = batch["observation.environment_state"][b][:7].astype(float)
        return self.episode(self.knobs, self.left, self.right, state, cube)


class PlannedEpisode:
    """Plays a precomputed (steps, 14) command table, holding its last row."""

    def __init__(self, commands: np.ndarray):
        self.commands = commands

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        return self.commands[min(t, len(self.commands) - 1)]


def uniform_cube_poses(box: tuple, seed: int, n: int, first: int = 0) -> np.ndarray:
    """(n, 7) unturned cube poses i = first..first+n-1, 5 cm up, x and y uniform over `box` ((x0, x1),
    (y0, y1)) drawn with SeedSequence([seed, i])."""
    (x0, x1), (y0, y1) = box
    out = []
    for i in range(first, first + n):
        rng = np.random.default_rng(np.random.SeedSequence([seed, i]))
        out.append([rng.uniform(x0, x1), rng.uniform(y0, y1), 0.05, 1.0, 0.0, 0.0, 0.0])
    return np.array(out)


def play_teacher(teacher, poses: np.ndarray, steps: int, num_envs: int = 10) -> dict[str, np.ndarray]:
    """Play the policy `teacher` from cube `poses` (n, 7) in the reference world, state only, `num_envs`
    starts at a time. Returns what each step observed, `states` (steps, n, 14) and `cubes` (steps, n, E)
    (the environment state), the `actions` (steps, n, 14) commanded at it, and `success` (n,) bool (the
    task's full reward reached at some step): the demonstrations of the families that learn from a teacher."""
    from families.measure import to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    parts: dict[str, list] = {"states": [], "cubes": [], "actions": [], "success": []}
    for lo in range(0, len(poses), num_envs):
        chunk = poses[lo : lo + num_envs]
        with AlohaWorld(WorldConfig(cameras=(), num_envs=len(chunk))) as world:
            obs, best, seen = world.reset(chunk, False), np.zeros(len(chunk)), []
            teacher.reset()
            for _ in range(steps):
                action = teacher.select_action(to_batch(obs)).numpy()
                seen.append(
                    (obs["observation.state"].copy(), obs["observation.environment_state"].copy(), action)
                )
                step = world.step(action, False)
                obs, best = step.observation, np.maximum(best, step.reward)
        for j, key in enumerate(("states", "cubes", "actions")):
            parts[key].append(np.stack([s[j] for s in seen]))
        parts["success"].append(best >= 4)
    return {k: np.concatenate(v, axis=0 if k == "success" else 1) for k, v in parts.items()}
