"""Tests of family 32, `whip`: the time-optimal profile against durations computed by hand and its limits,
the grasp geometry and the IK against MuJoCo's own forward kinematics, the knobs' checks, determinism, and
real rollouts: the nominal tuning hands the cube over, the reckless one flings it out of the right's grip
during the carry, before the left can take it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gym_aloha.constants import START_ARM_POSE

from families import whip
from families.arm import Arm
from families.common import rotvec_matrix
from families.whip import WhipKnobs, WhipProfile
from helpers.kinematics import mujoco_tcp

CUBE = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0])


def sampled(profile: WhipProfile, dt: float = 1e-4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Position, velocity and acceleration of a profile on a fine grid (finite differences)."""
    t = np.arange(-0.05, profile.duration + 0.05, dt)
    s = np.array([profile(x) for x in t])
    v = np.diff(s) / dt
    return s, v, np.diff(v) / dt


def test_trapezoid_takes_the_time_optimal_duration_by_hand():
    # 0.5 m at <= 0.5 m/s, <= 2 m/s^2: 0.25 s up to speed (6.25 cm), 0.75 s coasting (37.5 cm), 0.25 s down
    long = WhipProfile(0.5, speed=0.5, accel=2.0)
    assert long.duration == pytest.approx(1.25)
    assert long(0.25) == pytest.approx(0.0625) and long(1.0) == pytest.approx(0.4375)
    assert long(1.24) < 0.5 and long(1.25) == pytest.approx(0.5)  # arrives at the end, not before
    # 2 cm at 2 m/s^2 never reaches 0.5 m/s: a triangle, 1 cm in sqrt(2 * 0.01 / 2) = 0.1 s each way,
    # peak 0.2 m/s
    short = WhipProfile(0.02, speed=0.5, accel=2.0)
    assert short.duration == pytest.approx(0.2) and short.v_peak == pytest.approx(0.2)
    _, v, a = sampled(long)
    assert v.max() == pytest.approx(0.5, rel=1e-3) and np.abs(a).max() <= 2.0 * 1.001


def test_blend_keeps_both_limits_limits_jerk_and_adds_exactly_its_window():
    hard, soft = WhipProfile(0.3, 0.6, 5.0), WhipProfile(0.3, 0.6, 5.0, blend=0.1)
    assert soft.duration == pytest.approx(hard.duration + 0.1)
    assert soft(soft.duration) == pytest.approx(0.3) and soft(soft.duration - 0.01) < 0.3
    _, v, a = sampled(soft)
    assert v.max() <= 0.6 * 1.001 and v.min() >= -1e-9  # never faster, never backwards
    assert np.abs(a).max() <= 5.0 * 1.001 and np.abs(a).max() > 0.95 * 5.0  # the limit is still used
    jerk = np.abs(np.diff(a)) / 1e-4
    assert np.quantile(jerk, 0.999) <= 5.0 / 0.1 * 1.05  # the acceleration ramps over the blend
    _, _, a_hard = sampled(hard)
    assert np.abs(np.diff(a_hard)).max() > 2.0  # bang-bang: the acceleration jumps within one 0.1 ms sample


def test_rotation_log_inverts_rotvec_matrix():
    for v in ([0.3, -0.2, 0.5], [0.0, 0.0, 0.0], [0.0, np.pi, 0.0], [2.0, 1.0, -0.5]):
        R = rotvec_matrix(np.array(v, dtype=float))
        np.testing.assert_allclose(rotvec_matrix(whip.rotation_log(R)), R, atol=1e-9)


def test_lin_move_runs_straight_and_turns_along_the_geodesic():
    R0, R1 = np.eye(3), rotvec_matrix(np.array([0.0, 0.0, 0.8]))
    move = whip.lin(10, np.zeros(3), R0, np.array([0.0, 0.0, 0.05]), R1, WhipKnobs())
    assert move.profile.length == pytest.approx(whip.ROT_RADIUS * 0.8)  # the turn is the longer part
    mid = move.start + (move.end - move.start) // 2
    p, R = whip.lin_pose(move, mid)
    np.testing.assert_allclose(p[:2], 0.0, atol=1e-12)  # on the straight line
    np.testing.assert_allclose(whip.rotation_log(R), [0.0, 0.0, 0.8 * p[2] / 0.05], atol=1e-9)  # in step
    p, R = whip.lin_pose(move, move.end)
    np.testing.assert_allclose(p, [0.0, 0.0, 0.05], atol=1e-12)
    np.testing.assert_allclose(R, R1, atol=1e-12)


@pytest.mark.parametrize("xy", [(0.1, 0.5), (-0.05, 0.35), (0.25, 0.65)])
def test_ik_reaches_the_grasp_and_the_take_checked_by_mujoco(xy):
    cube = np.array([*xy, 0.02])
    pos, R = whip.right_grasp(cube, WhipKnobs())
    assert pos[2] - cube[2] == pytest.approx(0.022)  # grasp_height above the centre ...
    np.testing.assert_allclose(np.cross(pos - cube, R[:, 0]), 0.0, atol=1e-12)  # ... on the approach axis
    right = Arm("right")
    q, _ = right.ik(pos - whip.ABOVE * R[:, 0], R, np.array(START_ARM_POSE[8:14]), iters=300)
    q, _ = right.ik(pos, R, q, iters=300)
    tcp, axes = mujoco_tcp("right", q)
    assert np.linalg.norm(tcp - pos) < 5e-3 and abs(axes[:, 1] @ [0.0, 1.0, 0.0]) > 0.995  # y faces
    assert np.degrees(np.arcsin(-axes[2, 0])) == pytest.approx(np.degrees(whip.GRASP_PITCH), abs=3)
    take, R_left = whip.left_take(whip.handover_point(WhipKnobs()))
    q, _ = Arm("left").ik(take, R_left, np.array(START_ARM_POSE[:6]), iters=300)
    tcp, axes = mujoco_tcp("left", q)
    assert np.linalg.norm(tcp - take) < 5e-3 and abs(axes[:, 1] @ [0.0, 1.0, 0.0]) > 0.995  # same faces


def planned(**kwargs) -> whip.WhipEpisode:
    left = Arm("left")
    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0])
    episode = whip.WhipEpisode(WhipKnobs(**kwargs), left, Arm("right", model=left.model), state, CUBE)
    episode.plan(CUBE[:3])
    return episode


def test_schedule_chains_time_optimal_moves_and_harder_limits_shorten_the_cycle():
    nominal, brisk = planned(), planned(accel=8.0, speed=1.2)
    reach, approach, lift, carry = nominal.moves["right"]
    assert approach.start == reach.end and carry.start == lift.end  # no idle step between moves
    assert nominal.events["close_right"] == approach.end + nominal.k.dwell
    assert lift.start == nominal.events["close_right"] + nominal.k.grip
    # the 5 cm lift at 3 m/s^2 never reaches 0.6 m/s: 2 sqrt(0.05 / 3) + the 0.08 s blend = 0.338 s
    assert lift.profile.duration == pytest.approx(2 * np.sqrt(0.05 / 3.0) + 0.08)
    assert lift.end - lift.start == 17  # 0.338 s at 50 Hz, rounded up
    np.testing.assert_allclose(carry.p1 - lift.p0, whip.handover_point(nominal.k) - CUBE[:3], atol=1e-12)
    assert brisk.events["take"] < nominal.events["take"] - 20


def test_unknown_and_invalid_knobs_are_refused():
    with pytest.raises(ValueError, match="unknown kwarg"):
        whip.make_policy(max_accel=3.0)
    with pytest.raises(ValueError, match="accel"):
        WhipKnobs(accel=0.0)
    with pytest.raises(ValueError, match="squeeze=1.5"):
        WhipKnobs(squeeze=1.5)
    with pytest.raises(ValueError, match="blend"):
        WhipKnobs(blend=-0.1)


def test_family_settings_are_named_and_valid():
    assert 8 <= len(whip.FAMILY_SETTINGS) <= 12 and "nominal" in whip.FAMILY_SETTINGS
    for name, kwargs in whip.FAMILY_SETTINGS.items():
        assert not name.startswith("whip")
        WhipKnobs(**kwargs)


def fake_batch() -> dict[str, torch.Tensor]:
    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0], dtype=np.float32)
    return {"observation.state": torch.from_numpy(state)[None],
            "observation.environment_state": torch.from_numpy(CUBE.astype(np.float32))[None]}  # fmt: skip


def actions_of(seed: int, steps: int = whip.READ + 20) -> np.ndarray:
    policy = whip.make_policy(seed=seed, cube_noise=0.01)
    return np.stack([policy.select_action(fake_batch()).numpy() for _ in range(steps)])


def test_same_seed_same_actions_other_seed_other_reading():
    a, b, c = actions_of(0), actions_of(0), actions_of(1)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[: whip.READ], c[: whip.READ])  # nothing read yet: the start pose
    assert np.abs(a - c).max() > 1e-4  # planned on another noisy reading


def rollout(**kwargs):
    """One ID episode (pose 0); the policy's plan, the cube poses and the rewards per step."""
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy = whip.make_policy(**kwargs)
    cubes, states, rewards = [], [], []
    with AlohaWorld(WorldConfig(cameras=(), num_envs=1)) as world:
        obs = world.reset(initial_poses("id", 1), False)
        policy.reset()
        for _ in range(whip.EPISODE_STEPS):
            step = world.step(policy.select_action(to_batch(obs)).numpy(), False)
            obs = step.observation
            cubes.append(obs["observation.environment_state"][0, :3].astype(float))
            states.append(obs["observation.state"][0].astype(float))
            rewards.append(float(step.reward[0]))
    return policy.plans[0], np.array(cubes), np.array(states), np.array(rewards)


def test_nominal_hands_the_cube_over():
    plan, cubes, states, rewards = rollout()
    take = plan.events["take"]
    assert rewards[: plan.events["close_right"]].max() == 0  # nothing touches the cube before the close
    assert np.linalg.norm(cubes[take] - whip.handover_point(plan.k)) < 0.015  # carried to the hand-over
    assert rewards[take] == 2 and rewards.max() == 4  # held by the right alone, then taken by the left
    assert states[take, 13] > 0.5  # the right's fingers still held open by the cube
    right_tcp, _ = mujoco_tcp("right", states[-1, 7:13])
    assert states[-1, 13] > 0.9 and np.linalg.norm(right_tcp - cubes[-1]) > 0.08  # the right let go, away
    assert cubes[-1, 2] > 0.2 and 0.1 < states[-1, 6] < 0.7 and rewards[-1] == 4  # the left holds it up


def test_reckless_flings_the_cube_out_during_the_carry():
    plan, cubes, states, rewards = rollout(**whip.FAMILY_SETTINGS["reckless"])
    carry, take = plan.moves["right"][3], plan.events["take"]
    assert cubes[carry.start, 2] > 0.05 and rewards[carry.start] == 2  # lifted in the right's grip
    assert states[carry.start : plan.events["release"], 13].min() < 0.3  # its fingers shut on nothing
    assert np.linalg.norm(cubes[take] - whip.handover_point(plan.k)) > 0.1  # gone before the left comes
    assert cubes[-1, 2] < 0.03 and rewards.max() < 4  # on the table, never taken
