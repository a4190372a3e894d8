"""Turn any LeRobot v3 dataset into multi-view training clips for the world model.

A clip is `context_frames + future_frames` frames of every requested camera, spaced at `frame_rate` (a
divisor of the dataset's control rate: 10 Hz model frames over 50 Hz control gives a stride of 5), with
the actions between consecutive frames as chunks of `stride` actions, the proprio at every frame and,
where the dataset has them, the object state, the reward and success labels:

    observation.images.<cam>       (T,3,H,W) float in [0,1]
    observation.state              (T,S)
    observation.environment_state  (T,E)       if recorded
    action                         (T-1,K,A)   K = stride: the actions taken from frame t to frame t+1
    next.reward, next.success      (T-1,)      label of the state reached at frame t+1, if recorded
    episode_success                ()          whether the episode ever succeeded, if recorded
    episode_index ()  frame_index (T,)

Tabular data are read once through LeRobot's own metadata and parquet loaders and kept as numpy arrays,
so samples cost only the video decode; frames come from `FrameDecoder` (LeRobot's decoder, or decord
with LeRobot's decoder for the files decord cannot read).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

import numpy as np
import pyarrow.parquet as pq
import torch

from r2s2r.data.commit import check_committed
from r2s2r.data.video import FrameDecoder, video_frame_index
from r2s2r.errors import DamagedFileError
from r2s2r.files import read_json
from r2s2r.robots.spec import robot_spec

log = logging.getLogger(__name__)

_TABULAR = ("observation.state", "action", "observation.environment_state", "next.reward", "next.success")


@dataclass
class ClipConfig:
    """Which dataset to read and how to cut it into clips."""

    root: str = "outputs/datasets/transfer_cube"  # folder of a LeRobot v3 dataset (r2s2r-train also takes
    # several, of any known robots and tasks: [a,b,c]; the first is the model's own robot and task)
    repo_id: str = "local/dataset"  # LeRobot repo id (a label only: nothing is downloaded)
    cameras: tuple[str, ...] = ()  # camera names to read; empty = every camera of the dataset
    read_images: bool = True  # False: proprio, actions and object state only; no video is decoded (and the
    # dataset need not have the cameras: a state-only recording)
    context_frames: int = 2  # K frames the model conditions on
    future_frames: int = 0  # frames after them (0: 3 when training, as the state head unrolls them; else 1)
    frame_rate: int = 0  # frames per second, a divisor of the dataset's fps (0: the model's when training or
    # evaluating one, i.e. control rate / frame_stride; 10 Hz when clips are read directly)
    decoder: str = "lerobot"  # lerobot (torchcodec, fastest here) | decord (LeRobot's decoder where it fails)
    robot: str = "aloha"  # embodiment whose action/state dims the data must match; "" skips the check
    episodes: tuple[int, ...] | None = None  # episode indices to use (of the first dataset); None = all
    action_free: tuple[str, ...] = ()  # r2s2r-train: datasets of `root` read as footage without actions
    # (their actions and proprio are never shown to the model)
    action_free_share: float = 0.0  # r2s2r-train: share of a batch's clips drawn from the action-free
    # datasets of its robot and task (0: in proportion to their clips)

    def __post_init__(self) -> None:
        if self.context_frames < 1 or self.future_frames < 0:
            raise ValueError(
                f"context_frames={self.context_frames} must be >= 1 and future_frames={self.future_frames} "
                ">= 1 (or 0 for the default)."
            )
        if self.frame_rate < 0:
            raise ValueError(f"frame_rate={self.frame_rate} must be >= 1 Hz, or 0 for the model's.")
        self.cameras = tuple(self.cameras)
        if not 0.0 <= self.action_free_share < 1.0:
            raise ValueError(f"action_free_share={self.action_free_share} must be in [0, 1).")

    @property
    def clip_length(self) -> int:
        return self.context_frames + (self.future_frames or 1)


def feature_stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """Per-column mean/std/min/max, and the median and 1st/99th percentiles (a robust scale), of (N,D)."""
    x = np.asarray(x, dtype=np.float64)
    q01, median, q99 = np.quantile(x, [0.01, 0.5, 0.99], axis=0)
    return {
        "mean": x.mean(0), "std": x.std(0), "min": x.min(0), "max": x.max(0),
        "median": median, "q01": q01, "q99": q99,
    }  # fmt: skip


class ClipDataset(torch.utils.data.Dataset):
    """Multi-view clips from a LeRobot v3 dataset; see the module docstring for the sample layout."""

    def __init__(self, cfg: ClipConfig):
        from lerobot.datasets.lerobot_dataset import LeRobotDatasetMetadata

        self.cfg = cfg
        self.root = Path(cfg.root)
        _require_dataset(self.root)
        try:
            self.meta = LeRobotDatasetMetadata(cfg.repo_id, root=self.root)
        except Exception as e:
            raise_damage(self.root, e)
        self.fps = self.meta.fps
        if cfg.frame_rate == 0 or cfg.future_frames == 0:  # defaults for clips read directly
            cfg = replace(cfg, frame_rate=cfg.frame_rate or 10, future_frames=cfg.future_frames or 1)
            self.cfg = cfg
        if self.fps % cfg.frame_rate:
            raise ValueError(
                f"frame_rate={cfg.frame_rate} Hz does not divide the dataset's {self.fps} Hz; "
                f"pick a divisor such as {', '.join(str(d) for d in _divisors(self.fps))}."
            )
        self.stride = self.fps // cfg.frame_rate
        self.camera_keys = self._select_cameras()
        self.data = self._load_tabular()
        self._check_dims_and_values()
        self._build_index()
        self.decoder = FrameDecoder(cfg.decoder, fps=self.fps)
        self._check_videos()
        self.decoder.close()  # workers open their own readers (lerobot#2488)
        self.stats = self._compute_stats()

    # ------------------------------------------------------------------ setup
    def _select_cameras(self) -> list[str]:
        if not self.cfg.read_images:
            return []
        available = [k.removeprefix("observation.images.") for k in self.meta.video_keys]
        if self.meta.image_keys:
            raise ValueError(
                f"{self.root} stores cameras {self.meta.image_keys} as images, not videos; re-encode it as "
                "videos (LeRobot's default) to read it here."
            )
        wanted = list(self.cfg.cameras) or available
        missing = [c for c in wanted if c not in available]
        if missing:
            raise ValueError(
                f"dataset {self.root} has no camera {missing} (it has: {', '.join(available) or 'none'}); "
                "drop it from cameras or record it."
            )
        return [f"observation.images.{c}" for c in wanted]

    def _load_tabular(self) -> dict[str, np.ndarray]:
        hf = load_frames_table(self.root)
        columns = ["episode_index", "frame_index", "index"] + [c for c in _TABULAR if c in hf.column_names]
        table = hf.select_columns(columns).with_format("numpy")[:]
        order = np.argsort(table["index"], kind="stable")
        data = {k: np.asarray(v)[order] for k, v in table.items()}
        for key in ("next.reward", "next.success"):
            if key in data:
                data[key] = data[key].reshape(len(order))
        return data

    def _check_dims_and_values(self) -> None:
        if self.cfg.robot:
            spec = robot_spec(self.cfg.robot)
            for key, dim in (("action", spec.action_dim), ("observation.state", spec.state_dim)):
                if key not in self.data:
                    raise ValueError(
                        f"dataset {self.root} has no '{key}' column; it cannot train a world model."
                    )
                if self.data[key].shape[1] != dim:
                    raise ValueError(
                        f"dataset {self.root} has {self.data[key].shape[1]}-D '{key}' but robot "
                        f"'{spec.name}' has {dim}; set robot to the robot that recorded it."
                    )
        for key in ("action", "observation.state", "observation.environment_state"):
            if key in self.data and not np.isfinite(self.data[key]).all():
                row = int(np.argmax(~np.isfinite(self.data[key]).all(axis=1)))
                ep, frame = int(self.data["episode_index"][row]), int(self.data["frame_index"][row])
                raise ValueError(
                    f"episode {ep} frame {frame} of {self.root} has NaN/inf in '{key}'; drop that episode "
                    "(episodes=...) or re-record it."
                )

    def _build_index(self) -> None:
        episode_index = self.data["episode_index"]
        wanted = set(self.cfg.episodes) if self.cfg.episodes is not None else None
        span = (self.cfg.clip_length - 1) * self.stride  # control steps from first to last clip frame
        self.episodes, starts, counts = [], [], []
        for ep in np.unique(episode_index):
            if wanted is not None and int(ep) not in wanted:
                continue
            rows = np.nonzero(episode_index == ep)[0]
            n_clips = len(rows) - span
            if n_clips <= 0:
                log.warning(
                    "episode %d has %d frames, too few for one clip of %d; skipped", ep, len(rows), span + 1
                )
                continue
            self.episodes.append(int(ep))
            starts.append(int(rows[0]))
            counts.append(n_clips)
        if wanted is not None and (unknown := wanted - set(np.unique(episode_index).tolist())):
            raise ValueError(f"episodes {sorted(unknown)} are not in {self.root}.")
        if not self.episodes:
            raise ValueError(
                f"no episode of {self.root} is long enough for a clip of {self.cfg.clip_length} frames at "
                f"{self.cfg.frame_rate} Hz; use fewer frames or a higher frame_rate."
            )
        self._row0 = np.array(starts)  # first table row of each kept episode
        self._cum = np.concatenate([[0], np.cumsum(counts)])
        episodes_meta = self.meta.episodes.to_pandas().set_index("episode_index")
        self._video_from = {  # (camera key, episode) -> (video file, timestamp of the episode's first frame)
            (key, ep): self._video_location(episodes_meta.loc[ep], key)
            for key in self.camera_keys
            for ep in self.episodes
        }

    def _video_location(self, row, key: str) -> tuple[Path, float]:
        chunk, file = int(row[f"videos/{key}/chunk_index"]), int(row[f"videos/{key}/file_index"])
        path = self.root / self.meta.video_path.format(video_key=key, chunk_index=chunk, file_index=file)
        return path, float(row[f"videos/{key}/from_timestamp"])

    def _check_videos(self) -> None:
        """Every video file must decode through the last frame its episodes need."""
        needed: dict[Path, int] = {}
        for (_, ep), (path, from_ts) in self._video_from.items():
            length = int(np.sum(self.data["episode_index"] == ep))
            last = int(video_frame_index(from_ts, length - 1, self.fps)) + 1
            needed[path] = max(needed.get(path, 0), last)
        for path, n in needed.items():
            self.decoder.check(path, n)

    def _compute_stats(self) -> dict[str, dict[str, torch.Tensor]]:
        """Per-feature mean/std/min/max over the rows used: proprio, actions, object state, cameras; and,
        for the low-dimensional features, the median and 1st/99th percentiles (a robust scale)."""
        rows = np.concatenate([np.nonzero(self.data["episode_index"] == ep)[0] for ep in self.episodes])
        stats = {}
        for key in ("observation.state", "action", "observation.environment_state"):
            if key in self.data:
                stats[key] = feature_stats(self.data[key][rows])
        for key in self.camera_keys:  # LeRobot computes per-channel image stats while recording
            if self.meta.stats and key in self.meta.stats:
                stats[key] = {k: self.meta.stats[key][k] for k in ("mean", "std", "min", "max")}
        return {
            k: {s: torch.as_tensor(np.asarray(v), dtype=torch.float32) for s, v in d.items()}
            for k, d in stats.items()
        }

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return int(self._cum[-1])

    def locate(self, idx: int) -> tuple[int, int]:
        """(episode index, first frame index) of clip `idx`."""
        k, start = self._locate(idx)
        return self.episodes[k], start

    def _locate(self, idx: int) -> tuple[int, int]:
        if not 0 <= idx < len(self):
            raise IndexError(f"clip {idx} out of range for {len(self)} clips")
        k = int(np.searchsorted(self._cum, idx, side="right") - 1)
        return k, int(idx - self._cum[k])

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        k, start = self._locate(idx)
        return self._clip(k, start, self.cfg.clip_length)

    def episode_length(self, ep: int) -> int:
        """Control steps (frames at the dataset's rate) of episode `ep`."""
        k = self.episodes.index(ep)
        return int(self._cum[k + 1] - self._cum[k]) + (self.cfg.clip_length - 1) * self.stride

    def episodes_by_length(self) -> dict[int, list[int]]:
        """The episodes grouped by length: those `episode` returns as clips of the same shape."""
        groups: dict[int, list[int]] = {}
        for ep in self.episodes:
            groups.setdefault(self.episode_length(ep), []).append(ep)
        return groups

    def episode(self, ep: int) -> dict[str, torch.Tensor]:
        """Episode `ep` as one long clip: every model frame from its first, with all chunks between them."""
        if ep not in self.episodes:
            raise ValueError(f"episode {ep} is not among the episodes read from {self.root}.")
        frames = (self.episode_length(ep) - 1) // self.stride + 1
        return self._clip(self.episodes.index(ep), 0, frames)

    def start(self, ep: int) -> dict[str, torch.Tensor]:
        """Episode `ep`'s first observation (images (3,H,W) in [0,1], state, object state) and its outcome."""
        if ep not in self.episodes:
            raise ValueError(f"episode {ep} is not among the episodes read from {self.root}.")
        clip = self._clip(self.episodes.index(ep), 0, 2)
        keys = [*self.camera_keys, "observation.state", "observation.environment_state"]
        first = {k: clip[k][0] for k in keys if k in clip}
        for key in ("episode_success", "episode_index"):
            if key in clip:
                first[key] = clip[key]
        return first

    def _clip(self, k: int, start: int, T: int) -> dict[str, torch.Tensor]:
        """T frames of kept episode `k` from frame `start`, `stride` control steps apart."""
        ep, K = self.episodes[k], self.stride
        frames = start + K * np.arange(T)  # (T,) frame indices within the episode
        rows = self._row0[k] + frames
        sample: dict[str, torch.Tensor] = {}
        for key in self.camera_keys:
            path, from_ts = self._video_from[(key, ep)]
            sample[key] = self.decoder.decode(path, video_frame_index(from_ts, frames, self.fps).tolist())
        sample["observation.state"] = torch.from_numpy(self.data["observation.state"][rows]).float()
        if "observation.environment_state" in self.data:
            sample["observation.environment_state"] = torch.from_numpy(
                self.data["observation.environment_state"][rows]
            ).float()
        action_rows = self._row0[k] + start + np.arange((T - 1) * K)
        sample["action"] = (
            torch.from_numpy(self.data["action"][action_rows]).float().reshape(T - 1, K, -1)
        )  # (T-1,K,A)
        label_rows = rows[1:] - 1  # the transition that ends at frame t+1
        for key in ("next.reward", "next.success"):
            if key in self.data:
                sample[key] = torch.from_numpy(self.data[key][label_rows])
        if "next.success" in self.data:
            ep_rows = self._row0[k] + np.arange(self.episode_length(ep))
            sample["episode_success"] = torch.tensor(bool(self.data["next.success"][ep_rows].any()))
        sample["episode_index"] = torch.tensor(ep)
        sample["frame_index"] = torch.from_numpy(frames)
        return sample


def match_frame_rate(cfg: ClipConfig, frame_stride: int) -> None:
    """Set `cfg.frame_rate` to `frame_stride` control steps per frame if it is 0 (the model's rate)."""
    if cfg.frame_rate:
        return
    info = _require_dataset(Path(cfg.root))
    fps = int(read_json(info, "restore it from a copy or record the dataset again.")["fps"])
    if fps % frame_stride:
        raise ValueError(
            f"the model's frame_stride={frame_stride} control steps does not divide the dataset's {fps} Hz; "
            f"train a model with a stride among {', '.join(str(d) for d in _divisors(fps))}."
        )
    cfg.frame_rate = fps // frame_stride


def load_frames_table(root: Path):
    """The dataset's frames (LeRobot's parquet loader over `data/`), as a Hugging Face dataset; a parquet
    file that cannot be read raises `DamagedFileError` naming it."""
    from lerobot.datasets.utils import load_nested_dataset

    try:
        return load_nested_dataset(Path(root) / "data")
    except Exception as e:
        raise_damage(Path(root), e)


def raise_damage(root: Path, error: Exception) -> NoReturn:
    """Re-raise `error`, which LeRobot raised reading `root`, as a `DamagedFileError` naming the file at
    fault (an unreadable info.json or parquet file); `error` itself if every file reads."""
    fix = "restore it from a copy or record the dataset again."
    if (root / "meta" / "info.json").is_file():
        read_json(root / "meta" / "info.json", fix)
    for path in sorted(root.glob("meta/**/*.parquet")) + sorted(root.glob("data/**/*.parquet")):
        try:
            pq.read_metadata(path)
        except Exception as e:
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise DamagedFileError(f"{path} is truncated or corrupt ({reason}); {fix}") from error
    raise error


def _require_dataset(root: Path) -> Path:
    """The dataset's meta/info.json, or a one-line error saying how to get a dataset there (or that the
    recording there was interrupted, and how to roll it back)."""
    check_committed(root)
    info = root / "meta" / "info.json"
    if not info.is_file():
        raise FileNotFoundError(
            f"no LeRobot dataset at {root} (meta/info.json is missing); record one with "
            "`r2s2r-record --root=...` or point root at a dataset folder."
        )
    return info


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
