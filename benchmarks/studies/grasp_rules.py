"""The grasp rules on the response curves' logs, open loop: does the head, given the logged actions, predict
the logged outcome at each value of each skill knob?

`benchmarks/response_curves.py` records the `waypoint` controller with one knob moved at a time (its logs
under outputs/bench/response_curves/logs/<axis>/<axis>=<value>/). Here each model replays the first
`--episodes` logs of every value from their first frame (`head_openloop`: no policy in the loop, so what
differs is only what the head makes of the actions) and its imagined success rate is tabled beside the
real one. The models: the coverage heads `head_tracking`, `head_balance` (its weights with head.balance)
and `head_held` (with head.balance, head.pad_holds and head.held_success); `benchmarks/coverage.sh` makes
them. These logs are design data for the rules (see docs/benchmarks.md). Writes
benchmarks/results/archive/grasp_rules_openloop.json.

Usage:
    python benchmarks/studies/grasp_rules.py        # ~5 minutes; needs response_curves.py's logs
    M=outputs/coverage; python benchmarks/studies/grasp_rules.py --world_models $M/head_takes,$M/head_servo \
        --out benchmarks/results/archive/grasp_rules_servo.json    # the servo, capture, squeeze and turns
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.model.modeling_world_model import WorldModel  # noqa: E402
from r2s2r.training.head import head_openloop, read_episodes  # noqa: E402

MODELS = "outputs/coverage/head_tracking,outputs/coverage/head_balance,outputs/coverage/head_held"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--world_models", default=MODELS)
    parser.add_argument("--logs", default="outputs/bench/response_curves/logs")
    parser.add_argument("--episodes", type=int, default=10, help="logs replayed per value (ID first)")
    parser.add_argument(
        "--out", default=str(Path(__file__).parents[1] / "results/archive/grasp_rules_openloop.json")
    )
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    models = {Path(m).name: WorldModel.from_pretrained(m).eval() for m in args.world_models.split(",")}
    first = next(iter(models.values()))
    values = sorted(p for p in Path(args.logs).glob("*/*=*") if p.is_dir())
    if not values:
        raise SystemExit(f"no logs under {args.logs}: run benchmarks/response_curves.py first.")
    rows, results = [], []
    for folder in values:
        axis, value = folder.name.split("=")
        episodes = read_episodes(str(folder), first, args.episodes)
        imagined = {
            name: head_openloop(model, episodes)["imagined_success"] for name, model in models.items()
        }
        real = float(sum(bool(ep["episode_success"]) for ep in episodes) / len(episodes))
        results.append({"axis": axis, "value": float(value), "real": real, "imagined": imagined})
        rows.append([axis, value, f"{100 * real:.0f}", *(f"{100 * v:.0f}" for v in imagined.values())])
    print_table(
        f"response-curve logs replayed open loop ({args.episodes} per value): success %",
        ["axis", "value", "real", *models], rows,
    )  # fmt: skip
    gaps = {
        name: max(abs(r["imagined"][name] - r["real"]) for r in results) for name in models
    }  # fmt: skip
    mean_gaps = {
        name: sum(abs(r["imagined"][name] - r["real"]) for r in results) / len(results) for name in models
    }
    print("largest / mean gap (points): " + ", ".join(
        f"{n} {100 * gaps[n]:.0f} / {100 * mean_gaps[n]:.1f}" for n in models
    ))  # fmt: skip
    write_json(Path(args.out), {
        "machine": machine_info(), "models": args.world_models.split(","),
        "episodes_per_value": args.episodes, "values": results, "largest_gap": gaps, "mean_gap": mean_gaps,
    })  # fmt: skip


if __name__ == "__main__":
    main()
