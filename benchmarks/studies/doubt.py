"""`head.doubt` on heads other than the one it was built with: does the uncertainty rank the errors?

`head.doubt` adds no weights and changes no imagined outcome: the uncertainty of an imagined episode rises
where one of its grasps came near the edge of a grasp rule that is on, and stays up. It was built with
`head_servo` (designed on the design set, measured on the fresh families `retry`, `pincer` and `relay`).
`head.chance`'s fitted grasp odds add one more edge, even odds (`head_chance`, where they decide grasps,
and `head_odds`, `head.odds_doubt`, where the rules still decide them).
Here it is switched on, in memory, for `head_takes` too, whose rules are fewer (balance and the hold
across the fingers; no squeeze, no capture), and `uncertainty_vs_error` (object-position error against
the uncertainty over the replayed frames, Spearman) is measured on each set's logs: the first
`--episodes` logs of every policy that `benchmarks/generalization.py` recorded (run it first for the
design set, `retry`, `pincer,relay` and `rate`). `head_takes` with doubt is measured after `head_servo`'s
figures on those families were read: its figures there are not held out for the doubt. Writes
benchmarks/results/archive/doubt.json.

Usage:
    python benchmarks/studies/doubt.py        # ~30 s; needs generalization.py's logs
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
from r2s2r.eval.generalization import uncertainty_vs_error  # noqa: E402
from r2s2r.model.modeling_world_model import WorldModel  # noqa: E402
from r2s2r.training.head import read_episodes  # noqa: E402

SETS = {  # name: (generalization.py's --output_dir, families)
    "design (waypoint, jointspace)": ("outputs/bench/generalization", ("waypoint", "jointspace")),
    "retry": ("outputs/bench/generalization_retry", ("retry",)),
    "pincer, relay": ("outputs/bench/generalization_heldout", ("pincer", "relay")),
    "rate": ("outputs/bench/generalization_rate", ("rate",)),
}
HEADS = {  # name: (world model, head.doubt switched on)
    "head_takes": ("outputs/coverage/head_takes", False),
    "head_takes + doubt": ("outputs/coverage/head_takes", True),
    "head_servo (doubt)": ("outputs/coverage/head_servo", True),
    "head_chance (odds decide, doubt)": ("outputs/coverage/head_chance", True),
    "head_odds (odds doubt)": ("outputs/coverage/head_odds", True),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=10, help="logs per policy (generalization.py's)")
    parser.add_argument("--out", default=str(Path(__file__).parents[1] / "results/archive/doubt.json"))
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    models = {}
    for name, (path, doubt) in HEADS.items():
        model = WorldModel.from_pretrained(path).eval()
        model.config.head.doubt = doubt
        models[name] = model
    results, rows = {}, []
    for set_name, (root, families) in SETS.items():
        folders = sorted(p for f in families for p in (Path(root) / "logs" / f).iterdir() if p.is_dir())
        if not folders:
            raise SystemExit(f"no logs under {root}/logs: run benchmarks/generalization.py first.")
        first = next(iter(models.values()))
        episodes = [ep for p in folders for ep in read_episodes(str(p), first, args.episodes)]
        results[set_name] = {name: uncertainty_vs_error(model, episodes) for name, model in models.items()}
        rows.append([set_name, len(episodes), *(f"{results[set_name][n]['spearman']:.2f}" for n in models)])
    print_table(
        "Spearman of object-position error and uncertainty over the replayed frames",
        ["logs", "episodes", *models], rows,
    )  # fmt: skip
    write_json(Path(args.out), {
        "machine": machine_info(), "episodes_per_policy": args.episodes, "heads": HEADS, "sets": results,
        "held_out": "design set: informed every rule, head.doubt included. retry, pincer, relay: head.doubt"
        " was built on the design set and measured there with head_servo first (generalization_retry.json,"
        " generalization_heldout.json); head_takes + doubt was measured here after those figures were read,"
        " so its figures are not held out for the doubt; relay informed head.squeeze. rate: head_takes and"
        " head_chance were ranked there once (generalization_rate.json) before head_odds (the odds for the"
        " doubt alone) was built; head_odds was built after every figure here was read except its own",
    })  # fmt: skip


if __name__ == "__main__":
    main()
