"""Imagined frames drawn from the state head's state: the head leads, the video follows.

On the video path a camera-only policy acts on what the imagined frames show, and the diffusion model's
frames drift from the state the dynamics imagine (at 48x64 the wrist views turn to noise within seconds):
a policy can find the cube where the head has none, or miss the one the head holds. `HeadFrames` draws
every view of an imagined frame, at the logs' resolution, from the head's own state, so that what the
policy sees and what the dynamics say are one state:

- Geometry: the robot's description (`spec.model_xml`: its links' meshes, the table, the objects' boxes,
  the cameras' mounts and fields of view), posed by forward kinematics at the imagined joint angles,
  gripper openings and object poses, and rasterized by MuJoCo as a segmentation (which geom each pixel
  sees) and a depth map. No physics is stepped; none of the MJCF's lights, materials or colours is used,
  as a team would pose its URDF and camera calibration.
- Appearance, fitted on logged frames (`fit_appearance`): per view and geom, colour as an affine function
  of the surface normal (ambient plus directional shading, least squares), the normal taken from the depth
  map, on pixels away from the geom's edges (`interior`); a geom that a view shows only a few pixels of
  takes its fit over every view (a normal's shading does not depend on the camera); and, for a fixed
  camera, the static scene (table, background, the arms' bases) as a plate: each pixel's mean logged
  colour while nothing that moves covered it.

The fit is saved beside the world model as `appearance.safetensors` (`r2s2r-fit-frames`);
`WorldModelEnv(head_frames=...)` (`--frames=head`) then returns these frames instead of the video model's,
and the judge, reading them, cross-checks the head. For logs without object poses, `HeadFrames.locate`
reads each object's resting pose from a first frame's fixed camera against the drawn empty scene.
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path

# The renderer opens a GL context (EGL headless; MUJOCO_GL=osmesa is the fallback): torch and triton must be
# loaded before MuJoCo pulls in Mesa, or triton's later import segfaults (see robots/aloha.py).
os.environ.setdefault("MUJOCO_GL", "egl")
import torch  # noqa: E402

try:  # noqa: SIM105
    import triton  # noqa: F401
except ImportError:  # CPU-only torch builds ship without triton
    pass

# isort: split

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tqdm.auto import tqdm

from r2s2r.errors import DamagedFileError, ModelMismatchError
from r2s2r.files import load_safetensors, staged_file
from r2s2r.robots.arm_sketch import POSE_SIZE, object_boxes
from r2s2r.robots.checker import PhysicsChecker
from r2s2r.robots.spec import EmbodimentSpec

APPEARANCE_FILE = "appearance.safetensors"
FEATURES = 4  # 1, normal x, y, z (world frame)
SCORE_EVERY = 5  # the fit's error is measured on every 5th logged frame (kept in memory)
FIT_MARGIN = 1  # a part's colour in one view is fitted on its pixels at least this far inside its edges
EDGE_MARGIN = 2  # ... and over every view at once on those this far inside (`interior`): clear of the codec
MIN_PIXELS = 200  # pixels EDGE_MARGIN inside a part that a view must show for the part's own fit there; the
# rest (the cube, a few pixels wide in the top view) take their fit over every view
LOCATE_ALPHA = 0.3  # share of a pixel an object must cover, by its colour, to count as the object's
RIDGE = 1e-3  # regularizes the per-geom colour fit toward its mean where few normals were seen


class SceneGeometry:
    """Poses the robot's MJCF and rasterizes which geom every pixel of every camera sees, with its normal."""

    def __init__(self, spec: EmbodimentSpec, cameras: tuple[str, ...], height: int, width: int):
        if spec.model_xml is None:
            raise ValueError(f"robot '{spec.name}' has no MJCF to draw frames from; use frames=video.")
        self.checker = PhysicsChecker(spec)  # proprio -> the model's qpos
        self.model = self.checker.model
        self.data = mujoco.MjData(self.model)
        missing = [c for c in cameras if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, c) < 0]
        if missing:
            raise ValueError(f"cameras {missing} are not in {spec.model_xml}; frames=head cannot place them.")
        self.cameras = tuple(cameras)
        self.height, self.width = height, width
        self.camera_ids = [self.model.camera(c).id for c in cameras]
        # a camera fixed in the world sees the static scene at the same pixels in every frame
        self.fixed = [self.model.cam_bodyid[c] == 0 for c in self.camera_ids]
        self.focal = [0.5 * height / np.tan(np.deg2rad(self.model.cam_fovy[c]) / 2) for c in self.camera_ids]
        free = [j for j in range(self.model.njnt) if self.model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        self.object_qpos = [int(self.model.jnt_qposadr[j]) for j in free]
        self.object_geoms = [int(self.model.body_geomadr[self.model.jnt_bodyid[j]]) for j in free]
        self.object_half = object_boxes(self.model)  # half extents (3,) per object
        self.geoms = self.model.ngeom  # ids 0..G-1; the background (nothing hit) is G
        # (G+1,) per id: welded to the world, or the background (static too)
        self.static = np.append(self.model.body_weldid[self.model.geom_bodyid] == 0, True)
        self.renderer = mujoco.Renderer(self.model, height, width)
        atexit.register(self.renderer.close)  # while the GL library is still loaded
        rows, cols = np.mgrid[0:height, 0:width] + 0.5
        self._rays = (cols - 0.5 * width, 0.5 * height - rows)  # pixel offsets from the centre, y up

    def qpos(self, states: np.ndarray, poses: np.ndarray | None) -> np.ndarray:
        """Proprio (N,S) and object poses (N,E) -> the model's qpos (N,nq); without poses the objects stay
        where the MJCF puts them."""
        qpos = self.checker.qpos(states)
        if poses is not None and self.object_qpos:
            if poses.shape[-1] != POSE_SIZE * len(self.object_qpos):
                raise ValueError(
                    f"object poses have {poses.shape[-1]} numbers; the MJCF has {len(self.object_qpos)} free "
                    f"objects of {POSE_SIZE} (position, quaternion)."
                )
            for k, adr in enumerate(self.object_qpos):
                qpos[:, adr : adr + POSE_SIZE] = poses[:, POSE_SIZE * k : POSE_SIZE * (k + 1)]
        return qpos

    def render(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One qpos -> geom ids (V,H,W) (background = `geoms`) and world-frame unit normals (V,H,W,3)
        facing the camera (zero on the background)."""
        self.data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_camlight(self.model, self.data)
        ids, normals = [], []
        r = self.renderer
        for view, camera in enumerate(self.camera_ids):
            r.update_scene(self.data, camera=camera)
            r.enable_segmentation_rendering()
            seg = r.render()
            r.disable_segmentation_rendering()
            r.enable_depth_rendering()
            depth = r.render().astype(np.float64)
            r.disable_depth_rendering()
            hit = (seg[..., 1] == mujoco.mjtObj.mjOBJ_GEOM) & (seg[..., 0] >= 0)
            ids.append(np.where(hit, seg[..., 0], self.geoms))
            normals.append(self._normals(ids[-1], depth, hit, view, camera))
        return np.stack(ids), np.stack(normals)

    def _normals(
        self, ids: np.ndarray, depth: np.ndarray, hit: np.ndarray, view: int, camera: int
    ) -> np.ndarray:
        """Unit normals (H,W,3) in the world frame from a depth map: the cross product of the surface's steps
        to the next pixel along the columns and the rows, each taken toward a neighbour on the same geom (a
        step across an edge would tilt the normal toward the geom behind)."""
        f = self.focal[view]
        points = np.stack([self._rays[0] * depth / f, self._rays[1] * depth / f, -depth], axis=-1)
        steps = []
        for axis in (1, 0):
            forward = np.diff(points, axis=axis, append=np.take(points, [-1], axis=axis))
            backward = np.diff(points, axis=axis, prepend=np.take(points, [0], axis=axis))
            same_next = np.diff(ids, axis=axis, append=np.take(ids, [-1], axis=axis) + 1) == 0
            same_prev = np.diff(ids, axis=axis, prepend=np.take(ids, [0], axis=axis) + 1) == 0
            steps.append(
                np.where(same_next[..., None], forward, np.where(same_prev[..., None], backward, 0.0))
            )
        normal = np.cross(steps[1], steps[0])
        facing = np.einsum("hwk,hwk->hw", normal, points) > 0  # must point back at the camera (origin)
        normal[facing] *= -1
        normal /= np.linalg.norm(normal, axis=-1, keepdims=True).clip(1e-12)
        rotation = self.data.cam_xmat[camera].reshape(3, 3)  # camera -> world
        return np.where(hit[..., None], normal @ rotation.T, 0.0)


_GEOMETRIES: dict[tuple, SceneGeometry] = {}


def scene_geometry(spec: EmbodimentSpec, cameras: tuple[str, ...], height: int, width: int) -> SceneGeometry:
    """One `SceneGeometry` per robot description, cameras and size in a process: a worker that evaluates
    many policies opens one GL context, not one per policy."""
    key = (spec.name, spec.model_xml, tuple(cameras), height, width)
    if key not in _GEOMETRIES:
        _GEOMETRIES[key] = SceneGeometry(spec, cameras, height, width)
    return _GEOMETRIES[key]


def _features(normals: np.ndarray) -> np.ndarray:
    """(...,3) normals -> (...,FEATURES) appearance features."""
    return np.concatenate([np.ones((*normals.shape[:-1], 1)), normals], axis=-1)


def interior(ids: np.ndarray, margin: int = EDGE_MARGIN) -> np.ndarray:
    """(V,H,W) pixels whose neighbours up to `margin` pixels away (in rows and columns) see the same geom.
    The fit skips edges, where the rasterizer's pixel grid and the logged frames disagree: the logs are
    video with colour stored at half resolution (yuv420p) and compressed in blocks, so colour bleeds across
    an edge. A part a few pixels wide (the cube in the top view) is all edge: fitted on its own pixels it
    took the table's grey into its red, and a blurred detector that finds the logged cube missed the drawn
    one; it is coloured by its fit over every view instead, on pixels EDGE_MARGIN inside (the wrist views,
    where it is large)."""
    V, H, W = ids.shape
    same = np.ones_like(ids, dtype=bool)
    padded = np.pad(ids, ((0, 0), (margin, margin), (margin, margin)), constant_values=-1)
    for dr in range(-margin, margin + 1):
        for dc in range(-margin, margin + 1):
            same &= padded[:, margin + dr : margin + dr + H, margin + dc : margin + dc + W] == ids
    return same


class HeadFrames:
    """(N,S) proprio and (N,E) object poses -> (N,V,3,H,W) frames in [0,1], drawn as the module says.

    Example:
        frames = HeadFrames.from_pretrained("assets/world_model_small", robot_spec("aloha"))
        images = frames(states, poses)  # observation.images.<camera> = images[:, v]
    """

    def __init__(self, geometry: SceneGeometry, coef: np.ndarray, plate: np.ndarray, plate_seen: np.ndarray):
        self.geometry = geometry
        self.coef = coef  # (V,G+1,FEATURES,3)
        self.plate = plate  # (V,H,W,3): fixed cameras' static scene
        self.plate_seen = plate_seen  # (V,H,W) bool: where the plate was ever seen uncovered

    @property
    def cameras(self) -> tuple[str, ...]:
        return self.geometry.cameras

    @property
    def size(self) -> tuple[int, int]:
        return self.geometry.height, self.geometry.width

    def draw(self, ids: np.ndarray, normals: np.ndarray) -> np.ndarray:
        """Geom ids (V,H,W) and normals (V,H,W,3) -> colours (V,H,W,3) in [0,1]."""
        V = ids.shape[0]
        colour = np.einsum(
            "vhwf,vhwfc->vhwc", _features(normals), self.coef[np.arange(V)[:, None, None], ids]
        )
        fixed = np.array(self.geometry.fixed)[:, None, None]
        use_plate = fixed & self.geometry.static[ids] & self.plate_seen
        colour = np.where(use_plate[..., None], self.plate, colour)
        return colour.clip(0.0, 1.0)

    @torch.no_grad()
    def __call__(self, states: torch.Tensor, poses: torch.Tensor | None) -> torch.Tensor:
        qpos = self.geometry.qpos(
            states.detach().double().cpu().numpy(),
            None if poses is None else poses.detach().double().cpu().numpy(),
        )
        frames = [self.draw(*self.geometry.render(q)) for q in qpos]
        images = torch.from_numpy(np.stack(frames)).permute(0, 1, 4, 2, 3)  # (N,V,3,H,W)
        return images.to(device=states.device, dtype=torch.float32)

    # ------------------------------------------------------------------ objects from the cameras
    def locate(self, images: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """Object poses (N,E) read from logged frames (N,V,3,H,W) in [0,1] and proprio (N,S), for logs that
        recorded none: each object resting on the table where a fixed camera sees it.

        In each fixed view the scene is drawn without the objects (arms at the logged joints); a pixel
        belongs to an object where the logged colour lies nearer the object's fitted colour (lit from
        above) than the drawn scene's by `LOCATE_MARGIN`; the largest such blob's centroid is
        back-projected through the camera onto the plane of the object's centre at rest (its MJCF box's
        half height). Yaw is not read (identity orientation). An object no fixed camera shows raises."""
        geometry = self.geometry
        if not any(geometry.fixed):
            raise ValueError(
                f"cameras {list(self.cameras)}: none is fixed in the world; object poses cannot be read from "
                "them. Record the object poses (observation.environment_state) or add a fixed camera."
            )
        imgs = images.detach().double().cpu().numpy().transpose(0, 1, 3, 4, 2)  # (N,V,H,W,3)
        qpos = geometry.qpos(states.detach().double().cpu().numpy(), None)
        out = np.zeros((len(qpos), POSE_SIZE * len(geometry.object_qpos)))
        for n, q in enumerate(qpos):
            q = q.copy()
            for adr in geometry.object_qpos:  # the objects out of every view
                q[adr : adr + 3] = (0.0, 0.0, -10.0)
            ids, normals = geometry.render(q)
            empty = self.draw(ids, normals)
            for k in range(len(geometry.object_qpos)):
                out[n, POSE_SIZE * k : POSE_SIZE * (k + 1)] = self._locate_one(imgs[n], empty, k, n)
        return torch.from_numpy(out).to(device=states.device, dtype=torch.float32)

    def _locate_one(self, image: np.ndarray, empty: np.ndarray, k: int, n: int) -> np.ndarray:
        from scipy import ndimage

        geometry = self.geometry
        geom = geometry.object_geoms[k]
        half = geometry.object_half[k]
        for v in np.nonzero(geometry.fixed)[0]:
            colour = _features(np.array([0.0, 0.0, 1.0])) @ self.coef[v, geom]  # its top face
            # how much of each pixel the object covers, were it mixed with the empty scene (alpha matting):
            # the logs' codec blurs a few-pixel object into its surroundings, which this still reads
            toward = colour - empty[v]  # (H,W,3)
            seen = image[v] - empty[v]
            alpha = (seen * toward).sum(-1) / (toward * toward).sum(-1).clip(1e-6)
            off = np.linalg.norm(seen - alpha[..., None] * toward, axis=-1)
            mask = (alpha > LOCATE_ALPHA) & (off < 0.5 * alpha * np.linalg.norm(toward, axis=-1))
            labels, count = ndimage.label(mask, structure=np.ones((3, 3)))
            if count == 0:
                continue
            weight = np.where(
                labels == 1 + int(np.argmax(ndimage.sum(alpha, labels, range(1, count + 1)))), alpha, 0
            )
            rows, cols = np.mgrid[0 : geometry.height, 0 : geometry.width]
            row, col = (weight * rows).sum() / weight.sum(), (weight * cols).sum() / weight.sum()
            camera = geometry.camera_ids[v]
            f = geometry.focal[v]
            ray = np.array([col + 0.5 - 0.5 * geometry.width, 0.5 * geometry.height - row - 0.5, -f])
            ray = geometry.data.cam_xmat[camera].reshape(3, 3) @ ray  # camera -> world
            origin = geometry.data.cam_xpos[camera]
            point = origin + ray * (half[2] - origin[2]) / ray[2]
            return np.array([point[0], point[1], half[2], 1.0, 0.0, 0.0, 0.0])
        fixed = [c for c, f in zip(self.cameras, geometry.fixed, strict=True) if f]
        raise ValueError(
            f"start {n}: no fixed camera ({', '.join(fixed)}) shows object {k} in its first frame; record "
            "the object poses (observation.environment_state)."
        )

    # ------------------------------------------------------------------ files
    def save(self, directory: str | Path, meta: dict) -> Path:
        """Write `<directory>/appearance.safetensors` atomically (a full disk leaves the old file)."""
        path = Path(directory) / APPEARANCE_FILE
        tensors = {
            "coef": torch.from_numpy(self.coef).float(),
            "plate": torch.from_numpy(self.plate).float(),
            "plate_seen": torch.from_numpy(self.plate_seen.astype(np.uint8)),
        }
        info = {"cameras": list(self.cameras), "height": self.size[0], "width": self.size[1], **meta}
        with staged_file(path) as tmp:
            save_file(tensors, str(tmp), metadata={"appearance": json.dumps(info)})
            os.chmod(tmp, 0o644)  # safetensors writes owner-only
        return path

    @classmethod
    def from_pretrained(cls, directory: str | Path, spec: EmbodimentSpec) -> HeadFrames:
        """The appearance fitted for the world model in `directory` (`r2s2r-fit-frames`)."""
        path = Path(directory) / APPEARANCE_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found: frames=head needs the logs' appearance; fit it with "
                f"r2s2r-fit-frames --checkpoint={directory} --data='[<rendered logs>]', or use frames=video."
            )
        fix = f"fit it again with r2s2r-fit-frames --checkpoint={directory}."
        tensors = load_safetensors(path, fix)
        try:
            with safe_open(str(path), "pt") as f:
                info = json.loads(f.metadata()["appearance"])
        except (KeyError, TypeError, json.JSONDecodeError):
            raise DamagedFileError(f"{path} holds no appearance metadata; {fix}") from None
        geometry = scene_geometry(spec, tuple(info["cameras"]), info["height"], info["width"])
        coef = tensors["coef"].double().numpy()
        if coef.shape[:2] != (len(geometry.cameras), geometry.geoms + 1):
            raise ModelMismatchError(
                f"{path} was fitted for a scene of {coef.shape[1] - 1} geoms; {spec.model_xml} has "
                f"{geometry.geoms}: {fix}"
            )
        return cls(geometry, coef, tensors["plate"].double().numpy(), tensors["plate_seen"].bool().numpy())


class _Sums:
    """The normal equations of the appearance fit, summed frame by frame: per (view, geom) on the pixels
    FIT_MARGIN inside its edges; per geom over every view on those EDGE_MARGIN inside (shading by the
    world-frame normal does not depend on the camera); and the fixed cameras' static plate."""

    def __init__(self, geometry: SceneGeometry):
        V, H, W, G = len(geometry.cameras), geometry.height, geometry.width, geometry.geoms + 1
        self.geometry, self.G = geometry, G
        self.xtx, self.xty = np.zeros((V, G, FEATURES, FEATURES)), np.zeros((V, G, FEATURES, 3))
        self.xtx_clear, self.xty_clear = np.zeros((G, FEATURES, FEATURES)), np.zeros((G, FEATURES, 3))
        self.wide = np.zeros((V, G))  # pixels per (view, geom) EDGE_MARGIN inside: who gets its own fit
        self.plate_sum, self.plate_n = np.zeros((V, H, W, 3)), np.zeros((V, H, W))

    def add(self, ids: np.ndarray, normals: np.ndarray, rgb: np.ndarray) -> np.ndarray:
        """One frame's geom ids (V,H,W), normals and logged colours (V,H,W,3); the pixels fitted on back."""
        keep, clear = interior(ids, FIT_MARGIN), interior(ids, EDGE_MARGIN)
        x = _features(normals)
        for v in range(len(ids)):
            idc, xc, yc = ids[v][clear[v]], x[v][clear[v]], rgb[v][clear[v]]
            self.wide[v] += np.bincount(idc, minlength=self.G)
            np.add.at(self.xtx_clear, idc, xc[:, :, None] * xc[:, None, :])
            np.add.at(self.xty_clear, idc, xc[:, :, None] * yc[:, None, :])
            idx, xv, yv = ids[v][keep[v]], x[v][keep[v]], rgb[v][keep[v]]
            np.add.at(self.xtx[v], idx, xv[:, :, None] * xv[:, None, :])
            np.add.at(self.xty[v], idx, xv[:, :, None] * yv[:, None, :])
            if self.geometry.fixed[v]:
                static = self.geometry.static[ids[v]] & keep[v]
                self.plate_sum[v][static] += rgb[v][static]
                self.plate_n[v][static] += 1
        return keep

    def solve(self, ridge: float) -> HeadFrames:
        """Each (view, geom) its own fit where the view shows enough of it, else its fit over every view,
        else (low resolution) its own fit on fewer pixels, else a mean colour."""
        xtx, xty, used = self.xtx, self.xty, self.xtx[..., 0, 0]

        def solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            # ridge on the normal's weights only, scaled by the pixels: a geom seen from one side keeps its
            # mean colour instead of extrapolating shading it never showed
            reg = ridge * a[0, 0] * np.diag([0.0, 1.0, 1.0, 1.0])
            return np.linalg.solve(a + reg + 1e-9 * np.eye(FEATURES), b)

        coef = np.zeros(xty.shape[:2] + (FEATURES, 3))
        for v, g in np.ndindex(*used.shape):
            if self.wide[v, g] >= MIN_PIXELS:  # large in this view: its own fit
                coef[v, g] = solve(xtx[v, g], xty[v, g])
            elif self.xtx_clear[g, 0, 0] >= MIN_PIXELS:  # small here: its fit over every view, clear of edges
                coef[v, g] = solve(self.xtx_clear[g], self.xty_clear[g])
            elif used[v, g] >= MIN_PIXELS:  # small everywhere (low resolution): its own fit after all
                coef[v, g] = solve(xtx[v, g], xty[v, g])
            elif used[:, g].sum() > 0:  # a few pixels: its mean colour over every view
                coef[v, g, 0] = xty[:, g, 0].sum(0) / used[:, g].sum()
            else:  # never seen inside its edges: the view's mean colour
                coef[v, g, 0] = xty[v, :, 0].sum(0) / used[v].sum().clip(1)
        plate = self.plate_sum / self.plate_n.clip(1)[..., None]
        return HeadFrames(self.geometry, coef, plate, self.plate_n > 0)


def fit_appearance(
    geometry: SceneGeometry, episodes, ridge: float = RIDGE, progress: bool = True
) -> tuple[HeadFrames, dict]:
    """Fit the appearance to logged frames. `episodes` yields (images (T,V,3,H,W) in [0,1], states (T,S),
    poses (T,E) or None) at the logs' resolution. Returns the renderer and its fit figures (pixels used,
    mean absolute colour error on them)."""
    V, H, W = len(geometry.cameras), geometry.height, geometry.width
    sums, scored, seen = _Sums(geometry), [], 0
    for images, states, poses in tqdm(episodes, desc="appearance", unit="ep", disable=not progress):
        qpos = geometry.qpos(
            np.asarray(states, np.float64), None if poses is None else np.asarray(poses, float)
        )
        for q, image in zip(qpos, np.asarray(images, np.float64), strict=True):
            if image.shape != (V, 3, H, W):
                raise ValueError(f"logged frames are {image.shape[1:]}; the renderer draws (3, {H}, {W}).")
            ids, normals = geometry.render(q)
            rgb = image.transpose(0, 2, 3, 1)  # (V,H,W,3)
            keep = sums.add(ids, normals, rgb)
            if seen % SCORE_EVERY == 0:  # kept to score the fit on
                scored.append((ids, normals.astype(np.float32), rgb.astype(np.float32), keep))
            seen += 1
    if not seen:
        raise ValueError("no logged frames to fit the appearance on; pass rendered logs.")
    renderer = sums.solve(ridge)
    error, pixels = 0.0, 0
    for ids, normals, rgb, keep in scored:
        error += np.abs(renderer.draw(ids, normals) - rgb).mean(-1)[keep].sum()
        pixels += int(keep.sum())
    figures = {"frames": seen, "scored_frames": len(scored), "pixels": pixels, "mae": error / max(pixels, 1)}
    return renderer, figures
