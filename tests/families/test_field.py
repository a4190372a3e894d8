"""The `field` family acts as claimed in the real MuJoCo reference world: a top-down grasp on the cube's x
faces, a take from below on its y faces with the fingers crossed, the right's release on the slip it feels
after the left's tug, joint commands capped in speed; its knobs do what they are labelled.

Every measurement is taken on the recorded trajectory (actions, proprio, cube poses), with gripper poses
from MuJoCo's own kinematics of the recorded joint state, not from the family's.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_families import _first_close, _first_open, _gripper_axes, _tcp

from families.field import (
    CLOSE_DWELL,
    DT,
    FAMILY_SETTINGS,
    GRIP_STEPS,
    HANDOVER,
    LEFT_PITCH_DEG,
    QDOT_MAX,
    TUG_WAIT,
    FieldKnobs,
)
from families.measure import initial_poses, play


def _in_hand(episode: dict, step: int) -> np.ndarray:
    """Cube centre minus the right's TCP at `step` (what the right feels the slip by)."""
    return episode["cubes"][step, :3] - _tcp(episode, "right", step)


def _max_joint_step(episode: dict) -> float:
    """The largest change of an arm joint command from one step to the next (rad)."""
    return float(np.abs(np.diff(episode["actions"][:, np.r_[0:6, 7:13]], axis=0)).max())


@pytest.fixture(scope="module")
def poses() -> np.ndarray:
    return initial_poses("id", 3)


@pytest.fixture(scope="module")
def nominal(poses) -> list[dict]:
    return play("field", {}, poses, num_envs=3, record=True)


def test_settings_are_ten_and_valid():
    assert len(FAMILY_SETTINGS) == 10 and FAMILY_SETTINGS["nominal"] == {}
    for kwargs in FAMILY_SETTINGS.values():
        FieldKnobs(**kwargs)  # every setting names real knobs with valid values


def test_nominal_grasps_the_x_faces_and_is_taken_from_below_crossed(nominal):
    for episode in nominal:
        assert episode["success"]
        grasp = _first_close(episode["actions"], 13)
        right = _gripper_axes(episode, "right", grasp)
        assert right[2, 0] < -0.98  # top-down ...
        assert abs(right[0, 1]) > 0.98  # ... fingers closing along world x, on the cube's x faces
        take = _first_close(episode["actions"], 6)
        assert np.linalg.norm(episode["cubes"][take, :3] - HANDOVER) < 0.02
        left = _gripper_axes(episode, "left", take)
        pitch = np.degrees(np.arcsin(left[2, 0]))
        assert pitch == pytest.approx(LEFT_PITCH_DEG, abs=4) and left[0, 0] > 0.8  # up at 30 deg toward +x
        assert abs(left[1, 1]) > 0.98  # fingers closing along world y, on the free y faces
        assert abs(_gripper_axes(episode, "right", take)[:, 1] @ left[:, 1]) < 0.05  # crossed fingers
        below = _tcp(episode, "left", take) - episode["cubes"][take, :3]
        assert np.linalg.norm(below) < 0.01  # the left's TCP on the cube's centre


def test_right_lets_go_once_it_feels_the_tug(nominal):
    for episode in nominal:
        take, release = _first_close(episode["actions"], 6), _first_open(episode["actions"])
        tug = take + GRIP_STEPS + CLOSE_DWELL
        assert tug < release < tug + TUG_WAIT  # during the tug, before the timer would let go
        slip = [
            np.linalg.norm(_in_hand(episode, t) - _in_hand(episode, take)) for t in (release - 1, release)
        ]
        assert slip[0] < FieldKnobs().slip_threshold <= slip[1]  # the step the slip crossed the threshold
        assert episode["states"][release + 30, 13] > 0.9  # the right has opened ...
        assert episode["cubes"][release + 30, 2] > 0.15  # ... and the left holds the cube up


def test_eager_release_lets_go_as_the_left_starts_to_close(poses):
    for episode in play("field", FAMILY_SETTINGS["eager_release"], poses[:2], num_envs=2, record=True):
        assert _first_open(episode["actions"]) - _first_close(episode["actions"], 6) <= 1


def test_joint_commands_are_speed_capped_and_rushed_raises_the_cap(poses, nominal):
    cap = QDOT_MAX * DT
    rushed = play("field", {"speed_scale": 5.0}, poses[:2], num_envs=2, record=True)
    for good, fast in zip(nominal, rushed, strict=False):
        assert 0.9 * cap < _max_joint_step(good) <= cap + 1e-6
        assert 3 * cap < _max_joint_step(fast) <= 5 * cap + 1e-6
        assert _first_close(fast["actions"], 13) < 0.7 * _first_close(
            good["actions"], 13
        )  # at the cube sooner


def test_high_table_wall_rests_the_grasp_above_its_goal(poses, nominal):
    high = play("field", {"table_margin": 0.07}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, high, strict=False):
        heights = []
        for episode in (good, bad):
            grasp = _first_close(episode["actions"], 13)
            heights.append(_tcp(episode, "right", grasp)[2] - episode["cubes"][grasp, 2])
        assert heights[0] < 0.02  # nominal: the tips 8 mm above the table
        assert heights[1] - heights[0] == pytest.approx((0.07 - 0.008) / 2, abs=0.006)  # wall meets well


def test_wide_keepout_rests_the_left_short_of_the_cube(poses, nominal):
    wide = play("field", {"keepout": 0.5}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, wide, strict=False):
        short = []
        for episode in (good, bad):
            take = _first_close(episode["actions"], 6)
            short.append(np.linalg.norm(_tcp(episode, "left", take) - episode["cubes"][take, :3]))
        assert short[0] < 0.01 and short[1] > 0.04
        assert (
            _first_open(bad["actions"]) - _first_close(bad["actions"], 6)
            >= GRIP_STEPS + CLOSE_DWELL + TUG_WAIT
        )


def test_short_descent_step_crawls(poses, nominal):
    timid = play("field", {"step_gain": 0.05}, poses[:2], num_envs=2, record=True)
    for good, slow in zip(nominal, timid, strict=False):
        assert _first_close(slow["actions"], 13) > 2.5 * _first_close(good["actions"], 13)
        assert not slow["success"]


def test_joint_noise_is_a_pure_function_of_the_seed_and_first_observation(poses, nominal):
    first = play("field", {"joint_noise": 0.04}, poses[:2], num_envs=2, record=True)
    again = play("field", {"joint_noise": 0.04}, poses[1::-1], num_envs=2, record=True)  # other batch order
    other = play("field", {"joint_noise": 0.04, "seed": 1}, poses[:1], num_envs=1, record=True)
    np.testing.assert_array_equal(first[0]["actions"], again[1]["actions"])
    deviation = first[0]["actions"][:20, :6] - nominal[0]["actions"][:20, :6]
    assert 0.01 < deviation.std() < 0.08  # slowly varying noise of std 0.04 on the commands
    assert np.abs(other[0]["actions"][:20] - first[0]["actions"][:20]).max() > 0.01
