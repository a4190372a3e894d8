"""Side-by-side MP4s of real and imagined video, one row per camera, for looking at open-loop rollouts.

Numbers (metrics.py) say how far a world model drifts; a video shows how. Each row holds the real clip on
the left and the imagined one on the right, upscaled by an integer factor with nearest-neighbour (tiny
training resolutions stay crisp), split by a thin white separator, under a black band with the labels in
PIL's default bitmap font. The result is one h264/yuv420p MP4 that browsers and notebooks play, written
to a temporary file next to the target and moved into place, so a killed run never leaves half a video.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path

import av
import av.logging
import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from r2s2r.files import disk_full, is_disk_full

Video = torch.Tensor | np.ndarray  # (T,3,H,W) float in [0,1], or (T,H,W,3) uint8

LABEL_BAND = 14  # pixels of label band above each row
SEPARATOR = 2  # pixels of white between the real and the imagined half
_TEXT_OFFSET = (2, 1)  # (x, y) of the label inside its band


def _as_uint8(video: Video, name: str) -> np.ndarray:
    """(T,H,W,3) uint8 frames of a float (T,3,H,W) tensor/array in [0,1] or a uint8 (T,H,W,3) one."""
    shape = tuple(video.shape)
    x = torch.as_tensor(video).detach().cpu()
    if x.dtype == torch.uint8:
        if x.ndim != 4 or x.shape[-1] != 3:
            raise ValueError(f"{name} is uint8 of shape {shape}; uint8 video must be (T,H,W,3).")
        frames = x.numpy()
    else:
        if not x.is_floating_point() or x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"{name} is {x.dtype} of shape {shape}; pass float (T,3,H,W) in [0,1] or uint8.")
        x = (x.float().clamp(0, 1) * 255).round().to(torch.uint8)
        frames = x.permute(0, 2, 3, 1).numpy()  # (T,H,W,3)
    if frames.shape[0] == 0:
        raise ValueError(f"{name} has no frames (shape {shape}); pass at least one frame.")
    return np.ascontiguousarray(frames)


def _pairs(
    real: Mapping[str, Video], imagined: Mapping[str, Video]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Camera -> (real, imagined) uint8 frames, checked to have equal shapes and one common length."""
    if set(real) != set(imagined):
        raise ValueError(
            f"real has cameras {sorted(real)} but imagined has {sorted(imagined)}; pass the same cameras."
        )
    if not real:
        raise ValueError("no cameras given; pass at least one camera's real and imagined video.")
    pairs = {}
    for cam in real:
        where = f" for camera '{cam}'" if cam else ""
        r, i = _as_uint8(real[cam], f"real{where}"), _as_uint8(imagined[cam], f"imagined{where}")
        if r.shape != i.shape:
            raise ValueError(
                f"real {tuple(real[cam].shape)} and imagined {tuple(imagined[cam].shape)}{where} differ "
                f"(as (T,H,W,3): {r.shape} vs {i.shape}); pass videos of the same length and size."
            )
        pairs[cam] = (r, i)
    lengths = {cam: len(r) for cam, (r, _) in pairs.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"cameras have different lengths {lengths}; pass the same number of frames per camera."
        )
    return pairs


def _draw_label(band: np.ndarray, text: str) -> None:
    """Write `text` in white into the (h,w,3) uint8 `band`, clipped to it."""
    image = Image.fromarray(band)
    ImageDraw.Draw(image).text(
        _TEXT_OFFSET, text, fill=(255, 255, 255), font=ImageFont.load_default_imagefont()
    )
    band[...] = np.asarray(image)


def _layout(
    pairs: dict[str, tuple[np.ndarray, np.ndarray]], labels: Sequence[str], scale: int
) -> tuple[np.ndarray, list[tuple[int, int, np.ndarray]]]:
    """The static canvas (labels, separators, even size) and where each upscaled video goes.

    Returns:
        canvas: (H,W,3) uint8 frame with everything but the videos drawn.
        slots: (top, left, frames) for every half of every row.
    """
    rows = [(cam, r.shape[1] * scale, r.shape[2] * scale) for cam, (r, _) in pairs.items()]
    height = sum(LABEL_BAND + h for _, h, _ in rows)
    width = max(2 * w + SEPARATOR for _, _, w in rows)
    canvas = np.zeros((height + height % 2, width + width % 2, 3), np.uint8)  # yuv420p needs even sides
    slots, top = [], 0
    for cam, h, w in rows:
        for side, (label, frames) in enumerate(zip(labels, pairs[cam], strict=True)):
            left = side * (w + SEPARATOR)
            _draw_label(canvas[top : top + LABEL_BAND, left : left + w], f"{label} ({cam})" if cam else label)
            slots.append((top + LABEL_BAND, left, frames))
        canvas[top : top + LABEL_BAND + h, w : w + SEPARATOR] = 255
        top += LABEL_BAND + h
    return canvas, slots


def _frames(canvas: np.ndarray, slots: list[tuple[int, int, np.ndarray]], scale: int) -> Iterator[np.ndarray]:
    """Yield each composed (H,W,3) uint8 frame."""
    for t in range(len(slots[0][2])):
        frame = canvas.copy()
        for top, left, frames in slots:
            big = frames[t].repeat(scale, axis=0).repeat(scale, axis=1)  # (h*scale,w*scale,3)
            frame[top : top + big.shape[0], left : left + big.shape[1]] = big
        yield frame


def _encode(path: Path, frames: Iterator[np.ndarray], size: tuple[int, int], fps: float) -> Path:
    """Encode (H,W,3) uint8 frames as h264/yuv420p MP4 at `path`, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    av.logging.set_libav_level(av.logging.ERROR)  # no per-file x264 statistics on stderr
    try:
        with av.open(str(tmp), mode="w", format="mp4", options={"movflags": "+faststart"}) as container:
            stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
            stream.height, stream.width = size
            stream.pix_fmt = "yuv420p"
            stream.options = {"crf": "18"}
            for frame in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
            container.mux(stream.encode())  # flush the encoder
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if is_disk_full(e):
            raise disk_full(path) from e
        raise
    return path


def write_side_by_side_views(
    path: str | os.PathLike,
    real: Mapping[str, Video],
    imagined: Mapping[str, Video],
    fps: float = 10,
    labels: Sequence[str] = ("real", "imagined"),
    scale: int = 2,
) -> Path:
    """Write one MP4 with a row per camera, real on the left and imagined on the right.

    Args:
        path: the MP4 to write (its folder is created; an existing file is replaced atomically).
        real: camera name -> (T,3,H,W) float video in [0,1], or (T,H,W,3) uint8 array. Rows follow its order.
        imagined: the same cameras, each video the same shape as its real one.
        fps: frames per second of the output.
        labels: text above the left and the right half; each row adds its camera, as "real (top)".
        scale: integer nearest-neighbour upscaling of every video.

    Returns:
        The path written.
    """
    if not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale={scale!r} must be a positive integer (nearest-neighbour upscaling factor).")
    if len(labels) != 2:
        raise ValueError(f"labels={labels!r} must be two strings: (left/real, right/imagined).")
    if fps <= 0:
        raise ValueError(f"fps={fps} must be positive.")
    canvas, slots = _layout(_pairs(real, imagined), labels, scale)
    return _encode(Path(path), _frames(canvas, slots, scale), canvas.shape[:2], fps)


def write_side_by_side(
    path: str | os.PathLike,
    real: Video,
    imagined: Video,
    fps: float = 10,
    labels: Sequence[str] = ("real", "imagined"),
    scale: int = 2,
) -> Path:
    """Write one MP4 with `real` on the left and `imagined` on the right, labelled above each half.

    Args:
        path: the MP4 to write (its folder is created; an existing file is replaced atomically).
        real: (T,3,H,W) float video in [0,1], or (T,H,W,3) uint8 array.
        imagined: a video of the same shape.
        fps: frames per second of the output.
        labels: text above the left and the right half.
        scale: integer nearest-neighbour upscaling of both videos.

    Returns:
        The path written.
    """
    return write_side_by_side_views(path, {"": real}, {"": imagined}, fps=fps, labels=labels, scale=scale)
