"""r2s2r-eval: evaluate one policy closed-loop inside a trained world model.

Examples:
    r2s2r-eval --checkpoint=outputs/train/demo/checkpoints/last/pretrained_model \\
        --starts='[outputs/logs/nominal]' --samples_per_start=4
    r2s2r-eval --checkpoint=... --starts='[outputs/datasets/heldout]' \\
        --policy.path=r2s2r.robots.demonstrators:make_demonstrator --policy.kwargs='{skill: sloppy}' \\
        --render=false --samples_per_start=20          # state-only policy: the fast state-head path
    r2s2r-eval --checkpoint=... --starts='[...]' --policy.path=outputs/act/step_2000   # a LeRobot policy dir
    r2s2r-eval --checkpoint=assets/world_model_small --starts='[...]' --frames=head   # frames from the head

Imagined episodes start from the first observation of every episode of the `starts` datasets (each start
seeds `samples_per_start` episodes with different sampling noise). The policy acts every control step on
the imagined observations (all views at the logs' resolution, proprio, and the predicted object state).
`--frames=head` draws those views from the state head's imagined state instead of sampling them with the
video model (fit the logs' look first with r2s2r-fit-frames); success is then the head's, and each row
keeps the judge's reading of the drawn frames as `judge_success`.
Prints the imagined success rate with a Wilson 95 % interval, overall and per ID/OOD; writes one JSON line
per episode to --output (outcome, success step, judge confidence, uncertainty) and summary.json beside it.
A killed run continues where it stopped when re-run with the same flags; nothing is counted twice.
"""

from __future__ import annotations

import sys

from r2s2r.eval.imagined import ImaginedEvalConfig, evaluate_imagined
from r2s2r.scripts import cli


def format_rates(summary: dict) -> str:
    lines = []
    for split in ("all", "id", "ood"):
        if split in summary and summary[split]["trials"]:
            s = summary[split]
            lo, hi = s["ci"]
            lines.append(
                f"  {split:4s} {100 * s['rate']:5.1f} % ({s['successes']}/{s['trials']}), "
                f"95 % interval {100 * lo:.1f}-{100 * hi:.1f} %"
            )
    return "\n".join(lines)


def eval_main(cfg: ImaginedEvalConfig) -> int:
    summary = evaluate_imagined(cfg)
    print(f"\nimagined success of {summary['policy']}:\n{format_rates(summary)}")
    print(f"\nwrote {summary['results']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(ImaginedEvalConfig, eval_main, __doc__, argv, prog="r2s2r-eval")


if __name__ == "__main__":
    sys.exit(main())
