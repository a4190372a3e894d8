"""Family 19, `mimic`: a learned state policy, an MLP trained by behaviour cloning on a scripted expert.

How it acts. Every step an MLP (two hidden ReLU layers) reads the proprio state (`observation.state`, 14),
the cube pose now (`observation.environment_state`, 7), the cube's x, y at the episode's start and a phase
clock (step/400 and its sines and cosines at 1, 2, 4, 8 cycles per episode), and predicts a chunk of the next
`CHUNK` = 10 joint-target actions (14 each). Inputs and outputs are normalised by the training data's mean
and std, stored with the weights. By default a fresh chunk is predicted every step and the predictions made
for the present step by the last ten chunks are averaged with weights exp(-0.1 k), k steps old (ACT's
temporal ensembling); `execute` = n plays n actions of each chunk open loop instead. The forward pass is
numpy; a checkpoint is a float32 npz under `mimic_weights/` (~250 KB at 176 hidden units).

The expert it imitates (`ExpertEpisode`, written for this family). Cartesian minimum-jerk moves, IK every
step (`arm.py`, warm-started from its last command). The right comes in from +x with its gripper heading
world -x, pitched 55 degrees down, lining up 7 cm back along its approach, and pinches the cube's y faces
(its TCP 3.1 cm behind the cube's centre); it closes, lifts 10 cm and carries the cube to a "roof" hand-over
left of the centre (`HANDOVER`, 20 cm up), its gripper pitched 40 degrees down. The left comes nose to nose
from -x, pitched 40 degrees down too, aiming at the cube it reads while coming in, and pinches the same y
faces on the cube's -x half. The right opens once the left's finger opening has come down and held still,
then backs off up and to +x, and the left carries the cube 6 cm toward its side. It reads the cube every
step until each arm has closed. It succeeds on 30/30 ID and 20/20 OOD tuning poses.

Training (`python benchmarks/families/mimic.py train`, ~10 min record + ~3 min train on one core). 300
demos with DART noise (Ornstein-Uhlenbeck noise, std `DART_NOISE` = 0.02 rad, on the executed arm joints,
the clean expert command as label) and 100 clean demos, cube poses from the ID box drawn with
`SeedSequence([DEMO_SEED=19019, i])` (measure.py evaluates on root 0); only successful demos are kept
(94 %), and a run takes the first 200 successful noisy ones unless its `TrainRun` says otherwise. Each run
fits the normalised 10-action chunk by L1, Adam (lr 1e-3, cosine decay), batch 512, seed 0;
the demos go to `outputs/family19/demos.npz`, the checkpoints to `mimic_weights/` (`RUNS`).

State-only: never an image. Deterministic given the episode: the only randomness, `action_noise` (slowly
varying noise on the arm joint commands, a servo's), is drawn from `common.episode_rng(seed, first state,
first cube pose)`. Kwargs (see `MimicKnobs`): `checkpoint`, `execute`, `ensemble_decay`, `lag`
(observations reach the network `lag` steps late), `action_noise`, `seed`. The settings are what a user's
runs would give: checkpoints taken early in training, runs on few demonstrations, a run on clean demos only
(no noise injection) played on noisy servos, a narrow network.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `families` importable when run as a script
import torch  # noqa: E402  (torch before MuJoCo, see arm.py)

# isort: split

import numpy as np  # noqa: E402

from families.arm import Arm  # noqa: E402
from families.common import (  # noqa: E402
    CUBE_HALF,
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    episode_rng,
    gripper_rot,
    minimum_jerk,
    smooth_noise,
)

EPISODE_STEPS = 400
WEIGHTS = Path(__file__).resolve().parent / "mimic_weights"

# ---------------------------------------------------------------- the expert's geometry
# The right comes in from +x pitched GRASP_PITCH down, heading world -x, fingers closing along world y on the
# cube's y faces; it lifts and carries the cube to a "roof" hand-over: both grippers pitched HANDOVER_PITCH
# down, nose to nose along x, the right holding the cube's +x half and the left taking its -x half on the
# same y faces, each TCP HOLD_BACK behind the cube's centre along its own approach.
GRASP_PITCH = np.radians(55.0)
HANDOVER_PITCH = np.radians(40.0)
HANDOVER = np.array([-0.03, 0.52, 0.20])  # the cube's centre at the hand-over (m, world)
HOLD_BACK = 0.031  # m from each TCP back to the cube's centre along its approach
LINE_UP = 0.07  # m back along the approach where each arm lines up before it comes in
LIFT = 0.10  # m the right lifts straight up after closing
TAKE_TOUCHED = 0.75  # the left's measured opening below this (and still) means it holds the cube
RETREAT = np.array([0.07, 0.0, 0.06])  # m the right backs off (world) after letting go
CARRY_AWAY = np.array([-0.06, 0.0, 0.02])  # m the left carries the cube toward its side after the take
GRIP_RAMP = 10  # steps over which a gripper command ramps
# Right timeline (steps): line up, come in, close and settle, lift, carry; the left: wait, stage, come in.
R_LINE, R_IN, R_CLOSE, R_LIFT, R_CARRY = 70, 100, 122, 150, 215
L_WAIT, L_STAGE, L_IN = 150, 215, 250
RELEASE_LATEST = 300  # the right opens by now even if the left's take was never felt


def _lerp_pose(t: float, t0: float, t1: float, a: tuple, b: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Position and (heading, pitch, roll) on a minimum-jerk move from pose a to pose b over [t0, t1]."""
    s = float(minimum_jerk((t - t0) / max(t1 - t0, 1e-9)))
    pos = (1 - s) * np.asarray(a[0]) + s * np.asarray(b[0])
    angles = (1 - s) * np.asarray(a[1]) + s * np.asarray(b[1])
    return pos, angles


def _approach(heading: float, pitch: float) -> np.ndarray:
    return gripper_rot(heading, pitch, 0.0)[:, 0]


class ExpertEpisode:
    """The scripted expert on one episode: Cartesian minimum-jerk moves, IK every step (warm-started).

    It reads the cube every step until each arm closes (so its grasp and take follow a cube that moved) and
    opens the right once the left's measured finger opening has come down and held still.
    """

    def __init__(self, left: Arm, right: Arm, state: np.ndarray):
        self.left, self.right = left, right
        self.q_left, self.q_right = state[:6].astype(float), state[7:13].astype(float)
        p, R = right.fk(self.q_right)
        self.right_start = (p, (np.pi, float(np.arcsin(-R[2, 0])), 0.0))
        p, R = left.fk(self.q_left)
        self.left_start = (p, (0.0, float(np.arcsin(-R[2, 0])), 0.0))
        self.cube_at_grasp: np.ndarray | None = None
        self.left_take = HANDOVER.copy()
        self.left_openings: list[float] = []
        self.t_release: int | None = None

    def _right_target(self, t: int, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        grasp_angles = (np.pi, GRASP_PITCH, 0.0)
        if t < R_CLOSE:  # follow the cube until the grasp has settled
            self.cube_at_grasp = cube.copy()
        centre = self.cube_at_grasp.copy()
        centre[2] = CUBE_HALF  # resting on the table whatever the (falling) first reading says
        a = _approach(np.pi, GRASP_PITCH)
        grasp = (centre - HOLD_BACK * a, grasp_angles)
        line_up = (grasp[0] - LINE_UP * a + [0, 0, 0.03], grasp_angles)
        lifted = (grasp[0] + [0, 0, LIFT], grasp_angles)
        ho_angles = (np.pi, HANDOVER_PITCH, 0.0)
        present = (HANDOVER - HOLD_BACK * _approach(np.pi, HANDOVER_PITCH), ho_angles)
        if t < R_LINE:
            return _lerp_pose(t, 0, R_LINE, self.right_start, line_up)
        if t < R_IN:
            return _lerp_pose(t, R_LINE, R_IN, line_up, grasp)
        if t < R_CLOSE:
            return grasp[0], np.array(grasp_angles)
        if t < R_LIFT:
            return _lerp_pose(t, R_CLOSE, R_LIFT, grasp, lifted)
        if self.t_release is None or t < self.t_release + GRIP_RAMP:
            return _lerp_pose(t, R_LIFT, R_CARRY, lifted, present)
        away = (present[0] + RETREAT, ho_angles)
        return _lerp_pose(t, self.t_release + GRIP_RAMP, self.t_release + GRIP_RAMP + 35, present, away)

    def _left_target(self, t: int, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        angles = (0.0, HANDOVER_PITCH, 0.0)
        a = _approach(0.0, HANDOVER_PITCH)
        if L_STAGE <= t < L_IN + 2:  # aim at the cube it sees while coming in, then hold that aim
            self.left_take = cube.copy()
        centre = self.left_take
        take = (centre - HOLD_BACK * a, angles)
        stage = (HANDOVER - (HOLD_BACK + LINE_UP) * a, angles)
        if t < L_WAIT:
            return self.left_start[0], np.array(self.left_start[1])
        if t < L_STAGE:
            return _lerp_pose(t, L_WAIT, L_STAGE, self.left_start, stage)
        if t < L_IN:
            return _lerp_pose(t, L_STAGE, L_IN, stage, take)
        if self.t_release is None or t < self.t_release + 20:
            return take[0], np.array(angles)
        away = (take[0] + CARRY_AWAY, angles)
        return _lerp_pose(t, self.t_release + 20, self.t_release + 60, take, away)

    def _grippers(self, t: int, state: np.ndarray) -> tuple[float, float]:
        """(left, right) commands; the right's release waits for the left's opening to stop shrinking."""
        self.left_openings.append(float(state[6]))
        closed_left = t >= L_IN + GRIP_RAMP + 4
        still = len(self.left_openings) > 3 and np.ptp(self.left_openings[-3:]) < 0.004
        if (
            self.t_release is None
            and closed_left
            and ((still and state[6] < TAKE_TOUCHED) or t >= RELEASE_LATEST)
        ):
            self.t_release = t
        ramp = np.clip((t - R_IN) / GRIP_RAMP, 0, 1)
        right = GRIPPER_OPEN + ramp * (GRIPPER_CLOSED - GRIPPER_OPEN)
        if self.t_release is not None:
            right = GRIPPER_CLOSED + np.clip((t - self.t_release) / GRIP_RAMP, 0, 1) * GRIPPER_OPEN
        left = GRIPPER_OPEN + np.clip((t - L_IN) / GRIP_RAMP, 0, 1) * (GRIPPER_CLOSED - GRIPPER_OPEN)
        return float(left), float(right)

    def action(self, t: int, state: np.ndarray, cube: np.ndarray) -> np.ndarray:
        """The expert's (14,) joint-target action at step t from this step's state and cube position."""
        pos, angles = self._right_target(t, cube)
        self.q_right, _ = self.right.ik(pos, gripper_rot(*angles), self.q_right, iters=10)
        pos, angles = self._left_target(t, cube)
        self.q_left, _ = self.left.ik(pos, gripper_rot(*angles), self.q_left, iters=10)
        left_grip, right_grip = self._grippers(t, state)
        return np.concatenate([self.q_left, [left_grip], self.q_right, [right_grip]])


class ExpertPolicy:
    """The expert as a batched LeRobot-style policy: `reset()`, `select_action(batch) -> (B, 14)`."""

    def __init__(self):
        self.right = Arm("right")
        self.left = Arm("left", model=self.right.model)
        self.reset()

    def reset(self) -> None:
        self.episodes: list[ExpertEpisode] | None = None
        self.t = 0

    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        state = batch["observation.state"].cpu().numpy().astype(float)
        cube = batch["observation.environment_state"].cpu().numpy()[:, :3].astype(float)
        if self.episodes is None or len(self.episodes) != len(state):
            self.episodes = [ExpertEpisode(self.left, self.right, s) for s in state]
            self.t = 0
        actions = np.stack(
            [e.action(self.t, s, c) for e, s, c in zip(self.episodes, state, cube, strict=True)]
        )
        self.t += 1
        return torch.from_numpy(actions.astype(np.float32))


def rollout(policy, poses: np.ndarray, num_envs: int = 10, noise: float = 0.0, seed: int = 0) -> dict:
    """Play `policy` from each cube pose (N, 7) in the reference world; optionally add slowly varying noise
    (std `noise` rad) to the executed arm joints while recording the policy's clean action (DART).

    Returns success (N,), max cube height (N,), and per-step states (N,T,14), cubes (N,T,7), actions (N,T,14).
    """
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    out = {"success": [], "max_z": [], "states": [], "cubes": [], "actions": []}
    for first in range(0, len(poses), num_envs):
        chunk = poses[first : first + num_envs]
        rngs = [episode_rng(seed, p) for p in chunk]
        jitter = np.stack([smooth_noise(r, EPISODE_STEPS, 12, noise, 20.0) for r in rngs])
        jitter = np.insert(np.insert(jitter, 6, 0.0, axis=2), 13, 0.0, axis=2)  # no noise on the grippers
        with AlohaWorld(WorldConfig(cameras=(), num_envs=len(chunk))) as world:
            obs = world.reset(chunk, False)
            policy.reset()
            states, cubes, actions, rewards = [], [], [], []
            for t in range(EPISODE_STEPS):
                batch = {k: torch.from_numpy(np.ascontiguousarray(v)).float() for k, v in obs.items()}
                action = policy.select_action(batch).numpy().astype(float)
                states.append(obs["observation.state"])
                cubes.append(obs["observation.environment_state"][:, :7])
                actions.append(action)
                step = world.step(action + jitter[:, t], False)
                rewards.append(step.reward)
                obs = step.observation
        rewards, cubes = np.stack(rewards, 1), np.stack(cubes, 1)
        out["success"].append((rewards >= 4).any(1))
        out["max_z"].append(cubes[:, :, 2].max(1))
        out["states"].append(np.stack(states, 1))
        out["cubes"].append(cubes)
        out["actions"].append(np.stack(actions, 1))
    return {k: np.concatenate(v) for k, v in out.items()}


# ---------------------------------------------------------------- demonstrations and behaviour cloning
DEMO_SEED = 19019  # cube poses of demo i: SeedSequence([DEMO_SEED, i]) (measure.py evaluates on root 0)
DART_NOISE = 0.02  # rad, std of the slowly varying noise on the executed joints of the noisy demos
CHUNK = 10  # future actions predicted per query
PHASE_FREQS = (1, 2, 4, 8)  # Fourier features of the phase clock: events are sharp in time


def record_demos(n_noisy: int, n_clean: int, path: Path) -> dict:
    """Record expert demos (DART-noisy ones first, then clean ones) from ID cube poses; keep successes."""
    from families.measure import initial_poses

    poses = initial_poses("id", n_noisy + n_clean, seed=DEMO_SEED)
    expert = ExpertPolicy()
    parts = [rollout(expert, poses[:n_noisy], noise=DART_NOISE, seed=DEMO_SEED),
             rollout(expert, poses[n_noisy:], noise=0.0)]  # fmt: skip
    data = {k: np.concatenate([p[k] for p in parts]) for k in ("success", "states", "cubes", "actions")}
    data["noisy"] = np.arange(n_noisy + n_clean) < n_noisy
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **data)
    return data


def features(states: np.ndarray, cubes: np.ndarray, first_cube: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Network input (N, 32): state 14, cube pose now 7, cube x, y at the start 2, phase clock 9."""
    phase = (np.asarray(t, dtype=float) / EPISODE_STEPS)[:, None]
    freqs = 2 * np.pi * np.array(PHASE_FREQS)[None]
    clock = np.concatenate([phase, np.sin(freqs * phase), np.cos(freqs * phase)], axis=1)
    return np.concatenate([states, cubes[:, :7], first_cube[:, :2], clock], axis=1).astype(np.float32)


def chunk_dataset(data: dict, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inputs (N, 32), targets (N, CHUNK*14)) from the kept episodes; chunks past the end repeat the last."""
    states, cubes, actions = data["states"][keep], data["cubes"][keep], data["actions"][keep]
    E, T, _ = states.shape
    idx = np.minimum(np.arange(T)[:, None] + np.arange(CHUNK)[None], T - 1)  # (T, CHUNK)
    targets = actions[:, idx].reshape(E * T, CHUNK * 14)
    first = np.repeat(cubes[:, 0], T, axis=0)
    t = np.tile(np.arange(T), E)
    return features(states.reshape(E * T, -1), cubes.reshape(E * T, -1), first, t), targets.astype(np.float32)


@dataclass
class TrainRun:
    """One behaviour-cloning run; `save_at` maps a training step to the checkpoint name saved there."""

    save_at: dict[int, str]
    demos: str = "noisy"  # which demos: "noisy" (DART) or "clean"
    n_demos: int = 200  # the first n of those (successful ones only)
    hidden: int = 176
    batch: int = 512
    lr: float = 1e-3
    seed: int = 0


def train(run: TrainRun, data: dict, out_dir: Path = WEIGHTS) -> None:
    """Behaviour cloning: L1 on the normalised action chunk, Adam with cosine decay; saves npz checkpoints."""
    torch.manual_seed(run.seed)
    pick = data["noisy"] if run.demos == "noisy" else ~data["noisy"]
    keep = np.nonzero(pick & data["success"])[0][: run.n_demos]
    x, y = chunk_dataset(data, keep)
    stats = {"in_mean": x.mean(0), "in_std": np.maximum(x.std(0), 1e-2),
             "out_mean": y.mean(0), "out_std": np.maximum(y.std(0), 1e-3)}  # fmt: skip
    xn = torch.from_numpy((x - stats["in_mean"]) / stats["in_std"])
    yn = torch.from_numpy((y - stats["out_mean"]) / stats["out_std"])
    net = torch.nn.Sequential(
        torch.nn.Linear(x.shape[1], run.hidden), torch.nn.ReLU(),
        torch.nn.Linear(run.hidden, run.hidden), torch.nn.ReLU(),
        torch.nn.Linear(run.hidden, y.shape[1]),
    )  # fmt: skip
    steps = max(run.save_at)
    opt = torch.optim.Adam(net.parameters(), lr=run.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    gen = torch.Generator().manual_seed(run.seed)
    for step in range(1, steps + 1):
        i = torch.randint(len(xn), (run.batch,), generator=gen)
        loss = (net(xn[i]) - yn[i]).abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step in run.save_at:
            layers = [m for m in net if isinstance(m, torch.nn.Linear)]
            params = {f"W{k}": m.weight.detach().numpy().T.copy() for k, m in enumerate(layers)}
            params.update({f"b{k}": m.bias.detach().numpy().copy() for k, m in enumerate(layers)})
            meta = np.array([CHUNK, run.hidden, len(keep), step], dtype=np.int64)
            out_dir.mkdir(parents=True, exist_ok=True)
            np.savez(out_dir / f"{run.save_at[step]}.npz", meta=meta, **params,
                     **{k: v.astype(np.float32) for k, v in stats.items()})  # fmt: skip
            print(f"{run.save_at[step]}: step {step}, {len(keep)} demos, loss {loss.item():.4f}", flush=True)


# ---------------------------------------------------------------- the learned policy
def load_checkpoint(name: str, weights_dir: Path = WEIGHTS) -> dict[str, np.ndarray]:
    """The float32 arrays of checkpoint `name` (W0..W2, b0..b2, in/out mean and std, meta)."""
    path = Path(weights_dir) / f"{name}.npz"
    if not path.is_file():
        known = sorted(f.stem for f in Path(weights_dir).glob("*.npz"))
        raise FileNotFoundError(f"mimic checkpoint '{name}' not found at {path}; known: {', '.join(known)}.")
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def forward(net: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The MLP on raw inputs (N, 32) -> action chunks (N, CHUNK, 14), in numpy (no torch at run time)."""
    h = (x - net["in_mean"]) / net["in_std"]
    h = np.maximum(h @ net["W0"] + net["b0"], 0.0)
    h = np.maximum(h @ net["W1"] + net["b1"], 0.0)
    y = (h @ net["W2"] + net["b2"]) * net["out_std"] + net["out_mean"]
    return y.reshape(len(x), -1, 14)


@dataclass
class MimicKnobs:
    """Which checkpoint plays and how its chunks are executed; defaults = the nominal run."""

    checkpoint: str = "bc_final"  # file stem under mimic_weights/
    execute: int = 0  # 0: query every step, temporal ensembling; n > 0: play n actions of a chunk open loop
    ensemble_decay: float = 0.1  # weight exp(-decay * k) of a prediction made k steps ago (newest first)
    lag: int = 0  # steps the observation reaches the network late
    action_noise: float = 0.0  # rad, std of slowly varying noise added to every arm joint command
    seed: int = 0  # seeds that noise together with the episode's first observation

    def __post_init__(self) -> None:
        if not 0 <= self.execute <= CHUNK:
            raise ValueError(f"execute={self.execute} must lie in [0, {CHUNK}] (0 = temporal ensembling).")
        if self.ensemble_decay < 0 or self.lag < 0 or self.action_noise < 0:
            raise ValueError("ensemble_decay, lag and action_noise must be >= 0.")


class MimicPolicy:
    """LeRobot-style batched policy: `reset()`, `select_action(batch) -> (B, 14)`; reads the state and the
    cube pose, never an image."""

    def __init__(self, knobs: MimicKnobs):
        self.knobs = knobs
        self.net = load_checkpoint(knobs.checkpoint)
        self.reset()

    def reset(self) -> None:
        self.t, self.first_cube, self.history = 0, None, []

    def _start(self, state: np.ndarray, cube: np.ndarray) -> None:
        """First step of a batch of episodes: remember the cube, draw each episode's noise, clear buffers."""
        B = len(state)
        self.t, self.first_cube, self.history = 0, cube.copy(), []
        k = self.knobs
        noise = [smooth_noise(episode_rng(k.seed, s, c), EPISODE_STEPS, 12, k.action_noise, 15.0)
                 for s, c in zip(state, cube, strict=True)]  # fmt: skip
        self.noise = np.insert(np.insert(np.stack(noise), 6, 0.0, axis=2), 13, 0.0, axis=2)
        self.acc = np.zeros((B, EPISODE_STEPS + CHUNK, 14))  # weighted sums of predictions per future step
        self.wsum = np.zeros(EPISODE_STEPS + CHUNK)
        self.chunk = None

    def _predict(self, t: int) -> np.ndarray:
        state, cube = self.history[max(0, len(self.history) - 1 - self.knobs.lag)]
        x = features(state, cube, self.first_cube, np.full(len(state), t))
        return forward(self.net, x)  # (B, CHUNK, 14)

    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        state = batch["observation.state"].detach().cpu().numpy().astype(np.float32)
        cube = batch["observation.environment_state"].detach().cpu().numpy()[:, :7].astype(np.float32)
        if self.first_cube is None or len(self.first_cube) != len(state):
            self._start(state, cube)
        self.history.append((state, cube))
        t, k = self.t, self.knobs
        if k.execute == 0:  # a fresh chunk every step, overlapping predictions averaged (ACT's ensembling)
            w = np.exp(-k.ensemble_decay * np.arange(CHUNK))
            self.acc[:, t : t + CHUNK] += w[None, :, None] * self._predict(t)
            self.wsum[t : t + CHUNK] += w
            action = self.acc[:, t] / self.wsum[t]
        else:  # open loop: a fresh chunk every `execute` steps
            if t % k.execute == 0:
                self.chunk = self._predict(t)
            action = self.chunk[:, t % k.execute]
        action = action + self.noise[:, min(t, EPISODE_STEPS - 1)]
        self.t += 1
        return torch.from_numpy(action.astype(np.float32)).to(batch["observation.state"].device)


def make_policy(**kwargs) -> MimicPolicy:
    """Import-path factory: `families.mimic:make_policy` with `MimicKnobs` fields as kwargs."""
    fields = set(MimicKnobs.__dataclass_fields__)
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise ValueError(f"unknown mimic kwargs {unknown}; choose among {', '.join(sorted(fields))}.")
    return MimicPolicy(MimicKnobs(**kwargs))


# Named settings for measure.py; measured success rates are in the docstring below.
FAMILY_SETTINGS: dict[str, dict] = {
    "nominal": {},
    "open_loop": {"execute": CHUNK},
    "servo_noise": {"action_noise": 0.02},
    "step_150": {"checkpoint": "bc_150"},
    "hidden_24": {"checkpoint": "bc_hidden24"},
    "demos_6": {"checkpoint": "bc_6demos"},
    "step_100": {"checkpoint": "bc_100"},
    "demos_3": {"checkpoint": "bc_3demos"},
    "clean_servo_noise": {"checkpoint": "bc_clean", "action_noise": 0.02},
    "step_60": {"checkpoint": "bc_60"},
}
"""Named settings of `mimic`. Measured success in the reference world (`python benchmarks/families/measure.py
--families mimic --episodes 25 --detector-poses 0`, 25 ID + 25 OOD episodes each, seed 0):

| setting           | what the user's run did                                          | ID      | OOD     |
|-------------------|------------------------------------------------------------------|---------|---------|
| nominal           | final checkpoint (6000 steps, 200 DART demos), ensembling        | 25/25   | 23/25   |
| open_loop         | the same, each 10-action chunk played open loop                  | 25/25   | 24/25   |
| servo_noise       | the same on noisy servos (OU noise, std 0.02 rad, on commands)   | 19/25   | 17/25   |
| step_150          | checkpoint at step 150                                           | 24/25   | 11/25   |
| hidden_24         | a narrow network (24 hidden units), trained as long              | 14/25   | 5/25    |
| demos_6           | trained on 6 demos only                                          | 17/25   | 6/25    |
| step_100          | checkpoint at step 100                                           | 3/25    | 5/25    |
| demos_3           | trained on 3 demos only                                          | 11/25   | 3/25    |
| clean_servo_noise | trained on 100 clean demos (no DART), played on noisy servos     | 8/25    | 2/25    |
| step_60           | checkpoint at step 60                                            | 0/25    | 0/25    |

The measurement is in `outputs/family19/measured.json`.
"""


# ---------------------------------------------------------------- command line
RUNS = (
    TrainRun(save_at={60: "bc_60", 100: "bc_100", 150: "bc_150", 6000: "bc_final"}),
    TrainRun(save_at={6000: "bc_clean"}, demos="clean"),
    TrainRun(save_at={6000: "bc_6demos"}, n_demos=6),
    TrainRun(save_at={6000: "bc_3demos"}, n_demos=3),
    TrainRun(save_at={6000: "bc_hidden24"}, hidden=24),
)


def main() -> None:
    p = argparse.ArgumentParser(description="Record the expert's demos and train mimic's checkpoints.")
    p.add_argument(
        "command", choices=("record", "train"), help="record: demos only; train: record if needed, train"
    )
    p.add_argument("--demos", default="outputs/family19/demos.npz", help="demo file (written by record)")
    p.add_argument("--noisy", type=int, default=300, help="DART-noisy demos to record")
    p.add_argument("--clean", type=int, default=100, help="clean demos to record")
    a = p.parse_args()
    torch.set_num_threads(1)
    start, path = time.perf_counter(), Path(a.demos)
    if a.command == "record" or not path.is_file():
        data = record_demos(a.noisy, a.clean, path)
        print(f"recorded {len(data['success'])} demos, {data['success'].mean():.0%} successful "
              f"({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
    if a.command == "train":
        data = dict(np.load(path))
        for old in WEIGHTS.glob("*.npz"):  # only this command's checkpoints stay
            old.unlink()
        for run in RUNS:
            train(run, data)
        print(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
