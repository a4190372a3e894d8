"""Finding the red cube in a rendered image and placing it on the table: the camera family's perception.

`detect_red` segments red pixels by colour (optionally after a blur and with sensor noise) and returns
their centroid; `PinholeCamera` back-projects a pixel through a camera whose intrinsics (vertical field of
view) and extrinsics (pose) are read from gym-aloha's MJCF, and intersects the ray with a horizontal plane.

Pixel convention (MuJoCo's renderer): row 0 is the top of the image; pixel (row r, col c) covers
[c, c+1) x [r, r+1), its centre is (c + 0.5, r + 0.5). A MuJoCo camera looks along its -z axis, with +x to
the right of the image and +y up.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")
import torch  # noqa: F401, E402  (torch before MuJoCo: loaded after Mesa, its triton import segfaults)

# isort: split

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from scipy import ndimage  # noqa: E402

from families.arm import load_model  # noqa: E402


class PinholeCamera:
    """One camera of the MJCF as an ideal pinhole, at the pose MuJoCo computes for given joint angles.

    `pos_error` (m, world) and `rot_error_deg` (rotation about the camera's own x, y, z axes) are what the
    controller believes minus the truth: it back-projects through the wrong pose, the renderer does not.
    A camera on an arm (the wrist cameras) needs the arm's joint angles: `qpos` sets them (a full
    `model.nq` vector, or None for the model's default pose, which is all a fixed camera needs).
    """

    def __init__(
        self,
        name: str,
        height: int,
        width: int,
        model: mujoco.MjModel | None = None,
        qpos: np.ndarray | None = None,
        pos_error: tuple[float, float, float] = (0.0, 0.0, 0.0),
        rot_error_deg: tuple[float, float, float] = (0.0, 0.0, 0.0),
        data: mujoco.MjData | None = None,
    ):
        model = model if model is not None else load_model()
        data = data if data is not None else mujoco.MjData(model)
        if qpos is not None:
            data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        mujoco.mj_camlight(model, data)  # cameras that track a body ("targetbody") are posed here
        cam = model.camera(name)
        self.height, self.width = height, width
        self.focal = (height / 2) / np.tan(np.radians(model.cam_fovy[cam.id]) / 2)  # pixels (fovy: vertical)
        rx, ry, rz = np.radians(rot_error_deg)
        self.pos = data.cam_xpos[cam.id] + np.asarray(pos_error, dtype=float)
        self.rot = (
            data.cam_xmat[cam.id].reshape(3, 3) @ _rot_x(rx) @ _rot_y(ry) @ _rot_z(rz)
        )  # columns: x, y, z

    def ray(self, row: float, col: float) -> np.ndarray:
        """Unit direction (3,) in the world of the ray through pixel coordinates (row, col)."""
        d = np.array([(col - self.width / 2) / self.focal, -(row - self.height / 2) / self.focal, -1.0])
        d = self.rot @ d
        return d / np.linalg.norm(d)

    def to_plane(self, row: float, col: float, z: float) -> np.ndarray:
        """The world point (3,) where the ray through (row, col) meets the horizontal plane at height z."""
        d = self.ray(row, col)
        return self.pos + d * (z - self.pos[2]) / d[2]

    def project(self, point: np.ndarray) -> tuple[float, float]:
        """Pixel coordinates (row, col) of a world point: the inverse of `to_plane`."""
        p = self.rot.T @ (np.asarray(point, dtype=float) - self.pos)
        return self.height / 2 - self.focal * p[1] / -p[2], self.width / 2 + self.focal * p[0] / -p[2]


def _rot_x(a: float) -> np.ndarray:
    return np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])


def _rot_y(a: float) -> np.ndarray:
    return np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])


def _rot_z(a: float) -> np.ndarray:
    return np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])


def gaussian_blur(image: np.ndarray, sigma: float) -> np.ndarray:
    """(H,W,C) image blurred by a separable Gaussian of `sigma` pixels (edges replicated)."""
    if sigma <= 0:
        return image
    radius = max(1, int(np.ceil(3 * sigma)))
    x = np.arange(-radius, radius + 1)
    kernel = np.exp(-0.5 * (x / sigma) ** 2)
    kernel /= kernel.sum()
    padded = np.pad(image, ((radius, radius), (radius, radius), (0, 0)), mode="edge")
    rows = sum(w * padded[i : i + image.shape[0]] for i, w in enumerate(kernel))  # blur along H
    return sum(w * rows[:, i : i + image.shape[1]] for i, w in enumerate(kernel))  # then along W


def red_mask(image: np.ndarray, threshold: float) -> np.ndarray:
    """(H,W) bool: pixels whose red exceeds both green and blue by `threshold` (image in [0, 1])."""
    return image[..., 0] - np.maximum(image[..., 1], image[..., 2]) > threshold


def detect_red(
    image: np.ndarray,
    threshold: float = 0.3,
    blur: float = 0.0,
    noise: float = 0.0,
    rng: np.random.Generator | None = None,
    min_pixels: int = 3,
) -> tuple[float, float, int] | None:
    """Centroid (row, col) in pixel coordinates and pixel count of the largest red blob, or None.

    `image` is (H,W,3) in [0,1] (or (3,H,W), as policies receive it). `noise` is the std of Gaussian sensor
    noise added to every pixel value (needs `rng`), `blur` a Gaussian blur in pixels applied after it. Only
    the largest 8-connected blob counts, so isolated noisy pixels do not drag the centroid; a blob of fewer
    than `min_pixels` is no detection.
    """
    if image.shape[0] == 3 and image.shape[-1] != 3:
        image = np.moveaxis(image, 0, -1)  # (3,H,W) -> (H,W,3)
    image = np.asarray(image, dtype=float)
    if noise > 0:
        image = image + rng.normal(0.0, noise, image.shape)
    labels, count = ndimage.label(red_mask(gaussian_blur(image, blur), threshold), structure=np.ones((3, 3)))
    if count == 0:
        return None
    sizes = np.bincount(labels.ravel())[1:]
    rows, cols = np.nonzero(labels == 1 + int(np.argmax(sizes)))
    if len(rows) < min_pixels:
        return None
    return float(rows.mean() + 0.5), float(cols.mean() + 0.5), len(rows)
