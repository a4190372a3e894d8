"""Inference-time action search in the reference world: success with and without search, as N grows.

For each weak base policy (two clumsy scripted demonstrators and a learned ACT checkpoint), the same
reference-world episodes (`--episodes`, ID and OOD alternating, the recorder's initial poses for `--seed`)
are played by the base alone (N=1) and by `SearchPolicy` around it with N = 4, 16, 64 candidates per
decision, in the world model of `--checkpoint` (default: the committed small model). Prints success per N,
overall and ID / OOD with Wilson 95 % intervals, the gain over the base, and the decision latency; writes
benchmarks/results/search.json. Targets: >= +15 points for the weaker policies; success non-decreasing in N.

Every (policy, N, batch) is appended to outputs/bench/search/<policy>/episodes.jsonl as it finishes, so a
killed run resumes where it stopped.

Usage:
    python benchmarks/search.py                                  # 100 episodes per N and policy
    python benchmarks/search.py --episodes 20 --candidates 1 16 --out /tmp/search.json  # a quick look
    python benchmarks/search.py --bases sloppy --candidates 1 16 --seed 2 \
        --output_dir outputs/bench/search_seed2 --out /tmp/search_seed2.json  # other episodes
    python benchmarks/search.py --bases act_step_3000 --value act_step_3000=outputs/bench/value/act_3000
        # with a base value fitted on the base's own rollouts (r2s2r-fit-value)
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.eval.search import SearchEvalConfig, evaluate_search  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.rollout.search import SearchConfig  # noqa: E402

DEMONSTRATOR = "r2s2r.robots.demonstrators:make_demonstrator"
BASES = {  # reference-world success over 20 logged episodes in benchmarks/rank.py, in brackets
    "sloppy": (DEMONSTRATOR, {"skill": "sloppy"}),  # (35 %)
    "noisy_noretry": (DEMONSTRATOR, {"skill": "noisy", "max_retries": 0}),  # (55 %)
    "act_step_3000": ("outputs/bench/zoo/act/step_3000", {}),  # (20 %), a state-only ACT checkpoint
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=100, help="reference-world episodes per N and policy")
    parser.add_argument("--candidates", type=int, nargs="+", default=[1, 4, 16, 64], help="values of N")
    parser.add_argument("--bases", nargs="+", default=list(BASES), choices=list(BASES))
    parser.add_argument("--checkpoint", default="assets/world_model_small", help="world model directory")
    parser.add_argument("--horizon", type=int, default=2, help="model frames each candidate is imagined")
    parser.add_argument(
        "--deviation_weight", type=float, default=SearchConfig.deviation_weight,
        help="trust-region charge per mean squared offset from the base plan, in noise stds",
    )  # fmt: skip
    parser.add_argument(
        "--uncertainty_weight", type=float, default=SearchConfig.uncertainty_weight,
        help="penalty per unit of ensemble disagreement (mean over the horizon)",
    )  # fmt: skip
    parser.add_argument(
        "--pessimism", type=float, default=SearchConfig.pessimism,
        help="progress + success scored as the ensemble members' mean minus this many stds",
    )  # fmt: skip
    parser.add_argument(
        "--arm_noise", type=float, default=SearchConfig.arm_noise,
        help="std (rad) of the CEM offsets on the arm joint targets",
    )  # fmt: skip
    parser.add_argument(
        "--gripper_noise", type=float, default=SearchConfig.gripper_noise,
        help="std of the CEM offsets on the gripper commands (0..1)",
    )  # fmt: skip
    parser.add_argument(
        "--warm_start", action=argparse.BooleanOptionalAction, default=SearchConfig.warm_start,
        help="also try the last decision's offsets moved on, and centre CEM on them",
    )  # fmt: skip
    parser.add_argument(
        "--min_gain", type=float, default=SearchConfig.min_gain,
        help="change course (leave the base plan or the correction under way) only for a larger score gain",
    )  # fmt: skip
    parser.add_argument(
        "--value", nargs="*", default=[], metavar="BASE=DIR",
        help="a base value (r2s2r-fit-value on that base's episodes) for the search around BASE",
    )  # fmt: skip
    parser.add_argument(
        "--value_weight", type=float, default=SearchConfig.value_weight,
        help="score for the base value's odds of success at a candidate's end",
    )  # fmt: skip
    parser.add_argument(
        "--followup", type=int, default=SearchConfig.followup,
        help="model frames the base plays on, closed-loop in the head, after the best candidates (0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--followup_top", type=int, default=SearchConfig.followup_top,
        help="candidates besides the base plan re-scored with the follow-up",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1, help="initial poses (seed 0 is the rank logs')")
    parser.add_argument("--output_dir", default="outputs/bench/search_v3")
    parser.add_argument(
        "--out",
        default=str(Path(__file__).parent / "results" / "search.json"),
        help="where the results JSON goes",
    )
    args = parser.parse_args()

    search = SearchConfig(
        checkpoint=args.checkpoint, horizon=args.horizon, deviation_weight=args.deviation_weight,
        uncertainty_weight=args.uncertainty_weight, pessimism=args.pessimism,
        arm_noise=args.arm_noise, gripper_noise=args.gripper_noise, warm_start=args.warm_start,
        min_gain=args.min_gain, value_weight=args.value_weight, followup=args.followup,
        followup_top=args.followup_top,
    )  # fmt: skip
    values = dict(v.split("=", 1) for v in args.value)
    if unknown := sorted(set(values) - set(args.bases)):
        sys.exit(f"search.py: error: --value for {unknown}, which are not among --bases {args.bases}.")
    results, rows = {}, []
    for name in args.bases:
        path, kwargs = BASES[name]
        if not path.startswith("r2s2r.") and not Path(path).is_dir():
            sys.exit(
                f"search.py: error: no ACT checkpoint at {path}; `python benchmarks/zoo_act.py` trains it."
            )
        cfg = SearchEvalConfig(
            base=PolicyConfig(path=path, kwargs=kwargs), search=replace(search, value=values.get(name, "")),
            candidates=tuple(args.candidates),
            episodes=args.episodes, workers=args.workers, seed=args.seed,
            output=f"{args.output_dir}/{name}/episodes.jsonl",
        )  # fmt: skip
        start = time.perf_counter()
        summary = evaluate_search(cfg)
        by_n = summary["by_candidates"]
        base_rate = by_n[str(min(args.candidates))]["all"]["rate"]
        results[name] = {"summary": by_n, "seconds": round(time.perf_counter() - start, 1)}
        for n, r in by_n.items():
            lo, hi = r["all"]["ci"]
            rows.append([
                name, int(n), f"{100 * r['all']['rate']:.0f} [{100 * lo:.0f}-{100 * hi:.0f}]",
                f"{100 * r['id']['rate']:.0f}", f"{100 * r['ood']['rate']:.0f}",
                f"{100 * (r['all']['rate'] - base_rate):+.0f}", f"+{r['won']} / -{r['lost']}",
                f"{r['decision_seconds_mean']:.2f}",
                f"{100 * r['chose_base']:.0f}",
            ])  # fmt: skip
    header = ["base", "N", "success % [95 % CI]", "ID %", "OOD %", "vs N=1", "won / lost", "s/decision",
              "base kept %"]  # fmt: skip
    print_table(f"Reference-world success with search ({args.episodes} episodes per N)", header, rows)
    write_json(
        Path(args.out),
        {"machine": machine_info(), "args": vars(args), "search": asdict(search), "results": results},
    )


if __name__ == "__main__":
    main()
