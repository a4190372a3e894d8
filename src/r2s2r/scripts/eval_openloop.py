"""r2s2r-eval-openloop: replay held-out episodes' logged actions in a trained world model.

Examples:
    r2s2r-eval-openloop --checkpoint=outputs/train/demo/checkpoints/last/pretrained_model \\
        --data.root=outputs/datasets/heldout
    r2s2r-eval-openloop --checkpoint=... --data.root=... --horizons='[1,3,6]' --videos=8 --batch_size=16

Prints, per ID/OOD split and camera, PSNR and SSIM of imagined vs real frames at each horizon, beside a
copy-last-frame baseline; the state head's object-position error; and how often the judge's verdict on the
imagined video matches the logged outcome. Writes <output_dir>/results.json and side-by-side
real | imagined MP4s under <output_dir>/videos/.
"""

from __future__ import annotations

import sys

from r2s2r.eval.openloop import OpenLoopConfig, evaluate_openloop
from r2s2r.scripts import cli


def format_summary(summary: dict) -> str:
    lines = []
    for split, entry in summary.items():
        lines.append(f"\n[{split}] {entry['episodes']} episodes")
        for cam, by_horizon in entry["model"].items():
            for horizon, m in by_horizon.items():
                base = entry["copy_last"][cam][horizon]
                lines.append(
                    f"  {cam:12s} {horizon:>5s}  PSNR {m['psnr']:6.2f} dB (copy-last {base['psnr']:6.2f})  "
                    f"SSIM {m['ssim']:.3f} (copy-last {base['ssim']:.3f})"
                )
        if entry.get("object_error_m"):
            errors = ", ".join(
                f"{h}: {v * 100:.1f} cm" for h, v in entry["object_error_m"].items() if v is not None
            )
            lines.append(f"  object position error (state head): {errors}")
        if entry.get("outcome_agreement") is not None:
            lines.append(
                f"  outcome agreement (judge on imagined video vs logged): "
                f"{100 * entry['outcome_agreement']:.1f} % (logged success rate "
                f"{100 * entry['real_success_rate']:.1f} %; the state head's own verdict agrees on "
                f"{100 * entry['head_outcome_agreement']:.1f} %)"
            )
    return "\n".join(lines)


def openloop_main(cfg: OpenLoopConfig) -> int:
    payload = evaluate_openloop(cfg)
    print(format_summary(payload["summary"]))
    print(f"\nwrote {cfg.output_dir}/results.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(OpenLoopConfig, openloop_main, __doc__, argv, prog="r2s2r-eval-openloop")


if __name__ == "__main__":
    sys.exit(main())
