"""Side-by-side MP4s decode back with the right frame count, layout and colours, and bad input is refused."""

from __future__ import annotations

import av
import numpy as np
import pytest
import torch

import r2s2r.eval.video as video_module
from r2s2r.eval.video import LABEL_BAND, SEPARATOR, write_side_by_side, write_side_by_side_views

T, H, W = 6, 32, 48
RED, BLUE, GREEN = (255, 0, 0), (0, 0, 255), (0, 255, 0)
TOLERANCE = 30  # h264 is lossy: channel means within 30/255 of the true colour


def _float_video(colour, t=T, h=H, w=W):
    """(t,3,h,w) float video of one colour."""
    return torch.tensor(colour, dtype=torch.float32).div(255).view(1, 3, 1, 1).expand(t, 3, h, w).clone()


def _uint8_video(colour, t=T, h=H, w=W):
    """(t,h,w,3) uint8 video of one colour."""
    return np.broadcast_to(np.array(colour, np.uint8), (t, h, w, 3)).copy()


def _decode(path):
    with av.open(str(path)) as container:
        assert container.streams.video[0].codec_context.name == "h264"
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])  # (T,H,W,3)


def _even(n):
    return n + n % 2


def _assert_colour(pixels, colour):
    means = pixels.reshape(-1, 3).mean(axis=0)
    assert np.abs(means - np.array(colour)).max() < TOLERANCE, (means, colour)


def test_side_by_side_layout_and_colours(tmp_path):
    scale = 2
    path = write_side_by_side(
        tmp_path / "out" / "clip.mp4", _float_video(RED), _uint8_video(BLUE), scale=scale
    )
    assert path == tmp_path / "out" / "clip.mp4"
    frames = _decode(path)
    h, w = H * scale, W * scale
    assert frames.shape == (T, _even(h + LABEL_BAND), _even(2 * w + SEPARATOR), 3)
    video = frames[:, LABEL_BAND : LABEL_BAND + h]  # (T,h,width,3) below the label band
    _assert_colour(video[:, 2:-2, 2 : w - 2], RED)  # keep clear of chroma bleeding at the edges
    _assert_colour(video[:, 2:-2, w + SEPARATOR + 2 : 2 * w + SEPARATOR - 2], BLUE)
    assert video[:, :, w : w + SEPARATOR].mean() > 255 - TOLERANCE  # white separator
    band = frames[:, :LABEL_BAND, : w - 2].astype(float)  # (T,band,w,3) of the left label
    assert band.max() > 200 and band.mean() < 100  # white text on black
    assert sorted(p.name for p in path.parent.iterdir()) == ["clip.mp4"]  # no temp file left


def test_odd_sizes_are_padded_to_even(tmp_path):
    frames = _decode(
        write_side_by_side(
            tmp_path / "odd.mp4", _float_video(RED, h=9, w=7), _float_video(BLUE, h=9, w=7), scale=1
        )
    )
    assert frames.shape == (T, _even(9 + LABEL_BAND), _even(2 * 7 + SEPARATOR), 3)
    assert frames.shape[1] % 2 == 0 and frames.shape[2] % 2 == 0


def test_views_give_one_row_per_camera(tmp_path):
    real = {"top": _float_video(RED), "left_wrist": _uint8_video(GREEN)}
    imagined = {"left_wrist": _uint8_video(BLUE), "top": _float_video(BLUE)}
    path = write_side_by_side_views(tmp_path / "views.mp4", real, imagined, fps=5, scale=1)
    frames = _decode(path)
    row = H + LABEL_BAND
    assert frames.shape == (T, _even(2 * row), _even(2 * W + SEPARATOR), 3)
    for i, colour in enumerate((RED, GREEN)):  # rows follow `real`'s order
        video = frames[:, i * row + LABEL_BAND + 2 : (i + 1) * row - 2]
        _assert_colour(video[:, :, 2 : W - 2], colour)
        _assert_colour(video[:, :, W + SEPARATOR + 2 : -2], BLUE)
    with av.open(str(path)) as container:
        assert container.streams.video[0].average_rate == 5


def test_existing_file_is_replaced(tmp_path):
    path = tmp_path / "clip.mp4"
    path.write_bytes(b"old")
    write_side_by_side(path, _float_video(RED, t=3), _float_video(BLUE, t=3))
    assert len(_decode(path)) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]


def test_mismatched_inputs_are_refused(tmp_path):
    path = tmp_path / "bad.mp4"
    with pytest.raises(ValueError, match=r"real \(6, 3, 32, 48\) and imagined \(5, 3, 32, 48\) differ"):
        write_side_by_side(path, _float_video(RED), _float_video(BLUE, t=5))
    with pytest.raises(ValueError, match=r"real \(6, 3, 32, 48\) and imagined \(6, 3, 32, 40\) differ"):
        write_side_by_side(path, _float_video(RED), _float_video(BLUE, w=40))
    with pytest.raises(ValueError, match="for camera 'top'"):
        write_side_by_side_views(path, {"top": _float_video(RED)}, {"top": _uint8_video(BLUE, h=16)})
    with pytest.raises(ValueError, match=r"cameras have different lengths \{'top': 6, 'left': 4\}"):
        write_side_by_side_views(
            path,
            {"top": _float_video(RED), "left": _float_video(RED, t=4)},
            {"top": _float_video(BLUE), "left": _float_video(BLUE, t=4)},
        )
    with pytest.raises(ValueError, match=r"real has cameras \['top'\] but imagined has \['left'\]"):
        write_side_by_side_views(path, {"top": _float_video(RED)}, {"left": _float_video(BLUE)})
    with pytest.raises(ValueError, match=r"uint8 video must be \(T,H,W,3\)"):
        write_side_by_side(path, _uint8_video(RED).transpose(0, 3, 1, 2), _uint8_video(BLUE))
    with pytest.raises(ValueError, match="scale"):
        write_side_by_side(path, _float_video(RED), _float_video(BLUE), scale=0)
    with pytest.raises(ValueError, match="no frames"):
        write_side_by_side(path, _float_video(RED, t=0), _float_video(BLUE, t=0))
    assert not any(tmp_path.iterdir())  # nothing written, no temp file


def test_failed_write_keeps_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "clip.mp4"
    path.write_bytes(b"old")

    frames = video_module._frames

    def broken(*args):
        yield next(frames(*args))  # one frame reaches the encoder, then the source fails
        raise RuntimeError("encoder died")

    monkeypatch.setattr(video_module, "_frames", broken)
    with pytest.raises(RuntimeError, match="encoder died"):
        write_side_by_side(path, _float_video(RED), _float_video(BLUE))
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4"]
