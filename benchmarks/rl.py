"""RL in imagination, judged in the reference world: from scratch, and fine-tuning a weak policy.

1. The world model: the committed small model (`--checkpoint`), whose state-dynamics head is first refined
   on the same recordings it was trained on (`training/head.py`, `--head_steps`); the head's open-loop
   object error and outcome agreement on the held-out recordings are printed before and after.
2. (a) **from scratch**: `r2s2r-rl --init=scratch`: a policy that reads proprio and the cube pose the
   world model sees in the cameras, trained only in imagination, from the recordings' episode starts.
3. (b) **fine-tuning a weak policy**: `r2s2r-rl --init=residual --base.kwargs='{skill: sloppy}'`: a
   residual actor on the sloppy scripted demonstrator (35 % in the search benchmark), trained only in
   imagination.
4. Every policy plays `--episodes` reference-world episodes (ID and OOD alternating, initial poses from
   `--eval_seed`, which no recording used) before training, every `--eval_every` rounds and after the last:
   success with Wilson intervals, and the imagined success of the same policy beside it (the gap); before
   and after training, 8 imagined episodes re-played with the video model and the judge say whether the
   head's verdict holds up in the full world model.
5. With `--confirm_seed`, the policy before training and the final one also play `--episodes` episodes from
   that seed's poses: a check on poses that no training decision (rounds, charges) was looked at on.

No reference-world step is used for training: the recordings are the world model's training data
(outputs/bench/data/train, `benchmarks/train_small.py` records them if missing). Prints a table and writes
benchmarks/results/rl.json. Targets: (a) report the success reached; (b) >= +20 points.

Each run resumes where it stopped (`r2s2r-rl` checkpoints every round).

Usage:
    python benchmarks/rl.py                       # ~45 min on 2 CPU cores
    python benchmarks/rl.py --rounds_scratch 4 --rounds_finetune 2 --episodes 20   # a quick look
    # the +32-point fine-tuning (docs/benchmarks.md, "RL in imagination"; benchmarks/results/rl.json),
    # after benchmarks/state_only.sh all_label:
    python benchmarks/rl.py --world_model outputs/bench/blind/all_label --observation state \
        --settings finetune_sloppy --finetune_envs 128 --uncertainty_weight 0 --residual_weight 0.05 \
        --rounds_finetune 10 --confirm_seed 1 --output_dir outputs/bench/rl_resid10
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.rl.checks import reference_eval  # noqa: E402
from r2s2r.rl.env import RewardConfig  # noqa: E402
from r2s2r.rl.train import RLConfig, train_rl  # noqa: E402
from r2s2r.training.head import HeadTrainConfig, RefineConfig, refine_checkpoint  # noqa: E402


def world_model(args) -> tuple[str, dict]:
    """The refined world model's directory (made once) and the head's open-loop figures before/after.

    With `--world_model`, that directory as it is (refined elsewhere: its refine.json, where it has one)."""
    if args.world_model:
        report = Path(args.world_model) / "refine.json"
        return args.world_model, json.loads(report.read_text()) if report.is_file() else {}
    out = Path(args.output_dir) / "world_model"
    if not (out / "refine.json").is_file():
        refine_checkpoint(
            RefineConfig(
                checkpoint=args.checkpoint, data=[args.data], heldout=args.heldout, output_dir=str(out),
                upgrade=False, head=HeadTrainConfig(steps=args.head_steps),
            )
        )  # fmt: skip
    return str(out), json.loads((out / "refine.json").read_text())


def rate(r: dict | None, split: str = "all") -> str:
    if not r or split not in r:
        return "-"
    lo, hi = r[split]["ci"]
    return f"{100 * r[split]['rate']:.0f} [{100 * lo:.0f}-{100 * hi:.0f}]"


def judged(verified: dict, key: str) -> str:
    """A video re-check figure in %, or '-' where there was none (state-only recordings have no frames)."""
    return f"{100 * verified[key]:.0f}" if key in verified else "-"


def plot_curves(results: dict, path: Path) -> None:
    """Imagined (head) and reference-world success against imagined frames, one panel per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, (name, result) in zip(axes[0], results.items(), strict=True):
        rows = [r for r in result["progress"] if "reference" in r]
        frames = [r["timesteps"] for r in rows]
        ax.plot(frames, [100 * r["imagined"]["success"] for r in rows], "o-", label="imagined (state head)")
        ax.plot(frames, [100 * r["reference"]["all"]["rate"] for r in rows], "s-", label="reference world")
        lo = [100 * r["reference"]["all"]["ci"][0] for r in rows]
        hi = [100 * r["reference"]["all"]["ci"][1] for r in rows]
        ax.fill_between(frames, lo, hi, alpha=0.2, color="C1")
        ax.set(title=name, xlabel="imagined frames trained on", ylabel="success %", ylim=(-5, 105))
        ax.legend(loc="center right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", default="assets/world_model_small", help="world model to refine")
    parser.add_argument("--data", default="outputs/bench/data/train", help="its training recordings")
    parser.add_argument("--heldout", default="outputs/bench/data/heldout", help="held-out recordings")
    parser.add_argument("--head_steps", type=int, default=3000)
    parser.add_argument(
        "--world_model", default="",
        help="an already refined world model to train in as it is (e.g. benchmarks/state_only.sh's blind "
        "head, with --observation state and state-only --data/--heldout); skips the refinement",
    )  # fmt: skip
    parser.add_argument(
        "--observation", default="latent", choices=("latent", "state"),
        help="where the policy reads the cube pose: the cameras through the world model, or "
        "observation.environment_state (a tracked object; the only choice for a head without cameras)",
    )  # fmt: skip
    parser.add_argument(
        "--uncertainty_weight", type=float, default=RewardConfig.uncertainty_weight,
        help="reward charge per unit of ensemble disagreement (0: none; the support's end still applies)",
    )  # fmt: skip
    parser.add_argument(
        "--residual_weight", type=float, default=RewardConfig.residual_weight,
        help="fine-tuning: reward charge per mean squared residual output (a trust region on the base)",
    )  # fmt: skip
    parser.add_argument(
        "--floor_quantile", type=float, default=0.0,
        help="disagreement up to this quantile of the logged replays' frames is not charged (0: all is)",
    )  # fmt: skip
    parser.add_argument("--settings", nargs="+", default=["scratch", "finetune_sloppy"], help="which to run")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "rl.json"), help="JSON")
    parser.add_argument("--episodes", type=int, default=100, help="reference-world episodes per evaluation")
    parser.add_argument("--eval_seed", type=int, default=2)
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument(
        "--confirm_seed", type=int, default=None,
        help="also play the policies before and after training on this seed's poses (e.g. 1), at the end",
    )  # fmt: skip
    parser.add_argument("--rounds_scratch", type=int, default=25)
    parser.add_argument("--rounds_finetune", type=int, default=20)
    parser.add_argument(
        "--finetune_envs", type=int, default=64, help="imagined episodes per PPO update when fine-tuning"
    )
    parser.add_argument("--output_dir", default="outputs/bench/rl")
    args = parser.parse_args()
    for root in (args.data, args.heldout):
        if not Path(root, "meta", "info.json").is_file():
            sys.exit(
                f"rl.py: error: no recordings at {root}; `python benchmarks/train_small.py` records them."
            )

    start = time.perf_counter()
    checkpoint, head = world_model(args)
    common = dict(
        checkpoint=checkpoint, data=args.data, eval_episodes=args.episodes, eval_seed=args.eval_seed,
        eval_every=args.eval_every, observation=args.observation, floor_quantile=args.floor_quantile,
        reward=RewardConfig(uncertainty_weight=args.uncertainty_weight, residual_weight=args.residual_weight),
    )  # fmt: skip
    settings = {
        "scratch": RLConfig(
            **common, init="scratch", output_dir=f"{args.output_dir}/scratch", num_envs=256, iterations=4,
            rounds=args.rounds_scratch,
        ),
        "finetune_sloppy": RLConfig(
            **common, init="residual", base=PolicyConfig(kwargs={"skill": "sloppy"}),
            output_dir=f"{args.output_dir}/finetune_sloppy", num_envs=args.finetune_envs, iterations=2,
            rounds=args.rounds_finetune,
        ),
    }  # fmt: skip
    unknown = sorted(set(args.settings) - set(settings))
    if unknown:
        sys.exit(f"rl.py: error: --settings {unknown} unknown; choose from {sorted(settings)}")
    settings = {name: cfg for name, cfg in settings.items() if name in args.settings}
    results, table, curves, confirmed = {}, [], [], []
    for name, cfg in settings.items():
        t0 = time.perf_counter()
        summary = train_rl(cfg)
        seconds = time.perf_counter() - t0
        rows = [r for r in summary["progress"] if "reference" in r]
        first, last = rows[0], rows[-1]
        verified = {
            "before": first.get("verified", {}),
            "after": last.get("verified", {}),
        }  # the video's verdict
        gain = 100 * (last["reference"]["all"]["rate"] - first["reference"]["all"]["rate"])
        results[name] = {"config": asdict(cfg), "progress": summary["progress"], "seconds_this_run": seconds,
                         "support_threshold": summary["support_threshold"], "verified": verified}  # fmt: skip
        if args.confirm_seed is not None:
            out = Path(cfg.output_dir)
            confirm = {
                when: reference_eval(out / folder, args.episodes, args.confirm_seed)
                for when, folder in (("before", "initial_policy"), ("after", "policy"))
            }
            results[name]["confirm"] = {"seed": args.confirm_seed, **confirm}
            confirmed.append([
                name, args.confirm_seed, rate(confirm["before"]), rate(confirm["after"]),
                rate(confirm["after"], "id"), rate(confirm["after"], "ood"),
                f"{100 * (confirm['after']['all']['rate'] - confirm['before']['all']['rate']):+.0f}",
            ])  # fmt: skip
        table.append([
            name, rate(first["reference"]), rate(last["reference"]), rate(last["reference"], "id"),
            rate(last["reference"], "ood"), f"{gain:+.0f}",
            f"{100 * first['imagined']['success']:.0f} -> {100 * last['imagined']['success']:.0f}",
            f"{100 * last['imagined']['left_support']:.0f}",
            judged(verified["before"], "judge_success") + " -> " + judged(verified["after"], "judge_success"),
            judged(verified["after"], "agreement"), summary["timesteps"],
        ])  # fmt: skip
        for r in rows:
            curves.append([
                name, r["round"], r["timesteps"], f"{100 * r['imagined']['success']:.0f}",
                rate(r["reference"]), f"{r['imagined']['return']:.2f}",
                f"{100 * r['imagined']['left_support']:.0f}",
                f"{100 * r['imagined']['violation_frames']:.0f}",
            ])  # fmt: skip

    ho = [
        [k, *(f"{100 * v:.1f}" if v is not None else "-" for v in head[k]["object_error_m"].values()),
         f"{100 * head[k]['outcome_agreement']:.0f}", f"{100 * head[k]['imagined_success']:.0f}",
         f"{100 * head[k]['real_success']:.0f}"]
        for k in ("before", "after") if k in head
    ]  # fmt: skip
    print_table(
        "State head, open loop on held-out recordings",
        ["head", "object cm 1 s", "3 s", "6 s", "outcome agreement %", "imagined success %", "real %"],
        ho,
    )
    print_table(
        "Imagined vs reference-world success during training",
        ["setting", "round", "imagined frames", "imagined success %", "reference % [95 % CI]",
         "imagined return", "left support %", "frames with violations %"], curves,
    )  # fmt: skip
    print_table(
        f"RL in imagination, reference-world success over {args.episodes} episodes",
        ["setting", "before %", "after %", "after ID %", "after OOD %", "gain (points)",
         "imagined success % (head)", "left support %", "judge success % (video)", "head-judge agreement %",
         "imagined frames"], table,
    )  # fmt: skip
    if confirmed:
        print_table(
            f"The same policies on other poses ({args.episodes} episodes, --confirm_seed)",
            ["setting", "seed", "before %", "after %", "after ID %", "after OOD %", "gain (points)"],
            confirmed,
        )  # fmt: skip
    plot_curves(results, Path(args.output_dir) / "curves.png")
    write_json(
        Path(args.out),
        {"machine": machine_info(), "args": vars(args), "head": head, "results": results,
         "seconds": round(time.perf_counter() - start, 1)},
    )  # fmt: skip


if __name__ == "__main__":
    main()
