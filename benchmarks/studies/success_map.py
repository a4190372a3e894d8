"""Fit a model's success map (imagined rate -> real rate) on families already ranked; check it family-out.

`r2s2r.eval.success_map` turns a model's imagined success rates into estimates of the real ones with a
monotone map fitted on (imagined, real) pairs of policies it was ranked on. This reads those pairs from
`benchmarks/generalization.py` runs (--runs, one model label --head in each: each policy's ID and OOD
rate, weighted by its episodes), and:

  1. leave one family out: for each family, a map fitted on every other family turns that family's
     imagined rates into mapped ones; the pooled out-of-family rates are ranked against the real ones
     (the same statistics as the benchmark: MAE and slope are what a map can change) beside the raw
     imagined rates. A map that does not lower the error here is not worth keeping;
  2. the map fitted on every family, written as success_map.json into --model (with what it was fitted
     on), unless --dry_run;
  3. both, and the map's knots, to --out (benchmarks/results/archive/success_map_coverage.json).

Families ranked after the map is written are its held-out test: the map played no part in them.

Usage:
    python benchmarks/studies/success_map.py --head world_model_coverage --model assets/world_model_coverage \
        --runs archive/coverage_asset_retry.json,archive/coverage_asset_rate.json,\
archive/coverage_asset_heldout.json,archive/coverage_asset_stall.json,archive/coverage_asset_overlap.json,\
archive/coverage_asset_table.json,generalization_coverage_nudge.json \
        --out benchmarks/results/archive/success_map_coverage.json
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
from r2s2r.eval.success_map import SuccessMap, mapped_rates  # noqa: E402

RESULTS = "benchmarks/results"
SPLITS = ("id", "ood")


def gather(runs: list[str], head: str) -> dict[str, dict]:
    """policy name -> {family, real, imagined} from the runs' entries of model label `head`."""
    policies = {}
    for run in runs:
        if not Path(RESULTS, run).is_file():
            raise SystemExit(f"no {RESULTS}/{run}: run benchmarks/generalization.py for it first.")
        data = json.loads(Path(RESULTS, run).read_text())
        if head not in data["models"]:
            raise SystemExit(f"{run} has no model '{head}' (it has {', '.join(data['models'])}).")
        for p in data["models"][head]["policies"]:
            policies[p["name"]] = p
    return policies


def fit(policies: dict[str, dict], source: str) -> SuccessMap:
    """The map fitted on every (policy, split) rate of `policies`, weighted by the imagined episodes."""
    pairs = [(p["imagined"][s], p["real"][s]) for p in policies.values() for s in SPLITS if s in p["real"]]
    return SuccessMap.fit(
        [i["rate"] for i, _ in pairs], [r["rate"] for _, r in pairs], [i["trials"] for i, _ in pairs], source
    )


def out_of_family(policies: dict[str, dict]) -> dict[str, dict]:
    """Each policy's imagined rates through the map fitted on the other families only."""
    mapped = {}
    for family in sorted({p["family"] for p in policies.values()}):
        others = {n: p for n, p in policies.items() if p["family"] != family}
        success_map = fit(others, f"all but {family}")
        for name, p in policies.items():
            if p["family"] == family:
                mapped[name] = mapped_rates(p["imagined"], success_map)
    return mapped


def rows_of(label: str, metrics: dict) -> list[list]:
    return [
        [label, s, f"{metrics[s]['spearman']['value']:.2f}", f"{metrics[s]['calibration']['mae_points']:.1f}",
         f"{metrics[s]['calibration']['slope']:.2f}"]
        for s in SPLITS if s in metrics
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs", required=True, help=f"generalization.py JSONs under {RESULTS}/, comma-separated"
    )
    parser.add_argument("--head", required=True, help="the model's label in those runs")
    parser.add_argument("--model", required=True, help="the model directory the map is written into")
    parser.add_argument("--out", default=f"{RESULTS}/archive/success_map.json")
    parser.add_argument("--dry_run", action="store_true", help="check family-out only; write no map")
    args = parser.parse_args()
    runs = args.runs.split(",")
    policies = gather(runs, args.head)
    families = sorted({p["family"] for p in policies.values()})
    real = {n: p["real"] for n, p in policies.items()}
    raw = ranking_metrics(real, {n: p["imagined"] for n, p in policies.items()}, 2000, 0)
    held = ranking_metrics(real, out_of_family(policies), 2000, 0)
    print_table(
        f"{len(policies)} policies of {', '.join(families)}: each family mapped by the others' map",
        ["rates", "split", "Spearman", "MAE", "slope"],
        rows_of("imagined", raw) + rows_of("mapped, family out", held),
    )
    source = f"{len(policies)} policies of {', '.join(families)} ranked with {args.head} ({', '.join(runs)})"
    success_map = fit(policies, source)
    print("knots (imagined -> real): " + ", ".join(
        f"{i:.2f} -> {r:.2f}" for i, r in zip(success_map.imagined, success_map.real, strict=True)
    ))  # fmt: skip
    if not args.dry_run:
        print(f"wrote {success_map.save(args.model)}")
    write_json(
        Path(args.out),
        {
            "machine": machine_info(),
            "settings": vars(args),
            "families": families,
            "policies": sorted(policies),
        }
        | {"imagined": raw, "mapped_family_out": held, "map": vars(success_map)},
    )


if __name__ == "__main__":
    main()
