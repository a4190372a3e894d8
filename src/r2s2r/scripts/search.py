"""r2s2r-search: inference-time action search around a policy, judged in the reference world.

Examples:
    r2s2r-search --base.kwargs='{skill: sloppy}' --candidates='[1,16]' --episodes=20
    r2s2r-search --base.path=outputs/bench/zoo/act/step_3000 --candidates='[1,4,16,64]' \\
        --search.checkpoint=assets/world_model_small --search.horizon=2 --workers=2

Every `--search.replan_every` control steps (default: each world-model frame), the search imagines the
base policy's own plan for the next `--search.horizon` frames with the world model's state-dynamics head,
proposes alternatives (re-seeded copies of the base, CEM perturbations of its joint targets), scores them
by predicted progress and success minus uncertainty and physics violations (the checker), refuses any
that would command a joint or gripper out of range, and sends the best one's offset on top of what the
base does. N=1 is the base policy unchanged, so each N in --candidates is compared on the same episodes.
--search.value=DIR adds a base value (`r2s2r-fit-value` on the base's own episodes): each candidate also
scores the odds of eventual success from where it ends. Off by default: around ACT it did not help
(docs/benchmarks.md).

Prints success per N (overall, ID, OOD, Wilson 95 % intervals), the episodes won and lost against the
base (the same episodes) and the decision latency; writes one JSON line per episode to --output and
summary.json beside it. A killed run resumes where it stopped when re-run with the same flags. To run
the search wherever a policy runs (r2s2r-record, r2s2r-eval), use the policy
`r2s2r.rollout.search:make_search_policy` with kwargs
'{base: {path: ..., kwargs: {...}}, num_candidates: 16}'.
"""

from __future__ import annotations

import sys

from r2s2r.eval.search import SearchEvalConfig, evaluate_search
from r2s2r.scripts import cli
from r2s2r.scripts.eval import format_rates


def search_main(cfg: SearchEvalConfig) -> int:
    summary = evaluate_search(cfg)
    print(f"\nreference-world success of {cfg.base.path} {cfg.base.kwargs or ''}:")
    for n, rates in summary["by_candidates"].items():
        searched = f", {rates['decision_seconds_mean']:.2f} s per decision, episodes won / lost vs the base: "
        latency = f"{searched}+{rates['won']} / -{rates['lost']}" if int(n) > 1 else " (the base alone)"
        print(f" N={n}{latency}\n{format_rates(rates)}")
    print(f"\nwrote {summary['results']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(SearchEvalConfig, search_main, __doc__, argv, prog="r2s2r-search")


if __name__ == "__main__":
    sys.exit(main())
