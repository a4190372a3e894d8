"""Tests of family 26, `miscal`: the believed model's errors against MuJoCo's true kinematics, the camera and
gripper maps by hand, the touch-off, the knobs' checks, determinism, and one real rollout in which the
right's hand lands where the miscalibrated plan predicts, off its believed target. Tool positions come from
`Arm` on the true MJCF, never from the family's own bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from families import miscal
from families.arm import FINGER_CLOSE, FINGER_OPEN, Arm
from families.miscal import MiscalKnobs, MiscalPlan

HOME = np.array([0.0, -0.96, 1.16, 0.0, -0.3, 0.0])  # gym-aloha's START_ARM_POSE, per arm
CUBE = np.array([0.1, 0.5, 0.05, 1.0, 0.0, 0.0, 0.0])


def state() -> np.ndarray:
    return np.concatenate([HOME, [1.0], HOME, [1.0]])


def test_finger_command_inverts_the_believed_gripper_map():
    stroke = FINGER_OPEN - FINGER_CLOSE  # 0.03956 m per unit command
    assert miscal.finger_command(MiscalKnobs(), FINGER_CLOSE) == pytest.approx(0.0)
    assert miscal.finger_command(MiscalKnobs(), FINGER_CLOSE + 0.5 * stroke) == pytest.approx(0.5)
    # Believing the fingers sit 5 mm further in than they do, it commands 5 mm more opening.
    wide = MiscalKnobs(gripper_offset_mm=5.0)
    assert miscal.finger_command(wide, FINGER_CLOSE) == pytest.approx(0.005 / stroke)
    # Believing each unit of command travels twice as far, it commands half as much.
    assert miscal.finger_command(
        MiscalKnobs(gripper_scale=2.0), FINGER_CLOSE + 0.5 * stroke
    ) == pytest.approx(0.25)
    assert miscal.finger_command(MiscalKnobs(), 1.0) == 1.0  # clipped to the command range


def test_read_cube_shifts_and_turns_about_the_camera_pivot():
    p = miscal.CAMERA_PIVOT + np.array([0.1, 0.0, 0.02])
    np.testing.assert_allclose(miscal.read_cube(MiscalKnobs(), p), p)
    shifted = miscal.read_cube(MiscalKnobs(camera_shift_mm=(3.0, -4.0, 1.0)), p)
    np.testing.assert_allclose(shifted - p, [0.003, -0.004, 0.001], atol=1e-12)
    turned = miscal.read_cube(MiscalKnobs(camera_yaw_deg=10.0), p)
    c, s = np.cos(np.radians(10)), np.sin(np.radians(10))
    np.testing.assert_allclose(turned - miscal.CAMERA_PIVOT, [0.1 * c, 0.1 * s, 0.02], atol=1e-12)


def test_believed_model_carries_exactly_the_stated_errors():
    true = Arm("right")
    q = np.array([0.1, -0.5, 0.6, 0.1, 0.3, 0.2])
    # Encoder offsets: the belief at reading q is the truth at q + offsets.
    believed = Arm("right", model=miscal.believed_model(MiscalKnobs(joint_offset_deg=2.0)))
    offsets = np.radians(2.0) * miscal.OFFSET_PATTERN
    np.testing.assert_allclose(believed.fk(q)[0], true.fk(q + offsets)[0], atol=1e-9)
    # A base believed 10 mm forward: the right base faces -x, so every believed tool sits 10 mm toward -x.
    shifted = Arm("right", model=miscal.believed_model(MiscalKnobs(base_shift_mm=(10.0, 0.0, 0.0))))
    np.testing.assert_allclose(shifted.fk(q)[0] - true.fk(q)[0], [-0.01, 0.0, 0.0], atol=1e-6)
    # A longer upper arm: at q = 0 the arm is stretched along the base's x, so the tool reaches further.
    longer = Arm("right", model=miscal.believed_model(MiscalKnobs(upper_arm_scale=1.1)))
    elbow = true.model.body("vx300s_right/upper_forearm_link").id
    np.testing.assert_allclose(longer.model.body_pos[elbow], 1.1 * true.model.body_pos[elbow])
    zero = np.zeros(6)
    np.testing.assert_allclose(longer.fk(zero)[0] - true.fk(zero)[0], 0.1 * np.array([-0.05955, 0, 0.3]),
                               atol=1e-6)  # fmt: skip


def grasp_miss(**kwargs) -> float:
    """How far (m) the real TCP at the right's planned grasp keyframe is from the nominal plan's TCP."""
    policy, nominal = miscal.make_policy(**kwargs), miscal.make_policy()
    true = nominal.arms["true_right"]
    planned = MiscalPlan(policy.knobs, policy.arms, state(), CUBE).right[1][2]
    ideal = MiscalPlan(nominal.knobs, nominal.arms, state(), CUBE).right[1][2]
    return float(np.linalg.norm(true.fk(planned)[0] - true.fk(ideal)[0]))


def test_grasp_miss_follows_the_error_size_and_a_touch_off_removes_a_pure_shift():
    assert grasp_miss() < 1e-4
    small, large = grasp_miss(joint_offset_deg=1.5), grasp_miss(joint_offset_deg=2.5)
    assert 0.005 < small < large  # a bigger encoder offset lands further off
    assert grasp_miss(base_shift_mm=(0.0, 15.0, 0.0)) == pytest.approx(0.015, abs=1e-3)
    assert grasp_miss(base_shift_mm=(0.0, 15.0, 0.0), touch_off=1.0) < 1e-3  # a translation: fully undone
    combined = dict(miscal.COMBINED)
    partly = grasp_miss(**combined, touch_off=1.0)
    assert 0.002 < partly < grasp_miss(**combined)  # joint offsets and yaw are only partly undone


def test_bad_kwargs_raise_clear_errors():
    with pytest.raises(ValueError, match="bogus"):
        miscal.make_policy(bogus=1)
    bad = {"joint_offset_deg": 15.0, "upper_arm_scale": 1.5, "base_shift_mm": (1.0, 2.0),
           "camera_shift_mm": (0.0, 80.0, 0.0), "camera_yaw_deg": -20.0, "gripper_scale": 0.0,
           "gripper_offset_mm": 30.0, "touch_off": 1.5}  # fmt: skip
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            MiscalKnobs(**{name: value})
    for kwargs in miscal.FAMILY_SETTINGS.values():
        MiscalKnobs(**kwargs)  # every named setting is valid
    assert 8 <= len(miscal.FAMILY_SETTINGS) <= 10


def test_the_same_knobs_give_the_same_actions():
    batch = {"observation.state": torch.tensor(state(), dtype=torch.float32)[None],
             "observation.environment_state": torch.tensor(CUBE, dtype=torch.float32)[None]}  # fmt: skip

    def actions(**kwargs) -> np.ndarray:
        policy = miscal.make_policy(**kwargs)
        return np.stack([policy.select_action(batch).numpy() for _ in range(70)])

    np.testing.assert_array_equal(actions(joint_offset_deg=1.5), actions(joint_offset_deg=1.5))
    assert np.abs(actions(joint_offset_deg=1.5) - actions()).max() > 0.01


def test_the_real_hand_lands_where_the_miscalibration_says_in_a_real_rollout():
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policies = [miscal.make_policy(), miscal.make_policy(joint_offset_deg=2.5)]
    true = Arm("right")
    landed, rewards = [], []
    with AlohaWorld(WorldConfig(cameras=(), num_envs=1)) as world:
        for policy in policies:
            obs = world.reset(initial_poses("id", 1), False)
            policy.reset()
            best = 0.0
            for t in range(miscal.T_RELEASE + miscal.GRIP_RAMP + 5):
                step = world.step(policy.select_action(to_batch(obs)).numpy(), False)
                obs, best = step.observation, max(best, float(step.reward[0]))
                if t == miscal.T_PRE + 3:  # at the pre-grasp keyframe, 7 cm from the cube: free space
                    landed.append(true.fk(obs["observation.state"][0, 7:13].astype(float))[0])
            rewards.append(best)
    # Both plans aim at the same believed pre-grasp point; the true FK of each keyframe says where it lands.
    predicted = [true.fk(p.plans[0].right[1][1])[0] for p in policies]
    assert np.linalg.norm(landed[0] - predicted[0]) < 0.004  # the servos follow within a few mm
    assert np.linalg.norm(landed[1] - predicted[1]) < 0.004
    miss = np.linalg.norm(landed[1] - landed[0])
    assert miss > 0.015  # the encoder offsets put the real hand well off the calibrated one
    assert miss == pytest.approx(np.linalg.norm(predicted[1] - predicted[0]), abs=0.004)
    assert rewards[0] == 4  # the calibrated robot hands the cube over
    assert rewards[1] < 4  # the miscalibrated one does not
