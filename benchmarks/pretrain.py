"""Pretraining on other tasks and another robot, then adapting to transfer-cube with little data.

1. record (resumable) the datasets, 48x64 in every view: ALOHA insertion and PushT (the pretraining mixture:
   never transfer-cube), transfer-cube training episodes (the first N are the fine-tuning sets), transfer-cube
   footage whose actions are dropped (the action-free ablation) and held-out transfer-cube episodes (other
   seeds) for scoring,
2. pretrain one `small` model on [insertion, pusht] (`r2s2r-train --data.root=[...]`),
3. for each N: train from scratch on N transfer-cube episodes, and fine-tune the pretrained model on the same
   N (`--init_from`), with the same steps and batch (equal fine-tuning compute); at N=40 also both with the
   action-free transfer-cube footage added (`--data.action_free`),
4. replay the held-out episodes open loop (`r2s2r-eval-openloop`): PSNR gain over copy-last-frame at 1 s per
   view, object error at 1 s and 3 s, outcome agreement (judge and state head),
5. rank a small zoo on the state path (`r2s2r-rank --render=false`): five controllers of the `jointspace`
   family (benchmarks/families, written apart from the demonstrators that made every training set; real
   success 5-100 %), `--zoo_episodes` rendered logs each; Spearman and MAE against the logs.
Trainings run `--jobs` at a time, each a resumable `r2s2r-train` process; a re-run skips finished work.
Prints a table, writes benchmarks/results/pretrain.json and docs/figures/pretrain_*.png.

Which data each model saw is in the JSON (`runs.<name>.data`); no transfer-cube episode is in pretraining, no
held-out episode in any training set.

Usage:
    python benchmarks/pretrain.py                        # ~40 min recording + ~1.5 h training on 2 cores
    python benchmarks/pretrain.py --ns 20 40 --finetune_steps 200 --pretrain_steps 300    # a quick look
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.data.recorder import RecordConfig, record  # noqa: E402
from r2s2r.eval.openloop import OpenLoopConfig, evaluate_openloop  # noqa: E402
from r2s2r.eval.rank import RankConfig, rank  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import WorldConfig  # noqa: E402
from r2s2r.training.checkpoint import read_training_state  # noqa: E402

log = logging.getLogger("pretrain")
DEMONSTRATOR = "r2s2r.robots.demonstrators:make_demonstrator"
PUSHER = "r2s2r.robots.pusht:make_pusher"
VIEWS = ("top", "left_wrist", "right_wrist")
# name -> (task, policy, kwargs, default episodes, seed); seeds differ, so no two sets share an episode
DATASETS = {
    "insertion": ("insertion", DEMONSTRATOR, {"skill": "mix"}, 240, 200),
    "pusht": ("pusht", PUSHER, {"noise": 4.0}, 200, 300),
    "tc_train": ("transfer_cube", DEMONSTRATOR, {"skill": "mix"}, 160, 100),
    "tc_video": ("transfer_cube", DEMONSTRATOR, {"skill": "mix"}, 120, 500),
    "tc_test": ("transfer_cube", DEMONSTRATOR, {"skill": "mix"}, 40, 900),
    "tc_check": ("transfer_cube", DEMONSTRATOR, {"skill": "mix"}, 40, 901),
}
ZOO = {  # a held-out family: its controllers made no training data of any model here
    "jointspace_nominal": {},
    "jointspace_steep": {"pitch_deg": 70.0},
    "jointspace_skewed": {"yaw_error_deg": 30.0},
    "jointspace_off_axis": {"lateral_error": 0.015},
    "jointspace_calibration_bad": {"calib_std": 0.07},
}


def record_all(root: Path, args) -> dict:
    """Record (or finish) every dataset; returns what each holds."""
    sizes = {"tc_train": max(args.ns), "tc_test": args.eval_episodes}
    out = {}
    for name, (task, policy, kwargs, episodes, seed) in DATASETS.items():
        episodes = sizes.get(name, episodes)
        cameras = ("top",) if task == "pusht" else VIEWS
        world = WorldConfig(task=task, cameras=cameras, image_height=48, image_width=64, num_envs=4)
        cfg = RecordConfig(root=str(root / name), num_episodes=episodes, distribution="mixed", seed=seed,
                           world=world, policy=PolicyConfig(path=policy, kwargs=kwargs))  # fmt: skip
        summary = record(cfg)
        out[name] = {"task": task, "policy": policy, "kwargs": kwargs, "episodes": episodes, "seed": seed,
                     "success_rate": summary.successes / max(summary.num_episodes, 1)}  # fmt: skip
    return out


def record_zoo(root: Path, args) -> dict:
    """Rendered logs of the zoo's controllers (resumable), at the training sets' size."""
    out = {}
    for name, kwargs in ZOO.items():
        world = WorldConfig(cameras=VIEWS, image_height=48, image_width=64, num_envs=4)
        policy = PolicyConfig(path="families.jointspace:make_policy", kwargs=kwargs)
        cfg = RecordConfig(root=str(root / "zoo" / name), num_episodes=args.zoo_episodes,
                           distribution="mixed", seed=700, world=world, policy=policy)  # fmt: skip
        summary = record(cfg)
        out[name] = {"kwargs": kwargs, "real_success_rate": summary.successes / max(summary.num_episodes, 1)}
    return out


def rank_zoo(root: Path, name: str) -> dict:
    """Spearman, pairwise accuracy and MAE of run `name`'s state path on the zoo (cached)."""
    cached = root / "runs" / name / "rank_zoo.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    cfg = RankConfig(checkpoint=str(root / "runs" / name / "checkpoints" / "last" / "pretrained_model"),
                     logs_dir=str(root / "zoo"), render=False, samples_per_start=4, batch_size=32,
                     output_dir=str(root / "runs" / name / "rank"), report=False, n_boot=200)  # fmt: skip
    metrics = rank(cfg)["metrics"]["all"]
    out = {"spearman": metrics["spearman"]["value"], "pairwise": metrics["pairwise_accuracy"]["all"]["value"],
           "mae_points": metrics["calibration"]["mae_points"]}  # fmt: skip
    cached.write_text(json.dumps(out))
    return out


def runs(root: Path, args) -> dict[str, dict]:
    """Every training run: its flags, and which run it starts from."""
    data = root
    pre_dir = root / "runs" / "pretrained"
    pretrained = str(pre_dir / "checkpoints" / "last" / "pretrained_model")
    plan = {"pretrained": {"flags": [f"--data.root=[{data / 'insertion'},{data / 'pusht'}]"],
                           "steps": args.pretrain_steps, "after": None}}  # fmt: skip
    for n in args.ns:
        episodes = f"--data.episodes=[{','.join(str(i) for i in range(n))}]"
        tc = f"--data.root={data / 'tc_train'}"
        plan[f"scratch_{n}"] = {"flags": [tc, episodes], "steps": args.finetune_steps, "after": None}
        plan[f"pretrained_{n}"] = {"flags": [tc, episodes, f"--init_from={pretrained}"],
                                   "steps": args.finetune_steps, "after": "pretrained"}  # fmt: skip
    if args.video_n in args.ns and args.video_share:  # the labelled clips keep their steps: more in all
        n, share = args.video_n, args.video_share
        episodes = f"--data.episodes=[{','.join(str(i) for i in range(n))}]"
        mix = [f"--data.root=[{data / 'tc_train'},{data / 'tc_video'}]", episodes,
               f"--data.action_free=[{data / 'tc_video'}]", f"--data.action_free_share={share}"]  # fmt: skip
        steps = round(args.finetune_steps / (1 - share))
        plan[f"scratch_{n}_video_share"] = {"flags": mix, "steps": steps, "after": None}
        plan[f"pretrained_{n}_video_share"] = {"flags": [*mix, f"--init_from={pretrained}"],
                                               "steps": steps, "after": "pretrained"}  # fmt: skip
    if args.video_n in args.ns:
        n = args.video_n
        episodes = f"--data.episodes=[{','.join(str(i) for i in range(n))}]"
        mix = [f"--data.root=[{data / 'tc_train'},{data / 'tc_video'}]", episodes,
               f"--data.action_free=[{data / 'tc_video'}]"]  # fmt: skip
        plan[f"scratch_{n}_video"] = {"flags": mix, "steps": args.finetune_steps, "after": None}
        plan[f"pretrained_{n}_video"] = {"flags": [*mix, f"--init_from={pretrained}"],
                                         "steps": args.finetune_steps, "after": "pretrained"}  # fmt: skip
    return plan


def finished(out: Path, steps: int) -> bool:
    last = out / "checkpoints" / "last"
    return last.exists() and read_training_state(last)["step"] >= steps


def train_all(root: Path, plan: dict[str, dict], args) -> dict[str, float]:
    """Run the trainings `args.jobs` at a time (a run waits for the one it starts from); returns seconds."""
    todo, running, seconds = list(plan), {}, {}
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, args.threads)), "HF_HUB_OFFLINE": "1"}
    while todo or running:
        for name in list(todo):
            if len(running) >= args.jobs:
                break
            spec = plan[name]
            if spec["after"] and (spec["after"] in running or spec["after"] in todo):
                continue
            out = root / "runs" / name
            todo.remove(name)
            if finished(out, spec["steps"]):
                continue
            cmd = [sys.executable, "-m", "r2s2r.scripts.train", "--preset=small", f"--output_dir={out}",
                   f"--steps={spec['steps']}", f"--batch_size={args.batch_size}", "--save_every=100",
                   "--log_every=50", "--num_workers=0", f"--resume={(out / 'checkpoints' / 'last').exists()}",
                   *spec["flags"]]  # fmt: skip
            out.mkdir(parents=True, exist_ok=True)
            log.info("training %s", name)
            with open(out / "train.log", "a") as logfile:
                running[name] = (subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT, env=env),
                                 time.perf_counter())  # fmt: skip
        for name, (proc, tic) in list(running.items()):
            if proc.poll() is not None:
                del running[name]
                if proc.returncode:
                    raise RuntimeError(
                        f"training {name} failed (exit {proc.returncode}): {root}/runs/{name}/train.log"
                    )
                seconds[name] = time.perf_counter() - tic
        time.sleep(2)
    return seconds


def evaluate(root: Path, name: str, args, data: str = "tc_test") -> dict:
    """Open-loop summary of run `name` on held-out transfer-cube episodes `data` (cached in its folder)."""
    cached = root / "runs" / name / ("openloop.json" if data == "tc_test" else f"openloop_{data}.json")
    if cached.is_file():
        return json.loads(cached.read_text())
    run = root / "runs" / name
    cfg = OpenLoopConfig(checkpoint=str(run / "checkpoints" / "last" / "pretrained_model"),
                         horizons=(1.0, 3.0), videos=2, output_dir=str(run / f"openloop_{data}"),
                         batch_size=8)  # fmt: skip
    cfg.data.root = str(root / data)
    summary = evaluate_openloop(cfg)["summary"]
    cached.write_text(json.dumps(summary))
    return summary


def check_share(root: Path, plan: dict, args) -> dict | None:
    """The action-free share was chosen after the first ablation was scored on tc_test: its runs, their
    baselines and the largest N are scored again on `tc_check`, episodes no decision has seen."""
    names = [n for n in plan if n.endswith("_video_share")]
    if not names:
        return None
    n, most = args.video_n, max(args.ns)
    names = [f"scratch_{n}", f"pretrained_{n}", f"scratch_{most}", f"pretrained_{most}", f"scratch_{n}_video",
             f"pretrained_{n}_video", *names]  # fmt: skip
    out = {name: figures(evaluate(root, name, args, "tc_check")) for name in names}
    header = ["run", "dB top", "dB left", "dB right", "dB mean", "obj 3s cm", "agree head"]
    keys = ["psnr_gain_1s_top", "psnr_gain_1s_left_wrist", "psnr_gain_1s_right_wrist", "psnr_gain_1s_mean",
            "object_error_3s_cm", "head_outcome_agreement"]  # fmt: skip
    print_table("action-free ablation on tc_check (40 more held-out episodes)", header,
                [[name, *[out[name][k] for k in keys]] for name in names])  # fmt: skip
    return out


def figures(summary: dict) -> dict:
    """The benchmark's figures from an open-loop summary (ID and OOD pooled by episode count)."""
    parts = [summary[k] for k in ("id", "ood") if k in summary] or [summary["all"]]
    weights = [p["episodes"] for p in parts]

    def pooled(get):
        values = [(get(p), w) for p, w in zip(parts, weights, strict=True) if get(p) is not None]
        return sum(v * w for v, w in values) / sum(w for _, w in values) if values else None

    out = {}
    for view in VIEWS:
        out[f"psnr_gain_1s_{view}"] = pooled(
            lambda p, v=view: p["model"][v]["1s"]["psnr"] - p["copy_last"][v]["1s"]["psnr"]
        )
    out["psnr_gain_1s_mean"] = sum(out[f"psnr_gain_1s_{v}"] for v in VIEWS) / len(VIEWS)
    out["object_error_1s_cm"] = 100 * pooled(lambda p: p["object_error_m"]["1s"])
    out["object_error_3s_cm"] = 100 * pooled(lambda p: p["object_error_m"]["3s"])
    out["outcome_agreement"] = pooled(lambda p: p["outcome_agreement"])
    out["head_outcome_agreement"] = pooled(lambda p: p["head_outcome_agreement"])
    return out


def plot(results: dict, ns: list[int], path_prefix: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for key, label in (("psnr_gain_1s_mean", "dB over copy-last, 1 s"),
                       ("object_error_3s_cm", "object error at 3 s (cm)"),
                       ("head_outcome_agreement", "outcome agreement (head)"),
                       ("zoo_spearman", "zoo Spearman (state path)")):  # fmt: skip
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for kind, style in (("scratch", "o--"), ("pretrained", "s-")):
            ys = [results.get(f"{kind}_{n}", {}).get(key) for n in ns]
            ax.plot(ns, ys, style, label=kind)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("transfer-cube fine-tuning episodes N")
        ax.set_ylabel(label)
        ax.legend()
        fig.tight_layout()
        path = Path(f"{path_prefix}_{key}.png")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default="outputs/pretrain")
    parser.add_argument("--ns", type=int, nargs="+", default=[20, 40, 80, 160])
    parser.add_argument("--video_n", type=int, default=40, help="N of the action-free ablation")
    parser.add_argument("--video_share", type=float, default=0.5,
                        help="also train the ablation with this share of action-free clips per batch, "
                        "for steps / (1 - share) steps (labelled clips keep theirs); 0: none")  # fmt: skip
    parser.add_argument("--eval_episodes", type=int, default=40)
    parser.add_argument("--zoo_episodes", type=int, default=16, help="logs per zoo policy; 0 skips the zoo")
    parser.add_argument("--pretrain_steps", type=int, default=2000)
    parser.add_argument("--finetune_steps", type=int, default=800)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2, help="trainings at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per training")
    parser.add_argument("--skip_record", action="store_true",
                        help="train first and finish (or take stock of) the recordings after: for datasets "
                        "recorded by a separate call running beside the trainings")  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/pretrain.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", force=True)
    root = Path(args.root)
    payload = {"benchmark": "pretrain", "machine": machine_info(), "args": vars(args)}
    tic = time.perf_counter()
    if not args.skip_record:
        payload["datasets"] = record_all(root, args)
        payload["zoo"] = record_zoo(root, args) if args.zoo_episodes else None
    payload["record_seconds"] = time.perf_counter() - tic
    plan = runs(root, args)
    payload["train_seconds"] = train_all(root, plan, args)
    if args.skip_record:  # recorded by an earlier call (or in parallel with the trainings): take stock now
        payload["datasets"] = record_all(root, args)
        payload["zoo"] = record_zoo(root, args) if args.zoo_episodes else None
    payload["runs"] = {}
    for name, spec in plan.items():
        if name == "pretrained":
            payload["runs"][name] = {"data": spec["flags"], "steps": spec["steps"]}
            continue
        tic = time.perf_counter()
        payload["runs"][name] = {"data": spec["flags"], "steps": spec["steps"],
                                 "openloop": evaluate(root, name, args),
                                 "zoo": rank_zoo(root, name) if args.zoo_episodes else None,
                                 "eval_seconds": time.perf_counter() - tic}  # fmt: skip
    results = {n: {**figures(r["openloop"]), **{f"zoo_{k}": v for k, v in (r["zoo"] or {}).items()}}
               for n, r in payload["runs"].items() if "openloop" in r}  # fmt: skip
    payload["check"] = check_share(root, plan, args)
    payload["figures"] = results
    payload["kept_out_of"] = {
        "tc_test": "every training set (seed 900; scored only)",
        "tc_check": "every training set and every decision (seed 901): scores the action-free share, which "
        "was chosen after the first action-free runs were scored on tc_test",
        "transfer_cube": "pretraining (the pretrained model saw insertion and PushT only)",
        "jointspace zoo": "every training set and every design decision of pretraining (its controllers were "
        "written for the generalization benchmark; none recorded data any model here learnt from)",
    }
    payload["plots"] = plot(results, args.ns, Path("docs/figures/pretrain"))
    report(results)
    write_json(args.out, payload)


def report(results: dict) -> None:
    cols = ["psnr_gain_1s_top", "psnr_gain_1s_left_wrist", "psnr_gain_1s_right_wrist", "object_error_1s_cm",
            "object_error_3s_cm", "outcome_agreement", "head_outcome_agreement", "zoo_spearman",
            "zoo_mae_points"]  # fmt: skip
    rows = [[name, *[results[name].get(c) for c in cols]] for name in results]
    header = ["run", "dB top", "dB left", "dB right", "obj 1s cm", "obj 3s cm", "agree judge", "agree head",
              "zoo Spearman", "zoo MAE"]  # fmt: skip
    print_table("open loop on held-out transfer-cube (dB: PSNR gain over copy-last at 1 s)", header, rows)


if __name__ == "__main__":
    main()
