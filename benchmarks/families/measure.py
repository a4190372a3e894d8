"""Real success rates of every named setting of the held-out families, measured in the reference world.

    python benchmarks/families/measure.py                            # every family, ~30 min on one core
    python benchmarks/families/measure.py --families waypoint --episodes 5 --detector-poses 0

Episode i of a distribution starts from the cube pose `sample_object_poses(task, dist, SeedSequence([seed,
i]))`, the recorder's convention, so every setting plays the same initial poses. State-only settings run
without rendering; camera settings render only the views they read (`CameraKnobs.cameras`), at 96x128, and
play fewer episodes (`--camera-episodes`). Prints a table and writes `measured.json` next to this file (or
`--out`); with `--families` a subset, the other families' entries in an existing JSON are kept.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("LP_NUM_THREADS", "1")  # Mesa's software rasterizer: one core, like the physics
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `families` importable when run as a script

import numpy as np  # noqa: E402
import torch  # noqa: E402  (torch before MuJoCo, see r2s2r.robots.aloha)

from r2s2r.robots.aloha import AlohaWorld, WorldConfig, sample_object_poses  # noqa: E402

FAMILIES = (
    "waypoint", "jointspace", "camera", "pincer", "relay", "retry", "rate", "stall", "overlap", "table",
    "nudge", "catch", "pivot", "swivel", "field", "joust", "teleop", "shoot", "mimic", "kalman",
    "tree", "tuned", "dmp", "rrt", "lqr", "miscal", "solo", "knn", "twohand", "promp", "gmr", "whip",
    "probe", "slide",
)  # fmt: skip
EPISODE_STEPS = 400
HERE = Path(__file__).resolve().parent


@dataclass
class MeasureConfig:
    """Which settings to measure and on how many episodes."""

    families: tuple[str, ...] = FAMILIES  # families whose FAMILY_SETTINGS are measured
    settings: tuple[str, ...] = ()  # only these setting names; () = all
    episodes: int = 20  # episodes per distribution (ID and OOD) for settings that read no image
    camera_episodes: int = 10  # episodes per distribution for settings that read images
    seed: int = 0  # episode i starts from the cube pose drawn with SeedSequence([seed, i])
    num_envs: int = 10  # episodes simulated in lockstep
    detector_poses: int = 100  # poses per distribution on which the top-camera detector is checked; 0 = none
    out: str = str(HERE / "measured.json")  # JSON written at the end; "" = none

    def __post_init__(self) -> None:
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown:
            raise ValueError(f"families {unknown} are unknown; choose among {', '.join(FAMILIES)}.")
        if self.episodes < 1 or self.camera_episodes < 1 or self.num_envs < 1 or self.detector_poses < 0:
            raise ValueError("episodes, camera_episodes and num_envs must be >= 1, detector_poses >= 0.")


def initial_poses(distribution: str, n: int, seed: int = 0) -> np.ndarray:
    """(n, 7) cube poses of episodes 0..n-1 of `distribution` ("id" or "ood")."""
    rngs = [np.random.default_rng(np.random.SeedSequence([seed, i])) for i in range(n)]
    return np.stack([sample_object_poses("transfer_cube", distribution, rng, 1)[0] for rng in rngs])


def cameras_of(family: str, kwargs: dict) -> tuple[str, ...]:
    """The views a setting reads: none for the state-based families."""
    if family != "camera":
        return ()
    from families.camera import CameraKnobs

    knobs = {k: v for k, v in kwargs.items() if k not in ("image_height", "image_width")}
    return CameraKnobs(**knobs).cameras


def to_batch(observation: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Reference-world observation -> LeRobot policy batch (images (B,3,H,W) float in [0,1])."""
    batch = {}
    for key, value in observation.items():
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        if key.startswith("observation.images."):
            tensor = tensor.permute(0, 3, 1, 2).float().div_(255.0)  # (B,H,W,3) -> (B,3,H,W)
        batch[key] = tensor.float()
    return batch


def play(
    family: str, kwargs: dict, poses: np.ndarray, num_envs: int = 10, record: bool = False
) -> list[dict]:
    """Play one setting from each initial pose; per episode: success, first success step, max reward.

    With `record`, each episode also carries its `states` (T,14), `actions` (T,14) and `cubes` (T,7).
    """
    policy = importlib.import_module(f"families.{family}").make_policy(**kwargs)
    cameras = cameras_of(family, kwargs)
    render = bool(cameras)
    results = []
    for first in range(0, len(poses), num_envs):
        chunk = poses[first : first + num_envs]
        with AlohaWorld(WorldConfig(cameras=cameras, num_envs=len(chunk))) as world:
            obs = world.reset(chunk, render)
            policy.reset()
            rewards, states, actions, cubes = [], [], [], []
            for _ in range(EPISODE_STEPS):
                action = policy.select_action(to_batch(obs)).numpy()
                states.append(obs["observation.state"])
                cubes.append(obs["observation.environment_state"])
                step = world.step(action, render)
                actions.append(action)
                rewards.append(step.reward)
                obs = step.observation
        rewards = np.stack(rewards)  # (T, B)
        for b in range(len(chunk)):
            hit = np.nonzero(rewards[:, b] >= 4)[0]
            episode = {
                "success": bool(len(hit)),
                "success_step": int(hit[0]) if len(hit) else -1,
                "max_reward": float(rewards[:, b].max()),
            }
            if record:
                episode.update(states=np.stack(states)[:, b], actions=np.stack(actions)[:, b],
                               cubes=np.stack(cubes)[:, b])  # fmt: skip
            results.append(episode)
    return results


def all_settings(cfg: MeasureConfig) -> dict[str, tuple[str, dict]]:
    """{"family/name": (family, kwargs)} of every setting to measure."""
    out = {}
    for family in cfg.families:
        for name, kwargs in importlib.import_module(f"families.{family}").FAMILY_SETTINGS.items():
            if not cfg.settings or name in cfg.settings:
                out[f"{family}/{name}"] = (family, kwargs)
    return out


def detector_error(n: int, seed: int = 0) -> dict:
    """How far the top-camera detector puts the cube from its true centre, over n ID + n OOD poses.

    The cube is located in the 96x128 top image after it has landed (step 10), back-projected through the
    MJCF's camera onto the plane of the cube's centre, as `families.camera` does with no error knobs.
    """
    from families.camera import make_policy

    poses = np.concatenate([initial_poses("id", n, seed), initial_poses("ood", n, seed)])
    policy = make_policy()
    with AlohaWorld(WorldConfig(cameras=("top",), num_envs=len(poses))) as world:
        obs = world.reset(poses)
        policy.reset()
        for _ in range(11):  # the policy looks at step 10
            batch = to_batch({k: v for k, v in obs.items() if k != "observation.environment_state"})
            obs = world.step(policy.select_action(batch).numpy()).observation
    truth = obs["observation.environment_state"][:, :2]
    errors = np.array(
        [np.linalg.norm(p.estimates[0][:2] - xy) for p, xy in zip(policy.plans, truth, strict=True)]
    )
    mm = {
        q: round(float(np.quantile(errors, v)) * 1000, 2)
        for q, v in (("median", 0.5), ("p90", 0.9), ("max", 1.0))
    }
    return {
        "poses": len(poses),
        "mean_mm": round(float(errors.mean()) * 1000, 2),
        **{f"{q}_mm": v for q, v in mm.items()},
    }


def measure(cfg: MeasureConfig) -> dict:
    """Success per setting and distribution; also writes `cfg.out` (merged with what is there)."""
    torch.set_num_threads(1)
    rows = {}
    for key, (family, kwargs) in all_settings(cfg).items():
        n = cfg.camera_episodes if cameras_of(family, kwargs) else cfg.episodes
        start = time.perf_counter()
        row = {"family": family, "kwargs": kwargs, "episodes_per_distribution": n}
        for dist in ("id", "ood"):
            episodes = play(family, kwargs, initial_poses(dist, n, cfg.seed), cfg.num_envs)
            row[dist] = {
                "success_rate": float(np.mean([e["success"] for e in episodes])),
                "successes": int(sum(e["success"] for e in episodes)),
                "lifted_rate": float(np.mean([e["max_reward"] >= 2 for e in episodes])),
            }
        row["seconds"] = round(time.perf_counter() - start, 1)
        rows[key] = row
        print(f"{key:34s} ID {row['id']['successes']:2d}/{n:<2d} OOD {row['ood']['successes']:2d}/{n:<2d} "
              f"({row['seconds']:.0f} s)", flush=True)  # fmt: skip
    detector = detector_error(cfg.detector_poses, cfg.seed) if cfg.detector_poses else None
    if detector:
        print(f"top-camera detector over {detector['poses']} poses: mean {detector['mean_mm']} mm, "
              f"p90 {detector['p90_mm']} mm, max {detector['max_mm']} mm")  # fmt: skip
    if cfg.out:
        _write(cfg, rows, detector)
    return {"settings": rows, "detector": detector}


def _write(cfg: MeasureConfig, rows: dict, detector: dict | None) -> None:
    path = Path(cfg.out)
    old = json.loads(path.read_text()) if path.is_file() else {}
    payload = {
        "what": "real success of each held-out family setting in the MuJoCo reference world",
        "command": "python benchmarks/families/measure.py " + " ".join(sys.argv[1:]),
        "seed": cfg.seed,
        "machine": {"python": platform.python_version(), "torch": torch.__version__},
        "detector": detector or old.get("detector"),
        "settings": dict(sorted({**old.get("settings", {}), **rows}.items())),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.rename(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--families", default=",".join(FAMILIES), help="comma-separated subset of " + ", ".join(FAMILIES)
    )
    p.add_argument("--settings", default="", help="comma-separated setting names (default: all)")
    p.add_argument("--episodes", type=int, default=20, help="episodes per distribution, state-only settings")
    p.add_argument(
        "--camera-episodes", type=int, default=10, help="episodes per distribution, camera settings"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the initial cube poses")
    p.add_argument("--num-envs", type=int, default=10, help="episodes simulated in lockstep")
    p.add_argument("--detector-poses", type=int, default=100, help="poses per distribution for the detector")
    p.add_argument("--out", default=str(HERE / "measured.json"), help='JSON to write ("" = none)')
    a = p.parse_args()
    families = tuple(f for f in a.families.split(",") if f)
    settings = tuple(s for s in a.settings.split(",") if s)
    cfg = MeasureConfig(families=families, settings=settings, episodes=a.episodes, out=a.out,
                        camera_episodes=a.camera_episodes, seed=a.seed, num_envs=a.num_envs,
                        detector_poses=a.detector_poses)  # fmt: skip
    measure(cfg)


if __name__ == "__main__":
    main()
