"""Reference-world recording and reading: how fast, and how good the demonstrators are.

Prints three tables and writes JSON (machine, versions, figures):
  1. demonstrator success rate per skill preset, ID and OOD (>= 100 episodes each by default),
  2. recording throughput: rendered three-view episodes per minute written as a LeRobot dataset,
  3. reader throughput: training clips per second, decord vs LeRobot's decoder, in-process and with
     DataLoader workers.

Usage:
    python benchmarks/record.py                        # the full run (about 15 minutes on 2 cores)
    python benchmarks/record.py --success_episodes 20 --record_episodes 4   # a quick look
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.data.reader import ClipConfig, ClipDataset  # noqa: E402
from r2s2r.data.recorder import RecordConfig, evaluate, record  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import WorldConfig  # noqa: E402
from r2s2r.robots.demonstrators import PRESETS  # noqa: E402

DEMONSTRATOR = "r2s2r.robots.demonstrators:make_demonstrator"


def success_job(skill: str, distribution: str, episodes: int, seed: int) -> dict:
    """Success of one preset on `episodes` episodes: physics and policy only (demonstrators do not look)."""
    cfg = RecordConfig(
        num_episodes=episodes,
        distribution=distribution,
        seed=seed,
        world=WorldConfig(num_envs=10, cameras=()),
        policy=PolicyConfig(path=DEMONSTRATOR, kwargs={"skill": skill}),
    )
    start = time.perf_counter()
    labels = evaluate(cfg, render=False)
    seconds = time.perf_counter() - start
    success = np.array([e["success"] for e in labels])
    steps = [e["success_step"] for e in labels if e["success"]]
    return {
        "skill": skill,
        "distribution": distribution,
        "episodes": episodes,
        "success_rate": float(success.mean()),
        "successes": int(success.sum()),
        "success_at_end_rate": float(np.mean([e["success_at_end"] for e in labels])),
        "recovered_rate": float(np.mean([e["recovered"] for e in labels])),
        "median_success_step": float(np.median(steps)) if steps else None,
        "max_reward_histogram": np.bincount([int(e["max_reward"]) for e in labels], minlength=5).tolist(),
        "seconds": seconds,
        "seconds_per_episode": seconds / episodes,
    }


def bench_success(episodes: int, seed: int, workers: int) -> list[dict]:
    jobs = [(skill, dist) for skill in PRESETS for dist in ("id", "ood")]
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(success_job, skill, dist, episodes, seed) for skill, dist in jobs]
        results = [f.result() for f in futures]
    rows = [
        [r["skill"], r["distribution"], r["episodes"], f"{100 * r['success_rate']:.1f}",
         f"{100 * r['success_at_end_rate']:.1f}", f"{100 * r['recovered_rate']:.1f}",
         r["median_success_step"], str(r["max_reward_histogram"]), r["seconds_per_episode"]]
        for r in results
    ]  # fmt: skip
    print_table(
        "Demonstrator success in the reference world (transfer_cube, 400 steps; success = top reward at any "
        "step, as gym-aloha; held = still at the top reward at the last step; recovered = success after the "
        "object was lost for >= 1 s: a new attempt)",
        [
            "skill",
            "dist",
            "episodes",
            "success %",
            "held %",
            "recovered %",
            "median step",
            "max-reward hist 0..4",
            "s/episode (2 processes)",
        ],
        rows,
    )
    return results


def bench_recording(root: Path, episodes: int, workers: tuple[int, ...]) -> list[dict]:
    """Rendered three-view episodes written per minute, in this process and with worker processes."""
    results = []
    for n_workers in workers:
        cfg = RecordConfig(
            root=str(root / f"workers{n_workers}"), num_episodes=episodes, distribution="mixed",
            workers=n_workers, world=WorldConfig(num_envs=4),
        )  # fmt: skip
        summary = record(cfg)
        size_mb = sum(p.stat().st_size for p in Path(cfg.root).rglob("*") if p.is_file()) / 1e6
        results.append({
            "workers": n_workers, "episodes": episodes, "episode_length": cfg.episode_length,
            "cameras": list(cfg.world.cameras), "image_size": [cfg.world.image_height, cfg.world.image_width],
            "vcodec": cfg.vcodec, "seconds": summary.seconds,
            "episodes_per_minute": 60 * episodes / summary.seconds,
            "frames_per_second": episodes * cfg.episode_length / summary.seconds, "dataset_mb": size_mb,
            "successes": summary.successes,
        })  # fmt: skip
    print_table(
        "Recording (nominal demonstrator, 3 views 96x128 rendered, h264, LeRobot writer)",
        ["workers", "episodes", "episodes/min", "frames/s", "MB", "successes"],
        [[r["workers"], r["episodes"], r["episodes_per_minute"], r["frames_per_second"], r["dataset_mb"],
          r["successes"]] for r in results],
    )  # fmt: skip
    return results


def bench_reader(root: Path, samples: int, seed: int) -> list[dict]:
    import torch

    results = []
    rng = np.random.default_rng(seed)
    for decoder in ("decord", "lerobot"):
        ds = ClipDataset(ClipConfig(root=str(root), decoder=decoder))
        indices = rng.integers(0, len(ds), samples).tolist()
        ds[indices[0]]  # open the files
        start = time.perf_counter()
        for i in indices:
            ds[i]
        in_process = samples / (time.perf_counter() - start)
        loader = torch.utils.data.DataLoader(
            torch.utils.data.Subset(ds, indices), batch_size=8, num_workers=2, shuffle=False
        )
        start = time.perf_counter()
        n = sum(len(batch["episode_index"]) for batch in loader)
        with_workers = n / (time.perf_counter() - start)
        results.append({
            "decoder": decoder, "clip_frames": ds.cfg.clip_length, "views": len(ds.camera_keys),
            "frame_rate": ds.cfg.frame_rate, "samples_per_s": in_process,
            "samples_per_s_2_workers": with_workers,
        })  # fmt: skip
    print_table(
        "Reader: clips of 3 frames x 3 views at 10 Hz (2 context + 1 target), action chunks of 5",
        ["decoder", "samples/s (1 process)", "samples/s (DataLoader, 2 workers, incl. start-up)"],
        [[r["decoder"], r["samples_per_s"], r["samples_per_s_2_workers"]] for r in results],
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--success_episodes", type=int, default=100, help="episodes per preset and distribution"
    )
    parser.add_argument("--record_episodes", type=int, default=8, help="rendered episodes to record and time")
    parser.add_argument("--reader_samples", type=int, default=400, help="clips to read per decoder")
    parser.add_argument("--workers", type=int, default=2, help="processes for the success runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/record.json")
    args = parser.parse_args()

    payload = {"benchmark": "record", "machine": machine_info(), "args": vars(args)}
    payload["demonstrator_success"] = bench_success(args.success_episodes, args.seed, args.workers)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "bench"
        payload["recording"] = bench_recording(root, args.record_episodes, (0, 2))
        payload["reader"] = bench_reader(root / "workers2", args.reader_samples, args.seed)
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
