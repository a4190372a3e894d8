"""Random-access frame decoding for LeRobot video files: LeRobot's own decoder, or decord with fallback.

Two backends read the same frames (tests check they agree to the last grey level):
- `lerobot` (default): LeRobot's torchcodec path, the decoder LeRobot itself trains with. On this
  project's recordings (h264, keyframe every 2 frames, 1,600-frame files) it fetches 3 scattered frames
  in ~2 ms, 10-15x faster than decord (benchmarks/record.py measures both), and it reads AV1.
- `decord`: decord's VideoReader, long the usual fast random-access reader. It cannot read AV1 (LeRobot's
  default codec and that of most published LeRobot datasets), so any file it refuses is read through
  LeRobot's decoder instead, with a warning naming the file.

Decoder objects are cached per process: a decoder opened before a DataLoader forks must not be used in
the workers (lerobot#2488), so a new process always opens its own.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import numpy as np
import torch

from r2s2r.errors import DamagedFileError

log = logging.getLogger(__name__)

DECODERS = ("lerobot", "decord")
_INHERITED: list[dict] = []  # decord readers a forked process inherited and must never destroy


class VideoFileError(DamagedFileError):
    """A video file that is missing, corrupt or shorter than its episodes need."""


class FrameDecoder:
    """Decode frames `indices` of a video file as (N,3,H,W) float in [0,1]."""

    def __init__(self, backend: str = "lerobot", fps: int = 50):
        if backend not in DECODERS:
            raise ValueError(f"decoder='{backend}' must be one of {DECODERS}.")
        self.backend = backend
        self.fps = fps
        self._pid = os.getpid()
        self._readers: dict[Path, object] = {}
        self._torchcodec = None  # LeRobot's torchcodec decoder cache, one per process
        self._fallback: set[Path] = set()  # files decord cannot read

    def _own_process(self) -> None:
        """Forget decoders opened by the process this one was forked from (a DataLoader parent).

        Their file offsets are shared with the parent and decord's decoder threads did not survive the
        fork (lerobot#2488); decord's destructor would wait on those threads forever, so the inherited
        readers are kept referenced, never destroyed.
        """
        if os.getpid() != self._pid:
            _INHERITED.append((self._readers, self._torchcodec))
            self._pid, self._readers, self._torchcodec = os.getpid(), {}, None

    def _reader(self, path: Path):
        self._own_process()
        if path not in self._readers:
            import decord

            self._readers[path] = decord.VideoReader(str(path), ctx=decord.cpu(0), num_threads=1)
        return self._readers[path]

    def uses_decord(self, path: Path) -> bool:
        """Whether `path` is read with decord (probing it once); False means LeRobot's decoder."""
        if self.backend == "lerobot" or path in self._fallback:
            return False
        try:
            self._reader(path)
            return True
        except Exception as e:  # decord raises its own DECORDError on codecs it does not know
            log.warning(
                "decord cannot read %s (%s); falling back to LeRobot's decoder (torchcodec) for it",
                path,
                _first_line(e),
            )
            self._fallback.add(path)
            return False

    def decode(self, path: Path, indices: list[int]) -> torch.Tensor:
        """Frames `indices` of `path`; a file that fails to decode raises `VideoFileError` naming it."""
        try:
            return self._decode(path, indices)
        except Exception as e:
            self._readers.pop(path, None)
            raise VideoFileError(
                f"video file {path} is corrupt or truncated (decoding frames {indices[0]}..{indices[-1]}: "
                f"{_first_line(e)}); re-record the dataset or drop the episodes stored in it."
            ) from None

    def _decode(self, path: Path, indices: list[int]) -> torch.Tensor:
        if self.uses_decord(path):
            frames = self._reader(path).get_batch(indices).asnumpy()  # (N,H,W,3) uint8
            frames = torch.from_numpy(frames).permute(0, 3, 1, 2).contiguous()  # (N,3,H,W) uint8
            return frames.float().div_(255.0)
        from lerobot.datasets import video_utils

        timestamps = [i / self.fps for i in indices]
        tolerance = 0.5 / self.fps
        if video_utils.get_safe_default_codec() != "torchcodec":
            return video_utils.decode_video_frames(path, timestamps, tolerance, backend="pyav")  # (N,3,H,W)
        self._own_process()
        if self._torchcodec is None:
            self._torchcodec = video_utils.VideoDecoderCache()
        return video_utils.decode_video_frames_torchcodec(
            path, timestamps, tolerance, decoder_cache=self._torchcodec
        )

    def check(self, path: Path, num_frames: int) -> None:
        """Raise `VideoFileError` unless `path` decodes through frame `num_frames - 1`."""
        if not path.is_file():
            raise VideoFileError(f"video file {path} is missing; re-record the dataset or restore the file.")
        try:
            if self.uses_decord(path):
                available = len(self._reader(path))
                if available < num_frames:
                    raise VideoFileError(f"has {available} frames, its episodes need {num_frames}")
            frames = self._decode(path, [num_frames - 1])
            if not torch.isfinite(frames).all():
                raise VideoFileError("decoded non-finite pixels")
        except Exception as e:
            self._readers.pop(path, None)
            raise VideoFileError(
                f"video file {path} is corrupt or truncated ({_first_line(e)}); "
                "re-record the dataset or drop the episodes stored in it."
            ) from None

    def close(self) -> None:
        self._readers.clear()
        if self._torchcodec is not None:
            self._torchcodec.clear()
            self._torchcodec = None


def _first_line(e: BaseException) -> str:
    """The gist of a decoder's error: its last line, without the C++ source location torchcodec puts
    first ("decodeAVFrame, .../SingleStreamDecoder.cpp:1495, Could not push packet ...")."""
    text = str(e).strip().splitlines()
    line = text[-1] if text else type(e).__name__
    return re.sub(r"^.*?\.(?:cpp|cc|c|h|hpp):\d+,\s*", "", line)[:200]


def video_frame_index(from_timestamp: float, frame_index: np.ndarray | int, fps: int) -> np.ndarray:
    """Index in a LeRobot v3 video file (several episodes back to back) of an episode's frames."""
    return np.rint(from_timestamp * fps).astype(int) + np.asarray(frame_index)
