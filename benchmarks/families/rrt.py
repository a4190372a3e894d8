"""Family 24, `rrt`: sampling-based motion planning, RRT-Connect in each arm's joint space, planned per phase.

How it acts. The episode is a script of phases per arm; at the start of each phase the arm's next goal is
turned into joint angles by inverse kinematics (`arm.py`, damped least squares, with restarts from random
seeds) and the joint path to it is planned from the arm's last command, on the cube pose observed at that
moment (`observation.environment_state`):

1. Transit moves (the right to its pre-grasp, the right carrying the cube to the hand-over, the left to its
   staging pose) are planned by RRT-Connect (Kuffner & LaValle 2000): two trees grown from the start and
   the goal in the arm's 6-D joint space, samples uniform within the joint limits (or, with probability
   `goal_bias`, the other tree's root), extended by steps of `step` rad and greedily connected. Every node
   and every edge (checked every `resolution` rad) must be collision-free with a clearance of `margin` m.
   The path is then shortened by `shortcuts` random shortcuts (two random points on the path joined by a
   straight edge when it is free).
2. Approaches and lifts are straight Cartesian lines, IK every centimetre, as a pick pipeline does them.
3. Every joint path is time-parameterized along its length (max-norm over the joints) by one trapezoidal
   profile under a joint velocity and acceleration limit (`speed` scales the first, its square the second;
   approaches and lifts run at half the velocity limit); a path's corners are not
   blended, so a raw RRT path jerks at each node. The profile is sampled at 50 Hz and played.
4. Grippers switch open/closed at phase boundaries; each move ends with a few settle steps.

Collision model, written here on MuJoCo's forward kinematics of the MJCF (no contact solver): each arm is
capsules between its link frames (upper arm, forearm, wrist to palm, the gripper bar across, two fingers
at their current opening), the table is the plane z = 0, the resting cube a sphere around its centre
(4 cm cube: radius 3.5 cm), the held cube the same sphere fixed in the gripper, and the other arm its
capsules at its current command and at the goal it is moving to.

Geometry. The right grasps top-down on the cube's face pair nearest world x (fingers square to the cube's
yaw), finger tips 1.5 cm above the table, so that it holds the upper part; it lifts 6 cm and carries the
cube to a hand-over at `HANDOVER` (table centre, 22 cm up), still top-down. Only once the right presents
the cube does the left plan its transit (the arms never move near each other at once): to a staging pose
10 cm back along -x from the cube as measured, level, fingers closing along world y; it then slides in
along +x, its tool centre 2.5 cm below the cube's centre, so that its fingers pinch the lower part of the
free y faces under the right's finger tips; once it has closed, the right opens and rises clear.

A plan that fails (start or goal in collision, or no connection within `iterations`) falls back to the
straight joint line (`fallback="straight"`, what a hurried user wires in) or stops that arm's script, the
arm holding where it is for the rest of the episode (`fallback="hold"`); `regrasps` re-plans the pick on
the cube as it then lies when a lift left it on the table. Randomness (RRT samples, shortcut points, IK
seeds) comes from `episode_rng(seed, first state, first cube pose)`, so an episode is the same in any batch.

State-only: reads `observation.state` and `observation.environment_state`, never an image. Kwargs: see
`RRTKnobs` (defaults = nominal); `FAMILY_SETTINGS` names the runs an RRT user would make.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from families.arm import FINGER_CLOSE, FINGER_OPEN, Arm, rotation
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    BimanualPolicy,
    checked_knobs,
    cube_yaw,
    episode_rng,
    refuse_invalid,
)

DT = 0.02  # s per control step (50 Hz)
VEL_LIMIT = 1.5  # rad/s, joint velocity limit at speed 1 (max-norm over the six joints)
ACC_LIMIT = 5.0  # rad/s^2, joint acceleration limit at speed 1
CARTESIAN_SCALE = 0.5  # approaches and lifts run at this fraction of the transit velocity limit
HANDOVER = np.array([0.0, 0.50, 0.22])  # m, where the right presents the cube's centre
GRASP_TIPS = 0.015  # m, the right's finger tips above the table at the grasp
TIP_REACH = 0.029  # m, finger tips past the tool centre point (arm.py)
PREGRASP = 0.08  # m above the grasp where the right's transit ends
LIFT = 0.06  # m the right lifts before it carries
LIFTED_Z = 0.05  # m, cube centre height after the lift that counts as picked (it rests at 0.02)
TAKE_BELOW = 0.025  # m the left's tool centre sits below the cube's centre
TAKE_BACK = 0.005  # m the left's tool centre stays short of the cube's centre along +x
STANDOFF = 0.10  # m back along -x where the left stages
RETREAT = 0.08  # m the right rises after it let go
SETTLE = 5  # steps after each move for the servos to catch up
CLOSE_STEPS, OPEN_STEPS = 15, 12  # steps a gripper is given to close or open
CUBE_RADIUS = CUBE_HALF * np.sqrt(3)  # m, the sphere around the cube
IK_TOL = 2e-3  # IK task error (m, plus 0.3 m/rad) below which a solution counts
IK_RESTARTS = 6  # random IK seeds tried besides the arm's last command
ARM_LINKS = ("upper_arm_link", "upper_forearm_link", "wrist_link")
ARM_RADII = np.array([0.04, 0.035, 0.035, 0.03, 0.015, 0.015])  # upper arm, forearm, wrist, bar, fingers


@dataclass
class RRTKnobs:
    """How the motion-planning stack is configured; defaults = nominal."""

    iterations: int = 300  # RRT-Connect iterations per plan (each: one sample, one extend, one connect)
    step: float = 0.3  # rad, longest extend step of a tree in joint space (Euclidean)
    goal_bias: float = 0.05  # probability that a sample is the other tree's root instead of uniform
    resolution: float = 0.04  # rad, largest joint change between two collision checks along an edge
    margin: float = 0.01  # m, clearance every checked state keeps from the table, cube and other arm
    shortcuts: int = 40  # random shortcut attempts on each planned path; 0 = the raw RRT path
    speed: float = 1.0  # scales the joint velocity limit (and the acceleration limit by speed^2)
    ik: str = "nearest"  # which IK solution a goal takes: "nearest" to the last command, or "random"
    fallback: str = "straight"  # a failed plan: "straight" joint line regardless, or "hold" still
    regrasps: int = 0  # re-plans of the pick after a lift that left the cube on the table
    seed: int = 0  # seeds the planner together with the episode's first observation

    def __post_init__(self) -> None:
        checks = {
            "iterations": self.iterations >= 0,
            "step": self.step > 0,
            "goal_bias": 0 <= self.goal_bias <= 1,
            "resolution": self.resolution > 0,
            "margin": self.margin >= 0,
            "shortcuts": self.shortcuts >= 0,
            "speed": self.speed > 0,
            "ik": self.ik in ("nearest", "random"),
            "fallback": self.fallback in ("straight", "hold"),
            "regrasps": self.regrasps >= 0,
        }
        refuse_invalid(self, checks)


# ------------------------------------------------------------------------------------- collision model
def segment_distances(p0: np.ndarray, p1: np.ndarray, q0: np.ndarray, q1: np.ndarray) -> np.ndarray:
    """(K,) closest distances between segments p0-p1 and q0-q1, each (K,3) (Ericson, Real-Time Collision
    Detection, 5.1.9; no segment is degenerate here)."""
    d1, d2, r = p1 - p0, q1 - q0, p0 - q0
    a, e = np.einsum("ki,ki->k", d1, d1), np.einsum("ki,ki->k", d2, d2)
    b, c, f = np.einsum("ki,ki->k", d1, d2), np.einsum("ki,ki->k", d1, r), np.einsum("ki,ki->k", d2, r)
    denom = a * e - b * b
    s = np.where(denom > 1e-12, np.clip((b * f - c * e) / np.maximum(denom, 1e-12), 0, 1), 0.0)
    t = (b * s + f) / e
    s = np.where(t < 0, np.clip(-c / a, 0, 1), np.where(t > 1, np.clip((b - c) / a, 0, 1), s))
    t = np.clip(t, 0, 1)
    return np.linalg.norm(p0 + d1 * s[:, None] - q0 - d2 * t[:, None], axis=1)


def point_distances(p0: np.ndarray, p1: np.ndarray, point: np.ndarray) -> np.ndarray:
    """(K,) distances from `point` (3,) to the segments p0-p1 (K,3)."""
    d = p1 - p0
    s = np.clip(np.einsum("ki,ki->k", point - p0, d) / np.einsum("ki,ki->k", d, d), 0, 1)
    return np.linalg.norm(p0 + d * s[:, None] - point, axis=1)


def arm_capsules(arm: Arm, q: np.ndarray, grip: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Capsules (start (6,3), end (6,3), radius (6,)) of `arm` at joints `q` and gripper command `grip`.

    Upper arm and forearm run between the link frames; the wrist runs to the palm; the gripper bar lies
    across the palm; each finger runs along its pad at the finger's current opening.
    """
    tcp, R = arm.fk(q)
    links = [arm.data.xpos[arm.model.body(f"vx300s_{arm.side}/{name}").id].copy() for name in ARM_LINKS]
    grip_frame = tcp - R @ arm.tcp
    local = lambda x, y: grip_frame + R @ np.array([x, y, 0.0])  # noqa: E731  (a point in the gripper frame)
    finger = FINGER_CLOSE + np.clip(grip, 0, 1) * (FINGER_OPEN - FINGER_CLOSE) - 0.0224 + 0.012
    starts = [links[0], links[1], links[2], local(0.045, -0.06), local(0.075, finger), local(0.075, -finger)]
    ends = [
        links[1],
        links[2],
        local(0.04, 0.0),
        local(0.045, 0.06),
        local(0.145, finger),
        local(0.145, -finger),
    ]
    return np.array(starts), np.array(ends), ARM_RADII.copy()


@dataclass
class Scene:
    """What one arm's plan must keep clear of: the table plane, spheres, the other arm's capsules.

    `held` is the held cube's centre in the gripper frame (None: nothing held)."""

    arm: Arm
    grip: float  # the moving arm's gripper command during the move
    margin: float
    spheres: list[tuple[np.ndarray, float]]  # (centre, radius) obstacles
    others: tuple[np.ndarray, np.ndarray, np.ndarray]  # the other arm's capsules, stacked
    held: np.ndarray | None = None

    def clear(self, q: np.ndarray) -> bool:
        """Whether joint angles `q` keep `margin` from everything (and the arm off its own upper arm)."""
        p0, p1, r = arm_capsules(self.arm, q, self.grip)
        if np.any(np.minimum(p0[:, 2], p1[:, 2]) - r < self.margin):  # the table top is z = 0
            return False
        for centre, radius in self.spheres:
            if np.any(point_distances(p0, p1, centre) - r < radius + self.margin):
                return False
        o0, o1, orad = self.others
        i, j = np.divmod(np.arange(len(r) * len(orad)), len(orad))
        if np.any(segment_distances(p0[i], p1[i], o0[j], o1[j]) - r[i] - orad[j] < self.margin):
            return False
        hand = [2, 4, 5]  # wrist and fingers against the upper arm: the arm folded into itself
        if np.any(segment_distances(p0[hand], p1[hand], p0[[0] * 3], p1[[0] * 3]) < r[hand] + r[0]):
            return False
        if self.held is not None:
            tcp, R = self.arm.fk(q)
            cube = tcp + R @ self.held
            if cube[2] - CUBE_RADIUS < self.margin:
                return False
            if np.any(point_distances(o0, o1, cube) - orad < CUBE_RADIUS + self.margin):
                return False
        return True


# ---------------------------------------------------------------------------------------------- planner
def edge_clear(clear: Callable, a: np.ndarray, b: np.ndarray, resolution: float) -> bool:
    """Whether the straight joint-space edge a -> b is clear, checked every `resolution` rad (a excluded)."""
    n = max(1, int(np.ceil(np.abs(b - a).max() / resolution)))
    return all(clear(a + (b - a) * (k / n)) for k in range(1, n + 1))


class Tree:
    """One RRT tree: nodes (joint angles) and each node's parent index (-1 at the root)."""

    def __init__(self, root: np.ndarray):
        self.nodes, self.parents = [root], [-1]

    def extend(self, target: np.ndarray, step: float, edge: Callable) -> tuple[int | None, bool]:
        """Grow one step from the nearest node toward `target`: (new node's index or None, reached?)."""
        i = int(np.argmin(np.linalg.norm(np.array(self.nodes) - target, axis=1)))
        near, dist = self.nodes[i], float(np.linalg.norm(target - self.nodes[i]))
        new = target if dist <= step else near + (target - near) * (step / dist)
        if not edge(near, new):
            return None, False
        self.nodes.append(new)
        self.parents.append(i)
        return len(self.nodes) - 1, dist <= step

    def branch(self, i: int) -> list[np.ndarray]:
        """Nodes from node `i` back to the root."""
        out = []
        while i >= 0:
            out.append(self.nodes[i])
            i = self.parents[i]
        return out


def rrt_connect(
    start: np.ndarray, goal: np.ndarray, edge: Callable, bounds: tuple, k: RRTKnobs, rng: np.random.Generator
) -> list[np.ndarray] | None:
    """A collision-free joint path start -> goal by RRT-Connect, or None after `k.iterations` iterations.

    Each iteration samples a configuration (the other tree's root with probability `goal_bias`), extends
    one tree a step toward it and then extends the other tree greedily toward the new node until it
    arrives or is blocked; the trees swap roles every iteration.
    """
    a, b = Tree(start), Tree(goal)
    for _ in range(k.iterations):
        target = b.nodes[0] if rng.random() < k.goal_bias else rng.uniform(*bounds)
        new, _ = a.extend(target, k.step, edge)
        if new is not None:
            advanced = b.extend(a.nodes[new], k.step, edge)
            while advanced[0] is not None and not advanced[1]:
                advanced = b.extend(a.nodes[new], k.step, edge)
            if advanced[1]:
                path = a.branch(new)[::-1] + b.branch(advanced[0])[1:]
                return path if a.nodes[0] is start else path[::-1]
        a, b = b, a
    return None


def shortcut(path: list[np.ndarray], edge: Callable, attempts: int, rng: np.random.Generator) -> list:
    """Random shortcutting: two random points on the path joined by a straight edge wherever it is clear."""
    path = distinct(path)
    for _ in range(attempts):
        if len(path) < 3:
            break
        lengths = np.linalg.norm(np.diff(np.array(path), axis=0), axis=1)
        knots = np.concatenate([[0.0], np.cumsum(lengths)])
        s1, s2 = np.sort(np.clip(rng.uniform(-0.1, 1.1, 2), 0, 1) * knots[-1])  # the ends now and then
        i1, i2 = np.minimum(np.searchsorted(knots, [s1, s2], side="right") - 1, len(lengths) - 1)
        if i1 == i2:
            continue
        p1 = path[i1] + (path[i1 + 1] - path[i1]) * (s1 - knots[i1]) / lengths[i1]
        p2 = path[i2] + (path[i2 + 1] - path[i2]) * (s2 - knots[i2]) / lengths[i2]
        if edge(p1, p2):
            path = distinct(path[: i1 + 1] + [p1, p2] + path[i2 + 1 :])
    return path


def distinct(path: list[np.ndarray]) -> list[np.ndarray]:
    """The path without repeated consecutive configurations (zero-length segments)."""
    return [q for i, q in enumerate(path) if i == 0 or np.abs(q - path[i - 1]).max() > 1e-9]


def trapezoid(length: float, vmax: float, amax: float) -> tuple[float, float, float]:
    """Duration (s), acceleration time (s) and top speed of a rest-to-rest trapezoid over `length`."""
    t_acc = vmax / amax
    if length < vmax * t_acc:  # never reaches the speed limit: a triangle
        t_acc = float(np.sqrt(length / amax))
        return 2 * t_acc, t_acc, amax * t_acc
    return length / vmax + t_acc, t_acc, vmax


def timed(path: list[np.ndarray], vmax: float, amax: float) -> np.ndarray:
    """(T, 6) joint commands at 50 Hz along `path` under the limits (max-norm over joints), rest to rest.

    One trapezoidal profile over the whole path length; corners between segments are not blended.
    """
    points = np.array(path)  # (N, 6)
    knots = np.concatenate([[0.0], np.cumsum(np.abs(np.diff(points, axis=0)).max(axis=1))])
    if knots[-1] < 1e-9:
        return points[-1:]
    duration, t_acc, v = trapezoid(knots[-1], vmax, amax)
    t = np.arange(1, int(np.ceil(duration / DT)) + 1) * DT
    t = np.minimum(t, duration)
    a = v / t_acc
    s = np.where(t < t_acc, 0.5 * a * t**2, 0.5 * a * t_acc**2 + v * (t - t_acc))
    s = np.where(t > duration - t_acc, knots[-1] - 0.5 * a * (duration - t) ** 2, s)
    return np.stack([np.interp(s, knots, points[:, j]) for j in range(points.shape[1])], axis=1)


def cartesian_path(arm: Arm, q: np.ndarray, target: np.ndarray, rot: np.ndarray) -> list[np.ndarray]:
    """Joint waypoints that move the TCP on a straight line to `target` at orientation `rot`, IK every cm."""
    start, _ = arm.fk(q)
    n = max(1, int(np.ceil(np.linalg.norm(target - start) / 0.01)))
    path = [np.array(q, dtype=float)]
    for s in np.arange(1, n + 1) / n:
        path.append(arm.ik(start + (target - start) * s, rot, path[-1])[0])
    return path


def right_grasp_rots(cube: np.ndarray) -> list[np.ndarray]:
    """Top-down gripper orientations closing along the cube's face normal nearest world x (both ways)."""
    yaw = cube_yaw(cube[3:7])
    yaw = (yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4  # the face normal nearest world x
    closing = np.array([np.cos(yaw), np.sin(yaw), 0.0])
    return [rotation([0, 0, -1], closing), rotation([0, 0, -1], -closing)]


def left_take_rots() -> list[np.ndarray]:
    """The left's take: level along +x, fingers closing along world y (both ways)."""
    return [rotation([1, 0, 0], [0, 1, 0]), rotation([1, 0, 0], [0, -1, 0])]


# ---------------------------------------------------------------------------------------------- episode
class RRTEpisode:
    """One episode: a generator script per arm, each planning its phases as it reaches them.

    `plans` logs every plan: (step, arm, phase, outcome), outcome "rrt", "fallback" or "failed"."""

    def __init__(self, knobs: RRTKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k, self.arms = knobs, {"left": left, "right": right}
        self.rng = episode_rng(knobs.seed, state, cube)
        self.q = {"left": state[:6].copy(), "right": state[7:13].copy()}  # last joint commands
        self.goal = {side: q.copy() for side, q in self.q.items()}  # where each arm's current move ends
        self.grip = {"left": GRIPPER_OPEN, "right": GRIPPER_OPEN}
        self.state, self.cube, self.t = state, cube, 0
        self.events: dict[str, int] = {}
        self.plans: list[tuple[int, str, str, str]] = []
        self.scripts = [self.right_script(), self.left_script()]

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        self.t = t
        self.state = batch["observation.state"][b].astype(float)
        self.cube = batch["observation.environment_state"][b][:7].astype(float)
        for script in self.scripts:
            next(script, None)
        q, g = self.q, self.grip
        return np.concatenate([q["left"], [g["left"]], q["right"], [g["right"]]])

    # ----------------------------------------------------------------------------- planning helpers
    def scene(self, side: str, spheres: list, held: np.ndarray | None = None) -> Scene:
        """The scene `side` plans in: the other arm at its last command and at the end of its move."""
        other = "left" if side == "right" else "right"
        caps = [
            arm_capsules(self.arms[other], q, self.grip[other]) for q in (self.q[other], self.goal[other])
        ]
        others = tuple(np.concatenate(parts) for parts in zip(*caps, strict=True))
        grip = GRIPPER_CLOSED if held is not None else GRIPPER_OPEN
        return Scene(self.arms[side], grip, self.k.margin, spheres, others, held)

    def solve(self, side: str, pos: np.ndarray, rots: list[np.ndarray], scene: Scene) -> np.ndarray:
        """Joint angles for a goal pose: IK from the last command and from random seeds (uniform in the middle
        half of the joint ranges). Of the solutions
        (the clear ones if any), `ik="nearest"` takes the one nearest the last command among those with the
        forearm upright (|roll| < pi/2; the flipped branch hangs on the weakest servo) if any; `ik="random"`
        takes any one."""
        arm, q_now = self.arms[side], self.q[side]
        seeds = [q_now] + [self.rng.uniform(arm.lower / 2, arm.upper / 2) for _ in range(IK_RESTARTS)]
        tries = [arm.ik(pos, rot, seed, iters=150) for seed in seeds for rot in rots]
        solutions = [q for q, err in tries if err < IK_TOL] or [min(tries, key=lambda qe: qe[1])[0]]
        clear = [q for q in solutions if scene.clear(q)] or solutions
        if self.k.ik == "random":
            return clear[int(self.rng.integers(len(clear)))]
        upright = [q for q in clear if abs(q[3]) < np.pi / 2] or clear
        return min(upright, key=lambda q: float(np.linalg.norm(q - q_now)))

    def plan(self, side: str, phase: str, goal: np.ndarray, scene: Scene) -> list[np.ndarray] | None:
        """A joint path from the last command to `goal`: RRT-Connect, shortcut; on failure the fallback."""
        start, k = self.q[side], self.k
        edge = lambda a, b: edge_clear(scene.clear, a, b, k.resolution)  # noqa: E731
        bounds = (self.arms[side].lower, self.arms[side].upper)
        path = None
        if scene.clear(start) and scene.clear(goal):
            path = rrt_connect(start, goal, edge, bounds, k, self.rng)
        if path is not None:
            self.plans.append((self.t, side, phase, "rrt"))
            return shortcut(path, edge, k.shortcuts, self.rng)
        outcome = "fallback" if k.fallback == "straight" else "failed"
        self.plans.append((self.t, side, phase, outcome))
        return [start, goal] if k.fallback == "straight" else None

    # ------------------------------------------------------------------------------ motion generators
    def move(self, side: str, path: list[np.ndarray], scale: float = 1.0) -> Iterator:
        """Play a joint path under the limits (`scale` slows the velocity limit only), then settle."""
        vmax, amax = VEL_LIMIT * self.k.speed * scale, ACC_LIMIT * self.k.speed**2
        self.goal[side] = np.array(path[-1], dtype=float)
        for q in timed(path, vmax, amax):
            self.q[side] = q
            yield
        for _ in range(SETTLE):
            yield

    def transit(self, side: str, phase: str, goal: np.ndarray, scene: Scene) -> Iterator:
        """Plan and play a transit (event "<phase> planned" once planned); False (the script stops) when the
        plan failed."""
        path = self.plan(side, phase, goal, scene)
        self.events[f"{phase} planned"] = self.t
        if path is None:
            return False
        yield from self.move(side, path)
        return True

    def straight(self, side: str, target: np.ndarray, rot: np.ndarray) -> Iterator:
        """A straight Cartesian move of the TCP to `target`, at the approach speed."""
        yield from self.move(
            side, cartesian_path(self.arms[side], self.q[side], target, rot), CARTESIAN_SCALE
        )

    def gripper(self, side: str, command: float, steps: int) -> Iterator:
        self.grip[side] = command
        for _ in range(steps):
            yield

    # ---------------------------------------------------------------------------------------- scripts
    def pick(self) -> Iterator:
        """Right: transit to above the cube, straight down, close, straight up; False if a plan failed."""
        while abs(self.cube[2] - CUBE_HALF) > 0.005:  # the cube is still falling onto the table
            yield
        cube = self.cube
        above = np.array([cube[0], cube[1], GRASP_TIPS + TIP_REACH + PREGRASP])
        scene = self.scene("right", [(cube[:3], CUBE_RADIUS)])
        goal = self.solve("right", above, right_grasp_rots(cube), scene)
        if not (yield from self.transit("right", "pregrasp", goal, scene)):
            return False
        cube, rot = self.cube, self.arms["right"].fk(self.q["right"])[1]  # re-read the cube where it lies
        grasp = np.array([cube[0], cube[1], GRASP_TIPS + TIP_REACH])
        yield from self.straight("right", grasp, rot)
        yield from self.gripper("right", GRIPPER_CLOSED, CLOSE_STEPS)
        yield from self.straight("right", grasp + [0.0, 0.0, LIFT], rot)
        return True

    def right_script(self) -> Iterator:
        """Pick (re-planned up to `regrasps` times), carry to the hand-over, wait for the left, let go."""
        for _ in range(1 + self.k.regrasps):
            if not (yield from self.pick()):
                return
            if self.cube[2] > LIFTED_Z:
                break
            yield from self.gripper("right", GRIPPER_OPEN, OPEN_STEPS)
        else:
            return
        arm = self.arms["right"]
        tcp, R = arm.fk(self.state[7:13])  # the cube in the hand, from the measured joints
        held = R.T @ (self.cube[:3] - tcp)
        rot = arm.fk(self.q["right"])[1]
        scene = self.scene("right", [], held=held)
        goal = self.solve("right", HANDOVER - rot @ held, [rot], scene)
        if not (yield from self.transit("right", "carry", goal, scene)):
            return
        self.events["presented"] = self.t
        while "left closed" not in self.events:
            yield
        yield from self.gripper("right", GRIPPER_OPEN, OPEN_STEPS)
        tcp, rot = arm.fk(self.q["right"])
        yield from self.straight("right", tcp + [0.0, 0.0, RETREAT], rot)

    def left_script(self) -> Iterator:
        """Left: once the right presents the cube, transit to the staging pose behind it, slide in, close."""
        while "presented" not in self.events:
            yield
        offset = np.array([-TAKE_BACK, 0.0, -TAKE_BELOW])
        scene = self.scene("left", [(self.cube[:3], CUBE_RADIUS)])
        goal = self.solve("left", self.cube[:3] + offset - [STANDOFF, 0.0, 0.0], left_take_rots(), scene)
        if not (yield from self.transit("left", "stage", goal, scene)):
            return
        rot = self.arms["left"].fk(self.q["left"])[1]
        yield from self.straight("left", self.cube[:3] + offset, rot)
        yield from self.gripper("left", GRIPPER_CLOSED, CLOSE_STEPS)
        self.events["left closed"] = self.t


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.rrt:make_policy` with `RRTKnobs` fields as kwargs."""
    return BimanualPolicy(checked_knobs(RRTKnobs, "rrt", kwargs), RRTEpisode)


# Named settings for measure.py; measured success rates are in the docstring below.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "fast_limits": {"speed": 2.5},
    "no_shortcut": {"shortcuts": 0},
    "random_ik": {"ik": "random"},
    "tiny_budget_hold": {"iterations": 1, "fallback": "hold"},
    "slow_limits": {"speed": 0.7},
    "raw_big_steps": {"step": 1.3, "shortcuts": 0},
    "cautious_limits": {"speed": 0.65},
    "raw_huge_steps": {"step": 1.5, "shortcuts": 0},
    "wide_margin_hold": {"margin": 0.06, "fallback": "hold"},
}
"""Named settings of `rrt`, from nominal to hopeless. Measured success in the reference world (`python
benchmarks/families/measure.py --families rrt --episodes 25 --detector-poses 0 --out
outputs/family24/measured.json`, 25 ID + 25 OOD episodes each, seed 0). Success is measure.py's: reward 4
at some step (the left's finger touches the cube while it is off the table). The nominal hand-over comes at
steps 265-315 of 400, so the limits and the path length decide most failures.

| setting          | what the user ran                                                  | ID    | OOD   |
|------------------|--------------------------------------------------------------------|-------|-------|
| nominal          | 300 iterations, 0.3 rad steps, 40 shortcuts, 1 cm margin, 1.5 rad/s | 25/25 | 25/25 |
| fast_limits      | limits x2.5 (3.75 rad/s, 31 rad/s^2): the grasp still holds        | 25/25 | 25/25 |
| no_shortcut      | the raw RRT-Connect path: short kinks at 0.3 rad steps             | 25/25 | 25/25 |
| random_ik        | goals take any converged IK solution, flipped forearm included     | 25/25 | 25/25 |
| tiny_budget_hold | one iteration per plan, a failed plan stops the arm                | 22/25 | 20/25 |
| slow_limits      | limits x0.7: for some OOD cubes the left arrives after step 400     | 25/25 | 21/25 |
| raw_big_steps    | raw paths with 1.3 rad steps: detours make the transits long       | 14/25 | 20/25 |
| cautious_limits  | limits x0.65: the left arrives after step 400 about half the time  | 10/25 | 13/25 |
| raw_huge_steps   | raw paths with 1.5 rad steps: the hand-over mostly after step 400  | 5/25  | 7/25  |
| wide_margin_hold | 6 cm margin: the pre-grasp (fingers ~4.7 cm from the cube's sphere) | 0/25  | 0/25  |
|                  | is "in collision", the plan fails and the right never moves        |       |       |

Quick checks (10 ID + 10 OOD episodes) not among the settings: margin 4.5 cm with `fallback="hold"` 20/20,
5 cm 0/20 (all or nothing: the clearance is set by the fixed pre-grasp height); speed 4 20/20, 0.6 0/20,
0.5 0/20; raw paths with 0.8 rad steps 19/20, with 1.5 rad steps and goal bias 0.5 18/20; coarse edge
checks (0.6 rad) with no margin 20/20 (this scene has no obstacle between the phases' start and goal);
`regrasps` has no named setting: the nominal pick never misses.
"""
