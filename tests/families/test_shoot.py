"""The `shoot` family acts as claimed in the real MuJoCo reference world: the right grasps from the cube's +y
side, pitched down, on its x faces; it presents the cube hanging below its top-down gripper at a high hand-
over right of the centre; the left reaches across from -x and pinches the free y faces; the right lets go
once the left's finger opening shows a grasp; no inverse kinematics is ever called; its knobs do what they
are labelled.

Measurements are taken on the recorded trajectory (actions, proprio, cube poses), with gripper poses from
MuJoCo's own kinematics of the recorded joint state (`test_families`' helpers), not from the family's.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_families import _fingers_xy_at_close, _first_close, _first_open, _gripper_axes, _tcp

from families.arm import Arm
from families.common import gripper_rot
from families.measure import initial_poses, play
from families.shoot import (
    FAMILY_SETTINGS,
    GRASP_PITCH,
    HANDOVER,
    HOLD_STEPS,
    ChainFK,
    Shooter,
    ShootKnobs,
)


@pytest.fixture(scope="module")
def poses() -> np.ndarray:
    return initial_poses("id", 3)


@pytest.fixture(scope="module")
def nominal(poses) -> list[dict]:
    return play("shoot", {}, poses, num_envs=3, record=True)


def test_settings_are_ten_and_valid():
    assert len(FAMILY_SETTINGS) == 10 and FAMILY_SETTINGS["nominal"] == {}
    for kwargs in FAMILY_SETTINGS.values():
        ShootKnobs(**kwargs)  # every setting names real knobs with valid values
    with pytest.raises(ValueError):
        ShootKnobs(samples=4)


def test_vectorised_fk_matches_mujoco():
    arm = Arm("left")
    Q = np.random.default_rng(0).uniform(-1.0, 1.0, (4, 6))
    P, R, _ = ChainFK(arm)(Q)
    for q, p, r in zip(Q, P, R, strict=True):
        p_ref, r_ref = arm.fk(q)
        assert np.allclose(p, p_ref, atol=1e-9) and np.allclose(r, r_ref, atol=1e-9)


def test_nominal_grasps_from_the_far_side_and_hands_over_high(nominal):
    for episode in nominal:
        assert episode["success"]
        grasp = _first_close(episode["actions"], 13)
        right = _gripper_axes(episode, "right", grasp)
        pitch = np.degrees(np.arcsin(-right[2, 0]))
        assert abs(pitch - np.degrees(GRASP_PITCH)) < 5  # pitched 60 degrees down ...
        assert right[1, 0] < -0.4 and abs(right[0, 0]) < 0.1  # ... pointing along -y: from the +y side
        assert abs(right[0, 1]) > 0.95  # fingers on the x faces
        take = _first_close(episode["actions"], 6)
        right, left = _gripper_axes(episode, "right", take), _gripper_axes(episode, "left", take)
        assert right[2, 0] < -0.95 and abs(right[0, 1]) > 0.95  # top-down now, same faces held
        assert left[0, 0] > 0.9 and -0.5 < left[2, 0] < -0.2  # reaching across, 20 degrees down
        assert abs(left[1, 1]) > 0.95  # ... closing on the y faces, crossing the right's fingers
        # high, right of the centre: the servos sag ~1 cm, a cube held off-centre swings a few cm more
        assert (
            np.linalg.norm(episode["cubes"][take, :3] - HANDOVER) < 0.05 and episode["cubes"][take, 0] > 0.03
        )
        assert np.linalg.norm(_tcp(episode, "left", take) - episode["cubes"][take, :3]) < 0.02
        assert episode["cubes"][-1, 2] > 0.15  # still held by the left at the end


def test_right_opens_once_the_left_opening_shows_a_grasp(nominal):
    for episode in nominal:
        take, release = _first_close(episode["actions"], 6), _first_open(episode["actions"])
        assert release > take + HOLD_STEPS
        opening = episode["states"][take : release + 1, 6]
        assert opening[0] > 0.9 and 0.5 < opening[-1] < 0.75  # closed, stopped by the cube (~0.64)


def test_no_inverse_kinematics_is_called(poses, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("shoot must not call IK")

    monkeypatch.setattr(Arm, "ik", refuse)
    (episode,) = play("shoot", {}, poses[:1], num_envs=1)
    assert episode["success"]


def _grasp_errors(knobs: ShootKnobs, poses: np.ndarray) -> list[float]:
    """The planned grasp goal's error (m + 0.3 m/rad) for each pose, from the start pose."""
    right = Arm("right")
    rot = gripper_rot(-np.pi / 2, GRASP_PITCH, 0.0)
    errors = []
    for i, pose in enumerate(poses):
        shooter = Shooter(
            right, np.array([0.0, -0.96, 1.16, 0.0, -0.3, 0.0]), knobs, np.random.default_rng(i)
        )
        shooter.plan(0, "line_up", pose[:3] + np.array([0.0, 0.03, 0.06]), rot)
        errors.append(shooter.goal_error)
    return errors


def test_fewer_samples_give_a_larger_planned_goal_error():
    poses = initial_poses("ood", 4)
    full = _grasp_errors(ShootKnobs(), poses)
    starved = _grasp_errors(ShootKnobs(samples=24, iters=3), poses)
    assert max(full) < 0.002
    assert np.mean(starved) > 0.01


def test_smooth_weight_stops_the_plan_short():
    poses = initial_poses("id", 2)
    assert min(_grasp_errors(ShootKnobs(smooth_weight=0.3), poses)) > 0.02


def test_cube_bias_closes_the_fingers_that_far_off(poses, nominal):
    biased = play("shoot", {"cube_bias": 0.025}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, biased, strict=False):
        offsets = []
        for episode in (good, bad):
            close, cube = _first_close(episode["actions"], 13), episode["cubes"][0, :2]  # where it was read
            commanded = _tcp({"states": episode["actions"]}, "right", close)  # FK of the joint command
            offsets.append((commanded[0] - cube[0], _fingers_xy_at_close(episode)[0][0] - cube[0]))
        assert abs(offsets[0][0]) < 0.002 and abs(offsets[0][1]) < 0.006  # nominal: centred on the cube
        assert offsets[1][0] == pytest.approx(0.025, abs=0.002)  # planned exactly the bias off ...
        assert offsets[1][1] > 0.014  # ... and closes its fingers that far off (the cube pushes back a bit)


def test_table_height_raises_the_grasp(poses, nominal):
    high = play("shoot", {"table_z": 0.04}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, high, strict=False):
        rises = [_tcp(e, "right", _first_close(e["actions"], 13))[2] for e in (good, bad)]
        assert rises[1] - rises[0] == pytest.approx(0.04, abs=0.008)


def test_release_lead_lets_go_before_the_left_closes(poses):
    for episode in play("shoot", {"release_lead": 9}, poses[:2], num_envs=2, record=True):
        assert _first_open(episode["actions"]) < _first_close(episode["actions"], 6)
        assert episode["max_reward"] >= 2 and not episode["success"]  # lifted, then dropped
        assert episode["cubes"][-1, 2] < 0.05  # back on the table
