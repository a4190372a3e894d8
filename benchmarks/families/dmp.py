"""Family 23, `dmp`: Dynamic Movement Primitives fitted to the family's own keyframe teacher.

The teacher (`demonstrate`) is a kinematic keyframe demonstrator: for a demonstration cube pose it lays
minimum-jerk paths of each arm's tool centre point (TCP) and gripper angles (heading, pitch, roll) through a
few Cartesian keyframes. The paths are cut into primitives (the right's reach, carry and retreat; the left's
approach and retreat), and each primitive is fitted in task space, one DMP per dimension (x, y, z, heading,
pitch, roll): an Ijspeert-style discrete DMP, a critically damped spring-damper pulled to the goal and driven
by a forcing term of Gaussian basis functions of a decaying phase, fitted by locally weighted regression
over all demonstrations (`fit_dmp`).

At run time the DMPs are integrated at 50 Hz (5 Euler substeps per control step) from where the arm is,
toward goals placed relative to the observed cube: the right comes down top-down on the cube's upper half,
its fingers across the cube's y faces; it lifts and tilts its gripper to point 35 degrees below -x at a
hand-over above the table's centre, the cube hanging in its fingers. The left comes up the same axis from
below-left (35 degrees up toward +x), fingers in the same plane, nose to nose, and pinches the y faces of
the cube's other half; its goal follows the cube it reads at every step. Grippers are phase-triggered: a
gripper closes or opens when its arm's primitive has run its phase out; the left sets off when the right's
carry is half done; the right opens once the left has closed, then both back off along their axes. Each
DMP pose is turned into joint targets by damped least-squares IK (`arm.py`) every step.

Knobs (`DmpKnobs`) are what a DMP user varies: the number of basis functions, how many demonstrations,
the forcing term's spatial scaling (none, or Ijspeert's `(g - y0) / (g_demo - y0_demo)`, which flips or
blows up the learnt shape when the new goal lies on the other side of the start or close to it), the
temporal scaling `tau`, goal coupling (off: the goals of the first demonstration, not the observed cube),
phase stopping (the phase waits while the arm lags its DMP) and a bias on the observed cube pose.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from families.arm import Arm
from families.common import (
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    RIGHT_BASE,
    BimanualPolicy,
    checked_knobs,
    cube_yaw,
    episode_rng,
    gripper_rot,
    minimum_jerk,
    piecewise,
    top_down_roll,
    wrap_pi,
)

DT = 0.02  # s, one control step (50 Hz)
SUBSTEPS = 5  # Euler substeps of the DMPs per control step
ALPHA_Z = 25.0  # spring gain of the transformation system; BETA_Z = ALPHA_Z / 4 makes it critically damped
BETA_Z = ALPHA_Z / 4
ALPHA_S = 4.0  # canonical decay: the phase falls from 1 to exp(-4) = 0.018 over one primitive
AMPLITUDE_FLOOR = 1e-3  # |g_demo - y0_demo| below this is taken as this (keeps Ijspeert's ratio finite)

MEET = np.array([0.0, 0.50, 0.22])  # m, cube centre at the hand-over
TILT = np.deg2rad(35.0)  # the right points this far below -x at the hand-over, the left this far above +x
HOLD = 0.031  # m from each TCP to the cube centre along its approach: each hand holds one half
PRE_GRASP = 0.07  # m above the grasp point where the teacher's descent starts
LIFT = 0.11  # m the teacher lifts straight up before carrying
PRE_TAKE = 0.08  # m short of its hand-over point, along its axis, where the left's final approach starts
BACK_OFF = 0.08  # m each arm backs off along its axis at the end
GRIP_STEPS = 10  # steps of a gripper ramp
SETTLE_STEPS = 10  # steps a gripper is left to settle before the next primitive starts
# Demonstration cube centres (x, y): the centre of gym-aloha's ID box, its corners, its edge midpoints.
DEMO_CUBES = np.array([[0.10, 0.50], [0.02, 0.42], [0.18, 0.42], [0.02, 0.58], [0.18, 0.58],
                       [0.10, 0.42], [0.10, 0.58], [0.02, 0.50], [0.18, 0.50]])  # fmt: skip
# Teacher durations (s) of each primitive.
DURATIONS = {"right_reach": 1.6, "right_carry": 1.8, "right_retreat": 1.0, "left_approach": 1.8,
             "left_retreat": 1.0}  # fmt: skip
LEFT_STARTS_AT = 0.5  # the left sets off when the right's carry has run this fraction of its phase time


@dataclass
class DmpKnobs:
    """How the DMP controller is fitted and run; the defaults are the nominal one."""

    n_basis: int = 20  # Gaussian basis functions of each forcing term
    demos: int = 5  # demonstrations fitted (the first `demos` of DEMO_CUBES: 1 = the ID box centre only)
    scaling: str = "none"  # forcing term: "none" (fixed, as learnt) | "ijspeert" (times the goal amplitude)
    tau: float = 1.0  # temporal scaling: every primitive takes tau times its demonstrated duration
    goal_coupling: bool = True  # goals from the observed cube; False = the first demonstration's goals
    phase_stop: float = 0.0  # 1/m^2, phase slowed by 1 + phase_stop * |TCP - DMP|^2; 0 = off
    pose_noise: float = 0.0  # m, std of a per-episode bias on the observed cube position (x, y)
    seed: int = 0  # seeds the pose bias together with the episode's first observation

    def __post_init__(self) -> None:
        if self.n_basis < 1:
            raise ValueError(f"n_basis={self.n_basis} must be >= 1.")
        if not 1 <= self.demos <= len(DEMO_CUBES):
            raise ValueError(f"demos={self.demos} must be in 1..{len(DEMO_CUBES)}.")
        if self.scaling not in ("none", "ijspeert"):
            raise ValueError(f"scaling='{self.scaling}' must be 'none' or 'ijspeert'.")
        if self.tau <= 0:
            raise ValueError(f"tau={self.tau} must be > 0 (1 = the demonstrated speed, 2 = half as fast).")
        if self.phase_stop < 0:
            raise ValueError(f"phase_stop={self.phase_stop} must be >= 0 (0 = no phase stopping).")
        if self.pose_noise < 0:
            raise ValueError(f"pose_noise={self.pose_noise} must be >= 0 (metres).")


# ---------------------------------------------------------------------------------------------- geometry
def right_grasp_pose(cube: np.ndarray) -> np.ndarray:
    """(6,) right TCP pose (x, y, z, heading, pitch, roll) of the top-down grasp of a cube pose (7,)."""
    dx, dy = cube[:2] - RIGHT_BASE[:2]
    heading = np.pi + wrap_pi(float(np.arctan2(dy, dx)) - np.pi)
    roll = top_down_roll(heading, cube_yaw(cube[3:7]) + np.pi / 2)  # fingers across the y faces
    # The cube rests on the table (its centre at CUBE_HALF) whatever height the first observation says.
    return np.array([cube[0], cube[1], CUBE_HALF + HOLD, heading, np.pi / 2, roll])


def right_handover_pose() -> np.ndarray:
    """(6,) right TCP pose at the hand-over: pointing TILT below -x, the cube centre at MEET."""
    approach = gripper_rot(np.pi, TILT, 0.0)[:, 0]
    return np.concatenate([MEET - HOLD * approach, [np.pi, TILT, 0.0]])


def left_take_pose(cube_centre: np.ndarray) -> np.ndarray:
    """(6,) left TCP pose that takes the far half of a cube centred at `cube_centre`, nose to nose."""
    approach = gripper_rot(0.0, -TILT, 0.0)[:, 0]
    return np.concatenate([cube_centre - HOLD * approach, [0.0, -TILT, 0.0]])


def backed_off(pose: np.ndarray, distance: float) -> np.ndarray:
    """`pose` moved `distance` back along its gripper's approach axis."""
    return np.concatenate([pose[:3] - distance * gripper_rot(*pose[3:])[:, 0], pose[3:]])


def tcp_pose(arm: Arm, q: np.ndarray) -> np.ndarray:
    """(6,) TCP pose of `arm` at joints `q`, angles read back from its orientation (roll taken as 0).

    The heading is unwrapped next to the arm's forward heading (pi for the right, 0 for the left), so that
    a DMP from it to a goal heading never turns the long way round.
    """
    p, R = arm.fk(q)
    forward = np.pi if arm.side == "right" else 0.0
    heading = forward + wrap_pi(float(np.arctan2(R[1, 0], R[0, 0])) - forward)
    return np.concatenate([p, [heading, float(np.arcsin(-R[2, 0])), 0.0]])


# ----------------------------------------------------------------------------------------------- teacher
def keyframe_path(poses: list[np.ndarray], fractions: list[float], duration: float) -> np.ndarray:
    """(T, 6) minimum-jerk path through `poses` reached at `fractions` of `duration`, sampled at 50 Hz."""
    steps = int(round(duration / DT))
    return np.stack([piecewise(fractions, poses, k / steps, minimum_jerk) for k in range(steps + 1)])


def demonstrate(cube_xy: np.ndarray, right_start: np.ndarray, left_start: np.ndarray) -> dict:
    """The teacher's task-space paths (T, 6) of every primitive for a cube resting at `cube_xy`."""
    cube = np.array([cube_xy[0], cube_xy[1], CUBE_HALF, 1.0, 0.0, 0.0, 0.0])
    grasp, handover = right_grasp_pose(cube), right_handover_pose()
    above = grasp + [0, 0, PRE_GRASP, 0, 0, 0]
    lifted = grasp + [0, 0, LIFT, 0, 0, 0]
    take = left_take_pose(MEET)
    return {
        "right_reach": keyframe_path([right_start, above, grasp], [0.0, 0.6, 1.0], DURATIONS["right_reach"]),
        "right_carry": keyframe_path([grasp, lifted, handover], [0.0, 0.35, 1.0], DURATIONS["right_carry"]),
        "right_retreat": keyframe_path(
            [handover, backed_off(handover, BACK_OFF)], [0.0, 1.0], DURATIONS["right_retreat"]
        ),
        "left_approach": keyframe_path(
            [left_start, backed_off(take, PRE_TAKE), take], [0.0, 0.6, 1.0], DURATIONS["left_approach"]
        ),
        "left_retreat": keyframe_path(
            [take, backed_off(take, BACK_OFF) + [0, 0, 0.03, 0, 0, 0]], [0.0, 1.0], DURATIONS["left_retreat"]
        ),
    }


# ------------------------------------------------------------------------------------------------ DMPs
@dataclass
class Dmp:
    """A fitted discrete DMP of D dimensions: basis centres and widths (N,) in phase, weights (D, N)."""

    centres: np.ndarray
    widths: np.ndarray
    weights: np.ndarray
    duration: float  # s, the demonstrated duration
    start: np.ndarray  # (D,) the first demonstration's start
    goal: np.ndarray  # (D,) the first demonstration's goal
    ijspeert: bool  # forcing term scaled by the goal amplitude relative to the demonstrations'

    def forcing(self, s: float) -> np.ndarray:
        """(D,) learnt forcing term at phase `s`, in the units it was fitted in."""
        psi = np.exp(-self.widths * (s - self.centres) ** 2)
        return self.weights @ psi * s / (psi.sum() + 1e-10)


def basis(n_basis: int) -> tuple[np.ndarray, np.ndarray]:
    """Centres (evenly spaced in time along the phase) and widths (overlap of neighbours) of n Gaussians."""
    centres = np.exp(-ALPHA_S * np.linspace(0.0, 1.0, n_basis))
    gaps = np.abs(np.diff(centres)) if n_basis > 1 else np.array([1.0])
    widths = 1.0 / (0.65 * np.append(gaps, gaps[-1])) ** 2
    return centres, widths


def amplitude(start: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """goal - start, with magnitudes below AMPLITUDE_FLOOR raised to it (sign kept)."""
    diff = goal - start
    return np.where(np.abs(diff) < AMPLITUDE_FLOOR, np.where(diff < 0, -1.0, 1.0) * AMPLITUDE_FLOOR, diff)


def fit_dmp(demos: list[np.ndarray], n_basis: int, ijspeert: bool) -> Dmp:
    """One DMP per dimension from demonstrations (T, D) at 50 Hz, by locally weighted regression.

    The target forcing is what the spring-damper lacks to reproduce each demonstration:
    f = tau^2 y'' - ALPHA_Z (BETA_Z (g - y) - tau y'); with `ijspeert` it is divided by the demonstration's
    goal amplitude g - y0. Each basis function's weight is the weighted least-squares fit of f ~ w s over
    the samples of every demonstration, weighted by that basis function.
    """
    centres, widths = basis(n_basis)
    duration = (len(demos[0]) - 1) * DT
    phases, targets = [], []
    for y in demos:
        yd = np.gradient(y, DT, axis=0)
        ydd = np.gradient(yd, DT, axis=0)
        f = duration**2 * ydd - ALPHA_Z * (BETA_Z * (y[-1] - y) - duration * yd)  # (T, D)
        if ijspeert:
            f = f / amplitude(y[0], y[-1])
        phases.append(np.exp(-ALPHA_S * np.arange(len(y)) * DT / duration))
        targets.append(f)
    s, f = np.concatenate(phases), np.concatenate(targets)  # (S,), (S, D)
    psi = np.exp(-widths * (s[:, None] - centres) ** 2)  # (S, N)
    weights = ((psi * s[:, None]).T @ f).T / ((psi * s[:, None] ** 2).sum(0) + 1e-10)  # (D, N)
    return Dmp(centres, widths, weights, duration, demos[0][0], demos[0][-1], ijspeert)


class DmpRun:
    """One DMP integrated online: state (y, v), phase s, start y0, goal g (may move while it runs)."""

    def __init__(self, dmp: Dmp, start: np.ndarray, goal: np.ndarray, tau: float):
        self.dmp, self.tau = dmp, tau * dmp.duration
        self.y, self.v = np.array(start, dtype=float), np.zeros(len(start))
        self.y0, self.goal, self.s = self.y.copy(), np.array(goal, dtype=float), 1.0
        self.scale = 1.0

    @property
    def done(self) -> bool:
        """The phase has run out (one demonstrated duration, times tau, unless it was stopped)."""
        return self.s <= np.exp(-ALPHA_S) + 1e-9

    @property
    def progress(self) -> float:
        """Fraction of its phase time the primitive has run, 0..1."""
        return min(1.0, float(-np.log(self.s) / ALPHA_S))

    def step(self, lag: float = 0.0, phase_stop: float = 0.0) -> np.ndarray:
        """Advance one control step; `lag` (m) is how far the arm trails the DMP. Returns the pose (D,)."""
        h = DT / SUBSTEPS
        if self.dmp.ijspeert:  # Ijspeert's spatial scaling: the learnt shape per unit of goal amplitude
            self.scale = amplitude(self.y0, self.goal)
        for _ in range(SUBSTEPS):
            force = self.scale * self.dmp.forcing(self.s)
            accel = (ALPHA_Z * (BETA_Z * (self.goal - self.y) - self.v) + force) / self.tau
            self.v = self.v + h * accel
            self.y = self.y + h * self.v / self.tau
            self.s = max(self.s - h * ALPHA_S * self.s / self.tau / (1 + phase_stop * lag**2), 1e-6)
        return self.y


def fit_primitives(knobs: DmpKnobs, right_start: np.ndarray, left_start: np.ndarray) -> dict[str, Dmp]:
    """Every primitive's DMP, fitted on the teacher's paths for the first `knobs.demos` cube poses."""
    demos = [demonstrate(xy, right_start, left_start) for xy in DEMO_CUBES[: knobs.demos]]
    ijspeert = knobs.scaling == "ijspeert"
    return {name: fit_dmp([d[name] for d in demos], knobs.n_basis, ijspeert) for name in DURATIONS}


# ----------------------------------------------------------------------------------------------- episode
class DmpEpisode:
    """One episode: each arm runs its primitives in turn, grippers switched when a primitive's phase ends.

    Stages of the right: reach, close, carry, hold, open, retreat; of the left: wait, approach, close, hold,
    retreat. `action(t, batch, b)` advances both and solves IK for the DMPs' poses.
    """

    def __init__(
        self, knobs: DmpKnobs, dmps: dict, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray
    ):
        self.knobs, self.dmps, self.left_arm, self.right_arm = knobs, dmps, left, right
        self.q_left, self.q_right = state[:6].astype(float), state[7:13].astype(float)
        rng = episode_rng(knobs.seed, cube)
        self.bias = np.append(rng.normal(0.0, knobs.pose_noise, 2), 0.0)  # (3,) miscalibrated detector
        goal = right_grasp_pose(self.read(cube)) if knobs.goal_coupling else dmps["right_reach"].goal
        self.right = DmpRun(dmps["right_reach"], tcp_pose(right, self.q_right), goal, knobs.tau)
        self.left: DmpRun | None = None
        self.right_stage, self.left_stage = "reach", "wait"
        self.right_since = self.left_since = 0  # step at which the current stage began
        self.grip = {"right": GRIPPER_OPEN, "left": GRIPPER_OPEN}

    def read(self, cube: np.ndarray) -> np.ndarray:
        """The cube pose (7,) as the policy sees it: the true one plus the episode's position bias."""
        return np.concatenate([cube[:3] + self.bias, cube[3:7]])

    def ramp(self, side: str, t: int, since: int, to: float) -> bool:
        """Move `side`'s gripper toward `to` over GRIP_STEPS; True once it has also settled."""
        frm = GRIPPER_CLOSED if to == GRIPPER_OPEN else GRIPPER_OPEN
        self.grip[side] = frm + (to - frm) * min(1.0, (t - since) / GRIP_STEPS)
        return t - since >= GRIP_STEPS + SETTLE_STEPS

    def advance_right(self, t: int) -> None:
        stage, dmps = self.right_stage, self.dmps
        nxt = None
        if stage in ("reach", "carry") and self.right.done:
            nxt = "close" if stage == "reach" else "hold"
        elif stage == "close" and self.ramp("right", t, self.right_since, GRIPPER_CLOSED):
            self.right = DmpRun(dmps["right_carry"], self.right.y, right_handover_pose(), self.knobs.tau)
            nxt = "carry"
        elif stage == "hold" and self.left_stage in ("hold", "retreat"):
            nxt = "open"
        elif stage == "open" and self.ramp("right", t, self.right_since, GRIPPER_OPEN):
            goal = backed_off(self.right.y, BACK_OFF)
            self.right = DmpRun(dmps["right_retreat"], self.right.y, goal, self.knobs.tau)
            nxt = "retreat"
        if nxt is not None:
            self.right_stage, self.right_since = nxt, t

    def left_goal(self, cube: np.ndarray) -> np.ndarray:
        if not self.knobs.goal_coupling:
            return self.dmps["left_approach"].goal
        return left_take_pose(self.read(cube)[:3])

    def advance_left(self, t: int, cube: np.ndarray) -> None:
        stage, nxt = self.left_stage, None
        if stage == "wait":
            carrying = self.right_stage == "carry" and self.right.progress >= LEFT_STARTS_AT
            if carrying or self.right_stage in ("hold", "open", "retreat"):
                start = tcp_pose(self.left_arm, self.q_left)
                self.left = DmpRun(self.dmps["left_approach"], start, self.left_goal(cube), self.knobs.tau)
                nxt = "approach"
        elif stage == "approach":
            self.left.goal = self.left_goal(cube)  # goal coupling: the goal follows the cube read now
            if self.left.done:
                nxt = "close"
        elif stage == "close" and self.ramp("left", t, self.left_since, GRIPPER_CLOSED):
            nxt = "hold"
        elif stage == "hold" and self.right_stage == "retreat":
            goal = backed_off(self.left.y, BACK_OFF) + [0, 0, 0.03, 0, 0, 0]
            self.left = DmpRun(self.dmps["left_retreat"], self.left.y, goal, self.knobs.tau)
            nxt = "retreat"
        if nxt is not None:
            self.left_stage, self.left_since = nxt, t

    def lag(self, arm: Arm, run: DmpRun, state: np.ndarray) -> float:
        """How far (m) the measured TCP trails the DMP; only computed when phase stopping is on."""
        if self.knobs.phase_stop == 0:
            return 0.0
        return float(np.linalg.norm(arm.fk(state.astype(float))[0] - run.y[:3]))

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        state = batch["observation.state"][b]
        cube = batch["observation.environment_state"][b][:7].astype(float)
        self.advance_right(t)
        self.advance_left(t, cube)
        stop = self.knobs.phase_stop
        pose = self.right.step(self.lag(self.right_arm, self.right, state[7:13]), stop)
        self.q_right, _ = self.right_arm.ik(pose[:3], gripper_rot(*pose[3:]), self.q_right, iters=8)
        if self.left is not None:
            pose = self.left.step(self.lag(self.left_arm, self.left, state[:6]), stop)
            self.q_left, _ = self.left_arm.ik(pose[:3], gripper_rot(*pose[3:]), self.q_left, iters=8)
        return np.concatenate([self.q_left, [self.grip["left"]], self.q_right, [self.grip["right"]]])


class DmpPolicy(BimanualPolicy):
    """LeRobot-style policy: `reset()`, `select_action(batch) -> (B, 14)`; DMPs fitted once, at creation."""

    def __init__(self, knobs: DmpKnobs):
        super().__init__(knobs, self._episode)
        from gym_aloha.constants import START_ARM_POSE

        home = np.array(START_ARM_POSE)
        self.dmps = fit_primitives(knobs, tcp_pose(self.right, home[8:14]), tcp_pose(self.left, home[:6]))

    def _episode(self, knobs, left, right, state, cube) -> DmpEpisode:
        return DmpEpisode(knobs, self.dmps, left, right, state, cube)


def make_policy(**kwargs) -> DmpPolicy:
    """Import-path factory: `families.dmp:make_policy` with `DmpKnobs` fields as kwargs."""
    return DmpPolicy(checked_knobs(DmpKnobs, "dmp", kwargs))


# Named settings for measure.py: runs a DMP user would make, from careful to careless.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "few_basis": {"n_basis": 3},
    "one_demo_ijspeert": {"demos": 1, "scaling": "ijspeert"},
    "fast": {"tau": 0.25},
    "slow": {"tau": 1.7},
    "phase_stop": {"phase_stop": 1000.0},
    "phase_stop_stiff": {"phase_stop": 2000.0},
    "pose_noise": {"pose_noise": 0.015},
    "pose_noise_heavy": {"pose_noise": 0.03},
    "demo_goal": {"goal_coupling": False},
}
"""Named settings of `dmp`. Measured success in the reference world (`python benchmarks/families/measure.py
--families dmp --episodes 25 --detector-poses 0`, 25 ID + 25 OOD episodes each, seed 0):

| setting           | what the user did                                            | ID    | OOD   |
|-------------------|--------------------------------------------------------------|-------|-------|
| nominal           | 20 basis functions, 5 demos, fixed forcing, goals on cube    | 25/25 | 25/25 |
| few_basis         | 3 basis functions: a smoothed shape, a slightly short reach  | 25/25 | 25/25 |
| one_demo_ijspeert | one demo (the box centre), Ijspeert's amplitude scaling      | 25/25 | 25/25 |
| fast              | tau 0.25: every primitive four times as fast                 | 25/25 | 19/25 |
| slow              | tau 1.7: the take only just fits in the 8 s episode          | 25/25 | 22/25 |
| phase_stop        | phase stopping, gain 1000 /m^2: waits on the arms' lag       | 23/25 | 15/25 |
| pose_noise        | a 1.5 cm (std) bias on the observed cube position            | 18/25 | 14/25 |
| pose_noise_heavy  | the same, 3 cm                                               | 10/25 | 5/25  |
| demo_goal         | goal coupling off: goals of the demo, cube at (0.10, 0.50)   | 1/25  | 0/25  |
| phase_stop_stiff  | gain 2000 /m^2: the left's sag stalls its phase mid-approach | 0/25  | 0/25  |
"""
