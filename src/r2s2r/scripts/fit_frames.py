"""r2s2r-fit-frames: fit how the logs look, so that imagined frames can be drawn from the head's state.

Examples:
    r2s2r-fit-frames --checkpoint=assets/world_model_small --data='[outputs/frames/design]'
    r2s2r-eval --checkpoint=assets/world_model_small --frames=head --starts='[outputs/logs/camera_policy]' ...

`--frames=head` (r2s2r-eval, r2s2r-rank) draws every imagined view, at the logs' resolution, from the state
the state head imagines: the robot's MJCF posed at the imagined joints and object poses (geometry), coloured
as the logs show it (appearance: per view and part a colour shaded by the surface's normal, and for a fixed
camera each pixel of the static scene as logged). This fits the appearance on rendered recordings (any
episodes of the same scene and cameras; not the episodes you will score on) and writes
<checkpoint>/appearance.safetensors beside the model, with <checkpoint>/appearance.json (frames used and the
drawn frames' mean absolute colour error on them). About 30 ms of drawing per frame of three views on a
CPU core: 16 episodes of 400 steps (640 frames at 5 Hz) take about 30 s. Nothing else in the model changes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate
from r2s2r.files import atomic_write_text
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.robots.spec import robot_spec
from r2s2r.rollout.head_frames import APPEARANCE_FILE, SceneGeometry, fit_appearance
from r2s2r.scripts import cli


@dataclass
class FitFramesConfig:
    """Which world model to fit the logs' appearance for, and on which rendered recordings."""

    checkpoint: str = "assets/world_model_small"  # WorldModel directory; the fit is written into it
    data: list[str] = field(default_factory=list)  # rendered recordings of the scene (LeRobot datasets)
    max_episodes: int = 0  # episodes read per dataset; 0 = all

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError("data is empty: pass rendered recordings of the scene, --data='[DIR, ...]'.")
        if self.max_episodes < 0:
            raise ValueError(f"max_episodes={self.max_episodes} must be >= 0 (0: every episode).")


def logged_episodes(roots: list[str], config: WorldModelConfig, max_episodes: int = 0):
    """Yield (images (T,V,3,H,W), states (T,S), poses (T,E) or None) of every episode of `roots`, one frame
    every `frame_stride` control steps, at the logs' own resolution."""
    for root in roots:
        clip = ClipConfig(root=root, cameras=config.cameras, context_frames=1, future_frames=1)
        match_frame_rate(clip, config.frame_stride)
        ds = ClipDataset(clip)
        for ep in ds.episodes[: max_episodes or None]:
            frames = ds.episode(ep)
            images = [frames[key] for key in ds.camera_keys]
            poses = frames.get("observation.environment_state")
            yield (
                torch.stack(images, dim=1).numpy(),
                frames["observation.state"].numpy(),
                None if poses is None else poses.numpy(),
            )


def fit_main(cfg: FitFramesConfig) -> int:
    config = WorldModelConfig.load(cfg.checkpoint)
    first = ClipDataset(
        ClipConfig(root=cfg.data[0], cameras=config.cameras, context_frames=1, future_frames=1)
    )
    height, width = first.start(first.episodes[0])[first.camera_keys[0]].shape[-2:]
    geometry = SceneGeometry(robot_spec(config.robot), tuple(config.cameras), height, width)
    renderer, figures = fit_appearance(geometry, logged_episodes(cfg.data, config, cfg.max_episodes))
    meta = {"data": [str(Path(d)) for d in cfg.data], **figures}
    path = renderer.save(cfg.checkpoint, {"data": meta["data"]})
    atomic_write_text(Path(cfg.checkpoint) / "appearance.json", json.dumps(meta, indent=1))
    print(
        f"appearance of {', '.join(config.cameras)} at {height}x{width}, fitted on {figures['frames']} "
        f"frames: mean absolute colour error {figures['mae']:.4f} (0..1 units) on the interior pixels"
    )
    print(f"wrote {path} ({APPEARANCE_FILE} beside the model)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(FitFramesConfig, fit_main, __doc__, argv, prog="r2s2r-fit-frames")


if __name__ == "__main__":
    sys.exit(main())
