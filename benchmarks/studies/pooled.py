"""Heads compared on every family already ranked, pooled: how heads are chosen before a fresh family.

`benchmarks/generalization.py` writes one JSON per run (a family or two at a time, several heads each).
This reads those JSONs, takes each head's real and imagined success of every policy it was ranked on, and
gives the ranking statistics over all of them together (Spearman, Pearson, MMRV, pairwise accuracy, MAE,
calibration slope; ID and OOD), with the number of policies and what each family was kept out of (the
runs' `kept_out_of`). A head is given as `NAME` or as `NAME=OTHER,...`: where a run has no NAME, the first
OTHER it has stands in (for a head whose imagined episodes are the same as another's there, e.g.
`head_odds`, which changes only the uncertainty of `head_takes`). Only policies every compared head was
ranked on are pooled. Writes --out (benchmarks/results/archive/pooled.json unless given).

Usage:
    python benchmarks/studies/pooled.py --heads "head_substeps;head_pushes" \
        --out benchmarks/results/archive/pooled_pushes.json
    python benchmarks/studies/pooled.py --heads "world_model_blind;head_pushes" \
        --out benchmarks/results/archive/pooled_blind_coverage.json   # the two committed state heads
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.eval.rank import ranking_metrics  # noqa: E402

RESULTS = "benchmarks/results"
RUNS = (  # the ranked families, by the JSON that holds them
    "archive/generalization_design_substeps.json",  # waypoint, jointspace (the design set)
    "generalization_retry.json",
    "generalization_rate.json",
    "generalization_heldout.json",  # pincer, relay
    "generalization_stall.json",
    "generalization_overlap.json",
    "generalization_table.json",
    "generalization_nudge.json",
)


def parse_heads(text: str) -> dict[str, tuple[str, ...]]:
    """'a=b,c;d' -> {a: (a, b, c), d: (d,)}: each head and the stand-ins tried after it, in order."""
    heads = {}
    for item in filter(None, (s.strip() for s in text.split(";"))):
        name, _, others = item.partition("=")
        heads[name] = (name, *filter(None, (o.strip() for o in others.split(","))))
    return heads


def gather(runs: list[dict], chain: tuple[str, ...]) -> dict[str, dict]:
    """policy name -> its entry (family, real, imagined) from the first head of `chain` each run has."""
    policies = {}
    for run in runs:
        model = next((run["models"][n] for n in chain if n in run["models"]), None)
        for entry in model["policies"] if model else ():
            policies[entry["name"]] = entry
    return policies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--heads",
        default="head_odds=head_takes;head_substeps",
        help="heads to compare, ';'-separated; NAME=OTHER,... lets OTHER stand in where a run lacks NAME",
    )
    parser.add_argument("--runs", default=",".join(RUNS), help=f"result JSONs under {RESULTS}/")
    parser.add_argument("--out", default=f"{RESULTS}/archive/pooled.json")
    args = parser.parse_args()
    runs = [json.loads(Path(RESULTS, r).read_text()) for r in args.runs.split(",")]
    heads = parse_heads(args.heads)
    found = {name: gather(runs, chain) for name, chain in heads.items()}
    common = sorted(set.intersection(*(set(p) for p in found.values())))
    if len(common) < 3:
        raise SystemExit(
            f"only {len(common)} policies were ranked by every head of --heads; nothing to pool."
        )
    rows, figures = [], {}
    for name, policies in found.items():
        real = {p: policies[p]["real"] for p in common}
        imagined = {p: policies[p]["imagined"] for p in common}
        metrics = ranking_metrics(real, imagined, 2000, 0)
        figures[name] = {"stand_ins": heads[name][1:], "metrics": metrics}
        for split in ("id", "ood"):
            m = metrics[split]
            rows.append(
                [
                    name,
                    split,
                    m["n"],
                    "n/a" if m["spearman"]["value"] is None else f"{m['spearman']['value']:.2f}",
                    f"{m['mmrv']:.2f}",
                    f"{m['pairwise_accuracy']['all']['value']:.2f}",
                    f"{m['calibration']['mae_points']:.1f}",
                ]
            )
    families = sorted({found[next(iter(found))][p]["family"] for p in common})
    title = f"{len(common)} policies of {', '.join(families)}, pooled"
    print_table(title, ["head", "split", "n", "Spearman", "MMRV", "pairwise", "MAE"], rows)
    kept_out_of = {
        f: run["kept_out_of"][f] for run in runs for f in run.get("kept_out_of", {}) if f in families
    }
    write_json(
        args.out,
        {"machine": machine_info(), "runs": args.runs.split(","), "families": families, "policies": common}
        | {"kept_out_of": kept_out_of, "heads": figures},
    )


if __name__ == "__main__":
    main()
