"""Forward kinematics of a robot's grasp points, in torch, read from its MJCF.

The state-dynamics head reasons about the object relative to the fingers: whether the cube sits between the
pads of a closing gripper decides whether it will be carried along, and a 1 cm miss looks like nothing in
joint angles but everything in the gripper's frame. Joint angles are the proprio the head carries; this
module turns them into each gripper's grasp point and orientation, batched, differentiable, on any device,
so thousands of imagined states can be related to the object in one call.

The chain of every gripper (its bodies' fixed offsets, and the hinge joints between them) is read once
from the robot's MJCF with MuJoCo, as a URDF would be read on hardware: MuJoCo computes nothing here, and
`GraspKinematics` agrees with `mj_kinematics` to float precision (tests/test_kinematics.py).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from r2s2r.robots.spec import EmbodimentSpec

# Per robot: the body of each gripper whose frame the grasp point is fixed in, and that point in its frame.
# ALOHA: gym-aloha's gripper_link has x pointing out of the gripper and the fingers sliding along y; the
# point between the pads is the demonstrators' tool centre point (robots/ik.py: DEFAULT_TCP).
GRASP_FRAMES = {
    "aloha": {
        "bodies": ("vx300s_left/gripper_link", "vx300s_right/gripper_link"),
        "point": (0.12, 0.0, 0.0),
        # the fingers' slide position at a gripper state of 0 and of 1 (gym-aloha's
        # PUPPET_GRIPPER_POSITION_CLOSE / _OPEN: its normalization of the gripper joint)
        "finger_travel": (0.01844, 0.05800),
    },
}


def _spec_joint(mjcf_name: str) -> str:
    """MJCF joint name -> spec joint name: 'vx300s_left/waist' -> 'left_waist'."""
    prefix, _, joint = mjcf_name.partition("/")
    return f"{prefix.split('_')[-1]}_{joint}"


def quat_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrix (3,3) of a (w, x, y, z) quaternion."""
    w, x, y, z = np.asarray(q, dtype=float) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def box_corners(aabb: np.ndarray) -> np.ndarray:
    """The 8 corners (8,3) of an axis-aligned box given as MuJoCo's (center xyz, half-size xyz)."""
    signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
    return aabb[:3] + signs * aabb[3:]


def table_geometry(model) -> tuple[float, np.ndarray, np.ndarray, list[np.ndarray]]:
    """A MuJoCo model's table and free objects: the table top's height, its x-y extent (lo (2,), hi (2,)),
    world frame, and per free object the corners (8 * n_geoms, 3) of its geoms' boxes in its body frame
    (a rotation then gives its lowest corner). Needs a geom named 'table'."""
    import mujoco

    names = [model.geom(i).name for i in range(model.ngeom)]
    if "table" not in names:
        raise ValueError(
            f"the robot's MJCF has no geom named 'table' (geoms: {names[:8]}...); name its top 'table'."
        )
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    g = names.index("table")
    corners = data.geom_xpos[g] + box_corners(model.geom_aabb[g]) @ data.geom_xmat[g].reshape(3, 3).T
    objects = []
    for j in range(model.njnt):
        if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE:
            body, boxes = model.jnt_bodyid[j], []
            for k in range(model.ngeom):
                if model.geom_bodyid[k] == body:
                    rot = np.zeros(9)
                    mujoco.mju_quat2Mat(rot, model.geom_quat[k])
                    boxes.append(model.geom_pos[k] + box_corners(model.geom_aabb[k]) @ rot.reshape(3, 3).T)
            objects.append(np.concatenate(boxes))
    return float(corners[:, 2].max()), corners[:, :2].min(0), corners[:, :2].max(0), objects


def _open_fingers(model, body_name: str, point) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """The fingers under `body_name` (bodies on slide joints) set to their widest opening: per finger its
    geometry's vertices (N,3) in the gripper's frame about the grasp point `point` (metres; a mesh's own
    vertices, a primitive's bounding-box corners) and the unit direction (3,) it moves in as the gripper
    opens, in that frame; and the closing axis (0-2)."""
    import mujoco

    data = mujoco.MjData(model)
    body = model.body(body_name).id
    slides = _slides(model, body)
    if not slides:
        raise ValueError(f"{body_name} has no finger on a slide joint in the MJCF; turn head.pads off.")
    for j in slides:
        low, high = model.jnt_range[j]
        data.qpos[model.jnt_qposadr[j]] = low if abs(low) > abs(high) else high
    mujoco.mj_kinematics(model, data)
    rot, origin = data.xmat[body].reshape(3, 3), data.xpos[body]
    fingers = []
    for j in slides:
        moves = rot.T @ data.xmat[model.jnt_bodyid[j]].reshape(3, 3) @ model.jnt_axis[j]
        vertices = []
        for g in np.flatnonzero(model.geom_bodyid == model.jnt_bodyid[j]):
            if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH:
                mesh = model.geom_dataid[g]
                local = model.mesh_vert[
                    model.mesh_vertadr[mesh] : model.mesh_vertadr[mesh] + model.mesh_vertnum[mesh]
                ]
            else:
                local = box_corners(model.geom_aabb[g])
            world = data.geom_xpos[g] + local @ data.geom_xmat[g].reshape(3, 3).T
            vertices.append((world - origin) @ rot - np.asarray(point))
        if vertices:
            q = data.qpos[model.jnt_qposadr[j]]
            opens = moves * np.sign(q)  # widening |q| opens
            fingers.append((np.concatenate(vertices), opens / np.linalg.norm(opens), float(abs(q))))
    axis = int(np.abs(fingers[0][1]).argmax()) if fingers else 1
    return fingers, axis


def pad_box(
    model, body_name: str, point, object_half: float, overlap: float = 0.005
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """The box, in a gripper's frame about its grasp point, where an object's centre lies when the fingers'
    inner faces can close on it: (centre (3,), half-sizes (3,)) in metres, how far a finger's slide
    position exceeds its inner face's distance from the closing axis (m), and that axis (0-2). The fingers
    are the bodies on slide joints under `body_name`, set to their widest opening; along the closing axis
    the object (half-size `object_half`) fits between the open faces, along the other two it overlaps them
    by at least `overlap` (the face's extent grown by `object_half - overlap` on each side: ALOHA's nominal
    grasp holds the cube by the last 8 mm of the fingertips, and a cube whose edge only touches a pad's rim
    slips out)."""
    fingers, axis = _open_fingers(model, body_name, point)
    lows, highs, gaps = [], [], []
    for v, _, _ in fingers:
        gap = np.abs(v[:, axis]).min()
        face = v[np.abs(v[:, axis]) <= gap + 1e-3]  # the inner face: vertices nearest the closing axis
        lows.append(face.min(0))
        highs.append(face.max(0))
        gaps.append(gap)
    grow = max(object_half - overlap, 0.0)
    low, high = np.max(lows, 0) - grow, np.min(highs, 0) + grow  # where both faces reach
    centre, half = (low + high) / 2, (high - low) / 2
    centre[axis], half[axis] = 0.0, max(min(gaps) - object_half, 1e-3)
    return centre, half, fingers[0][2] - float(min(gaps)), axis


def face_profile(
    model, body_name: str, point, step: float = 0.001
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pads' inner faces as the fingers' geometry gives them, not their bounding box: ALOHA's taper from
    61 mm wide at the base to 10 mm at the tips. Along the first axis of the faces' plane (`depths` (N,),
    metres, every `step` over the faces' extent), the extent `lo`, `hi` (N,) along the second where both
    fingers' faces reach: each face is the convex hull of its vertices nearest the closing axis (MuJoCo
    collides a mesh by its convex hull), cut at each depth."""
    fingers, axis = _open_fingers(model, body_name, point)
    a, b = [i for i in range(3) if i != axis]
    cuts = []
    for v, _, _ in fingers:
        gap = np.abs(v[:, axis]).min()
        face = v[np.abs(v[:, axis]) <= gap + 1e-3][:, [a, b]]
        cuts.append(_hull_cut(face, step))
    start, stop = max(c[0][0] for c in cuts), min(c[0][-1] for c in cuts)
    depths = np.linspace(start, stop, max(int(round((stop - start) / step)), 1) + 1)
    lo = np.max([np.interp(depths, d, low) for d, low, _ in cuts], axis=0)
    hi = np.min([np.interp(depths, d, high) for d, _, high in cuts], axis=0)
    return depths, lo, hi


def _hull_cut(points: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The convex hull of 2-D `points` (N,2) cut at depths (first coordinate) every `step` over its extent:
    (depths, lowest and highest second coordinate there). A depth's cut is spanned by the segments between
    any two points on either side of it, so no hull is built."""
    low, high = points[:, 0].min(), points[:, 0].max()
    depths = np.linspace(low, high, max(int(round((high - low) / step)), 1) + 1)
    depths[[0, -1]] += np.array([1, -1]) * min(step, high - low) / 2  # a hull may end in one vertex
    n = len(points)
    p, q = np.repeat(points, n, axis=0), np.tile(points, (n, 1))  # every ordered pair of points
    da, pa, pb, qb = q[:, 0] - p[:, 0], p[:, 0], p[:, 1], q[:, 1] - p[:, 1]
    t = (depths[:, None] - pa) / np.where(da == 0, np.inf, da)  # (D, pairs): where each cut meets each pair
    spans = (t >= 0) & (t <= 1) & (da > 0)
    at = pb + t.clip(0, 1) * qb
    return depths, np.where(spans, at, np.inf).min(1), np.where(spans, at, -np.inf).max(1)


def _slides(model, body: int) -> list[int]:
    """The slide joints of the bodies under `body` (its fingers), in the MJCF's order."""
    import mujoco

    return [
        j
        for j in range(model.njnt)
        if model.body_parentid[model.jnt_bodyid[j]] == body
        and model.jnt_type[j] == mujoco.mjtJoint.mjJNT_SLIDE
    ]


def finger_names(model, body_name: str) -> tuple[tuple[str, ...], ...]:
    """The geom names of each finger under `body_name`, in the order of `finger_boxes` (the MJCF's)."""
    bodies = [model.jnt_bodyid[j] for j in _slides(model, model.body(body_name).id)]
    return tuple(tuple(model.geom(g).name for g in np.flatnonzero(model.geom_bodyid == b)) for b in bodies)


def finger_boxes(model, body_name: str, point) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Each finger under `body_name` as the box bounding its geometry, at the gripper's widest opening, in
    the gripper's frame about the grasp point: lower and upper corners (F,3) in metres, the unit direction
    (F,3) each moves in as the gripper opens, and the fingers' slide position there (m): what a moving
    finger sweeps (`head.pushes`)."""
    fingers, _ = _open_fingers(model, body_name, point)
    lower, upper, opens = zip(*((v.min(0), v.max(0), d) for v, d, _ in fingers), strict=True)
    return np.stack(lower), np.stack(upper), np.stack(opens), fingers[0][2]


class GraspKinematics(nn.Module):
    """Proprio (...,S) -> each gripper's grasp point (...,G,3) in metres and orientation (...,G,3,3).

    Example:
        fk = GraspKinematics(robot_spec("aloha"))
        point, rot = fk(states)  # states: raw observation.state (rad; grippers ignored)
        in_gripper = (rot.transpose(-1, -2) @ (cube - point)[..., None])[..., 0]  # cube in each gripper frame
    """

    def __init__(self, spec: EmbodimentSpec, pad_overlap: float = 0.005):
        super().__init__()
        if spec.name not in GRASP_FRAMES or spec.model_xml is None:
            raise ValueError(
                f"robot '{spec.name}' has no grasp frames or MJCF for forward kinematics; add it to "
                "r2s2r/robots/kinematics.py: GRASP_FRAMES, or turn head.kinematics off."
            )
        import mujoco

        frames = GRASP_FRAMES[spec.name]
        model = mujoco.MjModel.from_xml_path(spec.model_xml)
        chains = []
        for body_name in frames["bodies"]:
            body, chain = model.body(body_name).id, []
            while body != 0:  # up to the world body
                joints = [j for j in range(model.njnt) if model.jnt_bodyid[j] == body]
                hinges = [j for j in joints if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
                if len(joints) != len(hinges) or len(hinges) > 1:
                    raise ValueError(f"{body_name}'s chain has a non-hinge or multi-joint body; unsupported.")
                index = -1
                if hinges:
                    name = _spec_joint(model.joint(hinges[0]).name)
                    if name not in spec.joint_names:
                        raise ValueError(f"joint {name} of {body_name}'s chain is not in the robot spec.")
                    index = spec.joint_names.index(name)
                chain.append((
                    model.body_pos[body].copy(), quat_matrix(model.body_quat[body]),
                    model.jnt_axis[hinges[0]].copy() if hinges else np.zeros(3),
                    model.jnt_pos[hinges[0]].copy() if hinges else np.zeros(3), index,
                ))  # fmt: skip
                body = model.body_parentid[body]
            chains.append(chain[::-1])  # root first
        depth = max(len(c) for c in chains)
        for c in chains:  # pad shorter chains at the root with identity links
            c[:0] = [(np.zeros(3), np.eye(3), np.zeros(3), np.zeros(3), -1)] * (depth - len(c))
        as_tensor = lambda i: torch.tensor(np.array([[link[i] for link in c] for c in chains]))  # noqa: E731
        offset, fixed, axis, anchor = (as_tensor(i).float() for i in range(4))  # (G,D,3), (G,D,3,3), ...
        if anchor.abs().max() > 0:
            raise ValueError("a hinge of the gripper chains is off its body's origin; unsupported.")
        x, y, z = axis.unbind(-1)
        zero = torch.zeros_like(x)
        cross = torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], dim=-1).unflatten(-1, (3, 3))
        # A link's transform is fixed @ R(axis, q) = fixed + sin q (fixed @ K) + (1 - cos q) (fixed @ K^2)
        # (Rodrigues), so all links of all chains come from three precomputed matrices in one batched op.
        self.register_buffer("offset", offset, persistent=False)
        self.register_buffer("fixed", fixed, persistent=False)
        self.register_buffer("fixed_k", fixed @ cross, persistent=False)
        self.register_buffer("fixed_k2", fixed @ cross @ cross, persistent=False)
        index = torch.tensor([[link[4] for link in c] for c in chains])  # state index of each hinge, or -1
        self.register_buffer("index", index.clamp_min(0), persistent=False)
        self.register_buffer("hinged", (index >= 0).float(), persistent=False)
        self.register_buffer("point", torch.tensor(frames["point"]).float(), persistent=False)
        self.num_grippers, self.depth = index.shape
        self._read_surroundings(model, frames, pad_overlap)

    def _read_surroundings(self, model, frames: dict, pad_overlap: float) -> None:
        """The table the objects rest on: its top, x-y extent, and the lowest an object's origin can sit above
        it (the smallest half-extent of any free object: a cube face down); the box between the pads."""
        top, lo, hi, objects = table_geometry(model)
        self.table_top = top
        self.register_buffer("table_lo", torch.tensor(lo).float(), persistent=False)
        self.register_buffer("table_hi", torch.tensor(hi).float(), persistent=False)
        self.object_rest = min((np.abs(c).max(0).min() for c in objects), default=0.0)
        # Where an object's centre sits between a gripper's pads (head.pads), from the first one's fingers.
        centre, half, self.face_offset, self.closing_axis = pad_box(
            model, frames["bodies"][0], frames["point"], self.object_rest, pad_overlap
        )
        self.register_buffer("pad_centre", torch.tensor(centre).float(), persistent=False)
        self.register_buffer("pad_half", torch.tensor(half).float(), persistent=False)
        # The pads' faces themselves (the box without the object's reach beyond them), across the closing
        # axis: `face_axes` the two axes of the faces' plane, `face_centre` / `face_half` their extent.
        self.face_axes = [a for a in range(3) if a != self.closing_axis]
        grow = max(self.object_rest - pad_overlap, 0.0)
        self.register_buffer("face_centre", torch.tensor(centre[self.face_axes]).float(), persistent=False)
        self.register_buffer(
            "face_half", torch.tensor(half[self.face_axes] - grow).float().clamp_min(1e-3), persistent=False
        )
        depths, lo, hi = face_profile(model, frames["bodies"][0], frames["point"])
        angles = np.linspace(0, np.pi, self.SUPPORT_DIRECTIONS, endpoint=False)
        directions = np.stack([np.cos(angles), np.sin(angles)], -1)  # (K,2) in the faces' plane
        outline = np.concatenate([np.stack([depths, lo], -1), np.stack([depths, hi], -1)]) @ directions.T
        self.register_buffer("support_directions", torch.tensor(directions).float(), persistent=False)
        support = np.stack([outline.min(0), outline.max(0)], -1)  # (K,2) the faces' extent along each
        self.register_buffer("support", torch.tensor(support).float(), persistent=False)
        self.finger_travel = frames.get("finger_travel")
        lower, upper, opens, self.finger_widest = finger_boxes(model, frames["bodies"][0], frames["point"])
        # each gripper's fingers' geom names, in finger_boxes' order (head.touch_finger picks one by index)
        self.finger_names = tuple(finger_names(model, body) for body in frames["bodies"])
        for name, value in (("finger_lower", lower), ("finger_upper", upper), ("finger_opens", opens)):
            self.register_buffer(name, torch.tensor(value).float(), persistent=False)

    SUPPORT_DIRECTIONS = 32  # directions in the faces' plane along which `overlaps_faces` looks for a gap

    def overlaps_faces(self, points: torch.Tensor, margin: float = 0.0) -> torch.Tensor:
        """(...) whether the convex hull of `points` (...,N,2), in the faces' plane (`face_axes`), overlaps
        the faces' polygon (`face_profile`) grown by `margin` (m): no gap between their extents along any of
        SUPPORT_DIRECTIONS directions (the separating-axis test, the directions standing in for the edges'
        normals)."""
        along = points @ self.support_directions.to(points).T  # (...,N,K)
        low, high = self.support.to(points).unbind(-1)
        return ((along.amin(-2) <= high + margin) & (along.amax(-2) >= low - margin)).all(-1)

    def balance_margin(self, rel: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
        """How far (m, (...,G)) an object's centre at `rel` (...,G,3) in each gripper's frame lies inside the
        pads' faces across gravity: along the horizontal direction of the faces' plane (square to the world's
        vertical), given each gripper's orientation `rot` (...,G,3,3). Negative outside; +inf where the faces
        lie flat (the closing axis within FLAT_FACES of vertical: the object rests on a finger). An object
        held off its centre this way turns about the pads under its weight; one off it along the vertical
        only hangs from them."""
        axes = self.face_axes
        up = rot[..., 2, :][..., axes]  # (...,G,2) the world's vertical in the faces' plane
        norm = up.norm(dim=-1)
        across = torch.stack([up[..., 1], -up[..., 0]], dim=-1) / norm[..., None].clamp_min(1e-6)
        centre, half = self.face_centre.to(rel), self.face_half.to(rel)
        reach = (half * across.abs()).sum(-1)  # half the faces' extent along `across`
        offset = ((rel[..., axes] - centre) * across).sum(-1)
        margin = reach - offset.abs()
        return torch.where(norm > self.FLAT_FACES, margin, torch.full_like(margin, float("inf")))

    FLAT_FACES = 0.2  # the vertical's share in the faces' plane below which they count as lying flat

    def opening_at(self, half_gap: torch.Tensor) -> torch.Tensor:
        """The gripper state (raw, 0 closed .. 1 open) whose pads stand `half_gap` metres from the closing
        axis each."""
        closed, opened = self.finger_travel
        return (half_gap + self.face_offset - closed) / (opened - closed)

    def fingers_at(self, opening: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each finger's box (`finger_boxes`) at the gripper states `opening` (...): lower and upper corners
        (...,F,3) in the gripper's frame about the grasp point, each finger slid along its opening
        direction to where that state puts it."""
        closed, opened = self.finger_travel
        slide = closed + opening * (opened - closed) - self.finger_widest  # (...) m, <= 0 inside the widest
        shift = slide[..., None, None] * self.finger_opens.to(opening)  # (...,F,3)
        return self.finger_lower.to(opening) + shift, self.finger_upper.to(opening) + shift

    @torch.no_grad()
    def forward(self, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Not differentiated: the head relates objects to where the grippers are, as given."""
        batch, G, D = states.shape[:-1], self.num_grippers, self.depth
        angle = states[..., self.index.flatten()].unflatten(-1, (G, D)) * self.hinged  # (...,G,D)
        s, c = angle.sin()[..., None, None], (1 - angle.cos())[..., None, None]
        fixed, fixed_k, fixed_k2, offset, point = (
            t.to(states.dtype) for t in (self.fixed, self.fixed_k, self.fixed_k2, self.offset, self.point)
        )
        links = fixed + s * fixed_k + c * fixed_k2  # (...,G,D,3,3)
        rot = states.new_zeros(()).expand(*batch, G, 3, 3) + torch.eye(3).to(states)
        pos = states.new_zeros(*batch, G, 3)
        for d in range(D):
            pos = pos + (rot @ offset[:, d, :, None])[..., 0]
            rot = rot @ links[..., d, :, :]
        return pos + (rot @ point[:, None])[..., 0], rot
