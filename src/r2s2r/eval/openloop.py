"""Open-loop alignment: replay logged actions in the world model from the logged first frames.

For every held-out episode the world model starts from the episode's first real observation (its views,
proprio and, where the recording has it, the object pose, as `r2s2r-eval` starts imagined episodes) and is
fed the actions the robot actually took, chunk by chunk, never seeing another real frame. Then, per view and
horizon, imagined frames are compared with the real ones (PSNR, SSIM), the state head's object state with
the logged one, and the judge's verdict on the imagined video with the logged outcome (beside it, the state
head's own verdict: where the head sees the success and the judge does not, the video failed to show it).
A copy-last-frame baseline (the first frame, held) is scored the same way: a model that cannot beat it has
learned nothing about the consequences of actions. Frames are compared at the model's resolution.

Results are split by ID/OOD where the dataset says which is which (the recorder's labels).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from r2s2r.data.commit import episode_labels
from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate
from r2s2r.eval.metrics import psnr, ssim
from r2s2r.eval.video import write_side_by_side_views
from r2s2r.files import atomic_write_text
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.rollout.replay import imagine_episodes

log = logging.getLogger(__name__)


@dataclass
class OpenLoopConfig:
    """Which model to evaluate on which held-out episodes, and what to write."""

    checkpoint: str = "outputs/train/world_model/checkpoints/last/pretrained_model"  # WorldModel directory
    data: ClipConfig = field(default_factory=ClipConfig)  # held-out dataset (root, episodes)
    horizons: tuple[float, ...] = (1.0, 3.0, 6.0)  # seconds after the first frame at which frames are scored
    batch_size: int = 8  # episodes imagined together
    sampling_steps: int = 0  # denoising steps per frame; 0 = the model's own setting
    videos: int = 4  # side-by-side real | imagined MP4s for the first N episodes
    output_dir: str = "outputs/eval/openloop"  # results.json and videos/
    seed: int = 0  # sampling noise
    device: str = "cpu"  # torch device

    def __post_init__(self) -> None:
        self.horizons = tuple(float(h) for h in self.horizons)
        if not self.horizons or min(self.horizons) <= 0:
            raise ValueError(f"horizons={self.horizons} must be positive seconds, e.g. (1, 3, 6).")


def _splits(root: Path, episodes: list[int]) -> dict[int, str]:
    """ID/OOD label of each episode from the recorder's sidecar; 'all' where none is known."""
    labels = episode_labels(root)
    return {ep: labels.get(ep, {}).get("distribution", "all") for ep in episodes}


def _model_res(model: WorldModel, video: torch.Tensor) -> torch.Tensor:
    """(T,3,H,W) in [0,1] -> model resolution, as the model sees it."""
    size = (model.config.image_height, model.config.image_width)
    return video if tuple(video.shape[-2:]) == size else F.interpolate(video, size=size, mode="area")


def score_episode(model: WorldModel, real: dict, imagined: dict, horizons: list[int]) -> dict:
    """PSNR/SSIM per view at each horizon (frames), for the model and for copy-last-frame."""
    scores: dict = {"model": {}, "copy_last": {}}
    for key in model.config.camera_keys:
        truth = _model_res(model, real[key])
        pred = _model_res(model, imagined["frames"][key])
        held = truth[:1].expand_as(truth)
        cam = key.removeprefix("observation.images.")
        for name, guess in (("model", pred), ("copy_last", held)):
            scores[name][cam] = {
                h: {
                    "psnr": float(psnr(guess[h], truth[h], max_db=60.0)),
                    "ssim": float(ssim(guess[h], truth[h], window=7)),
                }
                for h in horizons
            }
    if "observation.environment_state" in real and model.config.env_state_dim:
        err = (imagined["env_state"][:, :3] - real["observation.environment_state"][1:, :3]).norm(
            dim=-1
        )  # (T-1,)
        scores["object_error_m"] = {h: float(err[h - 1]) for h in horizons}
    if "episode_success" in real:
        scores["agree"] = bool(imagined["success"] == bool(real["episode_success"]))
        scores["head_agree"] = bool(imagined["head_success"] == bool(real["episode_success"]))
        scores["real_success"] = bool(real["episode_success"])
    return scores


def evaluate_openloop(cfg: OpenLoopConfig) -> dict:
    """Open-loop alignment of `cfg.checkpoint` on the held-out episodes; writes results.json and videos."""
    model = WorldModel.from_pretrained(cfg.checkpoint, device=cfg.device)
    mc = model.config
    cfg.data.cameras, cfg.data.context_frames, cfg.data.future_frames = mc.cameras, 1, 1
    match_frame_rate(cfg.data, mc.frame_stride)
    dataset = ClipDataset(cfg.data)
    if dataset.stride != mc.frame_stride:
        raise ValueError(
            f"the dataset at {dataset.fps} Hz gives stride {dataset.stride} at frame_rate="
            f"{cfg.data.frame_rate}, but the model was trained with frame_stride={mc.frame_stride}: "
            f"set --data.frame_rate={dataset.fps // mc.frame_stride}."
        )
    rate = dataset.fps / dataset.stride
    horizons = [int(round(h * rate)) for h in cfg.horizons]
    out = Path(cfg.output_dir)
    splits = _splits(dataset.root, dataset.episodes)
    per_episode, video_count = [], 0
    for length, eps in dataset.episodes_by_length().items():
        usable = [h for h in horizons if h <= (length - 1) // dataset.stride]
        if len(usable) < len(horizons):
            log.warning(
                "episodes of %d steps are too short for horizons %s; scoring %s", length, horizons, usable
            )
        for i in tqdm(range(0, len(eps), cfg.batch_size), desc=f"open-loop ({length} steps)", unit="batch"):
            batch_eps = eps[i : i + cfg.batch_size]
            real = [dataset.episode(ep) for ep in batch_eps]
            imagined = imagine_episodes(model, real, cfg.sampling_steps, cfg.seed, cfg.device)
            for ep, r, im in zip(batch_eps, real, imagined, strict=True):
                per_episode.append(
                    {"episode": ep, "split": splits[ep], **score_episode(model, r, im, usable)}
                )
                if video_count < cfg.videos:
                    write_side_by_side_views(
                        out / "videos" / f"episode_{ep:06d}.mp4",
                        {k.removeprefix("observation.images."): r[k] for k in mc.camera_keys},
                        {k.removeprefix("observation.images."): im["frames"][k] for k in mc.camera_keys},
                        fps=rate,
                    )
                    video_count += 1
    summary = summarize(per_episode, cfg.horizons, horizons)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "checkpoint": str(cfg.checkpoint),
        "data": str(cfg.data.root),
        "summary": summary,
        "episodes": per_episode,
    }
    atomic_write_text(out / "results.json", json.dumps(payload, indent=1))
    return payload


def summarize(per_episode: list[dict], seconds: tuple[float, ...], horizons: list[int]) -> dict:
    """Means per split (and over all): PSNR/SSIM per view and horizon, object error, outcome agreement."""
    summary = {}
    for split in sorted({e["split"] for e in per_episode}) + ["all"]:
        rows = [e for e in per_episode if split in ("all", e["split"])]
        entry: dict = {"episodes": len(rows)}
        for name in ("model", "copy_last"):
            entry[name] = {
                cam: {
                    f"{s:g}s": {
                        m: _mean([r[name][cam][h][m] for r in rows if h in r[name][cam]])
                        for m in ("psnr", "ssim")
                    }
                    for s, h in zip(seconds, horizons, strict=True)
                }
                for cam in rows[0][name]
            }
        if "object_error_m" in rows[0]:
            entry["object_error_m"] = {
                f"{s:g}s": _mean([r["object_error_m"].get(h) for r in rows])
                for s, h in zip(seconds, horizons, strict=True)
            }
        if "agree" in rows[0]:
            entry["outcome_agreement"] = _mean([float(r["agree"]) for r in rows])
            entry["head_outcome_agreement"] = _mean([float(r["head_agree"]) for r in rows])
            entry["real_success_rate"] = _mean([float(r["real_success"]) for r in rows])
        summary[split] = entry
    return summary


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None
