"""Tests of family 27, `solo`: the minimum-jerk paths and rotation maps, the IK against MuJoCo's own forward
kinematics, the grasp and push geometry and what the knobs do to it, the knobs' checks, determinism, and
real rollouts: the right's push brings the cube within the left's reach, the left picks it (reward 4), and a
stale cube reading misses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gym_aloha.constants import START_ARM_POSE

from families import solo
from families.arm import Arm
from families.common import LEFT_BASE, rotvec_matrix
from families.solo import Path, SoloKnobs
from helpers.kinematics import mujoco_tcp


def test_rotation_log_and_exp_are_inverse():
    rng = np.random.default_rng(0)
    for _ in range(20):
        v = rng.normal(size=3)
        v *= rng.uniform(0.01, 3.1) / np.linalg.norm(v)
        R = rotvec_matrix(v)
        np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)
        np.testing.assert_allclose(solo.rot_log(R), v, atol=1e-9)
    half = rotvec_matrix(np.array([0.0, 0.0, np.pi]))  # half a turn: the axis from R + I
    np.testing.assert_allclose(np.abs(solo.rot_log(half)), [0.0, 0.0, np.pi], atol=1e-6)


def test_path_is_minimum_jerk_between_keyframes():
    R1 = rotvec_matrix(np.array([0.0, 0.0, 1.0]))
    path = Path(10, np.zeros(3), np.eye(3)).to(30, np.array([0.1, 0.0, 0.0]), R1)
    np.testing.assert_allclose(path.at(0)[0], 0.0)  # held before the first keyframe
    np.testing.assert_allclose(path.at(20)[0], [0.05, 0.0, 0.0])  # the quintic is 1/2 at mid-time
    np.testing.assert_allclose(path.at(14)[0][0], 0.1 * (0.2**3 * (10 - 15 * 0.2 + 6 * 0.04)))
    np.testing.assert_allclose(solo.rot_log(path.at(20)[1]), [0.0, 0.0, 0.5], atol=1e-12)  # geodesic
    np.testing.assert_allclose(path.at(99)[1], R1)  # held after the last
    assert np.linalg.norm(path.at(11)[0] - path.at(10)[0]) < 0.05 * 0.1 / 20  # starts at rest
    with pytest.raises(ValueError, match="not after"):
        path.to(30, np.zeros(3), np.eye(3))


@pytest.mark.parametrize("xy", [(-0.05, 0.45), (0.0, 0.6), (-0.1, 0.38)])
def test_ik_reaches_the_left_grasp_checked_by_mujoco(xy):
    cube = np.array([*xy, 0.02, 1.0, 0.0, 0.0, 0.0])
    pos, R = solo.left_grasp(cube, SoloKnobs())
    q, err = Arm("left").ik(pos, R, np.array(START_ARM_POSE[:6]), iters=200)
    tcp, axes = mujoco_tcp("left", q)
    assert np.linalg.norm(tcp - pos) < 2e-3
    assert axes[:, 0] @ [0.0, 0.0, -1.0] > 0.999  # top-down
    assert abs(axes[:, 1] @ [1.0, 0.0, 0.0]) > 0.999 or abs(axes[:, 1] @ [0.0, 1.0, 0.0]) > 0.999  # on faces


def test_knobs_move_the_grasp_by_the_asked_distance():
    cube = np.array([-0.05, 0.55, 0.02, 1.0, 0.0, 0.0, 0.0])
    p0, R0 = solo.left_grasp(cube, SoloKnobs())
    p1, R1 = solo.left_grasp(cube, SoloKnobs(across_offset=0.02))
    p2, _ = solo.left_grasp(cube, SoloKnobs(along_offset=0.03, grasp_height=0.04))
    np.testing.assert_allclose(p1 - p0, 0.02 * R0[:, 1], atol=1e-12)  # along the finger axis
    heading = (cube[:2] - LEFT_BASE[:2]) / np.linalg.norm(cube[:2] - LEFT_BASE[:2])
    np.testing.assert_allclose(p2 - p0, [*(0.03 * heading), 0.04 - SoloKnobs().grasp_height], atol=1e-12)
    _, Rt = solo.left_grasp(cube, SoloKnobs(tilt=0.3))
    assert np.degrees(np.arccos(Rt[:, 0] @ [0.0, 0.0, -1.0])) == pytest.approx(np.degrees(0.3))
    assert Rt[:2, 0] @ heading > 0.29  # pointing away from the left's base (sin 0.3 = 0.296)


def test_push_only_beyond_reach_and_to_the_asked_radius():
    near = np.array([-0.05, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0])
    far = np.array([0.15, 0.56, 0.02, 1.0, 0.0, 0.0, 0.0])
    assert solo.push_line(near) is None
    u, end = solo.push_line(far)
    np.testing.assert_allclose(u, [-1.0, 0.0], atol=1e-12)  # the face normal toward -x, along -x
    assert np.linalg.norm(end - LEFT_BASE[:2]) == pytest.approx(solo.PUSH_TO)
    assert end[1] == pytest.approx(far[1])
    _, half = solo.push_line(far, 0.5)
    np.testing.assert_allclose(half, (far[:2] + end) / 2, atol=1e-12)
    turned = far.copy()
    turned[3:7] = [np.cos(0.2), 0.0, 0.0, np.sin(0.2)]  # yaw 0.4 rad: the push follows the face normal
    u, _ = solo.push_line(turned)
    np.testing.assert_allclose(u, [-np.cos(0.4), -np.sin(0.4)], atol=1e-6)


def test_bad_kwargs_raise_clear_errors():
    with pytest.raises(ValueError, match="bogus"):
        solo.make_policy(bogus=1)
    with pytest.raises(ValueError, match="squeeze"):
        solo.make_policy(squeeze=1.5)
    with pytest.raises(ValueError, match="lift_steps"):
        solo.make_policy(lift_steps=0)
    with pytest.raises(ValueError, match="tilt"):
        solo.make_policy(tilt=-0.1)
    assert 8 <= len(solo.FAMILY_SETTINGS) <= 10
    for name, kwargs in solo.FAMILY_SETTINGS.items():
        assert not name.startswith("solo")  # the family prefixes the policy name itself
        SoloKnobs(**kwargs)  # every named setting is valid


def fake_batch() -> dict[str, torch.Tensor]:
    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0], dtype=np.float32)
    env = np.array([0.15, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    return {"observation.state": torch.from_numpy(state)[None],
            "observation.environment_state": torch.from_numpy(env)[None]}  # fmt: skip


def actions_of(seed: int, steps: int = 3) -> np.ndarray:
    policy = solo.make_policy(seed=seed, joint_noise=0.02)
    return np.stack([policy.select_action(fake_batch()).numpy() for _ in range(steps)])


def test_same_seed_same_actions_other_seed_other_actions():
    a, b, c = actions_of(0), actions_of(0), actions_of(1)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-4


def rollout(steps: int, **kwargs) -> tuple[object, np.ndarray, np.ndarray, np.ndarray]:
    """One ID episode (its cube at x = 0.178: beyond the left's reach); cube poses, left joints, rewards."""
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy = solo.make_policy(**kwargs)
    cubes, joints, rewards = [], [], []
    with AlohaWorld(WorldConfig(cameras=(), num_envs=1)) as world:
        obs = world.reset(initial_poses("id", 2)[1:], False)
        policy.reset()
        for _ in range(steps):
            step = world.step(policy.select_action(to_batch(obs)).numpy(), False)
            obs = step.observation
            cubes.append(obs["observation.environment_state"][0, :7].astype(float))
            joints.append(obs["observation.state"][0, :6].astype(float))
            rewards.append(float(step.reward[0]))
    return policy.plans[0], np.array(cubes), np.array(joints), np.array(rewards)


def test_push_brings_the_cube_to_the_left_which_picks_it_up():
    plan, cubes, joints, rewards = rollout(330)
    assert plan.push is not None and np.linalg.norm(cubes[0, :2] - LEFT_BASE[:2]) > solo.REACH
    at_reread = cubes[solo.REREAD - 1]
    assert cubes[0, 0] - at_reread[0] > 0.15  # slid >15 cm toward the left along -x
    assert np.linalg.norm(at_reread[:2] - plan.expected[:2]) < 0.01  # where the push meant to leave it
    assert abs(at_reread[2] - 0.02) < 2e-3  # flat on the table, not tipped
    assert rewards[: solo.REREAD].max() < 3  # the left does not touch the cube during the push
    assert rewards[solo.REREAD - 5 : solo.REREAD].max() == 0  # and the right has let go of it by the re-read
    grasp = plan.paths["left"].at(solo.L_DOWN)[0]
    assert np.linalg.norm(mujoco_tcp("left", joints[solo.L_DOWN + 2])[0] - grasp) < 0.01
    assert cubes[-1, 2] > 0.02 + 0.8 * solo.LIFT  # lifted with the gripper
    assert rewards.max() == 4  # the left's finger holds it off the table


def test_stale_cube_reading_misses():
    plan, cubes, _, rewards = rollout(300, reread=False)
    np.testing.assert_allclose(plan.picked_on[:2], cubes[0, :2], atol=1e-3)  # planned on the first read
    assert rewards.max() < 4 and cubes[-1, 2] < 0.03
