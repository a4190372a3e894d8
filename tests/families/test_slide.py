"""Tests of family 34, `slide`: the face and drag geometry against values computed by hand, the grasps'
IK against MuJoCo's own forward kinematics, the schedule, the knobs' checks, determinism, and real
rollouts: the nominal drag brings the cube to the target along the table and the left lifts it; a light
squeeze slides the pads over the cube, which stays out of the left's reach; without the re-read the left
goes down where the cube no longer lies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gym_aloha.constants import START_ARM_POSE

from families import slide
from families.arm import Arm
from families.slide import SlideKnobs
from helpers.kinematics import mujoco_tcp

CUBE = np.array([0.17, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0])
START = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0])


def yawed(yaw: float, xy=(0.17, 0.5)) -> np.ndarray:
    return np.array([*xy, 0.02, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])


def test_face_yaw_picks_the_nearest_of_four_normals():
    # an unturned cube has normals at 0, pi/2, pi, -pi/2: the one nearest +y is +y itself, even though
    # the x normal lies exactly a quarter turn off (the edge case of a half-turn wrap)
    assert slide.face_yaw(yawed(0.0), np.pi / 2) == pytest.approx(np.pi / 2)
    assert slide.face_yaw(yawed(0.3), 0.0) == pytest.approx(0.3)
    assert slide.face_yaw(yawed(1.0), 0.0) == pytest.approx(1.0 - np.pi / 2)  # the -y normal, turned 1 rad
    assert slide.face_yaw(yawed(-0.2), np.pi / 2) == pytest.approx(np.pi / 2 - 0.2)


def test_drag_end_and_duration_by_hand():
    assert slide.drag_end(CUBE, SlideKnobs()) == pytest.approx([-0.03, 0.5])
    assert slide.drag_end(CUBE, SlideKnobs(drag_length=0.05)) == pytest.approx([0.12, 0.5])
    # a 3-4-5 triangle: 0.12 m on -x and 0.16 m on -y to the target, 0.2 m; half of it is 0.06 and 0.08
    cube = np.array([0.09, 0.66, 0.02, 1.0, 0.0, 0.0, 0.0])
    assert slide.drag_end(cube, SlideKnobs(drag_length=0.1)) == pytest.approx([0.03, 0.58])
    assert slide.drag_steps(0.3, SlideKnobs()) == 100  # 0.3 m at 0.15 m/s: 2 s at 50 Hz
    assert slide.drag_steps(0.2, SlideKnobs()) == 67  # 1.333 s: 66.7 steps, rounded up
    assert slide.drag_steps(0.0, SlideKnobs()) == 1


@pytest.mark.parametrize("xy", [(0.1, 0.5), (-0.03, 0.5), (0.05, 0.38)])
def test_grasps_reach_their_faces_checked_by_mujoco(xy):
    cube = np.array([*xy, 0.02, 1.0, 0.0, 0.0, 0.0])
    right, left = Arm("right"), Arm("left")
    pos, heading, roll = slide.right_grasp(cube, SlideKnobs())
    assert pos == pytest.approx([*xy, 0.034])  # tips 5 mm above the table: 0.005 + 0.029
    q = slide.top_down_ik(right, pos, heading, roll, START[7:13])
    tcp, axes = mujoco_tcp("right", q)
    assert np.linalg.norm(tcp - pos) < 2e-3 and axes[2, 0] < -0.999  # top-down
    assert abs(axes[:, 1] @ [0.0, 1.0, 0.0]) > 0.999  # closing on the y faces
    pos, heading, roll = slide.left_grasp(cube, SlideKnobs(left_offset=0.01))
    q = slide.top_down_ik(left, pos, heading, roll, START[:6])
    tcp, axes = mujoco_tcp("left", q)
    assert np.linalg.norm(tcp - pos) < 2e-3 and axes[2, 0] < -0.999
    assert abs(axes[:, 1] @ [1.0, 0.0, 0.0]) > 0.999  # the x faces, the pair the right left free
    assert abs((pos - cube[:3]) @ axes[:, 1]) == pytest.approx(
        0.01, abs=2e-4
    )  # the offset runs along the fingers


def test_left_cannot_reach_far_on_plus_x():
    pos, heading, roll = slide.left_grasp(np.array([0.2, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0]), SlideKnobs())
    q = slide.top_down_ik(Arm("left"), pos, heading, roll, START[:6])
    assert np.linalg.norm(mujoco_tcp("left", q)[0] - pos) > 0.03  # why a cube left at x = 0.2 is lost


def test_schedule_by_hand():
    left = Arm("left")
    episode = slide.SlideEpisode(SlideKnobs(), left, Arm("right", model=left.model), START, CUBE)
    episode.plan(CUBE)
    times, points = episode.keys["right"]
    # grasp at 85, 15 steps' grip, a 0.2 m drag in 67 steps, open 5 steps later, rise 8 steps after that
    assert times == [60, 85, 100, 167, 180, 200]
    assert points[3] == pytest.approx([-0.03, 0.5, 0.034]) and points[5][2] == pytest.approx(0.134)
    assert episode.events == {"close_right": 85, "release": 172, "home": 200, "clear": 225}
    episode.plan_pick(np.array([-0.02, 0.51, 0.02, 1.0, 0.0, 0.0, 0.0]))
    assert episode.events["close_left"] == 225 + 25 + 20
    assert episode.keys["left"][1][2] == pytest.approx([-0.02, 0.51, 0.034])


def test_height_trim_integrates_only_while_dragging_and_is_bounded():
    left = Arm("left")
    episode = slide.SlideEpisode(SlideKnobs(), left, Arm("right", model=left.model), START, CUBE)
    episode.plan(CUBE)
    episode.trim_height(99, START)  # before the drag: the hand in its start pose, ~27 cm too high
    assert episode.z_trim == 0.0
    episode.trim_height(100, START)  # first drag step: 0.2 x (0.034 - 0.002 - 0.304) is far past the bound
    assert episode.z_trim == pytest.approx(-slide.TRIM_MAX)
    grasp = slide.top_down_ik(episode.arms["right"], np.array([0.17, 0.5, 0.027]), np.pi, 0.0, START[7:13])
    state = START.copy()
    state[7:13] = grasp  # the hand 5 mm under its aim: the trim backs off by 0.2 x 5 mm
    episode.trim_height(101, state)
    assert episode.z_trim == pytest.approx(-slide.TRIM_MAX + 0.001, abs=1e-4)


def test_unknown_and_invalid_knobs_are_refused():
    with pytest.raises(ValueError, match="unknown kwarg"):
        slide.make_policy(grip=0.5)
    with pytest.raises(ValueError, match="squeeze=1.5"):
        SlideKnobs(squeeze=1.5)
    with pytest.raises(ValueError, match="drag_speed"):
        SlideKnobs(drag_speed=0.0)
    with pytest.raises(ValueError, match="drag_height"):
        SlideKnobs(drag_height=-0.05)


def test_family_settings_are_named_and_valid():
    assert len(slide.FAMILY_SETTINGS) == 10 and next(iter(slide.FAMILY_SETTINGS)) == "nominal"
    assert slide.FAMILY_SETTINGS["nominal"] == {}
    for name, kwargs in slide.FAMILY_SETTINGS.items():
        assert not name.startswith("slide")
        SlideKnobs(**kwargs)


def fake_batch(cube: np.ndarray) -> dict[str, torch.Tensor]:
    return {"observation.state": torch.from_numpy(START.astype(np.float32))[None],
            "observation.environment_state": torch.from_numpy(cube.astype(np.float32))[None]}  # fmt: skip


def actions_of(cube: np.ndarray, steps: int = 70) -> np.ndarray:
    policy = slide.make_policy()
    return np.stack([policy.select_action(fake_batch(cube)).numpy()[0] for _ in range(steps)])


def test_same_reading_same_actions_other_reading_other_plan():
    a, b = actions_of(CUBE), actions_of(CUBE)
    np.testing.assert_array_equal(a, b)
    c = actions_of(np.array([0.05, 0.45, 0.02, 1.0, 0.0, 0.0, 0.0]))
    np.testing.assert_array_equal(a[: slide.READ + 1], c[: slide.READ + 1])  # the start pose until planned
    assert np.abs(a[-1, 7:13] - c[-1, 7:13]).max() > 0.05  # over another cube


def rollout(kwargs: dict, poses: list[int]):
    """ID episodes `poses` in one batch: plans, cube positions (T,B,3), states (T,B,14), rewards (T,B)."""
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy = slide.make_policy(**kwargs)
    cubes, states, rewards = [], [], []
    with AlohaWorld(WorldConfig(cameras=(), num_envs=len(poses))) as world:
        obs = world.reset(initial_poses("id", max(poses) + 1)[poses], False)
        policy.reset()
        for _ in range(slide.EPISODE_STEPS):
            step = world.step(policy.select_action(to_batch(obs)).numpy(), False)
            obs = step.observation
            cubes.append(obs["observation.environment_state"][:, :3].astype(float))
            states.append(obs["observation.state"].astype(float))
            rewards.append(step.reward)
    return policy.plans, np.array(cubes), np.array(states), np.array(rewards)


def test_nominal_drags_along_the_table_and_the_left_lifts():
    plans, cubes, states, rewards = rollout({}, [0, 1])  # cubes at x 0.127 and 0.178
    for b, plan in enumerate(plans):
        times, _ = plan.keys["right"]
        pull0, pull1 = times[2], times[3]
        assert np.linalg.norm(cubes[pull1, b, :2] - [-0.03, 0.5]) < 0.01  # at the target ...
        # dragged, not carried: its centre never more than 5 mm over its resting height, the right's finger
        # on it all the way (bar a flicker of the contact)
        assert cubes[pull0:pull1, b, 2].max() < 0.025
        assert (rewards[pull0:pull1, b] >= 1).mean() > 0.9
        assert states[pull1, b, 13] > 0.5  # the right's fingers held open by the cube: it was held
        assert rewards[: plan.events["close_left"], b].max() < 3  # the left never touched it before
        assert rewards[-1, b] == 4 and cubes[-1, b, 2] > 0.1  # lifted 10 cm by the left


def test_light_squeeze_leaves_the_cube_behind_out_of_reach():
    plans, cubes, states, rewards = rollout(slide.FAMILY_SETTINGS["light_squeeze"], [1])
    times, _ = plans[0].keys["right"]
    right_start, _ = mujoco_tcp("right", states[times[2], 0, 7:13])
    right_end, _ = mujoco_tcp("right", states[times[3], 0, 7:13])
    assert np.linalg.norm(right_end - right_start) > 0.15  # the hand made the drag ...
    assert np.linalg.norm(cubes[times[3], 0] - cubes[times[2], 0]) < 0.01  # ... without the cube
    assert cubes[times[3], 0, 0] > 0.16 and rewards.max() < 4  # where the left cannot take it


def test_stale_reading_sends_the_left_where_the_cube_was():
    plans, cubes, _, rewards = rollout(slide.FAMILY_SETTINGS["stale_reading"], [0])
    plan = plans[0]
    np.testing.assert_array_equal(plan.picked_on, plan.read_at)  # picked on the reading before the drag
    assert np.linalg.norm(cubes[plan.events["clear"], 0, :2] - plan.read_at[:2]) > 0.1  # it has moved
    assert rewards.max() < 3  # the left never touched it
