"""r2s2r-refit-judge: fit a world model's success/reward judge to its own imagined frames.

Examples:
    r2s2r-refit-judge --checkpoint=assets/world_model_small --data='[outputs/bench/data/train]' \\
        --output_dir=outputs/world_model_judged
    r2s2r-eval-openloop --checkpoint=outputs/world_model_judged --data.root=outputs/bench/data/heldout

The judge reads imagined frames (the video path of r2s2r-eval and r2s2r-rank, the open-loop outcome
agreement) but learns from real ones in joint training, and the video model's samples are softer and
grainier than the recordings. This replays every episode of --data open-loop in the world model (its first
observation, then the logged actions) and trains the judge on the imagined frames beside the real ones,
each labelled with the staged reward and success logged at that time. Nothing else in the model changes.
Pass the world model's training recordings, not the episodes it is scored on. About 10 minutes for 160
episodes and 2,000 steps on 2 CPU cores. Writes <output_dir>/ (a world model: use it as any --checkpoint)
and <output_dir>/judge.json (the judge's accuracy on those real and imagined frames, before and after).
"""

from __future__ import annotations

import sys

from r2s2r.scripts import cli
from r2s2r.training.judge import JudgeConfig, refit_judge


def refit_main(cfg: JudgeConfig) -> int:
    figures = refit_judge(cfg)
    frames, data = figures["frames"], ", ".join(cfg.data)
    print(f"judge on {frames} frames of {data} (staged-reward accuracy / success recall)")
    for when in ("before", "after"):
        real, imagined = figures[when]["real"], figures[when]["imagined"]
        scores = [
            f"{100 * row['reward_accuracy']:5.1f} / {100 * row['success_recall']:5.1f} %"
            for row in (real, imagined)
        ]
        print(f"  {when:6s}  real {scores[0]}   imagined {scores[1]}")
    print(f"wrote {cfg.output_dir}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(JudgeConfig, refit_main, __doc__, argv, prog="r2s2r-refit-judge")


if __name__ == "__main__":
    sys.exit(main())
