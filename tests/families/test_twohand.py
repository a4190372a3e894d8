"""Tests of family 29, `twohand`: the grasp geometry and the IK against MuJoCo's own forward kinematics, what
the knobs do to the grasp and the timing, the knobs' checks, determinism, and real rollouts: both hands lift
the cube together, then the right lets go and backs away while the left alone holds it; a left grasp moved
outward misses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gym_aloha.constants import START_ARM_POSE

from families import twohand
from families.arm import Arm
from families.twohand import TwohandKnobs
from helpers.kinematics import mujoco_tcp

CUBE = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("xy", [(0.1, 0.5), (-0.05, 0.35), (0.2, 0.6)])
def test_ik_reaches_both_grasps_checked_by_mujoco(xy):
    cube = np.array([*xy, 0.02, 1.0, 0.0, 0.0, 0.0])
    for side, start in (("left", START_ARM_POSE[:6]), ("right", START_ARM_POSE[8:14])):
        pos, R = twohand.grasp_pose(cube, side, TwohandKnobs())
        arm = Arm(side)  # as the policy does: the pre-grasp from the start pose, then down to the grasp
        q, _ = arm.ik(pos - twohand.ABOVE * R[:, 0], R, np.array(start), iters=300)
        q, _ = arm.ik(pos, R, q, iters=300)
        tcp, axes = mujoco_tcp(side, q)
        assert np.linalg.norm(tcp - pos) < 5e-3, side
        assert axes[:, 0] @ R[:, 0] > 0.995 and abs(axes[:, 1] @ [0.0, 1.0, 0.0]) > 0.995  # pinches y faces


def test_grasps_are_mirror_images_on_the_same_faces():
    (pl, Rl), (pr, Rr) = (twohand.grasp_pose(CUBE, s, TwohandKnobs()) for s in ("left", "right"))
    np.testing.assert_allclose(pl, CUBE[:3] + [-twohand.GAP, 0.0, twohand.HEIGHT], atol=1e-12)
    np.testing.assert_allclose(pr, CUBE[:3] + [twohand.GAP, 0.0, twohand.HEIGHT], atol=1e-12)
    np.testing.assert_allclose(Rl[:, 0] * [-1, 1, 1], Rr[:, 0], atol=1e-12)  # approaches mirrored in x
    assert Rl[0, 0] > 0 > Rr[0, 0]  # each leans in toward the other, wrists apart
    assert np.arccos(-Rl[2, 0]) == pytest.approx(twohand.TILT)
    np.testing.assert_allclose(np.abs(Rl[:, 1]), [0.0, 1.0, 0.0], atol=1e-12)  # both close along y


def test_pinch_axis_follows_the_cube_yaw():
    yaw = 0.3
    cube = np.array([0.1, 0.5, 0.02, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
    n, m = twohand.pinch_axes(cube)
    np.testing.assert_allclose(n, [-np.sin(yaw), np.cos(yaw), 0.0], atol=1e-12)
    np.testing.assert_allclose(m, [np.cos(yaw), np.sin(yaw), 0.0], atol=1e-12)


def test_knobs_move_the_grasp_by_the_asked_distance():
    p0, _ = twohand.grasp_pose(CUBE, "left", TwohandKnobs())
    p1, _ = twohand.grasp_pose(CUBE, "left", TwohandKnobs(left_offset=0.02, left_height=0.03))
    np.testing.assert_allclose(p1 - p0, [-0.02, 0.0, 0.03], atol=1e-12)  # outward is -x for the left
    r0, _ = twohand.grasp_pose(CUBE, "right", TwohandKnobs())
    r1, _ = twohand.grasp_pose(CUBE, "right", TwohandKnobs(right_offset=0.01, left_height=0.03))
    np.testing.assert_allclose(r1 - r0, [0.01, 0.0, 0.0], atol=1e-12)  # the left's height leaves it be


def planned(**kwargs) -> twohand.TwohandEpisode:
    left = Arm("left")
    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0])
    episode = twohand.TwohandEpisode(
        TwohandKnobs(**kwargs), left, Arm("right", model=left.model), state, CUBE
    )
    episode.plan(CUBE)
    return episode


def test_lags_and_release_shift_move_the_timing_by_the_asked_steps():
    nominal, late = planned(), planned(left_lag=25, release_shift=-30)
    assert late.close_step("left") == nominal.close_step("left") + 25
    assert late.close_step("right") == nominal.close_step("right")
    assert late.release_step() == nominal.release_step() - 30
    lift_l = [t for t, _ in late.keys["left"]][2:4]
    assert lift_l == [t + 25 for t, _ in nominal.keys["left"]][2:4]
    assert [t for t, _ in late.keys["right"][:4]] == [t for t, _ in nominal.keys["right"][:4]]


def test_segments_ease_from_rest_to_rest():
    keys = [(10, np.zeros(3)), (30, np.array([0.0, 0.0, 0.1]))]
    np.testing.assert_allclose(twohand.line(keys, 0), 0.0)
    np.testing.assert_allclose(twohand.line(keys, 20), [0.0, 0.0, 0.05])
    np.testing.assert_allclose(twohand.line(keys, 99), [0.0, 0.0, 0.1])
    assert twohand.line(keys, 11)[2] < 0.01 * 0.1
    q = twohand.quintic(np.zeros(2), np.ones(2), 0, 10, 5)
    np.testing.assert_allclose(q, 0.5)


def test_unknown_and_invalid_knobs_are_refused():
    with pytest.raises(ValueError, match="unknown kwarg"):
        twohand.make_policy(left_delay=3)
    with pytest.raises(ValueError, match="left_squeeze"):
        TwohandKnobs(left_squeeze=1.5)
    with pytest.raises(ValueError, match="left_lag"):
        TwohandKnobs(left_lag=-1)


def test_family_settings_are_named_and_valid():
    assert 8 <= len(twohand.FAMILY_SETTINGS) <= 10 and "nominal" in twohand.FAMILY_SETTINGS
    for name, kwargs in twohand.FAMILY_SETTINGS.items():
        assert not name.startswith("twohand")
        TwohandKnobs(**kwargs)


def fake_batch() -> dict[str, torch.Tensor]:
    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0], dtype=np.float32)
    return {"observation.state": torch.from_numpy(state)[None],
            "observation.environment_state": torch.from_numpy(CUBE.astype(np.float32))[None]}  # fmt: skip


def actions_of(seed: int, steps: int = 3) -> np.ndarray:
    policy = twohand.make_policy(seed=seed, joint_noise=0.02)
    return np.stack([policy.select_action(fake_batch()).numpy() for _ in range(steps)])


def test_same_seed_same_actions_other_seed_other_actions():
    a, b, c = actions_of(0), actions_of(0), actions_of(1)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-4


def test_stale_plans_on_the_first_reading_fresh_waits_for_the_landed_cube():
    stale, fresh = twohand.make_policy(stale=True), twohand.make_policy()
    stale.select_action(fake_batch())
    fresh.select_action(fake_batch())
    np.testing.assert_allclose(stale.plans[0].planned_on, CUBE, atol=1e-6)
    assert fresh.plans[0].planned_on is None  # planned at step READ on what it reads then
    for _ in range(twohand.READ):
        fresh.select_action(fake_batch())
    np.testing.assert_allclose(fresh.plans[0].planned_on, CUBE, atol=1e-6)


def rollout(steps: int, **kwargs):
    """One ID episode; the policy's plan, cube poses, states and rewards per step."""
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy = twohand.make_policy(**kwargs)
    cubes, states, rewards = [], [], []
    with AlohaWorld(WorldConfig(cameras=(), num_envs=1)) as world:
        obs = world.reset(initial_poses("id", 1), False)
        policy.reset()
        for _ in range(steps):
            step = world.step(policy.select_action(to_batch(obs)).numpy(), False)
            obs = step.observation
            cubes.append(obs["observation.environment_state"][0, :7].astype(float))
            states.append(obs["observation.state"][0].astype(float))
            rewards.append(float(step.reward[0]))
    return policy.plans[0], np.array(cubes), np.array(states), np.array(rewards)


def test_both_hands_lift_then_the_left_alone_holds():
    plan, cubes, states, rewards = rollout(twohand.EPISODE_STEPS)
    lifted = twohand.LIFT0 + plan.k.lift_steps  # the joint lift ends
    release = plan.release_step()
    assert rewards[: twohand.CLOSE].max() == 0  # nobody touches the cube before the close
    assert cubes[release - 1, 2] > 0.02 + 0.8 * plan.k.lift  # lifted together
    assert 0.1 < states[lifted, 13] < 0.7 and 0.1 < states[lifted, 6] < 0.7  # both held open by the cube
    assert rewards[lifted] == 4  # the left's finger on it, off the table
    right_tcp, _ = mujoco_tcp("right", states[-1, 7:13])
    assert states[-1, 13] > 0.9 and np.linalg.norm(right_tcp - cubes[-1, :3]) > 0.06  # the right is away
    assert cubes[-1, 2] > 0.02 + 0.8 * plan.k.lift and rewards[-1] == 4  # the left alone holds it up


def test_left_grasp_moved_outward_misses():
    _, cubes, _, rewards = rollout(240, left_offset=0.02)
    assert rewards.max() < 4 and cubes[-1, 2] < 0.03
