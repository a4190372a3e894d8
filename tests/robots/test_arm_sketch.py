"""The arms' stick figures fall on the arms MuJoCo renders, in every camera, at the model's resolution."""

from __future__ import annotations

from dataclasses import replace

import mujoco
import numpy as np
import pytest
import torch

from r2s2r.robots.arm_sketch import ArmSketch
from r2s2r.robots.spec import robot_spec

CAMERAS = ("top", "left_wrist", "right_wrist")


def _arm_of_geoms(model) -> np.ndarray:
    """Each geom's arm: 0 left, 1 right, -1 neither."""

    def arm(body):
        while body:
            name = model.body(body).name
            if name in ("vx300s_left", "vx300s_right"):
                return int(name.endswith("right"))
            body = model.body_parentid[body]
        return -1

    return np.array([arm(model.geom_bodyid[g]) for g in range(model.ngeom)])


def _poses(count: int) -> np.ndarray:
    """Arm poses around gym-aloha's start pose, grippers half to fully open."""
    rng = np.random.default_rng(0)
    start = np.array([0, -0.96, 1.16, 0, -0.3, 0, 0.75] * 2)
    spread = np.array([0.3] * 6 + [0.25]) * np.ones((2, 1))
    return start + rng.uniform(-1, 1, size=(count, 14)) * spread.reshape(-1)


def test_sketches_lie_on_the_rendered_arms():
    spec = robot_spec("aloha")
    sketch = ArmSketch(spec, CAMERAS, 48, 64)
    model, data = sketch.model, sketch.data
    geom_arm = _arm_of_geoms(model)
    renderer = mujoco.Renderer(model, 48, 64)
    renderer.enable_segmentation_rendering()
    poses = _poses(3)
    drawn = sketch(torch.tensor(poses, dtype=torch.float32))  # (N,V,arms,48,64)
    assert drawn.shape == (3, 3, 2, 48, 64) and drawn.min() >= 0 and drawn.max() <= 1
    try:
        for i, qpos in enumerate(sketch.checker.qpos(poses)):
            sketch.pose(qpos)
            for v, camera in enumerate(CAMERAS):
                renderer.update_scene(data, camera=camera)
                segmentation = renderer.render()
                ids, types = segmentation[..., 0], segmentation[..., 1]
                arm = np.where(types == mujoco.mjtObj.mjOBJ_GEOM, geom_arm[ids.clip(0)], -1)
                for a in range(2):
                    lines = drawn[i, v, a].numpy() > 0.5
                    if not lines.any():  # e.g. the other arm out of a wrist camera's view
                        continue
                    on_arm = (arm[lines] == a).mean()
                    # The top camera sees both arms whole: the figure lies on them. A wrist camera sees
                    # its own gripper close up, where the lines to the fingers' centres cross the gap
                    # between them.
                    assert on_arm >= (0.9 if camera == "top" else 0.6), (camera, a, on_arm)
                    if camera == "top":  # a projection upside down would not: the lines miss the arms
                        assert (arm[lines[::-1]] == a).mean() < 0.3
    finally:
        renderer.close()


def test_drawing_in_tiles_equals_every_pixel_for_every_segment():
    """The tiled drawing against the plain formula: per pixel centre, the Gaussian of its distance to the
    nearest visible segment, every segment against every pixel."""
    sketch = ArmSketch(robot_spec("aloha"), CAMERAS, 48, 64)
    drawn = [sketch.endpoints(q) for q in sketch.checker.qpos(_poses(4))]
    ends = torch.tensor(np.stack([e for e, _ in drawn])).float()  # (N,V,arms,L,2,2)
    visible = torch.tensor(np.stack([v for _, v in drawn]))
    assert not visible.all() and visible.any()  # some lines behind a wrist camera, in these poses
    ys, xs = torch.meshgrid(torch.arange(48) + 0.5, torch.arange(64) + 0.5, indexing="ij")
    pixel = torch.stack([xs, ys], -1).reshape(-1, 2)  # (H*W,2) as (column, row)
    a, b = ends[..., 0, None, :], ends[..., 1, None, :]  # (N,V,arms,L,1,2)
    t = (((pixel - a) * (b - a)).sum(-1) / ((b - a) ** 2).sum(-1).clamp_min(1e-6)).clamp(0, 1)
    distance2 = ((a + t[..., None] * (b - a) - pixel) ** 2).sum(-1)  # (N,V,arms,L,H*W)
    plain = (torch.exp(-distance2 / (2 * 0.6**2)) * visible[..., None]).amax(3).reshape(4, 3, 2, 48, 64)
    torch.testing.assert_close(sketch.draw(ends, visible), plain, atol=1e-5, rtol=0)
    assert plain.max() > 0.99  # every arm drawn somewhere, at full strength on its lines


def test_an_open_gripper_draws_its_fingers_apart():
    sketch = ArmSketch(robot_spec("aloha"), ("top",), 48, 64)
    closed, opened = _poses(1)[0].copy(), _poses(1)[0].copy()
    closed[[6, 13]], opened[[6, 13]] = 0.0, 1.0
    gaps = []
    for joints in (closed, opened):
        ends, visible = sketch.endpoints(sketch.checker.qpos(joints[None])[0])  # (V,arms,L,2,2)
        fingers = ends[0, :, -2:, 1]  # each arm's two finger ends (arms,2,2)
        gaps.append(np.linalg.norm(fingers[:, 0] - fingers[:, 1], axis=-1))
    # gym-aloha's fingers slide 18 to 58 mm off centre: seen from the top at 48x64, a closed gripper's finger
    # lines end within a pixel or so of each other, an open one's several pixels apart
    assert (gaps[0] < 1.5).all() and (gaps[1] > 3 * gaps[0]).all() and (gaps[1] > 3).all(), gaps


def test_bad_sketch_requests_are_refused():
    spec = robot_spec("aloha")
    with pytest.raises(ValueError, match=r"cameras \['ceiling'\] are not in"):
        ArmSketch(spec, ("top", "ceiling"), 48, 64)
    with pytest.raises(ValueError, match="robot 'other' has no arm chains"):
        ArmSketch(replace(spec, name="other"), ("top",), 48, 64)


def test_object_boxes_come_from_the_mjcf_and_turn_with_their_quaternion():
    """The transfer cube is the MJCF's one free body, a box of 2 cm half side. Its edges for a hand-made
    pose: turned 45 degrees about z (w-x-y-z quaternion), the corners sit on the axes at h*sqrt(2) from the
    centre."""
    sketch = ArmSketch(robot_spec("aloha"), ("top",), 48, 64, objects=True)
    assert len(sketch.boxes) == 1 and sketch.channels == 3
    np.testing.assert_allclose(sketch.boxes[0], [0.02, 0.02, 0.02])
    half_turn = np.pi / 8  # half of 45 degrees
    pose = np.array([0.1, 0.5, 0.05, np.cos(half_turn), 0.0, 0.0, np.sin(half_turn)])
    edges = sketch.box_edges(pose)  # (1,12,2,3)
    assert edges.shape == (1, 12, 2, 3)
    corners = np.unique(edges.reshape(-1, 3).round(6), axis=0) - pose[:3]  # the 8 corners, centred
    on_axes = ((0.02828, 0), (-0.02828, 0), (0, 0.02828), (0, -0.02828))
    expected = [(x, y, z) for x, y in on_axes for z in (-0.02, 0.02)]
    np.testing.assert_allclose(
        np.array(sorted(map(tuple, corners.round(5)))), np.array(sorted(expected)), atol=1e-5
    )
    lengths = np.linalg.norm(edges[0, :, 0] - edges[0, :, 1], axis=-1)
    np.testing.assert_allclose(lengths, 0.04, atol=1e-9)  # every edge is one side of the cube
    with pytest.raises(ValueError, match="object poses have 6 numbers; the MJCF has 1 free objects of 7"):
        sketch.box_edges(pose[:6])
    with pytest.raises(ValueError, match="this sketch draws objects: pass their poses"):
        sketch(torch.tensor(_poses(1), dtype=torch.float32))


def test_the_cube_sketch_lies_on_the_rendered_cube():
    """With the cube placed in the MJCF at a pose, the centre of its sketch's ink falls within a pixel of the
    centre of the cube's pixels in MuJoCo's segmentation render, in every camera that sees it; the sketch of
    a pose 5 cm away does not."""
    cameras = ("top", "angle", "front_close")
    spec = robot_spec("aloha")
    sketch = ArmSketch(spec, cameras, 96, 128, objects=True)
    model, data = sketch.model, sketch.data
    joint = next(j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE)
    cube = model.body_geomadr[model.jnt_bodyid[joint]]
    renderer = mujoco.Renderer(model, 96, 128)
    renderer.enable_segmentation_rendering()
    joints = torch.tensor(_poses(1), dtype=torch.float32)
    rng = np.random.default_rng(3)
    checked = 0
    try:
        for _ in range(3):
            quaternion = np.array([np.cos(0.3), 0, 0, np.sin(0.3)])
            pose = np.concatenate([[rng.uniform(-0.1, 0.2), rng.uniform(0.4, 0.6), 0.02], quaternion])
            drawn = sketch(joints, torch.tensor(pose[None], dtype=torch.float32))[0, :, 2].numpy()  # (V,H,W)
            away = pose.copy()
            away[1] += 0.05
            drawn_away = sketch(joints, torch.tensor(away[None], dtype=torch.float32))[0, :, 2].numpy()
            qpos = sketch.checker.qpos(joints.double().numpy())[0]
            qpos[model.jnt_qposadr[joint] : model.jnt_qposadr[joint] + 7] = pose
            sketch.pose(qpos)
            for v, camera in enumerate(cameras):
                renderer.update_scene(data, camera=camera)
                segmentation = renderer.render()
                mask = (segmentation[..., 1] == mujoco.mjtObj.mjOBJ_GEOM) & (segmentation[..., 0] == cube)
                if mask.sum() < 4:  # hidden by an arm or out of view
                    continue
                rows, columns = np.nonzero(mask)
                truth = np.array([columns.mean(), rows.mean()]) + 0.5

                def centre(ink):
                    ys, xs = np.mgrid[0:96, 0:128] + 0.5
                    return np.array([(ink * xs).sum(), (ink * ys).sum()]) / ink.sum()

                assert np.linalg.norm(centre(drawn[v]) - truth) < 1.0, (camera, centre(drawn[v]), truth)
                assert np.linalg.norm(centre(drawn_away[v]) - truth) > 2.0, camera
                checked += 1
    finally:
        renderer.close()
    assert checked >= 6  # most cameras saw most cubes
