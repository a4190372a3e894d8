"""Rank a zoo of policy checkpoints in the world model and compare with their reference-world logs.

The realistic case, end to end:
  1. the zoo: scripted demonstrators at several skill settings (one family) and LeRobot ACT checkpoints
     saved along one training run on demonstrator data (the learned family, `benchmarks/zoo_act.py`);
  2. "hardware logs": each policy recorded in the reference world, `--per_split` ID + `--per_split` OOD
     episodes, as LeRobot datasets (new seeds: none of these episodes is in the world model's training data);
  3. the noise floor: a second, independent reference-world run of every policy (new seeds, not rendered),
     ranked against the logs with the same statistics;
  4. `r2s2r-rank` in the world model trained by `benchmarks/train_small.py`, from the logs' episode starts,
     on the state head's fast path (`--samples` imagined episodes per start) and, with `--video_samples`,
     on the video path with the judge reading imagined frames;
  5. the ranking table and metrics vs the targets (Spearman >= 0.9 ID and OOD, pairwise accuracy >= 90 %,
     calibration MAE <= 10 points), the HTML report, and benchmarks/results/rank.json.

Every stage resumes: recordings and imagined evaluations continue where they stopped.

`--camera` ranks camera-only policies instead, on the video path alone: the `camera` family of
`benchmarks/families/camera.py` (10 controllers that find the cube in the top image and never read its
pose, written apart from the model), logged and re-run exactly as `benchmarks/generalization.py` does
(same seeds: its logs are reused when `--output_dir` is its own), against a second real run, with the
imagined episodes per minute. `--frames head` draws the imagined frames from the state head's state.

Usage:
    python benchmarks/rank.py                               # 50 + 50 logged episodes per policy (hours)
    python benchmarks/rank.py --per_split 10 --samples 10   # the CPU-sized run
    python benchmarks/rank.py --state_only --world_model DIR  # state-only logs, state-head path (minutes)
    python benchmarks/rank.py --camera --frames head --per_split 5 --floor_per_split 5 \
        --world_model assets/world_model_coverage --output_dir outputs/bench/generalization \
        --out benchmarks/results/rank_camera.json   # camera-only policies, video path (~30 min on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.data.recorder import RecordConfig, evaluate, record  # noqa: E402
from r2s2r.eval.rank import RankConfig, rank, ranking_metrics, success_rates  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import WorldConfig  # noqa: E402

DEMONSTRATOR = "r2s2r.robots.demonstrators:make_demonstrator"
# The scripted family, from clean to clumsy (success over 20 mixed episodes, seed 11, in brackets):
SCRIPTED = {
    "nominal": {"skill": "nominal"},  # (100 %)
    "noisy": {"skill": "noisy"},  # (~90 %)
    "noisy_noretry": {"skill": "noisy", "max_retries": 0},  # (80 %)
    "wobbly": {"skill": "nominal", "joint_noise": 0.03},  # (70 %)
    "offset_y": {"skill": "nominal", "grasp_offset_y": 0.012, "max_retries": 0},  # (65 %)
    "retrying_noretry": {"skill": "retrying", "max_retries": 0},  # (60 %)
    "sloppy": {"skill": "sloppy"},  # (~30 %)
}


def zoo(act_dir: Path, act_steps: list[int]) -> dict[str, dict]:
    """name -> {path, kwargs, family}: the scripted family and the ACT checkpoints of `act_steps`."""
    out = {name: {"path": DEMONSTRATOR, "kwargs": kw, "family": "scripted"} for name, kw in SCRIPTED.items()}
    for step in act_steps:
        ckpt = act_dir / f"step_{step}"
        if not (ckpt / "config.json").is_file():
            raise FileNotFoundError(f"no ACT checkpoint {ckpt}; train it with benchmarks/zoo_act.py first.")
        out[f"act_{ckpt.name}"] = {"path": str(ckpt.resolve()), "kwargs": {}, "family": "act"}
    return out


def record_logs(policies: dict, out: Path, per_split: int, workers: int, state_only: bool = False) -> float:
    """Each policy's 'hardware logs': per_split ID + per_split OOD rendered episodes, as a LeRobot dataset
    (without any camera when `state_only`)."""
    start = time.perf_counter()
    world = WorldConfig(num_envs=10, cameras=()) if state_only else WorldConfig(num_envs=5)
    for i, (name, spec) in enumerate(policies.items()):
        cfg = RecordConfig(
            root=str(out / "logs" / name), num_episodes=2 * per_split, distribution="mixed", seed=3000 + i,
            workers=workers, world=world,
            policy=PolicyConfig(path=spec["path"], kwargs=spec["kwargs"]),
        )  # fmt: skip
        summary = record(cfg)
        print(f"logs {name}: {summary.successes}/{summary.num_episodes} succeeded", flush=True)
    return time.perf_counter() - start


def camera_zoo(out: Path, args) -> tuple[dict, dict, float, float]:
    """The `camera` family, its logs (under out/logs/camera/) and its second real run, made by
    generalization.py's own helpers and seeds: (policies, floor rates, logs seconds, floor seconds)."""
    from generalization import held_out_zoo
    from generalization import record_logs as record_family
    from generalization import second_run as family_second_run

    policies = held_out_zoo(("camera",))
    start = time.perf_counter()
    record_family(policies, out, args.per_split, args.workers)
    record_s, start = time.perf_counter() - start, time.perf_counter()
    floor_rates = family_second_run(policies, out, args.floor_per_split, args.workers)
    return policies, floor_rates, record_s, time.perf_counter() - start


def cached_second_run(out: Path, policies: dict, per_split: int) -> tuple[dict[str, dict], float]:
    """`second_run`, kept in out/second_run.json for re-runs of the ranking (the same seeds give the same
    run): (rates, the seconds the run took)."""
    start = time.perf_counter()
    floor_file = out / "second_run.json"
    key = {"policies": policies, "per_split": per_split}
    cached = json.loads(floor_file.read_text()) if floor_file.is_file() else {}
    if cached.get("key") == json.loads(json.dumps(key)):
        return cached["rates"], cached["seconds"]
    rates = second_run(policies, per_split)
    seconds = time.perf_counter() - start
    floor_file.write_text(json.dumps({"key": key, "rates": rates, "seconds": seconds}))
    return rates, seconds


def second_run(policies: dict, per_split: int) -> dict[str, dict]:
    """An independent reference-world run of every policy (new seeds, no rendering): real rates per split."""
    rates = {}
    for i, (name, spec) in enumerate(policies.items()):
        cfg = RecordConfig(
            num_episodes=2 * per_split, distribution="mixed", seed=7000 + i,
            world=WorldConfig(num_envs=10, cameras=()),
            policy=PolicyConfig(path=spec["path"], kwargs=spec["kwargs"]),
        )  # fmt: skip
        labels = evaluate(cfg, render=False)
        rates[name] = success_rates(
            [{"split": e["distribution"], "real_success": e["success"]} for e in labels], "real_success"
        )
    return rates


def table(payload: dict) -> list[list]:
    rows = []
    for p in sorted(payload["policies"], key=lambda p: -p["real"]["all"]["rate"]):
        r, i = p["real"], p["imagined"]
        rows.append([
            p["name"], p["family"],
            *(f"{100 * r[s]['rate']:.0f} / {100 * i[s]['rate']:.0f}" for s in ("all", "id", "ood")),
        ])  # fmt: skip
    return rows


def _both(ours, theirs) -> str:
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    return f"{fmt(ours)} ({fmt(theirs)})"


def metric_rows(metrics: dict, floor: dict | None) -> list[list]:
    """Per split: our statistic (the noise floor's in brackets)."""
    getters = [
        lambda x: x["spearman"]["value"], lambda x: x["kendall"]["value"], lambda x: x["pearson"]["value"],
        lambda x: x["mmrv"], lambda x: x["pairwise_accuracy"]["all"]["value"],
        lambda x: x["pairwise_accuracy"]["gap_15"]["value"], lambda x: x["calibration"]["mae_points"],
    ]  # fmt: skip
    rows = []
    for split, m in metrics.items():
        f = (floor or {}).get(split)
        rows.append([split, m["n"], *(_both(get(m), get(f) if f else None) for get in getters)])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per_split", type=int, default=50, help="logged ID (and OOD) episodes per policy")
    parser.add_argument(
        "--samples", type=int, default=20, help="imagined episodes per start, state-head path"
    )
    parser.add_argument("--video_samples", type=int, default=1, help="per start on the video path; 0 = skip")
    parser.add_argument("--sampling_steps", type=int, default=1, help="denoising steps per imagined frame")
    parser.add_argument(
        "--world_model", default="outputs/bench/train_small/checkpoints/last/pretrained_model"
    )
    parser.add_argument("--act_dir", default="outputs/bench/zoo/act", help="ACT checkpoints (zoo_act.py)")
    parser.add_argument(
        "--act_steps", default="1000,2000,3000,8000", help="which ACT checkpoints join the zoo"
    )
    parser.add_argument("--floor_per_split", type=int, default=50, help="episodes per split, second real run")
    parser.add_argument("--output_dir", default="outputs/bench/rank")
    parser.add_argument("--workers", type=int, default=2, help="recording processes and Ray workers")
    parser.add_argument("--seed", type=int, default=0, help="imagination noise (logs keep theirs)")
    parser.add_argument(
        "--state_only", action="store_true",
        help="logs without cameras (proprio, actions, cube pose), ranked on the state-head path only: "
        "needs a world model whose head reads no cameras (r2s2r-refine-head --cameras=false)",
    )  # fmt: skip
    parser.add_argument(
        "--camera", action="store_true",
        help="rank the camera-only `camera` family instead, on the video path only (see above)",
    )  # fmt: skip
    parser.add_argument(
        "--frames", default="video", choices=("video", "head"),
        help="video path: frames sampled by the video model, or drawn from the state head's state",
    )  # fmt: skip
    parser.add_argument(
        "--out", default=None, help="where the JSON goes (results/rank.json, rank_camera.json)"
    )
    args = parser.parse_args()
    name = "rank_camera.json" if args.camera else "rank.json"
    args.out = args.out or str(Path(__file__).parent / "results" / name)
    if args.camera and (args.state_only or args.video_samples < 1):
        sys.exit(
            "--camera ranks rendered logs on the video path: drop --state_only, keep --video_samples >= 1"
        )
    if args.state_only:
        args.video_samples = 0  # no frames in the logs to start the video model from
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.camera:
        policies, floor_rates, record_s, floor_s = camera_zoo(out, args)
        logs, manifest, ranked_in = out / "logs" / "camera", out / "zoo" / "camera.json", out / "rank_py"
    else:
        policies = zoo(Path(args.act_dir), [int(s) for s in args.act_steps.split(",")])
        logs, manifest, ranked_in = out / "logs", out / "zoo.json", out
        record_s = record_logs(policies, out, args.per_split, args.workers, args.state_only)
        floor_rates, floor_s = cached_second_run(out, policies, args.floor_per_split)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(policies, indent=1))

    results = {}
    paths = [("state_head", False, args.samples)] * (not args.camera) + (
        [("video", True, args.video_samples)] * bool(args.video_samples)
    )
    for label, render, samples in paths:
        start = time.perf_counter()
        payload = rank(
            RankConfig(
                checkpoint=args.world_model, logs_dir=str(logs), policies=str(manifest),
                samples_per_start=samples, render=render, batch_size=20 if not args.camera else 16,
                workers=args.workers, sampling_steps=args.sampling_steps if render else 0,
                output_dir=str(ranked_in / label), videos=2 if render else 0, seed=args.seed,
                frames=args.frames if render else "video",
            )
        )  # fmt: skip
        seconds = time.perf_counter() - start
        if not payload["policies"]:
            sys.exit(f"{label}: no policy was ranked; the first error: {payload['failed'][0]['error']}")
        real = {p["name"]: p["real"] for p in payload["policies"]}
        floor = ranking_metrics(real, {n: floor_rates[n] for n in real}, 2000, 0)
        payload["noise_floor"] = floor
        (ranked_in / label / "rank.json").write_text(json.dumps(payload, indent=1))
        from r2s2r.eval.report import write_report

        report = write_report(ranked_in / label / "rank.json")
        episodes = sum(p["imagined"]["all"]["trials"] for p in payload["policies"])
        print_table(
            f"{label}: real / imagined success (%), {samples} imagined per logged start",
            ["policy", "family", "all", "ID", "OOD"], table(payload),
        )  # fmt: skip
        print_table(
            f"{label}: ranking vs the logs (in brackets: a second real run vs the logs, the noise floor)",
            ["split", "n", "Spearman", "Kendall", "Pearson", "MMRV", "pairwise", "pairs >=15pt", "MAE"],
            metric_rows(payload["metrics"], floor),
        )  # fmt: skip
        print(
            f"{label}: {episodes} imagined episodes in {seconds:.0f} s "
            f"({60 * episodes / seconds:.1f} a minute); report {report}"
        )
        results[label] = {
            "seconds": seconds,
            "imagined_episodes": episodes,
            "episodes_per_s": episodes / seconds,
            "failed": payload["failed"],
            "metrics": payload["metrics"],
            "noise_floor": floor,
            "policies": [
                {k: p[k] for k in ("name", "family", "real", "imagined")} for p in payload["policies"]
            ],
        }
    write_json(
        Path(args.out),
        {
            "machine": machine_info(),
            "settings": vars(args),
            "record_logs_s": record_s,
            "second_run_s": floor_s,
            "zoo": policies,
            "kept_out_of": kept_out_of(args.camera),
            "results": results,
            "targets": {"spearman": 0.9, "pairwise_accuracy": 0.9, "calibration_mae_points": 10},
        },
    )


def kept_out_of(camera: bool) -> dict[str, str]:
    """What each ranked family was kept out of (generalization.py's account for `camera`)."""
    if camera:
        from generalization import KEPT_OUT_OF

        return {"camera": KEPT_OUT_OF["camera"]}
    return {
        "scripted": "nothing: the models' data and the state head's rules came from these demonstrators",
        "act": "nothing: other checkpoints of the same ACT run are in the state head's refinement data",
    }


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
