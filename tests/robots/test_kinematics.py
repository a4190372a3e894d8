"""Forward kinematics of the grasp points in torch agree with MuJoCo's own on the robot's MJCF."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from r2s2r.robots.checker import PhysicsChecker
from r2s2r.robots.kinematics import GraspKinematics, _hull_cut, face_profile, finger_boxes, pad_box
from r2s2r.robots.spec import EmbodimentSpec, robot_spec


def test_grasp_points_and_frames_match_mujoco():
    spec = robot_spec("aloha")
    fk, checker = GraspKinematics(spec), PhysicsChecker(spec)
    states = np.random.default_rng(0).uniform(spec.position_lower, spec.position_upper, size=(40, 14))
    point, rot = fk(torch.tensor(states, dtype=torch.float64))
    model, data = checker.model, checker.data
    for i, qpos in enumerate(checker.qpos(states)):
        data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        for g, side in enumerate(("left", "right")):
            body = model.body(f"vx300s_{side}/gripper_link").id
            xmat = data.xmat[body].reshape(3, 3)
            np.testing.assert_allclose(rot[i, g].numpy(), xmat, atol=1e-6)
            np.testing.assert_allclose(point[i, g].numpy(), data.xpos[body] + xmat @ [0.12, 0, 0], atol=1e-6)
    # Batched over any leading dims; the left grasp point ignores the right arm's joints.
    moved = torch.tensor(states[:4], dtype=torch.float32).reshape(2, 2, 14).clone()
    before = fk(moved)[0]
    moved[..., 7:] += 0.3
    after = fk(moved)[0]
    assert torch.equal(after[..., 0, :], before[..., 0, :])
    assert not torch.allclose(after[..., 1, :], before[..., 1, :])


def test_robot_without_grasp_frames_is_refused():
    spec = robot_spec("aloha")
    other = EmbodimentSpec(**{**spec.__dict__, "name": "other"})
    with pytest.raises(ValueError, match="no grasp frames"):
        GraspKinematics(other)


HAND = """<mujoco><worldbody>
  <body name="hand" pos="0.2 -0.1 0.5" euler="30 0 90">
    <geom type="box" size="0.01 0.03 0.01"/>
    <body name="finger_a" pos="0.05 0 0">
      <joint name="a" type="slide" axis="0 1 0" range="0.01 0.04"/>
      <geom type="box" pos="0 0.006 0" size="0.02 0.005 0.015"/>
    </body>
    <body name="finger_b" pos="0.05 0 0">
      <joint name="b" type="slide" axis="0 1 0" range="-0.04 -0.01"/>
      <geom type="box" pos="0 -0.006 0" size="0.02 0.005 0.015"/>
    </body>
  </body>
  <body name="palm_only"><geom type="sphere" size="0.01"/></body>
</worldbody></mujoco>"""


def test_pad_box_is_where_the_open_fingers_faces_reach_an_object():
    """Two box fingers on slide joints, widest at +-0.04: their inner faces stand at y = +-0.041 and span
    x 0.03..0.07, z +-0.015 in the hand's frame (the hand turned in the world, which must not matter). About a
    grasp point at x = 0.06, an object of half-size 0.01 fits between the faces for |y| <= 0.031 and
    overlaps them by at least 0.005 for x in -0.035..0.015 and z in -0.02..0.02. A finger at slide 0.04 has
    its face at 0.041: the slide position is 0.001 short of the face; the fingers close along y."""
    model = mujoco.MjModel.from_xml_string(HAND)
    centre, half, offset, axis = pad_box(model, "hand", (0.06, 0.0, 0.0), 0.01, overlap=0.005)
    np.testing.assert_allclose(centre, [-0.01, 0.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(half, [0.025, 0.031, 0.02], atol=1e-9)
    assert offset == pytest.approx(-0.001, abs=1e-9)
    assert axis == 1  # the fingers slide along the hand's y
    with pytest.raises(ValueError, match="palm_only has no finger on a slide joint"):
        pad_box(model, "palm_only", (0.0, 0.0, 0.0), 0.01)


def test_hull_cut_is_the_convex_hull_of_the_points_cut_at_each_depth():
    """A triangle (0, 0), (10, 5), (10, -5) with an interior point (5, 0): cut at depth x it spans
    +-x/2 (the interior point changes nothing); cut every 2.5 from 0 to 10, the end cuts just inside."""
    points = np.array([[0.0, 0.0], [10.0, 5.0], [10.0, -5.0], [5.0, 0.0]])
    depths, low, high = _hull_cut(points, 2.5)
    np.testing.assert_allclose(depths, [1.25, 2.5, 5.0, 7.5, 8.75])
    np.testing.assert_allclose(high, depths / 2)
    np.testing.assert_allclose(low, -depths / 2)


def test_face_profile_of_box_fingers_is_their_face_and_of_aloha_tapers_to_the_tips():
    """The two box fingers' inner faces are rectangles, x -0.03..0.01, z +-0.015 about the grasp point, so
    every cut spans +-0.015. ALOHA's tapers (mesh vertices of its fingers): 61 mm wide from the base to 36
    mm behind the grasp point, then straight in to 10 mm at the tips 34 mm ahead of it; 30 mm ahead of it
    the face is 12.6 mm wide (by hand: 30.5 - 25.5 * 66.3 / 70.0 mm each side)."""
    hand = mujoco.MjModel.from_xml_string(HAND)
    depths, low, high = face_profile(hand, "hand", (0.06, 0.0, 0.0))
    assert depths[0] == pytest.approx(-0.03, abs=1e-3) and depths[-1] == pytest.approx(0.01, abs=1e-3)
    np.testing.assert_allclose(low, -0.015, atol=1e-9)
    np.testing.assert_allclose(high, 0.015, atol=1e-9)
    spec = robot_spec("aloha")
    aloha = mujoco.MjModel.from_xml_path(spec.model_xml)
    depths, low, high = face_profile(aloha, "vx300s_left/gripper_link", (0.12, 0.0, 0.0))
    width = lambda at: 1000 * float(np.interp(at, depths, high - low))  # noqa: E731
    assert width(-0.045) == pytest.approx(61.0, abs=0.5)
    assert width(0.030) == pytest.approx(2 * (30.5 - 25.5 * 66.3 / 70.0), abs=0.5)
    assert width(0.033) == pytest.approx(10.4, abs=0.5)
    assert width(0.0) < width(-0.02) < width(-0.04)


def test_overlaps_faces_finds_the_gap_beside_a_tapered_fingertip():
    """In the plane of ALOHA's pads' faces (along the fingers, across them), a 4 cm square centred 3.3 cm
    ahead of the grasp point and 3.4 cm to the side spans 1.4-5.4 cm across, within the fingers' bounding
    box (+-3.05 cm), but over 1.3-5.3 cm ahead, where the tapered faces are at most 1.25 cm wide each side
    (by hand: 30.5 - 25.5 * 49.3 / 70.0 mm): no overlap, until a 1 cm margin closes the gap. Centred 1 cm
    to the side it overlaps; 5 cm past the tips it does not."""
    fk = GraspKinematics(robot_spec("aloha"))
    square = 0.02 * torch.tensor([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    centres = torch.tensor([[0.033, 0.034], [0.033, 0.010], [0.084, 0.0]])
    inside = fk.overlaps_faces(centres[:, None, :] + square)
    assert inside.tolist() == [False, True, False]
    assert bool(fk.overlaps_faces(centres[0] + square, margin=0.01))


def test_finger_boxes_bound_each_open_finger_and_say_which_way_it_opens():
    """The same hand: at the widest slides (+-0.04) finger a's box (centre y 0.046, half-sizes 0.02, 0.005,
    0.015 about x 0.05) spans x 0.03..0.07, y 0.041..0.051, z -0.015..0.015 in the hand's frame, about the
    grasp point at x = 0.06: x -0.03..0.01; finger b mirrors it in y. Opening moves a along +y and b along
    -y; the slide position there is 0.04."""
    model = mujoco.MjModel.from_xml_string(HAND)
    lower, upper, opens, widest = finger_boxes(model, "hand", (0.06, 0.0, 0.0))
    np.testing.assert_allclose(lower, [[-0.03, 0.041, -0.015], [-0.03, -0.051, -0.015]], atol=1e-9)
    np.testing.assert_allclose(upper, [[0.01, 0.051, 0.015], [0.01, -0.041, 0.015]], atol=1e-9)
    np.testing.assert_allclose(opens, [[0.0, 1.0, 0.0], [0.0, -1.0, 0.0]], atol=1e-9)
    assert widest == pytest.approx(0.04)


def test_balance_margin_is_the_centre_inside_the_pads_faces_across_gravity():
    """ALOHA's inner finger faces span 9 cm along the fingers (-5.6..+3.4 cm about the grasp point) and 6.1
    cm across them (+-3.05 cm). Across gravity means across the fingers for a gripper pointing straight
    down (a cube 2.6 cm off that way is 4.5 mm inside; 3.1 cm off, 0.5 mm outside; anywhere along the
    fingers it only hangs), along them for a level one (centre -1.1 cm, reach 4.5 cm), and nowhere for
    faces lying flat (the closing axis vertical)."""
    fk = GraspKinematics(robot_spec("aloha"))
    assert fk.closing_axis == 1 and fk.face_axes == [0, 2]
    np.testing.assert_allclose(fk.face_centre.numpy(), [-0.0113, 0.0], atol=5e-4)
    np.testing.assert_allclose(fk.face_half.numpy(), [0.0450, 0.0305], atol=5e-4)
    down = torch.tensor([[0.0, 0, 1], [0, 1, 0], [-1, 0, 0]])  # columns: pointing -z, closing y, third x
    level = torch.eye(3)  # pointing along x, closing along y, third axis up
    flat = torch.tensor([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]])  # closing axis up
    rel = torch.tensor([[0.03, 0.0, 0.026], [0.03, 0.0, 0.031], [-0.05, 0.0, 0.0], [0.03, 0.0, -0.02]])
    rot = torch.stack([down, level, flat])[:, None].expand(3, 4, 3, 3)
    margin = fk.balance_margin(rel.expand(3, 4, 3), rot)
    half0, half2 = fk.face_half.tolist()
    centre0 = fk.face_centre[0].item()
    np.testing.assert_allclose(
        margin[0].numpy(), [half2 - 0.026, half2 - 0.031, half2, half2 - 0.02], atol=1e-6
    )
    level_expected = [half0 - abs(r - centre0) for r in (0.03, 0.03, -0.05, 0.03)]
    np.testing.assert_allclose(margin[1].numpy(), level_expected, atol=1e-6)
    assert torch.isinf(margin[2]).all()
