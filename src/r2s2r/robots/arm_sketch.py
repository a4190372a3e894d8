"""Where the arms appear in each camera, drawn from joint angles: a stick figure per arm, per view.

The video model must learn to draw an arm where its joint targets put it. At 48x64 pixels that is a few
pixels of a thin arm in the top view, a small share of the pixel loss, and the model learnt it slowly. The
robot's own model already knows the answer: forward kinematics of its MJCF puts every link in space, and
the cameras' calibration (the same MJCF: the fixed cameras' poses and the wrist cameras' mounts, fields of
view) projects them into every image. `ArmSketch` draws each arm's links as soft lines at the model's
resolution, one channel per arm, for any batch of joint vectors. The world model gives its denoiser the
sketch of the joints at the last context frame and of the chunk's last joint targets (`arm_sketch`):
position-controlled arms reach their targets within a frame, so the second is where the arms will be.

MuJoCo's kinematics of the robot's model computes the link and camera poses (as a URDF library would on
hardware; no physics is stepped). Points behind a camera are dropped with the links they end.

With `objects`, the sketch also draws every object whose pose `observation.environment_state` holds: the
MJCF's free-floating bodies, in order, 7 numbers each (position, then MuJoCo's w-x-y-z quaternion), each as
the twelve edges of its box (its first geom's half extents, or a cube of its bounding radius), one channel
per object. The world model gives its denoiser the object at the last context frame and where the state
head puts it in the frame being imagined (`object_sketch`): the video then shows the cube where the head,
which tracks it to 1-3 cm over 6 s, says it is, instead of where 48x64 pixels let the denoiser guess.
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from r2s2r.robots.spec import EmbodimentSpec

# Per robot: each arm's chain of bodies (drawn as lines between their origins, then on to the grasp point),
# the body the grasp point is fixed in and that point in its frame, and the finger geoms (lines from the
# gripper body's origin to each finger's centre, so an open gripper draws wider than a closed one).
ARM_CHAINS = {
    "aloha": [
        {
            "links": tuple(
                f"vx300s_{side}/{b}"
                for b in (
                    "shoulder_link",
                    "upper_arm_link",
                    "upper_forearm_link",
                    "lower_forearm_link",
                    "wrist_link",
                    "gripper_link",
                )
            ),  # fmt: skip
            "grasp": (f"vx300s_{side}/gripper_link", (0.12, 0.0, 0.0)),
            "fingers": (f"vx300s_{side}/10_left_gripper_finger", f"vx300s_{side}/10_right_gripper_finger"),
        }
        for side in ("left", "right")
    ],
}
SKETCH_WIDTH = 0.6  # std of the lines' Gaussian profile, in pixels of the 48x64 image (scaled with size)
SKETCH_REACH = 8  # line widths past which a line's Gaussian (below 1e-13 there) is drawn as 0
SKETCH_TILE = 16  # pixels per side of the tiles a line is drawn in (16: fastest at 48x64 on a CPU)


def sketch_channels(robot: str, objects: int = 0) -> int:
    """Channels of one sketch: one per arm of `robot`, and one per object drawn. A robot without arm chains
    is refused."""
    if robot not in ARM_CHAINS:
        raise ValueError(
            f"robot '{robot}' has no arm chains in r2s2r/robots/arm_sketch.py: ARM_CHAINS; add them to "
            "sketch its arms, or set arm_sketch=False."
        )
    return len(ARM_CHAINS[robot]) + objects


POSE_SIZE = 7  # numbers per object in observation.environment_state: position, w-x-y-z quaternion
CORNER_SIGNS = np.array([[(c >> k & 1) * 2 - 1 for k in range(3)] for c in range(8)], dtype=np.float64)
BOX_EDGES = np.array(
    [(a, b) for a in range(8) for b in range(a + 1, 8) if bin(a ^ b).count("1") == 1]
)  # corner pairs that differ in one axis: a box's 12 edges


def object_boxes(model: mujoco.MjModel) -> list[np.ndarray]:
    """Half extents (3,) of each free-floating body of `model`, in the order of their joints (the order of
    their poses in observation.environment_state): its first geom's box, or a cube of its bounding radius."""
    boxes = []
    for joint in range(model.njnt):
        if model.jnt_type[joint] != mujoco.mjtJoint.mjJNT_FREE:
            continue
        body = model.jnt_bodyid[joint]
        geom = model.body_geomadr[body]
        if geom < 0:
            name = model.body(body).name
            raise ValueError(f"free body '{name}' has no geom to draw; turn object_sketch off.")
        box = model.geom_type[geom] == mujoco.mjtGeom.mjGEOM_BOX
        boxes.append(model.geom_size[geom].copy() if box else np.full(3, model.geom_rbound[geom]))
    return boxes


class ArmSketch:
    """Joint vectors (N,S) -> soft stick figures of each arm in each camera, (N,V,arms,height,width) in [0,1];
    with `objects`, and object poses (N,E), each object's box after the arms: (N,V,arms+objects,height,width).

    Example:
        sketch = ArmSketch(robot_spec("aloha"), ("top", "left_wrist", "right_wrist"), 48, 64)
        maps = sketch(states)  # raw observation.state or joint-target actions, radians and gripper 0..1
    """

    def __init__(
        self, spec: EmbodimentSpec, cameras: tuple[str, ...], height: int, width: int, objects: bool = False
    ):
        sketch_channels(spec.name)  # refuses a robot without arm chains
        if spec.model_xml is None:
            raise ValueError(f"robot '{spec.name}' has no MJCF to sketch its arms from; turn arm_sketch off.")
        from r2s2r.robots.checker import PhysicsChecker

        self.checker = PhysicsChecker(spec)  # the robot's MJCF, and proprio -> its qpos
        self.model = self.checker.model
        self.data = mujoco.MjData(self.model)
        self.height, self.width = height, width
        missing = [c for c in cameras if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, c) < 0]
        if missing:
            raise ValueError(
                f"cameras {missing} are not in {spec.model_xml}; the arm sketch cannot place them."
            )
        self.cameras = [self.model.camera(c).id for c in cameras]
        # per arm, its lines: pairs of ends, ("body", id, point in its frame or None) or ("geom", id, None)
        self.segments = []
        for arm in ARM_CHAINS[spec.name]:
            bodies = [("body", self.model.body(b).id, None) for b in arm["links"]]
            lines = list(zip(bodies, bodies[1:], strict=False))
            gripper = ("body", self.model.body(arm["grasp"][0]).id, None)
            lines.append((gripper, ("body", gripper[1], np.array(arm["grasp"][1]))))
            lines += [(gripper, ("geom", self.model.geom(f).id, None)) for f in arm["fingers"]]
            self.segments.append(lines)
        self.boxes = object_boxes(self.model) if objects else []
        if objects and not self.boxes:
            raise ValueError(f"{spec.model_xml} has no free-floating objects; turn object_sketch off.")

    @property
    def channels(self) -> int:
        """Channels of one sketch: the arms', then the objects'."""
        return len(self.segments) + len(self.boxes)

    def pose(self, qpos: np.ndarray) -> None:
        """Set the model's qpos and compute its link and camera poses."""
        self.data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_camlight(self.model, self.data)

    def project(self, points: np.ndarray, camera: int) -> tuple[np.ndarray, np.ndarray]:
        """World points (P,3) -> pixel coordinates (P,2) as (column, row) at the sketch's size, and whether
        each lies in front of the camera (P,). MuJoCo cameras look along their frame's -z, y up."""
        position, rotation = self.data.cam_xpos[camera], self.data.cam_xmat[camera].reshape(3, 3)
        local = (points - position) @ rotation  # camera frame
        depth = -local[:, 2]
        focal = 0.5 * self.height / np.tan(np.deg2rad(self.model.cam_fovy[camera]) / 2)
        safe = np.where(depth > 1e-3, depth, 1.0)
        column = 0.5 * self.width + focal * local[:, 0] / safe
        row = 0.5 * self.height - focal * local[:, 1] / safe
        return np.stack([column, row], axis=-1), depth > 1e-3

    def box_edges(self, pose: np.ndarray) -> np.ndarray:
        """Object poses (objects*7,) -> each box's 12 edges in the world, (objects,12,2,3)."""
        if pose.shape != (POSE_SIZE * len(self.boxes),):
            raise ValueError(
                f"object poses have {pose.shape[-1]} numbers; the MJCF has {len(self.boxes)} free objects of "
                f"{POSE_SIZE} (position, quaternion): record observation.environment_state as their poses."
            )
        edges = []
        for half, obj in zip(self.boxes, pose.reshape(-1, POSE_SIZE), strict=True):
            rotation = np.empty(9)
            quaternion = obj[3:] / max(np.linalg.norm(obj[3:]), 1e-9)
            mujoco.mju_quat2Mat(rotation, quaternion)
            corners = obj[:3] + (CORNER_SIGNS * half) @ rotation.reshape(3, 3).T  # (8,3)
            edges.append(corners[BOX_EDGES])  # (12,2,3)
        return np.stack(edges)

    def endpoints(self, qpos: np.ndarray, pose: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """One qpos (and, with objects, their poses) -> every segment's two ends in pixels (V,groups,L,2,2)
        and visibility (V,groups,L): each arm's lines, then each object's edges, padded with hidden lines to
        the longest group."""
        self.pose(qpos)
        worlds = []
        for lines in self.segments:
            ends = []
            for line in lines:
                for kind, index, point in line:
                    if kind == "geom":
                        ends.append(self.data.geom_xpos[index])
                        continue
                    origin = self.data.xpos[index]
                    ends.append(
                        origin if point is None else origin + self.data.xmat[index].reshape(3, 3) @ point
                    )
            worlds.append(np.array(ends).reshape(-1, 2, 3))
        if self.boxes:
            worlds += list(self.box_edges(pose))
        longest = max(len(w) for w in worlds)
        real = np.array([[i < len(w) for i in range(longest)] for w in worlds])  # (groups,L)
        worlds = np.stack([np.concatenate([w, w[:1].repeat(longest - len(w), 0)]) for w in worlds])
        pixels, visible = [], []
        for camera in self.cameras:
            uv, front = self.project(worlds.reshape(-1, 3), camera)
            pixels.append(uv.reshape(*worlds.shape[:-1], 2))
            visible.append(front.reshape(worlds.shape[:-1]).all(-1) & real)
        return np.stack(pixels), np.stack(visible)

    @torch.no_grad()
    def __call__(self, joints: torch.Tensor, poses: torch.Tensor | None = None) -> torch.Tensor:
        """(N,S) joint vectors, and with objects their poses (N,E) -> (N,V,channels,height,width) sketches, on
        the joints' device and dtype."""
        if self.boxes and poses is None:
            raise ValueError("this sketch draws objects: pass their poses (observation.environment_state).")
        qpos = self.checker.qpos(joints.detach().double().cpu().numpy())
        pose = [None] * len(qpos) if poses is None else poses.detach().double().cpu().numpy()
        ends, visible = zip(*(self.endpoints(q, p) for q, p in zip(qpos, pose, strict=True)), strict=True)
        ends = torch.tensor(np.stack(ends), dtype=torch.float32)  # (N,V,arms,L,2,2)
        visible = torch.tensor(np.stack(visible))  # (N,V,arms,L)
        return self.draw(ends, visible).to(device=joints.device, dtype=joints.dtype)

    def draw(self, ends: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """Segments (N,V,arms,L,2,2) in pixels and their visibility (N,V,arms,L) -> (N,V,arms,height,width):
        per pixel, a Gaussian of its distance to the nearest visible segment of that arm.

        Distances are computed only in the tiles (SKETCH_TILE pixels square) that a segment's bounding box,
        grown by SKETCH_REACH line widths, touches: farther pixels read 0 where the Gaussian is below 1e-13.
        The arms cover a few tiles of each image: several times cheaper than every pixel for every segment."""
        N, V, A, L = visible.shape
        H, W, T = self.height, self.width, SKETCH_TILE
        width = SKETCH_WIDTH * H / 48
        reach = SKETCH_REACH * width
        a, b = ends[..., 0, :], ends[..., 1, :]  # (N,V,A,L,2) as (column, row)
        low, high = torch.minimum(a, b) - reach, torch.maximum(a, b) + reach
        starts = [
            torch.arange(0, size, T, dtype=torch.float32) for size in (W, H)
        ]  # tiles' first column, row
        touch = [
            (starts[k] < high[..., k, None]) & (starts[k] + T > low[..., k, None]) for k in (0, 1)
        ]  # (N,V,A,L,tiles across) and (N,V,A,L,tiles down)
        hit = (touch[1][..., :, None] & touch[0][..., None, :] & visible[..., None, None]).nonzero()  # (P,6)
        n, v, arm, line, tile_row, tile_column = hit.unbind(-1)
        local = torch.arange(T * T)
        columns = tile_column[:, None] * T + local % T  # (P,T*T) pixel indices
        rows = tile_row[:, None] * T + local // T
        inside = (columns < W) & (rows < H)
        pa, pb = a[n, v, arm, line][:, :, None], b[n, v, arm, line][:, :, None]  # (P,2,1)
        ab = pb - pa
        dx, dy = columns + 0.5 - pa[:, 0], rows + 0.5 - pa[:, 1]
        t = ((dx * ab[:, 0] + dy * ab[:, 1]) / (ab * ab).sum(1).clamp_min(1e-6)).clamp_(0, 1)
        dx, dy = dx - t * ab[:, 0], dy - t * ab[:, 1]
        distance2 = (dx * dx + dy * dy).masked_fill_(~inside, torch.inf)
        target = ((n * V + v) * A + arm)[:, None] * (H * W) + (rows * W + columns).clamp_max(H * W - 1)
        nearest = torch.full((N * V * A * H * W,), torch.inf)
        nearest.scatter_reduce_(0, target.flatten(), distance2.flatten(), reduce="amin")
        return torch.exp(-nearest / (2 * width**2)).reshape(N, V, A, H, W)
