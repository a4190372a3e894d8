"""r2s2r-report: turn a ranking run's rank.json into one self-contained HTML report.

Examples:
    r2s2r-report --rank_json=outputs/rank/rank.json
    r2s2r-report --rank_json=outputs/rank/rank.json --output=reports/ranking.html

The page needs no other file: it holds the ranking table (real vs imagined success per policy, all/ID/OOD,
with intervals), the ranking metrics per split beside the real-vs-real noise floor, a real-vs-imagined
scatter, success-by-initial-position maps, and the videos r2s2r-rank saved, embedded. Open it in a browser.
"""

from __future__ import annotations

import sys

from r2s2r.eval.report import ReportConfig, write_report
from r2s2r.scripts import cli


def report_main(cfg: ReportConfig) -> int:
    path = write_report(cfg.rank_json, cfg.output)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); open it in a browser")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(ReportConfig, report_main, __doc__, argv, prog="r2s2r-report")


if __name__ == "__main__":
    sys.exit(main())
