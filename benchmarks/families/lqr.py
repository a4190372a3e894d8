"""Family 25, `lqr`: every move is a trajectory optimised by iterative LQR, replayed with LQR feedback.

How it acts. Each arm's motion between phase goals is the solution of a finite-horizon optimal-control
problem in joint space, solved by iterative LQR (iLQR, Li & Todorov 2004) when the phase starts, from the
measured joints; the horizon runs to that arm's next phase. The optimiser's model of the arm is a
first-order lag per joint, q' = q + a (u - q), u the commanded position: the rates `SERVO_RATE` were fitted
here to step responses of the reference world's position servos (a 0.2-0.3 rad step on every joint of the
right arm at its start pose; the best lag per joint by least squares over 80 steps). The state is
(q, q_prev), so that joint velocity and acceleration are both linear in it. Costs, per step: joint velocity,
joint acceleration and command lead (u - q), each quadratic; on the last fifth of the horizon, the tool
centre point's (TCP) pose error to the phase goal (position in m, plus `ROT_WEIGHT` x the rotation
matrices' difference), through MuJoCo forward kinematics (`arm.py`), linearised by finite differences at
each iteration (Gauss-Newton). Each iteration is a backward Riccati pass and a forward pass with a
backtracking line search, starting from holding still. The optimised commands are replayed with the
final pass's time-varying gains K_t, scaled by `gain_scale`, correcting them from the measured (q, q_prev)
every step; after the horizon the last command is held. Grippers switch when a phase starts.

Geometry (each goal read from the cube pose observed when its phase starts):
1. Right arm. Top-down over the cube, wrist turned so that its fingers close on the cube's y faces (the
   face pair of the observed yaw); 8 cm above, then down until its TCP is `GRASP_UP` above the cube's centre
   (it holds the upper half, tips level with the centre), closes, lifts `LIFT` straight up, then carries
   the cube, fingers along world y (of the two such wrist turns the nearer), to a high hand-over left of
   the table's centre (`HANDOVER`, the cube's centre placed from where it sits in the hand) and holds it.
2. Left arm. Level, heading +x (its own forward), fingers closing along world y: it stages `STANDOFF`
   short of the hand-over on -x, then goes in along +x to the cube as measured, `TAKE_BELOW` under its
   centre, its open fingers passing outside the right's, and closes on the lower half of the y faces,
   under the right's finger tips.
3. Release. The right opens and rises; the left draws the cube back along -x.

State-only: reads `observation.state` and `observation.environment_state`, never an image. Kwargs (see
`LqrKnobs`; defaults = nominal) are what a user of such an optimiser sets: the iteration budget (1-3: not
converged, the arm ends cm off the goal), the share of the LQR gains applied (0: open loop; 1: the full
gains, designed on the lag model, over-correct the real servos, which overshoot, and the arm lags and
swings), a wrong servo model in the optimiser (`servo_scale`), a heavy command cost, a low goal weight
(both arrive short and late), a noisy cube reading (`cube_noise`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from families.arm import Arm
from families.common import (
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    BimanualPolicy,
    checked_knobs,
    cube_yaw,
    episode_rng,
    gripper_rot,
    refuse_invalid,
    top_down_roll,
)

EPISODE_STEPS = 400
SERVO_RATE = np.array([0.9, 0.9, 0.7, 0.55, 0.4, 0.8])  # fitted first-order lag per joint, per 50 Hz step
ROT_WEIGHT = 0.2  # m of task error per unit of rotation-matrix difference (~rad for small turns)
HANDOVER = np.array([-0.03, 0.50, 0.22])  # m, world: the cube's centre at the hand-over
GRASP_UP = 0.03  # m the right's TCP sits above the cube's centre (tips 2.9 cm past it: the upper half)
ABOVE = 0.08  # m above the grasp where the right lines up
LIFT = 0.08  # m the right lifts straight up before it carries
STANDOFF = 0.09  # m short of the cube (along -x) where the left stages
TAKE_BACK = 0.005  # m the left's TCP stays short of the cube's centre along x
TAKE_BELOW = 0.013  # m the left's TCP sits below the cube's centre: its fingers on the lower half
LEFT_ROT = gripper_rot(0.0, 0.0, 0.0)  # level, heading +x, fingers closing along world y
LINE_SEARCH = (1.0, 0.5, 0.25, 0.1, 0.03)
# Phases (start step at tempo 1, arm, name); a move's horizon runs to that arm's next phase.
SCHEDULE = (
    (0, "right", "above"), (80, "right", "descend"), (120, "right", "close"), (135, "right", "lift"),
    (160, "right", "carry"), (260, "right", "hold"), (325, "right", "release"), (340, "right", "rise"),
    (150, "left", "stage"), (260, "left", "insert"), (300, "left", "close"), (345, "left", "withdraw"),
)  # fmt: skip


@dataclass
class LqrKnobs:
    """How the optimal-control stack deviates from its nominal tuning; defaults = nominal."""

    iterations: int = 12  # iLQR iterations per move (Gauss-Newton on the TCP cost)
    final_weight: float = 3e4  # weight of the TCP error (m^2) summed over the horizon's last fifth
    velocity_weight: float = 1.0  # weight of joint velocity (rad/step)^2
    acceleration_weight: float = 20.0  # weight of joint acceleration (rad/step^2)^2
    control_weight: float = 0.1  # weight of the command lead (u - q)^2 (rad^2)
    servo_scale: float = 1.0  # the optimiser's servo rates are SERVO_RATE times this (clipped to 1)
    tempo: float = 1.0  # phase start steps and horizons scaled by this (< 1: shorter horizons)
    gain_scale: float = (
        0.3  # fraction of the time-varying LQR gains applied to the measured joints; 0: open loop
    )
    cube_noise: float = 0.0  # m, std of the cube position reading error (x, y), drawn per phase
    seed: int = 0  # seeds the reading errors together with the episode's first observation

    def __post_init__(self) -> None:
        checks = {
            "iterations": self.iterations >= 1,
            "final_weight": self.final_weight > 0,
            "velocity_weight": self.velocity_weight >= 0,
            "acceleration_weight": self.acceleration_weight >= 0,
            "control_weight": self.control_weight > 0,
            "servo_scale": self.servo_scale > 0,
            "tempo": 0.3 <= self.tempo <= 1.0,
            "gain_scale": 0 <= self.gain_scale <= 1,
            "cube_noise": self.cube_noise >= 0,
        }
        refuse_invalid(self, checks)

    @property
    def rate(self) -> np.ndarray:
        return np.minimum(SERVO_RATE * self.servo_scale, 1.0)


# ---------------------------------------------------------------------------------- the optimiser's model
def dynamics(rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x' = F x + G u for the state x = (q, q_prev) (12,) and command u (6,) of a per-joint lag."""
    eye, A = np.eye(6), np.diag(rate)
    F = np.block([[eye - A, np.zeros((6, 6))], [eye, np.zeros((6, 6))]])
    G = np.vstack([A, np.zeros((6, 6))])
    return F, G


def running_hessian(k: LqrKnobs) -> np.ndarray:
    """H (18,18) with the running cost z^T H z, z = (q, q_prev, u): velocity, acceleration, command lead."""
    eye, A, zero = np.eye(6), np.diag(k.rate), np.zeros((6, 6))
    velocity = np.hstack([-A, zero, A])  # q' - q
    acceleration = np.hstack([-(eye + A), eye, A])  # q' - 2q + q_prev
    lead = np.hstack([-eye, zero, eye])  # u - q
    rows = ((k.velocity_weight, velocity), (k.acceleration_weight, acceleration), (k.control_weight, lead))
    return sum(w * M.T @ M for w, M in rows)


class TcpGoal:
    """The task error e(q) (12,) = (TCP position error, ROT_WEIGHT x (R - R_goal)) and its Jacobian.

    The orientation part is the rotation matrices' difference, not a small-angle axis error: |R - R_goal|^2
    = 6 - 2 tr(R_goal^T R) has its only zero at the goal (the small-angle error also vanishes at half a turn).
    """

    def __init__(self, arm: Arm, pos: np.ndarray, rot: np.ndarray):
        self.arm, self.pos, self.rot = arm, np.asarray(pos, dtype=float), rot

    def error(self, q: np.ndarray) -> np.ndarray:
        p, R = self.arm.fk(q)
        return np.concatenate([p - self.pos, ROT_WEIGHT * (R - self.rot).ravel()])

    def jacobian(self, q: np.ndarray, e0: np.ndarray, eps: float = 1e-5) -> np.ndarray:
        """(12,6) by forward differences."""
        return np.stack([(self.error(q + eps * np.eye(6)[j]) - e0) / eps for j in range(6)], axis=1)


@dataclass
class Plan:
    """An optimised move: nominal states x (N+1,12), commands u (N,6), feedback gains K (N,6,12)."""

    x: np.ndarray
    u: np.ndarray
    K: np.ndarray
    cost: float
    iterations: int

    @property
    def steps(self) -> int:
        return len(self.u)


class Ilqr:
    """Finite-horizon iLQR of one move: linear lag dynamics, quadratic running cost, FK goal cost."""

    def __init__(self, k: LqrKnobs, arm: Arm):
        self.k, self.arm = k, arm
        self.F, self.G = dynamics(k.rate)
        self.H = running_hessian(k)

    def task_weights(self, steps: int) -> np.ndarray:
        """(steps+1,) weight of the TCP error at each state: the final weight spread over the last fifth."""
        w = np.zeros(steps + 1)
        window = max(1, (steps + 1) // 5)
        w[-window:] = self.k.final_weight / window
        return w

    def rollout(self, x0: np.ndarray, u: np.ndarray) -> np.ndarray:
        x = np.zeros((len(u) + 1, 12))
        x[0] = x0
        for t in range(len(u)):
            x[t + 1] = self.F @ x[t] + self.G @ u[t]
        return x

    def cost(self, x: np.ndarray, u: np.ndarray, goal: TcpGoal, w: np.ndarray) -> float:
        z = np.hstack([x[:-1], u])
        running = float(np.einsum("ti,ij,tj->", z, self.H, z))
        task = sum(w[t] * float(goal.error(x[t, :6]) @ goal.error(x[t, :6])) for t in np.nonzero(w)[0])
        return running + task

    def backward(self, x, u, goal, w, mu=1e-6) -> tuple[np.ndarray, np.ndarray]:
        """Riccati pass about (x, u): feedforward steps d (N,6) and gains K (N,6,12)."""
        F, G, H, N = self.F, self.G, self.H, len(u)
        Vx, Vxx = self.task_terms(x[N], goal, w[N])
        K, d = np.zeros((N, 6, 12)), np.zeros((N, 6))
        for t in reversed(range(N)):
            g = 2 * H @ np.concatenate([x[t], u[t]])
            lx, lxx = self.task_terms(x[t], goal, w[t])
            Qx = g[:12] + lx + F.T @ Vx
            Qu = g[12:] + G.T @ Vx
            Qxx = 2 * H[:12, :12] + lxx + F.T @ Vxx @ F
            Quu = 2 * H[12:, 12:] + G.T @ Vxx @ G + mu * np.eye(6)
            Qux = 2 * H[12:, :12] + G.T @ Vxx @ F
            step = -np.linalg.solve(Quu, np.column_stack([Qux, Qu]))
            K[t], d[t] = step[:, :12], step[:, 12]
            Vx = Qx + K[t].T @ Quu @ d[t] + K[t].T @ Qu + Qux.T @ d[t]
            Vxx = Qxx + K[t].T @ Quu @ K[t] + K[t].T @ Qux + Qux.T @ K[t]
            Vxx = 0.5 * (Vxx + Vxx.T)
        return d, K

    def task_terms(self, x: np.ndarray, goal: TcpGoal, w: float) -> tuple[np.ndarray, np.ndarray]:
        """Gauss-Newton gradient (12,) and Hessian (12,12) of w |e(q)|^2 in the state x = (q, q_prev)."""
        gx, gxx = np.zeros(12), np.zeros((12, 12))
        if w > 0:
            e = goal.error(x[:6])
            J = goal.jacobian(x[:6], e)
            gx[:6], gxx[:6, :6] = 2 * w * J.T @ e, 2 * w * J.T @ J
        return gx, gxx

    def forward(self, x, u, d, K, alpha) -> tuple[np.ndarray, np.ndarray]:
        xn, un = np.zeros_like(x), np.zeros_like(u)
        xn[0] = x[0]
        for t in range(len(u)):
            un[t] = np.clip(u[t] + alpha * d[t] + K[t] @ (xn[t] - x[t]), self.arm.lower, self.arm.upper)
            xn[t + 1] = self.F @ xn[t] + self.G @ un[t]
        return xn, un

    def solve(self, q: np.ndarray, q_prev: np.ndarray, goal: TcpGoal, steps: int) -> Plan:
        """Optimise a move of `steps` commands from the measured (q, q_prev), starting from holding still."""
        w = self.task_weights(steps)
        u = np.tile(q, (steps, 1))
        x = self.rollout(np.concatenate([q, q_prev]), u)
        cost, done = self.cost(x, u, goal, w), 0
        for _ in range(self.k.iterations):
            d, K = self.backward(x, u, goal, w)
            for alpha in LINE_SEARCH:
                xn, un = self.forward(x, u, d, K, alpha)
                cn = self.cost(xn, un, goal, w)
                if cn < cost:
                    x, u, cost = xn, un, cn
                    break
            else:
                break  # no step lowers the cost: converged (or stuck)
            done += 1
        _, K = self.backward(x, u, goal, w)  # the gains about the trajectory that is replayed
        return Plan(x=x, u=u, K=K, cost=cost, iterations=done)


# ---------------------------------------------------------------------------------------------- episode
def right_grasp_rot(arm: Arm, cube_xy: np.ndarray, yaw: float) -> np.ndarray:
    """Top-down, approach heading away from the right's base, fingers closing along the cube's y axis."""
    heading = float(np.arctan2(cube_xy[1] - 0.5, cube_xy[0] - 0.469))
    return gripper_rot(heading, np.pi / 2, top_down_roll(heading, yaw + np.pi / 2))


def handover_right_rot(arm: Arm, q: np.ndarray) -> np.ndarray:
    """Top-down, fingers along world y, of the two such orientations the one nearer the gripper's now."""
    R = gripper_rot(np.pi, np.pi / 2, 0.0)
    flipped = R @ np.diag([1.0, -1.0, -1.0])  # half a turn about the approach axis
    now = arm.fk(q)[1]
    return R if np.trace(R.T @ now) >= np.trace(flipped.T @ now) else flipped


class LqrEpisode:
    """One episode: at each phase start an arm's move is optimised, then replayed with its gains."""

    def __init__(self, knobs: LqrKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        self.k, self.arms = knobs, {"left": left, "right": right}
        self.rng = episode_rng(knobs.seed, state, cube)
        self.solvers = {side: Ilqr(knobs, arm) for side, arm in self.arms.items()}
        starts = [(round(s * knobs.tempo), side, name) for s, side, name in SCHEDULE]
        self.phases = {side: sorted((s, n) for s, sd, n in starts if sd == side) for side in self.arms}
        self.moves: dict[str, tuple[int, Plan] | None] = {"left": None, "right": None}
        self.held = {"left": state[:6].copy(), "right": state[7:13].copy()}
        self.grip = {"left": GRIPPER_OPEN, "right": GRIPPER_OPEN}
        self.prev_state = state.copy()
        self.cube_in_hand = np.array([0.0, 0.0, -GRASP_UP])  # cube centre minus the right's TCP
        self.plans: list[tuple[str, str, Plan]] = []  # (arm, phase, plan), for inspection

    def read_cube(self, cube: np.ndarray) -> np.ndarray:
        noise = self.rng.normal(0.0, self.k.cube_noise, 2) if self.k.cube_noise > 0 else np.zeros(2)
        return cube[:3] + np.append(noise, 0.0)

    def goal(self, side: str, name: str, state: np.ndarray, cube: np.ndarray) -> TcpGoal | None:
        """The TCP goal of a phase (None: the arm holds), and the gripper switch that starts it."""
        arm, pos = self.arms[side], self.read_cube(cube)
        q_right = state[7:13]
        if side == "right":
            if name in ("above", "descend"):
                rot = right_grasp_rot(arm, pos[:2], cube_yaw(cube[3:7]))
                return TcpGoal(arm, pos + [0.0, 0.0, GRASP_UP + (ABOVE if name == "above" else 0.0)], rot)
            if name == "close":
                self.grip[side] = GRIPPER_CLOSED
            if name == "lift":
                p, R = arm.fk(q_right)
                return TcpGoal(arm, p + [0.0, 0.0, LIFT], R)
            if name == "carry":
                self.cube_in_hand = cube[:3] - arm.fk(q_right)[0]
                return TcpGoal(arm, HANDOVER - self.cube_in_hand, handover_right_rot(arm, q_right))
            if name == "release":
                self.grip[side] = GRIPPER_OPEN
            if name == "rise":
                p, R = arm.fk(q_right)
                return TcpGoal(arm, p + [0.04, 0.0, 0.08], R)
            return None
        if name == "stage":
            return TcpGoal(arm, HANDOVER + [-STANDOFF, 0.0, 0.0], LEFT_ROT)
        if name == "insert":
            return TcpGoal(arm, pos + [-TAKE_BACK, 0.0, -TAKE_BELOW], LEFT_ROT)
        if name == "close":
            self.grip[side] = GRIPPER_CLOSED
        if name == "withdraw":
            return TcpGoal(arm, arm.fk(state[:6])[0] + [-0.10, 0.0, 0.02], LEFT_ROT)
        return None

    def start_phase(self, side: str, t: int, state: np.ndarray, cube: np.ndarray) -> None:
        starts = [s for s, _ in self.phases[side]]
        i = starts.index(t)
        name = self.phases[side][i][1]
        if self.moves[side] is not None:  # freeze the last move's final command
            self.held[side] = self.command(side, t, state)
        self.moves[side] = None
        goal = self.goal(side, name, state, cube)
        if goal is None:
            return
        end = starts[i + 1] if i + 1 < len(starts) else EPISODE_STEPS
        q, q_prev = self.joints(side, state), self.joints(side, self.prev_state)
        plan = self.solvers[side].solve(q, q_prev, goal, max(1, end - t))
        self.moves[side] = (t, plan)
        self.plans.append((side, name, plan))

    @staticmethod
    def joints(side: str, state: np.ndarray) -> np.ndarray:
        return state[:6] if side == "left" else state[7:13]

    def command(self, side: str, t: int, state: np.ndarray) -> np.ndarray:
        """The move's command at step t, corrected by its gain from the measured (q, q_prev)."""
        if self.moves[side] is None:
            return self.held[side]
        start, plan = self.moves[side]
        i = min(t - start, plan.steps - 1)
        u = plan.u[i]
        if self.k.gain_scale > 0 and t - start < plan.steps:
            x = np.concatenate([self.joints(side, state), self.joints(side, self.prev_state)])
            u = u + self.k.gain_scale * plan.K[i] @ (x - plan.x[i])
        arm = self.arms[side]
        return np.clip(u, arm.lower, arm.upper)

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        state = batch["observation.state"][b].astype(float)
        cube = batch["observation.environment_state"][b][:7].astype(float)
        if t == 0:
            self.prev_state = state.copy()
        for side in ("right", "left"):
            if t in [s for s, _ in self.phases[side]]:
                self.start_phase(side, t, state, cube)
        q_left, q_right = self.command("left", t, state), self.command("right", t, state)
        self.prev_state = state.copy()
        return np.concatenate([q_left, [self.grip["left"]], q_right, [self.grip["right"]]])


def make_policy(**kwargs) -> BimanualPolicy:
    """Import-path factory: `families.lqr:make_policy` with `LqrKnobs` fields as kwargs."""
    return BimanualPolicy(checked_knobs(LqrKnobs, "lqr", kwargs), LqrEpisode)


# Named settings for measure.py, as an optimal-control user would run them.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "open_loop": {"gain_scale": 0.0},
    "full_gains": {"gain_scale": 1.0},
    "one_iteration": {"iterations": 1},
    "two_iterations": {"iterations": 2},
    "three_iterations": {"iterations": 3},
    "slow_servo_model": {"servo_scale": 0.4},
    "heavy_control": {"control_weight": 300.0},
    "low_final_weight": {"final_weight": 3.0},
    "noisy_cube": {"cube_noise": 0.015},
}
