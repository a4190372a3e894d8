"""r2s2r-rank: rank policy checkpoints in a world model and compare with their hardware logs.

Examples:
    r2s2r-rank --checkpoint=outputs/train/demo/checkpoints/last/pretrained_model --logs_dir=outputs/logs
    r2s2r-rank --checkpoint=... --logs_dir=hw_logs --policies=zoo.yaml --samples_per_start=4 --workers=2
    r2s2r-rank --checkpoint=... --logs_dir=... --noise_floor_dir=hw_logs_rerun  # real-vs-real floor
    r2s2r-rank --checkpoint=assets/world_model_small --logs_dir=... --object_poses=false  # cameras only
    r2s2r-rank --checkpoint=assets/world_model_small --logs_dir=... --frames=head  # frames from the head

`logs_dir` holds one LeRobot dataset per checkpoint (`<logs_dir>/<name>/`), each with per-frame success
labels (`next.success`) and, where known, ID/OOD labels (the recorder's). The policy of each comes from the
manifest, a YAML/JSON file such as

    nominal: {path: r2s2r.robots.demonstrators:make_demonstrator, kwargs: {skill: nominal}, family: scripted}
    act_2000: {path: outputs/act/step_2000, family: act}

or, for logs recorded by r2s2r-record, from the recording itself. Each policy runs in imagination from its
own logs' episode starts. Prints, per checkpoint, real vs imagined success (all / ID / OOD), then Pearson,
Spearman and Kendall with bootstrap intervals, MMRV (SIMPLER's convention), pairwise ordering accuracy and
calibration; writes <output_dir>/rank.json and report.html. A policy that fails is reported and skipped.
On the video path (the default, `--render=true`) success is the judge's reading of the imagined frames; the
`head` column is the state head's verdict on the same episodes, the dynamics' answer. Where the two differ
much, trust neither before looking at the videos. `--frames=head` draws the imagined frames from the state
head's state instead of sampling them (the robot's MJCF posed there, coloured as the logs look: fit it with
r2s2r-fit-frames; assets/world_model_small has it): the policy sees the cube where the dynamics put it, at
the logs' resolution; success is then the head's, and rank.json keeps the judge's reading of the drawn
frames beside it (`imagined_judge`).

Object poses: where the logs recorded the cube's pose (`observation.environment_state`), the imagined
episodes start from it as well as from the cameras and proprio. `--object_poses=false` ignores it, as on
hardware that records none (logs without the feature are read that way anyway); the world model's state
head must then read the cameras (assets/world_model_small does; assets/world_model_blind cannot), or
`--frames=head` reads each start's pose from its first frame's top camera. A policy that acts on object
poses, such as the scripted demonstrator, then acts on the poses the head imagines.
rank.json and report.html say which starts used the logged poses.
"""

from __future__ import annotations

import sys

from r2s2r.eval.rank import RankConfig, rank
from r2s2r.scripts import cli


def _rate(entry: dict | None) -> str:
    return f"{100 * entry['rate']:5.1f}" if entry else "    -"


def format_rank(payload: dict) -> str:
    """The printed table: per policy real / imagined success (all, ID, OOD) and, where frames were imagined,
    the other verdict on the same episodes: the state head's (`head`) beside the judge's, or, with frames
    drawn from the head's state (success then the head's), the judge's reading of them (`judge`); then the
    statistics per split, the object-pose note, the failures."""
    video = payload["settings"]["render"]
    drawn = payload["settings"].get("frames") == "head"
    other, key = ("judge", "imagined_judge") if drawn else ("head", "imagined_head")
    lines = [
        f"{'policy':24s} {'family':10s} {'real':>6s} {'imag':>6s}" + (f" {other:>6s}" if video else "")
        + f"  {'ID r/i':>13s}  {'OOD r/i':>13s}"
    ]  # fmt: skip
    for p in sorted(payload["policies"], key=lambda p: -p["real"]["all"]["rate"]):
        r, i, h = p["real"], p["imagined"], p.get(key) or {}
        lines.append(
            f"{p['name'][:24]:24s} {p['family'][:10]:10s} {_rate(r['all'])} {_rate(i['all'])}"
            + (f" {_rate(h.get('all'))}" if video else "")
            + f"  {_rate(r.get('id'))}/{_rate(i.get('id'))}  {_rate(r.get('ood'))}/{_rate(i.get('ood'))}"
        )
    for split, m in payload["metrics"].items():
        v = lambda d: "n/a" if d["value"] is None else f"{d['value']:.2f}"  # noqa: E731
        pairs = m["pairwise_accuracy"]
        gap = next(k for k in pairs if k != "all")
        lines.append(
            f"[{split}] n={m['n']} Pearson {v(m['pearson'])} Spearman {v(m['spearman'])} Kendall "
            f"{v(m['kendall'])} MMRV {m['mmrv']:.3f} pairwise {v(pairs['all'])} ({gap}: {v(pairs[gap])}) "
            f"calibration MAE {m['calibration']['mae_points']:.1f} pts"
        )
    lines.append(f"object poses: {payload['object_poses']}")
    for f in payload["failed"]:
        lines.append(f"FAILED {f['name']}: {f['error']}")
    return "\n".join(lines)


def rank_main(cfg: RankConfig) -> int:
    payload = rank(cfg)
    print(format_rank(payload))
    print(
        f"\nwrote {cfg.output_dir}/rank.json" + (f" and {cfg.output_dir}/report.html" if cfg.report else "")
    )
    return 1 if payload["failed"] else 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(RankConfig, rank_main, __doc__, argv, prog="r2s2r-rank")


if __name__ == "__main__":
    sys.exit(main())
