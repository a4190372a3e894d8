"""The reference world: spec read from the MJCF, explicit poses, ID/OOD samplers, lockstep and seeding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from r2s2r.robots.aloha import ID_BOXES, AlohaWorld, WorldConfig, in_id_box, sample_object_poses
from r2s2r.robots.spec import EmbodimentSpec, robot_spec


def test_aloha_spec_comes_from_the_mjcf():
    spec = robot_spec("aloha")
    assert spec.action_dim == spec.state_dim == 14 and spec.control_hz == 50
    assert spec.joint_names[:7] == (
        "left_waist", "left_shoulder", "left_elbow", "left_forearm_roll", "left_wrist_angle",
        "left_wrist_rotate", "left_gripper",
    )  # fmt: skip
    # vx300s_left.xml: <joint name="vx300s_left/shoulder" ... range="-1.85005 1.25664">
    assert spec.position_lower[1] == pytest.approx(-1.85005) and spec.position_upper[1] == pytest.approx(
        1.25664
    )
    assert spec.position_lower[9] == pytest.approx(-1.76278)  # right elbow
    assert spec.gripper_indices == (6, 13) and (spec.position_lower[6], spec.position_upper[6]) == (0.0, 1.0)
    # The reference robot's envelope, not the Interbotix datasheet's pi rad/s (its servos move faster).
    assert spec.velocity_limits[2] > math.pi and "x1.25" in spec.velocity_source
    assert len(spec.acceleration_limits) == 14 and spec.limit_window == pytest.approx(0.1)
    assert set(spec.cameras) == {
        "top",
        "angle",
        "left_wrist",
        "right_wrist",
        "left_pillar",
        "right_pillar",
        "front_close",
    }
    assert spec.default_cameras == ("top", "left_wrist", "right_wrist")


def test_unknown_robot_and_inconsistent_spec():
    with pytest.raises(ValueError, match="Unknown robot 'ur5'. Known robots: aloha"):
        robot_spec("ur5")
    with pytest.raises(ValueError, match="position_lower has 1 entries but there are 2 joint_names"):
        EmbodimentSpec("x", ("a", "b"), (0.0,), (1.0, 1.0), "", (1.0, 1.0), "", (), "", ("c",), ("c",), 10)


def test_id_and_ood_samplers():
    rng = np.random.default_rng(0)
    id_poses = sample_object_poses("transfer_cube", "id", rng, 200)
    ood_poses = sample_object_poses("transfer_cube", "ood", rng, 200, ood_margin=0.05)
    assert in_id_box("transfer_cube", id_poses[:, :2]).all()
    assert not in_id_box("transfer_cube", ood_poses[:, :2]).any()
    x, y = ood_poses[:, 0], ood_poses[:, 1]
    assert (x >= -0.05).all() and (x <= 0.25).all() and (y >= 0.35).all() and (y <= 0.65).all()
    np.testing.assert_array_equal(id_poses[:, 3:], np.tile([1.0, 0, 0, 0], (200, 1)))
    both = sample_object_poses("insertion", "ood", rng, 50)
    assert both.shape == (50, 14)
    for i, ((x0, x1), (y0, y1)) in enumerate(ID_BOXES["insertion"]):  # peg and socket each off their box
        x, y = both[:, 7 * i], both[:, 7 * i + 1]
        assert not ((x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)).any()


def test_lockstep_envs_are_independent_and_seeded():
    poses = sample_object_poses("transfer_cube", "id", np.random.default_rng(1), 3)
    actions = np.tile(np.array([0, -0.96, 1.16, 0, -0.3, 0, 1.0, 0.3, -0.6, 0.9, 0, -0.2, 0.1, 0.5]), (3, 1))
    with AlohaWorld(
        WorldConfig(num_envs=3, cameras=("top", "right_wrist"), image_height=32, image_width=40)
    ) as world:
        obs = world.reset(poses)
        assert (
            obs["observation.images.top"].shape == (3, 32, 40, 3)
            and obs["observation.images.top"].dtype == np.uint8
        )
        np.testing.assert_allclose(obs["observation.environment_state"][:, :2], poses[:, :2], atol=1e-6)
        for _ in range(10):
            result = world.step(actions)
        batched = result.observation
    with AlohaWorld(
        WorldConfig(num_envs=1, cameras=("top", "right_wrist"), image_height=32, image_width=40)
    ) as world:
        world.reset(poses[2:3])
        for _ in range(10):
            alone = world.step(actions[2:3]).observation
    # env 2 of the batch is exactly env 0 alone: lockstep does not couple episodes
    np.testing.assert_array_equal(batched["observation.state"][2], alone["observation.state"][0])
    np.testing.assert_array_equal(
        batched["observation.images.right_wrist"][2], alone["observation.images.right_wrist"][0]
    )
    # the right shoulder moved towards its target; the cubes did not move (nothing touched them)
    assert abs(batched["observation.state"][0, 8] - (-0.6)) < abs(-0.96 - (-0.6))
    np.testing.assert_allclose(batched["observation.environment_state"][:, :2], poses[:, :2], atol=1e-4)
    assert (result.reward == 0).all() and not result.success.any()


def test_a_physics_fault_stops_only_its_env():
    poses = sample_object_poses("transfer_cube", "id", np.random.default_rng(2), 1).repeat(2, axis=0)
    action = np.array([[0, -0.96, 1.16, 0, -0.3, 0, 1.0, 0.3, -0.6, 0.9, 0, -0.2, 0.1, 0.5]] * 2)
    with AlohaWorld(WorldConfig(num_envs=2, cameras=("top",), image_height=16, image_width=16)) as world:
        world.reset(poses, render=False)
        for _ in range(3):
            world.step(action, render=False)
        before = world.state()[1].copy()
        world.physics[1].data.qvel[:] = 1e12  # what a violent contact leaves: MuJoCo's unstable-state warning
        results = [world.step(action) for _ in range(4)]
        np.testing.assert_array_equal(results[0].info["stopped"], [False, True])
        for r in results:  # env 1 is held where the fault found it, scoring 0; env 0 goes on moving
            np.testing.assert_array_equal(r.observation["observation.state"][1], before)
            assert r.reward[1] == 0
            top = r.observation["observation.images.top"]
            np.testing.assert_array_equal(top[1], results[0].observation["observation.images.top"][1])
        assert not np.array_equal(
            results[0].observation["observation.state"][0], results[-1].observation["observation.state"][0]
        )
        world.reset(poses, render=False)  # a reset clears the stop
        after = world.step(action, render=False)
        np.testing.assert_array_equal(after.info["stopped"], [False, False])
        np.testing.assert_array_equal(
            after.observation["observation.state"][0], after.observation["observation.state"][1]
        )


def test_world_rejects_bad_input():
    with pytest.raises(ValueError, match=r"Unknown camera\(s\) \['wrist'\]"):
        AlohaWorld(WorldConfig(num_envs=1, cameras=("wrist",)))
    with pytest.raises(ValueError, match="Unknown task 'stack'"):
        WorldConfig(task="stack")
    with AlohaWorld(WorldConfig(num_envs=2, cameras=("top",), image_height=16, image_width=16)) as world:
        with pytest.raises(ValueError, match=r"object_poses has shape \(2, 3\), expected \(2, 7\)"):
            world.reset(np.zeros((2, 3)))
        world.reset(sample_object_poses("transfer_cube", "id", np.random.default_rng(0), 2))
        with pytest.raises(ValueError, match=r"actions has shape \(2, 7\), expected \(2, 14\)"):
            world.step(np.zeros((2, 7)))
        bad = np.zeros((2, 14))
        bad[1, 3] = np.nan
        with pytest.raises(ValueError, match=r"actions for env\(s\) \[1\] contain NaN"):
            world.step(bad)
