"""Tests of family 20, `kalman`: the sensor, the filter, the MPC, and a real rollout."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: F401  (torch before MuJoCo)

from families import kalman
from families.arm import Arm
from families.kalman import CubeFilter, KalmanKnobs, MpcArm, Sensor

CUBE = np.array([0.1, 0.5, 0.02])
FAR = [np.array([1.0, 1.0, 1.0])]  # a gripper far from the cube: no occlusion


def clean_sensor(latency: int = 0, **extra) -> Sensor:
    knobs = KalmanKnobs(noise=0.0, drift=0.0, dropout=0.0, latency=latency, **extra)
    return Sensor(knobs, np.random.default_rng(0))


def test_filter_converges_to_a_constant_position_under_the_documented_noise():
    sigma = 0.004  # the nominal sensor noise
    rng = np.random.default_rng(0)
    f = CubeFilter(meas_std=sigma, latency=0)
    for _ in range(200):
        f.predict()
        f.update(CUBE + rng.normal(0.0, sigma, 3))
    std = np.sqrt(np.diag(f.P)[:3])
    # It has averaged many readings: its own std is well below one reading's, and the truth lies within
    # 4 of its stds on every axis (a consistent filter; P(|N(0,1)| > 4) ~ 6e-5 per axis).
    assert np.all(std < sigma / 2)
    assert np.all(np.abs(f.estimate() - CUBE) < 4 * std)
    assert np.linalg.norm(f.x[3:]) < 0.02  # no made-up velocity (m/s)


def test_sensor_latency_delivers_the_capture_of_latency_steps_ago():
    sensor = clean_sensor(latency=5)
    truths = [CUBE + np.array([0.001 * t, 0.0, 0.0]) for t in range(20)]
    readings = [sensor.read(t, truths[t], FAR) for t in range(20)]
    assert all(r is None for r in readings[:5])
    for t in range(5, 20):
        np.testing.assert_allclose(readings[t], truths[t - 5], atol=1e-12)


def test_filter_estimate_moves_only_latency_steps_after_the_cube_does():
    latency = 4
    sensor = clean_sensor(latency=latency)
    f = CubeFilter(meas_std=0.002, latency=latency)
    moved = CUBE + np.array([0.05, 0.0, 0.0])
    estimates = []
    for t in range(40):
        f.predict()
        reading = sensor.read(t, CUBE if t < 20 else moved, FAR)
        if reading is not None:
            f.update(reading)
        estimates.append(None if f.x is None else f.estimate())
    # Nothing arrives before step `latency`; the jump at step 20 reaches the estimate at 20 + latency.
    assert estimates[latency - 1] is None and estimates[latency] is not None
    np.testing.assert_allclose(estimates[20 + latency - 1], CUBE, atol=1e-6)
    assert estimates[20 + latency][0] - CUBE[0] > 0.01


def test_occluded_reading_is_pulled_toward_the_gripper_and_dropout_loses_readings():
    gripper = CUBE + np.array([0.0, 0.0, 0.04])  # 4 cm above: inside the occlusion radius
    reading = clean_sensor().read(0, CUBE, [gripper])
    np.testing.assert_allclose(reading, CUBE + kalman.OCCLUSION_PULL * (gripper - CUBE), atol=1e-12)
    lossy = Sensor(KalmanKnobs(dropout=0.5), np.random.default_rng(2))
    lost = sum(lossy.read(t, CUBE, FAR) is None for t in range(400))
    assert 150 < lost < 250  # binomial(400, 0.5): mean 200, std 10


def test_attached_estimate_follows_the_gripper():
    f = CubeFilter(meas_std=0.002, latency=0)
    f.update(CUBE)
    pos, rot = CUBE + np.array([0.0, 0.0, 0.015]), np.eye(3)
    f.attach(pos, rot)
    turn = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # a quarter turn about z
    new_pos = np.array([-0.1, 0.5, 0.2])
    np.testing.assert_allclose(f.estimate(new_pos, turn), new_pos + turn @ (CUBE - pos), atol=1e-9)


def test_mpc_brings_the_command_to_a_goal_5_cm_away():
    arm = Arm("right")
    q = np.array([0.0, -0.6, 0.8, 0.0, 0.5, 0.0])
    mpc = MpcArm(arm, q, KalmanKnobs())
    start, rot = arm.fk(q)
    goal = start + np.array([-0.03, 0.02, -0.03])
    mpc.go(0, "move", goal, rot)
    for t in range(mpc.n + 15):
        mpc.step(t, mpc.q_cmd)  # an ideal servo: the arm is where it is commanded
    assert np.linalg.norm(arm.fk(mpc.q_cmd)[0] - goal) < 0.002


def test_bad_kwargs_raise_clear_errors():
    with pytest.raises(ValueError, match="bogus"):
        kalman.make_policy(bogus=1)
    with pytest.raises(ValueError, match="noise"):
        kalman.make_policy(noise=-0.01)
    with pytest.raises(ValueError, match="dropout"):
        kalman.make_policy(dropout=1.0)


def fake_batch(cube: np.ndarray) -> dict[str, torch.Tensor]:
    from gym_aloha.constants import START_ARM_POSE

    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0], dtype=np.float32)
    env = np.concatenate([cube, [1.0, 0.0, 0.0, 0.0]]).astype(np.float32)
    return {"observation.state": torch.from_numpy(state)[None],
            "observation.environment_state": torch.from_numpy(env)[None]}  # fmt: skip


def actions_of(seed: int, steps: int = 40) -> np.ndarray:
    policy = kalman.make_policy(seed=seed, noise=0.01)
    batch = fake_batch(CUBE)
    return np.stack([policy.select_action(batch).numpy() for _ in range(steps)])


def test_same_seed_same_actions_other_seed_other_actions():
    a, b, c = actions_of(0), actions_of(0), actions_of(1)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-6


def test_nominal_grasps_and_lifts_the_cube_in_a_real_rollout():
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy = kalman.make_policy()
    heights, rewards = [], []
    with AlohaWorld(WorldConfig(cameras=(), num_envs=1)) as world:
        obs = world.reset(initial_poses("id", 1), False)
        policy.reset()
        for _ in range(180):
            step = world.step(policy.select_action(to_batch(obs)).numpy(), False)
            obs = step.observation
            heights.append(float(obs["observation.environment_state"][0, 2]))
            rewards.append(float(step.reward[0]))
    assert max(heights) > 0.07  # lifted from 0.02 (its centre on the table) by the 8 cm lift
    assert max(rewards) >= 2  # gym-aloha's own "lifted by the right" stage
    assert policy.plans[0].filter.held  # the filter's process model follows the gripper
