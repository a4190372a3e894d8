"""r2s2r-record: run a policy in a reference world (MuJoCo ALOHA or gym-pusht's PushT) and write a LeRobot
v3 dataset.

Examples:
    r2s2r-record --root=outputs/datasets/demo --num_episodes=8
    r2s2r-record --root=outputs/datasets/sloppy --num_episodes=100 --distribution=ood \\
        --policy.path=r2s2r.robots.demonstrators:make_demonstrator --policy.kwargs='{"skill": "sloppy"}'
    r2s2r-record --root=outputs/logs/act_010000 --policy.path=outputs/act/checkpoints/010000/pretrained_model
    r2s2r-record --world.cameras='[top]' --world.image_height=64 --world.image_width=64 --world.num_envs=8
    r2s2r-record --num_episodes=300 --workers=2     # simulate and render in two processes
    r2s2r-record --root=outputs/datasets/pusht --world.task=pusht --policy.path=r2s2r.robots.pusht:make_pusher

PushT (--world.task=pusht) keeps the same flags; three left at ALOHA's defaults take PushT's own: the
cameras become [top] (its only camera; any other is refused), --world.ood_margin=0.05 (m) becomes 40 (world
units of its 512x512 arena) and --episode_length=400 (8 s at 50 Hz) becomes 300 (gym-pusht's 30 s at 10 Hz).
Any other value is taken as given. It records at 10 Hz, robot_type pusht: ClipConfig(robot="pusht") reads it.

Re-running the same command resumes: it adds only the episodes still missing (a killed batch is rolled
back first). Every flag is a field of `RecordConfig` (r2s2r/data/recorder.py); `--config_path=x.yaml`
reads them from a file.
"""

from __future__ import annotations

import sys

from r2s2r.data.recorder import RecordConfig, record, summary_text
from r2s2r.scripts import cli


def describe_dataset(root) -> str:
    """A few lines on what a recorded dataset holds: features, episodes, frames, files and size."""
    from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata("local/dataset", root=root)
    files = [p for p in meta.root.rglob("*") if p.is_file()]
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    lines = [
        f"LeRobot {meta.info['codebase_version']} dataset at {meta.root}: {meta.total_episodes} episodes, "
        f"{meta.total_frames} frames at {meta.fps} Hz, {len(files)} files, {size_mb:.1f} MB",
    ]
    for key, ft in meta.features.items():
        if key not in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
            lines.append(f"  {key:32s} {ft['dtype']:8s} {tuple(ft['shape'])}")
    return "\n".join(lines)


def record_main(cfg: RecordConfig) -> int:
    summary = record(cfg)
    print(summary_text(summary))
    print(describe_dataset(summary.root))
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(RecordConfig, record_main, __doc__, argv, prog="r2s2r-record")


if __name__ == "__main__":
    sys.exit(main())
