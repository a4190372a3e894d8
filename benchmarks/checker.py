"""Benchmark of the physics-constraint checker (`r2s2r.robots.checker`) on real recorded trajectories.

1. calibration: per joint, the envelope the spec's velocity and acceleration limits were set from (max over
   the calibration episodes of |dq|, |d2q| over the spec's 0.1 s window, x1.25) and the largest excursion
   beyond the MJCF ranges, next to the spec's numbers;
2. false alarms: every evaluation episode (held-out demonstrations and the rank benchmark's policy logs,
   ACT checkpoints and clumsy demonstrators included) checked at 50 Hz (all steps) and at the world model's
   10 Hz (every 5th step): per violation type, the share of trajectories flagged anywhere (target <= 5 %)
   and of steps flagged; the calibration episodes' rates alongside;
3. recall: per type, `copies` evaluation episodes each with ONE injected violation of that type (seeded,
   sized relative to the checker's limits; sizes in the JSON), checked at 10 and 50 Hz: the share flagged
   with that type within -0.1/+0.3 s of the injected span, and which other types fire there that did not
   on the real episode. Collision poses are found with the checker's own geometry (MuJoCo contact depth,
   `PhysicsChecker.geometry`), so recall measures the rules, not the geometry;
4. throughput: states/s and trajectories/s on a batch of 10 Hz trajectories with object states, with the
   collision pass on and off.
Prints tables and writes benchmarks/results/checker.json.

Usage:
    python benchmarks/checker.py --calibrate=true   # only the calibration envelope (seconds)
    python benchmarks/checker.py                    # everything (about 2 min on 2 cores)
    python benchmarks/checker.py --copies=20        # a quick look
"""

from __future__ import annotations

import glob
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from lerobot.datasets.utils import load_nested_dataset  # noqa: E402

from r2s2r.robots.checker import VIOLATIONS, PhysicsChecker  # noqa: E402
from r2s2r.robots.ik import BimanualIK  # noqa: E402
from r2s2r.robots.spec import robot_spec  # noqa: E402
from r2s2r.scripts.cli import run  # noqa: E402

DT, STRIDE = 0.02, 5  # the recordings' step (s); every STRIDE-th state is a 10 Hz world-model frame
RATES = (10, 50)  # Hz at which every corrupted copy is checked
RECORDED_BY = {  # which benchmark records the default datasets
    "outputs/bench/rank": "python benchmarks/rank.py",
    "outputs/bench/data": "python benchmarks/train_small.py",
}
HOLD = 0.3  # s an injected joint value or pose is held
MAX_RISE = 1.5  # s: an injection whose blend at half the joint limits takes longer is redrawn
BEFORE, AFTER = 0.1, 0.3  # s around an injected span within which its flag counts
FAR = 0.15  # m from the cube to both grasp points for the object injections
DEPTH_BAND = (0.04, 0.10)  # m of injected arm-table / arm-arm penetration (the checker flags > 0.03)


@dataclass
class CheckerBenchConfig:
    """Which recordings calibrate and evaluate the checker, and how many corrupted copies to score."""

    calibration: list[str] = field(default_factory=lambda: ["outputs/bench/data/train"])  # the limits' data
    evaluation: list[str] = field(  # real trajectories not used for calibration (LeRobot v3 roots, globs)
        default_factory=lambda: ["outputs/bench/data/heldout", "outputs/bench/rank/logs/*"]
    )
    calibrate: bool = False  # only print and store the calibration envelope
    copies: int = 100  # corrupted copies per violation type
    seed: int = 0  # of the injections and the throughput batch
    batch: int = 256  # trajectories in the throughput batch
    steps: int = 40  # 10 Hz steps per throughput trajectory
    out: str = "benchmarks/results/checker.json"  # where the JSON goes

    def __post_init__(self) -> None:
        if min(self.copies, self.batch, self.steps) < 1:
            raise ValueError(f"copies={self.copies}, batch={self.batch}, steps={self.steps} must be >= 1.")


def load(patterns: list[str]) -> list[dict]:
    """Episodes {name, q (T,14), env (T,7)} of the LeRobot datasets at `patterns`, each in index order."""
    episodes, keys = [], ["episode_index", "index", "observation.state", "observation.environment_state"]
    for pattern in patterns:
        roots = [Path(r) for r in sorted(glob.glob(pattern)) if (Path(r) / "data").is_dir()]
        if not roots:
            by = next((s for p, s in RECORDED_BY.items() if pattern.startswith(p)), "r2s2r-record")
            raise FileNotFoundError(f"no LeRobot dataset at {pattern}; `{by}` records it.")
        for root in roots:
            cols = load_nested_dataset(root / "data").select_columns(keys).with_format("numpy")[:]
            order = np.argsort(cols["index"])
            for e in np.unique(cols["episode_index"]):
                rows = order[cols["episode_index"][order] == e]
                q, env = (cols[k][rows].astype(np.float64) for k in keys[2:])
                episodes.append({"name": f"{root.name}/{e}", "q": q, "env": env})
    return episodes


def calibrate(episodes: list[dict], checker: PhysicsChecker) -> dict:
    """Per joint: |velocity| and |acceleration| envelopes x1.25 over the spec's window, range excursions."""
    spec, w = checker.spec, checker.spec.limit_window
    k = round(w / DT)
    lo, hi = np.array(spec.position_lower), np.array(spec.position_upper)
    lo[checker.grippers], hi[checker.grippers] = spec.gripper_state_range  # a gripper *state*'s range
    stats = np.array([[  # (5, 14, episodes) after the transpose
        np.abs(q[k:] - q[:-k]).max(0) / w, np.abs(q[2 * k:] - 2 * q[k:-k] + q[:-2 * k]).max(0) / w**2,
        np.maximum(q - hi, lo - q).max(0).clip(0), q.min(0), q.max(0)] for q in (e["q"] for e in episodes)
    ]).transpose(1, 2, 0)  # fmt: skip
    velocity, acceleration, beyond = 1.25 * stats[0].max(1), 1.25 * stats[1].max(1), stats[2].max(1)
    print_table(
        f"Calibration envelope ({len(episodes)} episodes, window {w} s, x1.25) vs the spec; position margin "
        f"{checker.cfg.position_margin} rad",
        ["joint", "|v| x1.25", "spec v", "|a| x1.25", "spec a", "min", "max", "range", "beyond range"],
        [[n, velocity[j], spec.velocity_limits[j], acceleration[j], spec.acceleration_limits[j],
          stats[3, j].min(), stats[4, j].max(), f"{lo[j]:.2f}..{hi[j]:.2f}", beyond[j]]
         for j, n in enumerate(spec.joint_names)],
    )  # fmt: skip
    return {"episodes": len(episodes), "window_s": w, "joints": spec.joint_names,
            "velocity_envelope": velocity.tolist(), "velocity_limits": spec.velocity_limits,
            "acceleration_envelope": acceleration.tolist(), "acceleration_limits": spec.acceleration_limits,
            "beyond_range": beyond.tolist(), "min": stats[3].min(1).tolist(),
            "max": stats[4].max(1).tolist()}  # fmt: skip


def check(checker: PhysicsChecker, q: np.ndarray, env: np.ndarray, hz: int) -> np.ndarray:
    """(T', K) flags of one 50 Hz trajectory, checked at `hz`."""
    s = 50 // hz
    return checker.check(q[None, ::s], DT * s, env_states=env[None, ::s]).flags[0]


def alarms(flags: list[np.ndarray], names: list[str]) -> dict:
    """Per type and any: share of trajectories flagged anywhere and of steps flagged; the flagged episodes."""
    flags = [np.concatenate([f, f.any(1, keepdims=True)], axis=1) for f in flags]
    anywhere, steps = np.stack([f.any(0) for f in flags]), np.concatenate(flags)
    return {t: {"trajectories": anywhere[:, k].mean(), "steps": steps[:, k].mean(),
                "flagged": [f"{n}: {f[:, k].sum()} steps from {f[:, k].argmax()}"
                            for n, f in zip(names, flags, strict=True) if f[:, k].any()]}
            for k, t in enumerate((*VIOLATIONS, "any"))}  # fmt: skip


def bump(t: np.ndarray, start: float, rise: float, hold: float) -> np.ndarray:
    """0 -> 1 over `rise` s from `start` (minimum jerk), 1 for `hold` s, back to 0 over `rise` s."""
    x = np.clip(np.stack([t - start, t - start - rise - hold]) / rise, 0, 1)
    step = x**3 * (10 - 15 * x + 6 * x * x)
    return step[0] - step[1]


class Injector:
    """One violation of a type in a real episode at t0: ((q, span) or None to redraw, cube poses, size)."""

    def __init__(self, checker: PhysicsChecker, rng: np.random.Generator):
        self.checker, self.rng, self.ik = checker, rng, BimanualIK(checker.spec.model_xml)
        self.v, self.a, self.names = checker.velocity, checker.acceleration, checker.spec.joint_names
        self.w = checker.spec.limit_window  # s over which velocity and acceleration limits are averaged
        self.k = round(self.w / DT)
        self.arms = [checker.arm[:6], checker.arm[6:]]

    def blend(self, q, dims, target, t0):
        """q with `dims` moved to `target` from t0 (min-jerk, at half the limits), held, and moved back."""
        d = np.abs(target - q[round(t0 / DT), dims])
        rise = max(0.2, np.max(3.75 * d / self.v[dims]), np.max(np.sqrt(11.55 * d / self.a[dims])))
        if rise > MAX_RISE:
            return None
        w = bump(np.arange(len(q)) * DT, t0, rise, HOLD)[:, None]
        q = q.copy()
        q[:, dims] = (1 - w) * q[:, dims] + w * target
        return q, (t0, t0 + 2 * rise + HOLD)

    def measured(self, q, j, start, end, order):
        """Largest |velocity| (order 1) or |acceleration| (2) of joint j from start to end (s) / limit."""
        k, x = self.k, q[round(start / DT) : round(end / DT) + 2 * self.k + 1, j]
        d = x[k:] - x[:-k] if order == 1 else x[2 * k :] - 2 * x[k:-k] + x[: -2 * k]
        return np.abs(d).max() / self.w**order / (self.v if order == 1 else self.a)[j]

    def _beyond(self, ep, t0, j, lo, hi):
        """Joint j 0.1-0.5 past lo or hi, held."""
        d = self.rng.uniform(0.1, 0.5)
        target = hi + d if self.rng.random() < 0.5 else lo - d
        return self.blend(ep["q"], [j], target, t0), ep["env"], {"joint": self.names[j], "beyond": d}

    def joint_position(self, ep, t0):
        c, j = self.checker, self.rng.choice(self.checker.arm)  # past the MJCF range + the margin
        return self._beyond(ep, t0, j, c.lower[j] - c.cfg.position_margin, c.upper[j] + c.cfg.position_margin)

    def gripper_range(self, ep, t0):
        g = self.rng.choice(self.checker.grippers)
        return self._beyond(ep, t0, g, *self.checker.spec.gripper_state_range)

    def joint_velocity(self, ep, t0):
        """A ramp at f x the limit for 2 windows (1 window min-jerk in and out), the way the joint moves."""
        q, i, f, w = ep["q"].copy(), round(t0 / DT), self.rng.uniform(1.5, 3), self.w
        j = self.rng.integers(q.shape[1])
        sign = np.sign(q[i + 3 * self.k, j] - q[i, j]) or 1.0
        q[:, j] += np.cumsum(sign * f * self.v[j] * bump(ep["t"], t0, w, 2 * w)) * DT
        size = {"joint": self.names[j], "x_limit": f, "measured": self.measured(q, j, t0, t0 + 4 * w, 1)}
        return (q, (t0, t0 + 4 * w)), ep["env"], size

    def joint_acceleration(self, ep, t0):
        """A tent one window either side of t0: the joint's velocity flips by f x limit x window at t0."""
        q, i, f, w, k = ep["q"].copy(), round(t0 / DT), self.rng.uniform(1.5, 3), self.w, self.k
        j = self.rng.integers(q.shape[1])
        sign = -np.sign(q[i + k, j] - 2 * q[i, j] + q[i - k, j]) or 1.0  # bends the way the joint bends
        q[:, j] += sign * f * self.a[j] * w / 2 * np.maximum(0, w - np.abs(ep["t"] - t0))
        size = {"joint": self.names[j], "x_limit": f, "measured": self.measured(q, j, t0 - w, t0, 2)}
        return (q, (t0 - w, t0 + w)), ep["env"], size

    def _collide(self, ep, t0, candidates, column, dims):
        """Blend `dims` into a random candidate whose `column` depth is in DEPTH_BAND, the other's < 1 cm."""
        geo, c = self.checker.geometry(candidates), self.checker
        depth, other = geo[column], geo["arm_depth" if column == "table_depth" else "table_depth"]
        inside = ((candidates[:, c.arm] >= c.lower[c.arm]) & (candidates[:, c.arm] <= c.upper[c.arm])).all(1)
        ok = np.flatnonzero((depth > DEPTH_BAND[0]) & (depth < DEPTH_BAND[1]) & (other < 0.01) & inside)
        if not len(ok):
            return None, ep["env"], {}
        pick = self.rng.choice(ok)
        return self.blend(ep["q"], dims, candidates[pick, dims], t0), ep["env"], {"depth_m": depth[pick]}

    def arm_table_collision(self, ep, t0):
        """One arm's shoulder, elbow and wrist angle pushed down into the table."""
        arm = self.arms[self.rng.integers(2)]
        candidates = np.tile(ep["q"][round(t0 / DT)], (64, 1))
        candidates[:, [arm[1], arm[2], arm[4]]] += self.rng.uniform(-0.5, 1.5, (64, 3))
        return self._collide(ep, t0, candidates, "table_depth", arm)

    def arm_arm_collision(self, ep, t0):
        """Both grasp points (IK) to their mid-point (>= 20 cm up), then 3-15 cm on along their approach."""
        q0, both = ep["q"][round(t0 / DT)], self.arms[0] + self.arms[1]
        joints = q0[both].reshape(2, 6)
        pos, rot = self.ik.fk(joints)
        mid = pos.mean(0)
        mid[2] = max(mid[2], 0.2)
        candidates = np.tile(q0, (13, 1))
        for n, shift in enumerate(np.linspace(0.03, 0.15, 13)):
            candidates[n, both] = self.ik.solve(joints, mid + shift * rot[:, :, 0], rot, iters=30).ravel()
        return self._collide(ep, t0, candidates, "arm_depth", both)

    def _move_cube(self, ep, t0, end, offset, size):
        """The cube moved by offset (T,3) if it rests untouched over the table and stays FAR from grippers."""
        (x0, y0), (x1, y1) = self.checker.table_xy
        a, b = round((t0 - 0.3) / DT), round((end + 0.3) / DT) + 1
        env = ep["env"].copy()
        env[:, :3] += offset
        p0, p = ep["env"][a:b, :3], env[a:b, :3]
        still = np.abs(np.diff(p0, axis=0)).max() < 0.001 and np.abs(p0[:, 2] - ep["rest"][a:b]).max() < 0.005
        far = (np.linalg.norm(ep["tcp"][a:b] - p[:, None], axis=-1) > FAR).all()
        over = ((p[:, 0] > x0) & (p[:, 0] < x1) & (p[:, 1] > y0) & (p[:, 1] < y1)).all()
        return ((ep["q"], (t0, end)) if still and far and over else None), env, size

    def _horizontal(self, length):
        angle = self.rng.uniform(0, 2 * np.pi)
        return length * np.array([np.cos(angle), np.sin(angle), 0.0])

    def object_below_table(self, ep, t0):
        d = self.rng.uniform(0.02, 0.04)
        offset = np.outer(bump(ep["t"], t0, 0.1, HOLD), [0, 0, -d])
        return self._move_cube(ep, t0, t0 + 0.2 + HOLD, offset, {"sink_m": d})

    def object_floating(self, ep, t0):
        h = self.rng.uniform(0.05, 0.15)  # up in 0.2 s, held 1 s, down in 0.2 s
        offset = np.outer(bump(ep["t"], t0, 0.2, 1.0), [0, 0, h])
        return self._move_cube(ep, t0, t0 + 1.4, offset, {"raise_m": h})

    def object_teleport(self, ep, t0):
        """A jump between two 10 Hz frames (at 50 Hz: within one 20 ms step); the cube stays there."""
        r = self.rng.uniform(0.1, 0.3)
        size = {"jump_m": r, "speed_10hz": r / (STRIDE * DT), "speed_50hz": r / DT}
        offset = np.outer(ep["t"] > t0 + (STRIDE - 0.5) * DT, self._horizontal(r))
        return self._move_cube(ep, t0, t0 + STRIDE * DT, offset, size)

    def object_unpushed(self, ep, t0):
        u = self.rng.uniform(0.2, 0.5)
        offset = np.outer(np.clip(ep["t"] - t0, 0, 0.5), self._horizontal(u))  # slides 0.5 s, then stays
        return self._move_cube(ep, t0, t0 + 0.5, offset, {"speed_m_s": u})


def recall(checker: PhysicsChecker, episodes: list[dict], base: dict, copies: int, rng) -> dict:
    """Per type: recall and co-firing types of corrupted copies at 10 and 50 Hz, and the injections' sizes."""
    injector, out = Injector(checker, rng), {}
    for k, kind in enumerate(VIOLATIONS):
        hits, cofire, sizes, draws = {hz: [] for hz in RATES}, {hz: Counter() for hz in RATES}, [], 0
        while len(sizes) < copies and draws < 100 * copies:
            draws += 1
            e = rng.integers(len(episodes))
            duration = episodes[e]["t"][-1]
            t0 = STRIDE * DT * rng.integers(5, int((duration - 1) / (STRIDE * DT)))  # on the 10 Hz grid
            injected, env, size = getattr(injector, kind)(episodes[e], t0)
            if injected is None or injected[1][1] + AFTER > duration:
                continue
            q, (start, end) = injected
            window = {hz: slice(round((start - BEFORE) * hz), round((end + AFTER) * hz) + 1) for hz in RATES}
            real = {hz: base[hz][e][window[hz]].any(0) for hz in RATES}
            if any(real[hz][k] for hz in RATES):
                continue  # the real episode has this type there already: no test of the injection
            for hz in RATES:
                new = check(checker, q, env, hz)[window[hz]].any(0) & ~real[hz]
                hits[hz].append(new[k])
                cofire[hz].update(t for j, t in enumerate(VIOLATIONS) if new[j] and j != k)
            sizes.append(size)
        if len(sizes) < copies:
            print(f"{kind}: only {len(sizes)} of {copies} copies after {draws} draws", flush=True)
        summary = {key: [min(s[key] for s in sizes), max(s[key] for s in sizes)] for key in sizes[0]}
        if "joint" in summary:
            summary["joint"] = Counter(s["joint"] for s in sizes)
        out[kind] = {"copies": len(sizes), "draws": draws, "size": summary} | {f"{hz}hz": {
            "recall": np.mean(hits[hz]), "cofire": {t: n / len(sizes) for t, n in cofire[hz].most_common()}}
            for hz in RATES}  # fmt: skip
    return out


def throughput(checker: PhysicsChecker, episodes: list[dict], cfg: CheckerBenchConfig, rng) -> dict:
    """Best of 3 timings of one batch of 10 Hz windows with object states, collision pass on and off."""
    q, env, out = [], [], {}
    for e in rng.integers(len(episodes), size=cfg.batch):
        s = STRIDE * rng.integers(len(episodes[e]["q"]) // STRIDE - cfg.steps + 1)
        q.append(episodes[e]["q"][s : s + STRIDE * cfg.steps : STRIDE])
        env.append(episodes[e]["env"][s : s + STRIDE * cfg.steps : STRIDE])
    q, env = np.stack(q), np.stack(env)
    for collisions in (True, False):
        best = np.inf
        for _ in range(3):
            tic = time.perf_counter()
            checker.check(q, STRIDE * DT, env_states=env, collisions=collisions)
            best = min(best, time.perf_counter() - tic)
        n_states = q.shape[0] * q.shape[1]
        out[f"collisions {'on' if collisions else 'off'}"] = {
            "seconds": best, "states_per_s": n_states / best, "trajectories_per_s": len(q) / best
        }  # fmt: skip
    return out


def short(kind: str) -> str:
    """A violation type without its family prefix or suffix, for narrow tables."""
    return kind.removeprefix("joint_").removeprefix("object_").removesuffix("_collision")


def main(cfg: CheckerBenchConfig) -> int:
    start = time.perf_counter()
    checker = PhysicsChecker(robot_spec("aloha"))
    calibration_set, episodes = load(cfg.calibration), [] if cfg.calibrate else load(cfg.evaluation)
    payload = {"benchmark": "checker", "machine": machine_info(), "config": asdict(cfg),
               "checker": asdict(checker.cfg)}  # fmt: skip
    payload["calibration"] = calibrate(calibration_set, checker)
    if not cfg.calibrate:
        for ep in episodes:  # the cube's resting height and the grasp points, for the object injections
            ep["rest"] = checker.resting_height(0, ep["env"][:, 3:7])
            ep["tcp"] = checker.geometry(ep["q"], collisions=False)["tcp"]
            ep["t"] = np.arange(len(ep["q"])) * DT
        base = {hz: [check(checker, ep["q"], ep["env"], hz) for ep in episodes] for hz in RATES}
        rates = {f"evaluation_{hz}hz": alarms(base[hz], [e["name"] for e in episodes]) for hz in (50, 10)}
        for hz in (50, 10):
            flags = [check(checker, e["q"], e["env"], hz) for e in calibration_set]
            rates[f"calibration_{hz}hz"] = alarms(flags, [e["name"] for e in calibration_set])
        print_table(
            f"False alarms: % of real trajectories flagged anywhere (% of steps); {len(episodes)} evaluation "
            f"and {len(calibration_set)} calibration episodes",
            ["type", "eval 50 Hz", "eval 10 Hz", "calib 50 Hz", "calib 10 Hz"],
            [[t, *(f"{100 * r[t]['trajectories']:.1f} ({100 * r[t]['steps']:.2f})" for r in rates.values())]
             for t in (*VIOLATIONS, "any")],
        )  # fmt: skip
        rng = np.random.default_rng(cfg.seed)
        found = recall(checker, episodes, base, cfg.copies, rng)
        print_table(
            f"Recall on injected violations: % flagged within -{BEFORE}/+{AFTER} s of the injection (other "
            "types firing there: % of copies)",
            ["type", "copies", "10 Hz", "50 Hz", "size", "others at 10 Hz", "others at 50 Hz"],
            [[t, r["copies"], f"{100 * r['10hz']['recall']:.0f}", f"{100 * r['50hz']['recall']:.0f}",
              ", ".join(f"{k} {v[0]:.3g}-{v[1]:.3g}" for k, v in r["size"].items() if k != "joint"),
              *(", ".join(f"{short(k)} {100 * v:.0f}" for k, v in r[f"{hz}hz"]["cofire"].items()) or "-"
                for hz in RATES)]
             for t, r in found.items()],
        )  # fmt: skip
        speed = throughput(checker, episodes, cfg, rng)
        print_table(
            f"Throughput: {cfg.batch} trajectories x {cfg.steps} steps at 10 Hz, object states (best of 3)",
            ["pass", "s", "states/s", "trajectories/s"],
            [[k, v["seconds"], f"{v['states_per_s']:.0f}", f"{v['trajectories_per_s']:.0f}"]
             for k, v in speed.items()],
        )  # fmt: skip
        payload |= {"evaluation_episodes": len(episodes), "false_alarms": rates, "recall": found}
        payload["throughput"] = speed
    payload["seconds"] = time.perf_counter() - start
    print(f"\n{payload['seconds']:.0f} s")
    write_json(cfg.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(run(CheckerBenchConfig, main, __doc__, None, "checker.py"))
