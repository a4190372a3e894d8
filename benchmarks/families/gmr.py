"""Family 31, `gmr`: Gaussian mixture regression (GMM/GMR, Calinon et al. 2007) as a closed-loop policy.

How it acts: never reads an image. At the first step it reads the cube's x, y from
`observation.environment_state`. A Gaussian mixture model (64 full-covariance components) over the joint
vector [phase, cube bearing, cube distance, 14 commands, 12 arm joint positions] was fitted by EM on
demonstrations: phase = t / (T - 1), T = 340 steps; the cube's bearing and distance are taken from the right
arm's base (its joints are nearly linear in these, far less so in x, y); commands = both arms' joint targets
and grippers; positions = the arm joints the demo measured at that step. EM starts from 16 equal phase bins
times the 4 quadrants of the demos' cube contexts. At every step GMR conditions the mixture on (time_scale t /
(T - 1), the cube reading in polar form) and takes the conditional mean of the commands c(t) and of the
expected joint positions q*(t): the sum over components of h_k (mu_k^O + S_k^OI (S_k^II)^-1 (input - mu_k^I)),
with responsibilities h_k proportional to pi_k N(input; mu_k^I, S_k^II). It then closes the loop on proprio:
the arm commands become c(t) + gain (q*(t) - q(t)), q(t) the measured joints (so an arm lagging or pushed off
the demonstrated state is pulled back toward it), optionally low-pass filtered; the grippers get the regressed
command as is. After the phase reaches 1 the last conditional mean is held.

The teacher (`teacher_commands`): joint keyframes solved once by IK (`arm.py`), minimum-jerk between them,
grippers ramped linearly over 10 steps. The right comes down top-down (heading from its base), wrist rolled
so that its fingers close across the cube's x faces (the roll kept unwrapped near +pi/2, so the joints vary
continuously with the cube and the demos can be blended), descends 7 cm to hold the upper part (TCP 1.5 cm
above the centre), lifts to 12 cm and carries it, still top-down, to a hand-over with the cube centre at
(0.07, 0.44, 0.23): right of the table centre and in front of the arms' line. The left comes in from -x,
its approach pitched 25 degrees down, fingers across the free y faces, and pinches them low (TCP 0.8 cm
below the centre, 1.2 cm short of it along its approach); the right then opens, rises 7 cm and swings back
toward its base; the left withdraws 6 cm toward -x and 3 cm up.

Demonstrations (stored in `gmr_model.npz` with the fitted nominal mixture): 40 episodes of the teacher in the
reference world, state-only, the first 340 steps of each kept at every second step (float16 commands and
measured arm joints, the cube x, y read at step 0), only successes kept (all 40 are). Demo i starts from the
cube drawn uniformly over x in [-0.03, 0.23], y in [0.37, 0.63] (the ID box plus 3 cm) with
SeedSequence([31000, i]), seeds apart from the benchmark's. Regenerate, deterministically, with `python
benchmarks/families/gmr.py` (`write_model`); other component counts, regularisations, demo counts or EM
settings are refitted from the stored demos when the policy is built (a few seconds). Bit for bit only under
the tests' BLAS: `OPENBLAS_CORETYPE=Haswell OPENBLAS_NUM_THREADS=1` (other kernels sum in another order).

Knobs (`GmrKnobs`) are what a user of GMR sets or gets wrong: the number of components (few: each covers a
long stretch of the motion and the grasp and hand-over are smoothed away), the covariance regularisation
(large: the local regressions on the cube flatten and the arm goes to an average cube), how many demos are
fitted (few: the dependence on the cube is poorly estimated, or singular), the EM iterations and the
initialisation (phase bins x cube quadrants; phase bins only, Calinon's usual start; or random data rows
with a seed: too few iterations from it leave components straddling the motion), the proprio feedback gain
(0: open loop; large: the loop with the joint servo goes unstable), a low-pass on the command, a noisy cube
reading, and a time scale (playing the regression faster or slower).
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
    PlannedEpisode,
    checked_knobs,
    episode_rng,
    gripper_rot,
    minimum_jerk,
    piecewise,
    play_teacher,
    refuse_invalid,
    uniform_cube_poses,
)

MODEL_FILE = Path(__file__).with_name("gmr_model.npz")
DEMO_SEED = 31000  # demonstration i starts from a cube drawn with SeedSequence([DEMO_SEED, i])
DEMO_BOX = ((-0.03, 0.23), (0.37, 0.63))  # m, x and y range of the demonstration cubes: ID box + 3 cm
N_DEMOS = 40  # demonstrations recorded (only the teacher's successes are kept)
T_DEMO = 340  # steps per demonstration; the phase runs over them
STRIDE = 2  # every STRIDE-th step of a demonstration is stored and fitted
EPISODE_STEPS = 400
N_IN, N_CMD, N_POS = 3, 14, 12  # GMM dimensions: inputs (phase, cube x, y), commands, arm joint positions
ARM_COLUMNS = np.r_[0:6, 7:13]  # the arm joints among the 14 commands / state entries

# ------------------------------------------------------------------------------------ teacher geometry
GRASP_UP = 0.015  # m, right TCP above the cube centre at the grasp (finger tips 1.4 cm below it)
DESCENT = 0.07  # m, the right's straight descent onto the cube
LIFT = 0.12  # m, TCP height after the lift
HANDOVER = np.array([0.07, 0.44, 0.23])  # m, cube centre at the hand-over
LEFT_PITCH = np.deg2rad(25.0)  # the left's approach points 25 degrees below +x (it comes down into the cube)
LEFT_DOWN = 0.008  # m, the left's TCP below the cube centre: it pinches the lower half of the y faces
LEFT_SHORT = 0.012  # m, the left's TCP short of the cube centre along its approach
LEFT_BACK = 0.09  # m, the left's final approach starts this far back along its approach
# Keyframes (50 Hz steps, name) of each arm; a gripper switch (step, value) ramps over GRIP_RAMP steps.
RIGHT_KEYS = ((0, "home"), (55, "above"), (85, "grasp"), (96, "grasp"), (130, "lift"), (190, "hand"),
              (262, "hand"), (285, "rise"), (320, "away"))  # fmt: skip
LEFT_KEYS = ((0, "home"), (135, "home"), (195, "pre"), (225, "take"), (265, "take"), (310, "back"))
RIGHT_GRIP = ((86, GRIPPER_CLOSED), (250, GRIPPER_OPEN))
LEFT_GRIP = ((228, GRIPPER_CLOSED),)
GRIP_RAMP = 10


def right_angles(xy: np.ndarray) -> tuple[float, float]:
    """(heading, roll) of the top-down right gripper over `xy`: heading from the right's base; the roll
    turns its fingers to close along world x, kept near +pi/2 rather than wrapped (a wrap inside the box
    would put demos on both sides of a pi jump, and their mixture would average the two)."""
    # The cube lies at -x of the right's base: measured from -x, the heading stays in (pi/2, 3 pi/2)
    # instead of jumping from pi to -pi where the cube crosses the base's y.
    heading = np.pi + float(np.arctan2(RIGHT_BASE[1] - xy[1], RIGHT_BASE[0] - xy[0]))
    return heading, heading - np.pi / 2


def solve_top_down(arm: Arm, pos: np.ndarray, xy: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Joints of the top-down right gripper at `pos`, angles of `xy`: IK at roll 0, then rolled from the
    wrist-turned seed (solving the rolled pose straight away lands in the flipped-forearm branch)."""
    heading, roll = right_angles(xy)
    q, _ = arm.ik(pos, gripper_rot(heading, np.pi / 2, 0.0), seed, iters=250)
    q, _ = arm.ik(pos, gripper_rot(heading, np.pi / 2, roll), q + [0, 0, 0, 0, 0, roll], iters=250)
    return q


def teacher_joints(cube_xy: np.ndarray, left: Arm, right: Arm, home: np.ndarray) -> dict[str, dict]:
    """{"right"|"left": {keyframe name: joints (6,)}}: the teacher's keyframes, solved once by IK."""
    x, y = np.asarray(cube_xy, dtype=float)
    grasp = np.array([x, y, CUBE_HALF + GRASP_UP])
    hand = HANDOVER + [0.0, 0.0, GRASP_UP]
    r = {"home": home[7:13].astype(float)}
    seed = r["home"]
    for name, pos, xy in (("above", grasp + [0, 0, DESCENT], (x, y)), ("grasp", grasp, (x, y)),
                          ("lift", np.array([x, y, LIFT]), (x, y)), ("hand", hand, HANDOVER[:2]),
                          ("rise", hand + [0, 0, 0.07], HANDOVER[:2]),
                          ("away", hand + [0.10, 0.04, 0.07], HANDOVER[:2])):  # fmt: skip
        r[name] = solve_top_down(right, pos, np.asarray(xy), seed - [0, 0, 0, 0, 0, seed[5]])
        seed = r[name]
    rot = gripper_rot(0.0, LEFT_PITCH, 0.0)  # fingers close along world y at roll 0
    take = HANDOVER - [0.0, 0.0, LEFT_DOWN] - LEFT_SHORT * rot[:, 0]
    lq = {"home": home[:6].astype(float)}
    seed = lq["home"]
    for name, pos in (
        ("pre", take - LEFT_BACK * rot[:, 0]),
        ("take", take),
        ("back", take - [0.06, 0, -0.03]),
    ):
        lq[name], _ = left.ik(pos, rot, seed, iters=250)
        seed = lq[name]
    return {"right": r, "left": lq}


def gripper_ramps(steps: int, switches: tuple) -> np.ndarray:
    """(steps,) gripper command: open, then at each (step, value) a linear ramp over GRIP_RAMP steps."""
    out, level = np.full(steps, GRIPPER_OPEN), GRIPPER_OPEN
    t = np.arange(steps)
    for at, value in switches:
        s = np.clip((t - at) / GRIP_RAMP, 0.0, 1.0)
        out = np.where(t >= at, level + s * (value - level), out)
        level = value
    return out


def teacher_commands(cube_xy: np.ndarray, left: Arm, right: Arm) -> np.ndarray:
    """(EPISODE_STEPS, 14) commands of the teacher for a cube at `cube_xy` (holding the last keyframe)."""
    from gym_aloha.constants import START_ARM_POSE

    home = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0])
    joints = teacher_joints(cube_xy, left, right, home)
    out = np.empty((EPISODE_STEPS, 14))
    for columns, keys, arm in ((slice(0, 6), LEFT_KEYS, "left"), (slice(7, 13), RIGHT_KEYS, "right")):
        times, values = [float(t) for t, _ in keys], [joints[arm][name] for _, name in keys]
        out[:, columns] = [piecewise(times, values, t, minimum_jerk) for t in range(EPISODE_STEPS)]
    out[:, 6] = gripper_ramps(EPISODE_STEPS, LEFT_GRIP)
    out[:, 13] = gripper_ramps(EPISODE_STEPS, RIGHT_GRIP)
    return out


def make_teacher() -> BimanualPolicy:
    """The scripted teacher as a policy: keyframes solved on the first cube reading."""
    return BimanualPolicy(None, lambda knobs, left, right, state, cube: PlannedEpisode(
        teacher_commands(cube[:2], left, right)))  # fmt: skip


# ------------------------------------------------------------------------------------- demonstrations
def demo_poses(n: int, first: int = 0) -> np.ndarray:
    """(n, 7) cube poses of demos first..first+n-1: uniform over DEMO_BOX, SeedSequence([DEMO_SEED, i])."""
    return uniform_cube_poses(DEMO_BOX, DEMO_SEED, n, first)


def record_demos(n: int, first: int = 0, num_envs: int = 10) -> dict[str, np.ndarray]:
    """Play the teacher in the reference world from demos first..first+n-1 and keep its successes.

    Returns float16 `commands` (N, T_DEMO / STRIDE, 14) and `positions` (N, T_DEMO / STRIDE, 12) (the arm
    joints measured before each command), float32 `contexts` (N, 2) (the cube x, y read at step 0) and
    int `index` (N,) (each demo's seed index i).
    """
    played = play_teacher(make_teacher(), demo_poses(n, first), EPISODE_STEPS, num_envs)
    kept = np.nonzero(played["success"])[0]
    stored = lambda key: played[key][:T_DEMO:STRIDE, kept].transpose(1, 0, 2)  # noqa: E731  (N, T, .)
    return {
        "commands": stored("actions").astype(np.float16),
        "positions": stored("states")[..., ARM_COLUMNS].astype(np.float16),
        "contexts": played["cubes"][0, kept, :2].astype(np.float32),
        "index": (first + kept).astype(np.int64),
    }


def polar(cube_xy: np.ndarray) -> np.ndarray:
    """(..., 2) the cube's bearing (rad, 0 along -x from the right's base, the right's heading minus pi)
    and distance (m) from the right's base: the right's joints are far more nearly linear in these than in
    x, y (its waist turns with the bearing), so each component's linear regression fits them better."""
    d = np.asarray(cube_xy, dtype=float) - RIGHT_BASE[:2]
    return np.stack([np.arctan2(-d[..., 1], -d[..., 0]), np.hypot(d[..., 0], d[..., 1])], axis=-1)


def demo_matrix(commands: np.ndarray, positions: np.ndarray, contexts: np.ndarray) -> np.ndarray:
    """(N * S, 29) GMM data: [phase, cube bearing, distance, 14 commands, 12 joint positions] at every
    stored step."""
    commands, positions = np.asarray(commands, float), np.asarray(positions, float)
    N, S, _ = commands.shape
    phase = np.broadcast_to((STRIDE * np.arange(S) / (T_DEMO - 1))[None, :, None], (N, S, 1))
    context = np.broadcast_to(polar(contexts)[:, None, :], (N, S, 2))
    return np.concatenate([phase, context, commands, positions], axis=2).reshape(N * S, -1)


# ---------------------------------------------------------------------------------------------- GMM, EM
def log_gaussians(X: np.ndarray, means: np.ndarray, covs: np.ndarray) -> np.ndarray:
    """(N, K) log N(x_n; mean_k, cov_k) of rows X (N, D) under K Gaussians (means (K, D), covs (K, D, D))."""
    out = np.empty((len(X), len(means)))
    for k, (mean, cov) in enumerate(zip(means, covs, strict=True)):
        L = np.linalg.cholesky(cov)
        z = np.linalg.solve(L, (X - mean).T)  # whitened deviations (D, N)
        log_det = 2.0 * np.log(np.diag(L)).sum()
        out[:, k] = -0.5 * ((z * z).sum(axis=0) + log_det + X.shape[1] * np.log(2 * np.pi))
    return out


def responsibilities(X: np.ndarray, gmm: dict) -> tuple[np.ndarray, float]:
    """E-step: (N, K) posterior of each component for each row, and the mean log-likelihood per row."""
    joint = log_gaussians(X, gmm["means"], gmm["covs"]) + np.log(gmm["weights"])
    top = joint.max(axis=1, keepdims=True)
    log_total = top[:, 0] + np.log(np.exp(joint - top).sum(axis=1))  # log-sum-exp, no underflow
    return np.exp(joint - log_total[:, None]), float(log_total.mean())


def m_step(X: np.ndarray, resp: np.ndarray, reg: float) -> dict:
    """M-step: weights, means and covariances (plus `reg` on the diagonal) from the responsibilities."""
    counts = np.maximum(resp.sum(axis=0), 1e-12)  # an emptied component keeps finite (if arbitrary) moments
    means = resp.T @ X / counts[:, None]
    covs = np.empty((len(counts), X.shape[1], X.shape[1]))
    for k in range(len(counts)):
        d = X - means[k]
        covs[k] = (resp[:, k, None] * d).T @ d / counts[k] + reg * np.eye(X.shape[1])
    return {"weights": counts / counts.sum(), "means": means, "covs": covs}


def initial_gmm(X: np.ndarray, K: int, init: str, reg: float, seed: int) -> dict:
    """Starting mixture. "time": K equal bins of the first column (the phase), Calinon's usual start, so
    every component begins as one stretch of the motion. "random": K rows drawn with `seed` as means, each
    with the data's whole covariance; EM must then find the stretches itself."""
    if init in ("time", "grid"):
        cells = K if init == "time" else K // 4
        label = np.minimum((cells * (X[:, 0] - X[:, 0].min()) / np.ptp(X[:, 0])).astype(int), cells - 1)
        if init == "grid":  # and the cube's quadrant: above or below the median x, above or below it in y
            label = 4 * label + 2 * (X[:, 1] > np.median(X[:, 1])) + (X[:, 2] > np.median(X[:, 2]))
        return m_step(X, np.eye(K)[label], reg)
    rows = np.random.default_rng(seed).choice(len(X), size=K, replace=False)
    cov = np.cov(X.T, bias=True) + reg * np.eye(X.shape[1])
    return {"weights": np.full(K, 1.0 / K), "means": X[rows].copy(), "covs": np.repeat(cov[None], K, 0)}


def fit_gmm(X: np.ndarray, K: int, iters: int, reg: float, init: str = "grid", seed: int = 0) -> dict:
    """A K-component full-covariance GMM of rows X by EM, in units of each column's standard deviation
    (so `reg` is a share of each dimension's variance), returned in X's own units.

    Also returns `loglik` (iters,): the mean log-likelihood per row (standardised units) before each EM
    iteration; with reg = 0 EM never lets it fall.
    """
    centre, scale = X.mean(axis=0), np.maximum(X.std(axis=0), 1e-9)
    Z = (X - centre) / scale
    gmm, history = initial_gmm(Z, K, init, reg, seed), []
    for _ in range(iters):
        resp, loglik = responsibilities(Z, gmm)
        history.append(loglik)
        gmm = m_step(Z, resp, reg)
    return {"weights": gmm["weights"], "means": centre + gmm["means"] * scale,
            "covs": gmm["covs"] * scale[:, None] * scale[None, :], "loglik": np.array(history)}  # fmt: skip


def gmr(gmm: dict, inputs: np.ndarray, n_in: int) -> np.ndarray:
    """(M, D - n_in) conditional means E[out | in] of the mixture at inputs (M, n_in) (its first n_in dims).

    Each component contributes its linear regression mu_O + S_OI S_II^-1 (in - mu_I), weighted by its
    responsibility for the input, pi_k N(in; mu_I, S_II), normalised over the components.
    """
    inputs = np.atleast_2d(np.asarray(inputs, dtype=float))
    means, covs = gmm["means"], gmm["covs"]
    log_h = log_gaussians(inputs, means[:, :n_in], covs[:, :n_in, :n_in]) + np.log(gmm["weights"])
    h = np.exp(log_h - log_h.max(axis=1, keepdims=True))
    h /= h.sum(axis=1, keepdims=True)
    out = np.zeros((len(inputs), means.shape[1] - n_in))
    for k in range(len(means)):
        gain = np.linalg.solve(covs[k, :n_in, :n_in], covs[k, :n_in, n_in:]).T  # S_OI S_II^-1
        out += h[:, k, None] * (means[k, n_in:] + (inputs - means[k, :n_in]) @ gain.T)
    return out


N_COMPONENTS = 64  # nominal mixture components: 16 phase bins times 4 cube quadrants
COV_REG = 1e-3  # nominal covariance regularisation, a share of each dimension's variance
EM_ITERS = 40  # nominal EM iterations


def write_model(path: Path = MODEL_FILE) -> None:
    """Regenerate `gmr_model.npz` (`python benchmarks/families/gmr.py`), deterministic: record the
    demonstrations, fit the nominal mixture by EM on their float16 values, store both."""
    demos = record_demos(N_DEMOS)
    X = demo_matrix(demos["commands"], demos["positions"], demos["contexts"])
    gmm = fit_gmm(X, N_COMPONENTS, EM_ITERS, COV_REG, "grid")
    np.savez_compressed(path, weights=gmm["weights"], means=gmm["means"], covs=gmm["covs"].astype(np.float32),
                        **demos)  # fmt: skip


# ------------------------------------------------------------------------------------------- policy
@dataclass
class GmrKnobs:
    """How the mixture is fitted and played; the defaults are the nominal one."""

    n_components: int = N_COMPONENTS  # mixture components (few: the grasp and hand-over are smoothed away)
    cov_reg: float = COV_REG  # added to each covariance's diagonal, a share of each dimension's variance
    demos: int = N_DEMOS  # demonstrations fitted: the first `demos` stored ones
    em_iters: int = EM_ITERS  # EM iterations after the initialisation (0: the initial mixture as is)
    init: str = "grid"  # "grid": phase bins x cube quadrants; "time": phase bins only; "random": data rows
    init_seed: int = 0  # seeds the "random" initialisation
    feedback_gain: float = 0.5  # arm command += gain (expected - measured joints); 0: open loop
    smoothing: float = 0.0  # steps, time constant of a first-order low-pass on the command (0: none)
    cube_noise: float = 0.0  # m, std of the per-episode error of the cube reading the policy conditions on
    time_scale: float = 1.0  # > 1 plays the regression faster, < 1 slower (phase = time_scale t / (T - 1))
    seed: int = 0  # seeds the cube-reading noise together with the episode's first observation

    def __post_init__(self) -> None:
        grid_ok = self.init != "grid" or self.n_components % 4 == 0  # whole phase bins of 4 quadrants
        checks = {"n_components": 1 <= self.n_components <= 200 and grid_ok,
                  "cov_reg": 0 < self.cov_reg <= 100, "demos": self.demos >= 1,
                  "em_iters": 0 <= self.em_iters <= 1000, "init": self.init in ("grid", "time", "random"),
                  "feedback_gain": 0 <= self.feedback_gain <= 20, "smoothing": self.smoothing >= 0,
                  "cube_noise": self.cube_noise >= 0, "time_scale": 0 < self.time_scale <= 10}  # fmt: skip
        refuse_invalid(self, checks)


def load_mixture(knobs: GmrKnobs, path: Path = MODEL_FILE) -> dict:
    """The mixture for `knobs`: the stored nominal one, or refitted by EM from the first `demos` demos."""
    with np.load(path) as f:
        stored = {k: f[k] for k in f.files}
    if knobs.demos > len(stored["commands"]):
        raise ValueError(f"demos={knobs.demos}: only {len(stored['commands'])} demonstrations are stored.")
    fit = (knobs.n_components, knobs.cov_reg, knobs.demos, knobs.em_iters, knobs.init)
    if fit == (N_COMPONENTS, COV_REG, len(stored["commands"]), EM_ITERS, "grid"):  # the stored fit
        return {k: stored[k].astype(float) for k in ("weights", "means", "covs")}
    n = knobs.demos
    X = demo_matrix(stored["commands"][:n], stored["positions"][:n], stored["contexts"][:n])
    if knobs.n_components > len(X):
        raise ValueError(f"n_components={knobs.n_components}: more components than the {len(X)} data rows.")
    return fit_gmm(X, knobs.n_components, knobs.em_iters, knobs.cov_reg, knobs.init, knobs.init_seed)


class GmrEpisode:
    """One episode: the conditional means over the whole clock, computed on the first cube reading, then
    played with proprio feedback toward the expected joints and an optional low-pass."""

    def __init__(self, knobs: GmrKnobs, gmm: dict, reading: np.ndarray, lower: np.ndarray, upper: np.ndarray):
        self.knobs, self.lower, self.upper = knobs, lower, upper
        phase = np.clip(knobs.time_scale * np.arange(EPISODE_STEPS) / (T_DEMO - 1), 0.0, 1.0)
        inputs = np.column_stack([phase, np.broadcast_to(polar(reading), (EPISODE_STEPS, 2))])
        out = gmr(gmm, inputs, N_IN)
        self.commands, self.expected = out[:, :N_CMD], out[:, N_CMD:]
        self.last: np.ndarray | None = None

    def action(self, t: int, batch: dict, b: int) -> np.ndarray:
        t = min(t, EPISODE_STEPS - 1)
        command = self.commands[t].copy()
        measured = batch["observation.state"][b][ARM_COLUMNS].astype(float)
        command[ARM_COLUMNS] += self.knobs.feedback_gain * (self.expected[t] - measured)
        if self.knobs.smoothing > 0 and self.last is not None:  # first-order lag, time constant in steps
            command = self.last + (command - self.last) / (1.0 + self.knobs.smoothing)
        self.last = command
        out = command.copy()
        out[ARM_COLUMNS] = np.clip(out[ARM_COLUMNS], self.lower, self.upper)
        out[[6, 13]] = np.clip(out[[6, 13]], GRIPPER_CLOSED, GRIPPER_OPEN)
        return out


class GmrPolicy(BimanualPolicy):
    """LeRobot-style policy: `reset()`, `select_action(batch) -> (B, 14)`; GMR on each episode's cube."""

    def __init__(self, knobs: GmrKnobs, gmm: dict | None = None):
        self.gmm = gmm if gmm is not None else load_mixture(knobs)
        super().__init__(knobs, self._episode)

    def _episode(self, knobs: GmrKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        rng = episode_rng(knobs.seed, cube)
        reading = cube[:2] + rng.normal(0.0, knobs.cube_noise, 2) if knobs.cube_noise > 0 else cube[:2]
        lower, upper = np.concatenate([left.lower, right.lower]), np.concatenate([left.upper, right.upper])
        return GmrEpisode(knobs, self.gmm, reading, lower, upper)


def make_policy(**kwargs) -> GmrPolicy:
    """Import-path factory: `families.gmr:make_policy` with `GmrKnobs` fields as kwargs."""
    return GmrPolicy(checked_knobs(GmrKnobs, "gmr", kwargs))


# Named settings for measure.py: runs a GMR user would make, from careful to careless.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "open_loop": {"feedback_gain": 0.0},
    "fast": {"time_scale": 2.5},
    "noisy_cube": {"cube_noise": 0.02},
    "few_components": {"n_components": 8},
    "stiff_feedback": {"feedback_gain": 1.3},
    "demos5": {"demos": 5},
    "heavy_reg": {"cov_reg": 0.03},
    "laggy_filter": {"smoothing": 40.0},
    "random_init": {"init": "random", "em_iters": 1, "n_components": 16},
}


"""Named settings of `gmr`. Measured success in the reference world (`python benchmarks/families/measure.py
--families gmr --episodes 25 --detector-poses 0`, 25 ID + 25 OOD episodes each, seed 0):

| setting         | what the user did                                                   | ID    | OOD   |
|-----------------|---------------------------------------------------------------------|-------|-------|
| nominal         | 64 components, grid start, reg 1e-3, 40 demos, 40 EM its, gain 0.5  | 24/25 | 25/25 |
| open_loop       | no proprio feedback: the conditional mean command alone             | 25/25 | 25/25 |
| fast            | regression played 2.5 times faster                                  | 24/25 | 25/25 |
| noisy_cube      | cube reading off by 2 cm std (per episode)                          | 17/25 | 13/25 |
| few_components  | 8 components: grasp and hand-over smoothed away                     | 7/25  | 16/25 |
| stiff_feedback  | feedback gain 1.3: the loop with the joint servo near instability   | 6/25  | 11/25 |
| demos5          | only the first 5 demos fitted                                       | 11/25 | 6/25  |
| heavy_reg       | covariance regularisation 0.03 of each variance: flattened slopes   | 10/25 | 6/25  |
| laggy_filter    | a 40-step low-pass on the command: everything late                  | 5/25  | 0/25  |
| random_init     | 16 components, one EM iteration from random data rows               | 0/25  | 0/25  |
"""


if __name__ == "__main__":
    write_model()
