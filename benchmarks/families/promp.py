"""Family 30, `promp`: probabilistic movement primitives (ProMP, Paraschos et al. 2013) in joint space.

How it acts: never reads an image. At the first step it reads the cube's x, y from
`observation.environment_state`, conditions a Gaussian over the primitive's weights on it
(mu_w|c = mu_w + S_wc (S_cc + obs_std^2 I)^-1 (c - mu_c)) and plays the conditioned mean trajectory (or a
tempered sample) open loop as absolute joint commands of both arms; the grippers switch at phases fitted
from the demonstrations (the mean phase at which each demo's gripper command starts to move). The ProMP:
per arm joint (12), `n_basis` normalised Gaussian basis functions of the phase t / (T - 1), T = 340 steps
(centres evenly over [0, 1], width their spacing), weights ridge-regressed per demo; a full Gaussian over
the stacked 12 n_basis weights plus the cube's initial x, y (the context; the cube always starts unturned in
this world, so its yaw carries no information and is left out). After T steps the last command is held.

The teacher (`teacher_actions`): joint keyframes solved once by IK (`arm.py`), minimum-jerk between them,
grippers ramped over 12 steps. The right comes top-down (heading from its base) with its fingers across the
cube's y faces, descends 8 cm to hold the upper part (TCP 1.4 cm above the centre), lifts to 13 cm and
carries the cube to a hand-over with its centre at (-0.04, 0.50, 0.21) while turning its wrist a quarter
turn, so that its fingers then hold the faces pointing along x. The left comes in from -x, its approach
rising 20 degrees, and pinches the free y faces low (TCP 1 cm below the centre, 1.2 cm short of it along
its approach); the right then opens and backs up and away, the left withdraws 5 cm back and 2 cm up.

Demonstrations (stored in `promp_model.npz`, 0.3 MB, with the fitted nominal mean and covariance): 60
episodes of the teacher in the reference world, state-only, 340 steps each (float16 joint and gripper
commands, the cube x, y read at step 0), only successes kept (all 60 are). Demo i starts from the cube drawn
uniformly over x in [-0.02, 0.22], y in [0.38, 0.62] (the ID box plus 2 cm) with SeedSequence([777, i]),
seeds apart from the benchmark's. Regenerate, deterministically, with `python benchmarks/families/promp.py`
(`write_model`, about 30 s); other basis counts, ridges or demo counts are refitted from the stored demos.
Bit for bit only under the tests' BLAS: `OPENBLAS_CORETYPE=Haswell OPENBLAS_NUM_THREADS=1`.

Knobs (`PrompKnobs`) are what a user of a ProMP sets or gets wrong: the number of basis functions (few: the
grasp and hand-over are smoothed away), the ridge of the weight fit (large: weights shrink toward zero
joints), how many demos are fitted (few: a poor estimate of how the weights covary with the cube), the cube
reading noise assumed by the conditioning (large: it barely conditions), no conditioning at all (the
unconditioned mean), sampling from the conditioned distribution with a temperature (its covariance carries
a `cov_reg` floor), a noisy cube reading, and a time scale (playing the primitive faster or slower).
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
    play_teacher,
    top_down_roll,
    uniform_cube_poses,
)

MODEL_FILE = Path(__file__).with_name("promp_model.npz")
DEMO_SEED = 777  # demonstration i starts from a cube drawn with SeedSequence([DEMO_SEED, i])
DEMO_BOX = ((-0.02, 0.22), (0.38, 0.62))  # m, x and y range of the demonstration cubes: ID box + 2 cm
N_DEMOS = 60  # demonstrations recorded (only the teacher's successes are fitted)
T_DEMO = 340  # steps per demonstration and per primitive; the policy holds the last command after it
EPISODE_STEPS = 400
CONTEXT_CENTRE = np.array([0.10, 0.50])  # the ID box centre: what the unconditioned mean is fitted around

# ------------------------------------------------------------------------------------ teacher geometry
GRASP_UP = 0.014  # m, right TCP above the cube centre at the grasp (finger tips 1.5 cm below it)
DESCENT = 0.08  # m, the right's straight descent onto the cube
LIFT = 0.13  # m, TCP height after the lift
HANDOVER = np.array([-0.04, 0.50, 0.21])  # m, cube centre at the hand-over
LEFT_PITCH = np.deg2rad(-20.0)  # the left's approach points 20 degrees above +x (rising into the cube)
LEFT_DOWN = 0.010  # m, the left's TCP below the cube centre: it pinches the lower half of the y faces
LEFT_SHORT = 0.012  # m, the left's TCP short of the cube centre along its approach
LEFT_BACK = 0.09  # m, the left's final approach starts this far back along its approach
# Keyframes (50 Hz steps) and gripper switch steps of the teacher; grippers ramp over GRIP_RAMP steps.
RIGHT_KEYS = (("home", 0), ("above", 60), ("grasp", 92), ("grasp", 100), ("lift", 135), ("turn", 190),
              ("turn", 262), ("away", 300))  # fmt: skip
LEFT_KEYS = (("home", 0), ("home", 140), ("pre", 200), ("take", 230), ("take", 262), ("back", 320))
RIGHT_CLOSE, RIGHT_OPEN, LEFT_CLOSE = 94, 256, 234
GRIP_RAMP = 12


def solve_top_down(arm: Arm, pos: np.ndarray, closing_yaw: float, seed: np.ndarray) -> np.ndarray:
    """Joints of a top-down right gripper at `pos` whose fingers close along the world axis `closing_yaw`.

    The heading is the direction from the right's base to `pos`; the pose is reached in two IK solves
    (unrolled, then rolled from a wrist-turned seed) so that the forearm stays in its unflipped branch.
    """
    heading = float(np.arctan2(pos[1] - RIGHT_BASE[1], pos[0] - RIGHT_BASE[0]))
    roll = top_down_roll(heading, closing_yaw)
    q, _ = arm.ik(pos, gripper_rot(heading, np.pi / 2, 0.0), seed, iters=250)
    q, _ = arm.ik(pos, gripper_rot(heading, np.pi / 2, roll), q + [0, 0, 0, 0, 0, roll], iters=250)
    return q


def teacher_joints(cube_xy: np.ndarray, left: Arm, right: Arm, home: np.ndarray) -> dict[str, dict]:
    """{"right"|"left": {keyframe name: joints (6,)}}: the teacher's keyframes, solved once by IK.

    The right comes down top-down with its fingers across the cube's y faces, lifts, and carries the cube
    to HANDOVER while turning its wrist a quarter turn (fingers then across the cube's faces that point
    along x); the left comes from -x rising 20 degrees and pinches the now-free y faces, lower half.
    """
    x, y = np.asarray(cube_xy, dtype=float)
    grasp = np.array([x, y, CUBE_HALF + GRASP_UP])
    hand = HANDOVER + [0.0, 0.0, GRASP_UP]
    r = {"home": home[7:13].astype(float)}
    seed = r["home"]
    for name, pos, yaw in (("above", grasp + [0, 0, DESCENT], np.pi / 2), ("grasp", grasp, np.pi / 2),
                           ("lift", np.array([x, y, LIFT]), np.pi / 2), ("turn", hand, 0.0),
                           ("away", hand + [0.04, 0.0, 0.07], 0.0)):  # fmt: skip
        r[name] = solve_top_down(right, pos, yaw, seed - [0, 0, 0, 0, 0, seed[5]])
        seed = r[name]
    rot = gripper_rot(0.0, LEFT_PITCH, 0.0)
    take = HANDOVER - [0.0, 0.0, LEFT_DOWN] - LEFT_SHORT * rot[:, 0]
    lq = {"home": home[:6].astype(float)}
    seed = lq["home"]
    for name, pos in (
        ("pre", take - LEFT_BACK * rot[:, 0]),
        ("take", take),
        ("back", take - [0.05, 0, -0.02]),
    ):
        lq[name], _ = left.ik(pos, rot, seed, iters=250)
        seed = lq[name]
    return {"right": r, "left": lq}


def keyframe_path(joints: dict, keys: tuple, steps: int) -> np.ndarray:
    """(steps, 6) joint path through the keyframes, minimum-jerk between consecutive ones."""
    times = np.array([t for _, t in keys], dtype=float)
    values = np.stack([joints[name] for name, _ in keys])
    out = np.empty((steps, values.shape[1]))
    for t in range(steps):
        k = int(np.searchsorted(times, t, side="right"))
        if k == 0 or k == len(times):
            out[t] = values[min(k, len(times) - 1)]
            continue
        s = minimum_jerk((t - times[k - 1]) / (times[k] - times[k - 1]))
        out[t] = values[k - 1] + s * (values[k] - values[k - 1])
    return out


def gripper_path(steps: int, switches: list[tuple[float, float]], start: float = GRIPPER_OPEN) -> np.ndarray:
    """(steps,) gripper command: `start`, then at each (step, value) a linear ramp over GRIP_RAMP steps."""
    out = np.full(steps, start, dtype=float)
    t = np.arange(steps)
    level = start
    for at, value in switches:
        s = np.clip((t - at) / GRIP_RAMP, 0.0, 1.0)
        out = np.where(t >= at, level + s * (value - level), out)
        level = value
    return out


def teacher_actions(cube_xy: np.ndarray, left: Arm, right: Arm) -> np.ndarray:
    """(EPISODE_STEPS, 14) commands of the teacher for a cube at `cube_xy` (holding the last after T)."""
    from gym_aloha.constants import START_ARM_POSE

    home = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0])
    joints = teacher_joints(cube_xy, left, right, home)
    out = np.empty((EPISODE_STEPS, 14))
    out[:, :6] = keyframe_path(joints["left"], LEFT_KEYS, EPISODE_STEPS)
    out[:, 7:13] = keyframe_path(joints["right"], RIGHT_KEYS, EPISODE_STEPS)
    out[:, 6] = gripper_path(EPISODE_STEPS, [(LEFT_CLOSE, GRIPPER_CLOSED)])
    out[:, 13] = gripper_path(EPISODE_STEPS, [(RIGHT_CLOSE, GRIPPER_CLOSED), (RIGHT_OPEN, GRIPPER_OPEN)])
    return out


def make_teacher() -> BimanualPolicy:
    """The scripted teacher as a policy: keyframes solved on the first cube reading."""
    return BimanualPolicy(None, lambda knobs, left, right, state, cube: PlannedEpisode(
        teacher_actions(cube[:2], left, right)))  # fmt: skip


# ------------------------------------------------------------------------------------- demonstrations
def demo_poses(n: int, first: int = 0) -> np.ndarray:
    """(n, 7) cube poses of demonstrations first..first+n-1: uniform over DEMO_BOX, SeedSequence([777, i])."""
    return uniform_cube_poses(DEMO_BOX, DEMO_SEED, n, first)


def record_demos(n: int, first: int = 0, num_envs: int = 10) -> dict[str, np.ndarray]:
    """Play the teacher in the reference world from demonstrations first..first+n-1, keep its successes.

    Returns float16 `joints` (N, T_DEMO, 12) (the arm joint commands, left then right), `grippers`
    (N, T_DEMO, 2) (the gripper commands), float32 `contexts` (N, 2) (the cube x, y the teacher read at
    step 0) and int `index` (N,) (the demonstration's seed index i).
    """
    played = play_teacher(make_teacher(), demo_poses(n, first), EPISODE_STEPS, num_envs)
    kept = np.nonzero(played["success"])[0]
    actions = played["actions"][:T_DEMO, kept].transpose(1, 0, 2)  # (N, T, 14)
    return {
        "joints": np.concatenate([actions[..., :6], actions[..., 7:13]], axis=-1).astype(np.float16),
        "grippers": actions[..., [6, 13]].astype(np.float16),
        "contexts": played["cubes"][0, kept, :2].astype(np.float32),
        "index": (first + kept).astype(np.int64),
    }


# ---------------------------------------------------------------------------------------------- ProMP
def basis(phase: np.ndarray, n_basis: int) -> np.ndarray:
    """(len(phase), n_basis) normalised Gaussian basis: centres evenly over [0, 1], width = their spacing.

    Each row sums to one (Paraschos et al.'s normalised radial basis for stroke-based movements).
    """
    phase = np.clip(np.asarray(phase, dtype=float), 0.0, 1.0)
    centres = np.linspace(0.0, 1.0, n_basis)
    width = 1.0 / max(n_basis - 1, 1)
    g = np.exp(-0.5 * ((phase[:, None] - centres[None]) / width) ** 2)
    return g / g.sum(axis=1, keepdims=True)


def fit_weights(trajectories: np.ndarray, n_basis: int, ridge: float) -> np.ndarray:
    """(N, D * n_basis) ridge-regressed weights of (N, T, D) trajectories, joint-major per demo."""
    trajectories = np.asarray(trajectories, dtype=float)
    N, T, D = trajectories.shape
    phi = basis(np.linspace(0.0, 1.0, T), n_basis)
    lhs = phi.T @ phi + ridge * np.eye(n_basis)
    W = np.linalg.solve(lhs, np.einsum("tb,ntd->nbd", phi, trajectories))  # (N, n_basis, D)
    return W.transpose(0, 2, 1).reshape(N, D * n_basis)


def fit_promp(trajectories: np.ndarray, contexts: np.ndarray, n_basis: int, ridge: float) -> dict:
    """The ProMP: a Gaussian over the stacked [weights, context] of the demonstrations.

    Returns {"mean": (D n_basis + C,), "cov": (same, same)} (maximum likelihood, divided by N), with the
    context the last C entries.
    """
    stacked = np.concatenate([fit_weights(trajectories, n_basis, ridge), np.asarray(contexts, float)], 1)
    mean = stacked.mean(axis=0)
    centred = stacked - mean
    return {"mean": mean, "cov": centred.T @ centred / len(stacked)}


def condition(mean: np.ndarray, cov: np.ndarray, context: np.ndarray, obs_var: float) -> tuple:
    """Gaussian conditioning of the weights on an observed context (last C entries) with noise `obs_var`.

    mu_w|c = mu_w + S_wc (S_cc + obs_var I)^-1 (c - mu_c); S_w|c = S_ww - S_wc (S_cc + obs_var I)^-1 S_cw.
    """
    C = len(context)
    s_wc, s_cc = cov[:-C, -C:], cov[-C:, -C:] + obs_var * np.eye(C)
    gain = np.linalg.solve(s_cc, s_wc.T).T  # (W, C)
    mu = mean[:-C] + gain @ (np.asarray(context, float) - mean[-C:])
    return mu, cov[:-C, :-C] - gain @ s_wc.T


def switch_phases(grippers: np.ndarray) -> dict[str, float]:
    """Mean phases (0..1) at which the demos' gripper commands start each switch."""
    T = grippers.shape[1]
    g = np.asarray(grippers, dtype=float)
    moving = np.abs(np.diff(g, axis=1)) > 1e-3  # (N, T-1, 2)

    def first(mask: np.ndarray) -> float:
        return float(np.mean([np.argmax(m) for m in mask]) / (T - 1))

    closing_left = moving[:, :, 0]
    closing_right = moving[:, :, 1] & (np.diff(g[:, :, 1], axis=1) < 0)
    opening_right = moving[:, :, 1] & (np.diff(g[:, :, 1], axis=1) > 0)
    return {"left_close": first(closing_left), "right_close": first(closing_right),
            "right_open": first(opening_right)}  # fmt: skip


N_BASIS = 30  # nominal basis functions per joint
RIDGE = 1e-6  # nominal ridge of the per-demo weight fit


def write_model(path: Path = MODEL_FILE) -> None:
    """Regenerate `promp_model.npz` (`python benchmarks/families/promp.py`), deterministic: record the
    demonstrations, fit the nominal ProMP on their float16 commands, store both."""
    demos = record_demos(N_DEMOS)
    model = fit_promp(demos["joints"], demos["contexts"], N_BASIS, RIDGE)
    np.savez_compressed(path, mean=model["mean"].astype(np.float32), cov=model["cov"].astype(np.float32),
                        **demos)  # fmt: skip


# ------------------------------------------------------------------------------------------- policy
@dataclass
class PrompKnobs:
    """How the ProMP is fitted and played; the defaults are the nominal one."""

    n_basis: int = N_BASIS  # Gaussian basis functions per joint (few: sharp moves are smoothed away)
    ridge: float = RIDGE  # ridge of each demo's weight fit (large: weights shrink toward zero joints)
    demos: int = N_DEMOS  # demonstrations fitted: the first `demos` stored ones
    obs_std: float = 0.001  # m, cube reading noise assumed by the conditioning (large: barely conditions)
    condition: bool = True  # False: play the unconditioned mean (blind to the cube)
    temperature: float = 0.0  # 0: play the conditioned mean; > 0: a sample, covariance times this
    cov_reg: float = 1e-6  # rad^2, added to the weights' covariance diagonal (the prior a sample draws on)
    cube_noise: float = 0.0  # m, std of the per-episode error of the cube reading the policy conditions on
    time_scale: float = 1.0  # > 1 plays the primitive faster, < 1 slower (phase = time_scale t / T)
    seed: int = 0  # seeds samples and cube-reading noise together with the episode's first observation

    def __post_init__(self) -> None:
        checks = {"n_basis": self.n_basis >= 2, "ridge": self.ridge >= 0, "demos": self.demos >= 1,
                  "obs_std": self.obs_std >= 0, "temperature": self.temperature >= 0,
                  "cov_reg": self.cov_reg >= 0, "cube_noise": self.cube_noise >= 0,
                  "time_scale": self.time_scale > 0}  # fmt: skip
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)} is out of range.")


class Primitive:
    """A fitted ProMP over the 12 arm joints, with the cube's x, y as context and fitted gripper phases."""

    def __init__(self, knobs: PrompKnobs, path: Path = MODEL_FILE):
        with np.load(path) as f:
            if knobs.demos > len(f["joints"]):
                raise ValueError(f"demos={knobs.demos}: only {len(f['joints'])} demonstrations are stored.")
            stored_all = knobs.demos == len(f["joints"])
            joints, grippers = f["joints"][: knobs.demos], f["grippers"][: knobs.demos]
            contexts = f["contexts"][: knobs.demos]
            stored = (f["mean"], f["cov"])
        self.knobs, self.dims, self.steps = knobs, joints.shape[2], joints.shape[1]
        if stored_all and (knobs.n_basis, knobs.ridge) == (N_BASIS, RIDGE):
            self.mean, self.cov = (a.astype(float) for a in stored)
        else:
            model = fit_promp(joints, contexts, knobs.n_basis, knobs.ridge)
            self.mean, self.cov = model["mean"], model["cov"]
        self.cov[:-2, :-2] += knobs.cov_reg * np.eye(len(self.mean) - 2)
        self.switches = switch_phases(grippers)

    def weights(self, context: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The weights played for an observed context: conditioned (or not) mean, or a tempered sample."""
        if self.knobs.condition:
            mu, cov = condition(self.mean, self.cov, context, self.knobs.obs_std**2)
        else:
            mu, cov = self.mean[:-2], self.cov[:-2, :-2]
        if self.knobs.temperature > 0:
            vals, vecs = np.linalg.eigh(0.5 * (cov + cov.T))
            mu = mu + vecs @ (
                np.sqrt(np.clip(vals, 0, None) * self.knobs.temperature) * rng.normal(size=len(mu))
            )
        return mu

    def actions(self, w: np.ndarray, steps: int = EPISODE_STEPS) -> np.ndarray:
        """(steps, 14) commands: the trajectory of weights `w`, grippers switched at the fitted phases."""
        scale = self.knobs.time_scale * np.arange(steps) / (self.steps - 1)
        joints = basis(scale, self.knobs.n_basis) @ w.reshape(self.dims, self.knobs.n_basis).T
        at = {k: v * (self.steps - 1) / self.knobs.time_scale for k, v in self.switches.items()}
        out = np.empty((steps, 14))
        out[:, :6], out[:, 7:13] = joints[:, :6], joints[:, 6:]
        out[:, 6] = gripper_path(steps, [(at["left_close"], GRIPPER_CLOSED)])
        out[:, 13] = gripper_path(
            steps, [(at["right_close"], GRIPPER_CLOSED), (at["right_open"], GRIPPER_OPEN)]
        )
        return out


class PrompPolicy(BimanualPolicy):
    """LeRobot-style policy: `reset()`, `select_action(batch) -> (B, 14)`; one plan per episode at step 0."""

    def __init__(self, knobs: PrompKnobs, primitive: Primitive | None = None):
        self.primitive = primitive if primitive is not None else Primitive(knobs)
        super().__init__(knobs, self._episode)

    def _episode(self, knobs: PrompKnobs, left: Arm, right: Arm, state: np.ndarray, cube: np.ndarray):
        rng = episode_rng(knobs.seed, cube)
        reading = cube[:2] + rng.normal(0.0, knobs.cube_noise, 2) if knobs.cube_noise > 0 else cube[:2]
        return PlannedEpisode(self.primitive.actions(self.primitive.weights(reading, rng)))


def make_policy(**kwargs) -> PrompPolicy:
    """Import-path factory: `families.promp:make_policy` with `PrompKnobs` fields as kwargs."""
    return PrompPolicy(checked_knobs(PrompKnobs, "promp", kwargs))


# Named settings for measure.py: runs a ProMP user would make, from careful to careless.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "fast": {"time_scale": 1.8},
    "heavy_ridge": {"ridge": 0.3},
    "sampled": {"temperature": 3.0},
    "vague_conditioning": {"obs_std": 0.04},
    "few_basis": {"n_basis": 6},
    "demos4": {"demos": 4},
    "noisy_cube": {"cube_noise": 0.02},
    "hot_sample": {"temperature": 30.0},
    "unconditioned": {"condition": False},
}


"""Named settings of `promp`. Measured success in the reference world (`python benchmarks/families/measure.py
--families promp --episodes 25 --detector-poses 0`, 25 ID + 25 OOD episodes each, seed 0):

| setting             | what the user did                                                | ID    | OOD   |
|---------------------|------------------------------------------------------------------|-------|-------|
| nominal             | 30 basis functions, ridge 1e-6, 60 demos, conditioned mean       | 24/25 | 16/25 |
| fast                | primitive played 1.8 times faster                                | 24/25 | 15/25 |
| heavy_ridge         | ridge 0.3 in the weight fit: the path shrinks toward zero joints | 23/25 | 16/25 |
| sampled             | a sample of the conditioned distribution, temperature 3          | 20/25 | 12/25 |
| vague_conditioning  | conditioning assumes a 4 cm cube reading noise: it barely moves  | 20/25 | 2/25  |
| few_basis           | 6 basis functions: grasp and hand-over smoothed away             | 15/25 | 4/25  |
| demos4              | only the first 4 demos fitted                                    | 17/25 | 7/25  |
| noisy_cube          | cube reading off by 2 cm std (per episode)                       | 13/25 | 7/25  |
| hot_sample          | a sample at temperature 30                                       | 7/25  | 4/25  |
| unconditioned       | the unconditioned mean: blind to the cube                        | 0/25  | 0/25  |
"""


if __name__ == "__main__":
    write_model()
