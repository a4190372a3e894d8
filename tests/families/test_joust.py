"""The `joust` family acts as claimed in the real MuJoCo reference world: a top-down grasp, the right's
gripper turned level toward the left's shoulder with the cube rolled a quarter turn in hand, a coaxial
nose-to-nose take on the top and bottom faces, a release once the left's finger opening has come down and
held still; its joint commands are re-planned quintics that keep their velocity; its knobs do what they are
labelled.

Every measurement is taken on the recorded trajectory (actions, proprio, cube poses), with gripper poses
from MuJoCo's own kinematics of the recorded joint state, not from the family's.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from test_families import _fingers_xy_at_close, _first_close, _first_open, _gripper_axes, _tcp

from families.joust import FAMILY_SETTINGS, HANDOVER, HOLD_STEPS, HOLD_STILL, JoustKnobs
from families.measure import initial_poses, play


def _cube_axes(episode: dict, step: int) -> np.ndarray:
    """(3,3) orientation of the cube (columns: its x, y, z axes in the world) at `step`."""
    w, x, y, z = episode["cubes"][step, 3:7]
    return Rotation.from_quat([x, y, z, w]).as_matrix()


@pytest.fixture(scope="module")
def poses() -> np.ndarray:
    return initial_poses("id", 3)


@pytest.fixture(scope="module")
def nominal(poses) -> list[dict]:
    return play("joust", {}, poses, num_envs=3, record=True)


def test_settings_are_ten_and_valid():
    assert len(FAMILY_SETTINGS) == 10 and FAMILY_SETTINGS["nominal"] == {}
    for kwargs in FAMILY_SETTINGS.values():
        JoustKnobs(**kwargs)  # every setting names real knobs with valid values


def test_nominal_turns_the_grasp_level_and_takes_nose_to_nose(nominal):
    for episode in nominal:
        assert episode["success"]
        grasp = _first_close(episode["actions"], 13)
        right = _gripper_axes(episode, "right", grasp)
        assert right[2, 0] < -0.97 and abs(right[1, 1]) > 0.9  # top-down, fingers across the y faces
        take = _first_close(episode["actions"], 6)
        right, left = _gripper_axes(episode, "right", take), _gripper_axes(episode, "left", take)
        assert right[0, 0] < -0.95 and abs(right[1, 1]) > 0.9  # level toward the left, same faces held
        assert left[0, 0] > 0.95 and abs(left[2, 1]) > 0.95  # level toward the right, fingers vertical
        up_in_cube = _cube_axes(episode, grasp).T @ np.array([0.0, 0.0, 1.0])  # its vertical on the table
        was_up = _cube_axes(episode, take) @ up_in_cube  # ... lies along x at the take: a quarter turn
        assert abs(was_up[2]) < 0.25 and abs(was_up[0]) > 0.9
        assert np.linalg.norm(episode["cubes"][take, :3] - HANDOVER) < 0.03  # between the shoulders
        tcp_gap = _tcp(episode, "right", take) - _tcp(episode, "left", take)
        assert abs(tcp_gap[1]) < 0.01 and abs(tcp_gap[2]) < 0.01 and 0.0 < tcp_gap[0] < 0.04  # coaxial


def test_right_opens_once_the_left_opening_has_come_down_and_held(nominal):
    for episode in nominal:
        take, release = _first_close(episode["actions"], 6), _first_open(episode["actions"])
        assert release > take + HOLD_STEPS
        opening = episode["states"][take : release + 1, 6]
        assert opening[0] > 0.9 and opening[-1] < 0.75  # the left had closed, on the cube (~0.64) ...
        assert opening[-1] > 0.55
        held = opening[-HOLD_STEPS - 2 : -1]  # what the right read before its decision (a step behind)
        assert np.all(np.abs(np.diff(held)) < HOLD_STILL) and held.max() < 0.75  # ... and held still
        assert episode["cubes"][-1, 2] > 0.15 and episode["cubes"][-1, 0] < -0.03  # drawn back in the air


def test_commands_are_replanned_without_velocity_jumps(nominal):
    for episode in nominal:
        q = episode["actions"][: _first_close(episode["actions"], 13), 7:13]  # the right's reach
        v = np.diff(q, axis=0)
        assert np.abs(v).max() > 0.02  # it moves at over 1 rad/s ...
        assert np.abs(np.diff(v, axis=0)).max() < 0.01  # ... yet its speed never jumps at a replan


def test_reach_bias_closes_the_fingers_that_far_off_the_cube(poses, nominal):
    biased = play("joust", {"reach_bias": 0.03}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, biased, strict=False):
        fingers, cube = _fingers_xy_at_close(good)
        assert np.linalg.norm(fingers - cube) < 0.01
        fingers, cube = _fingers_xy_at_close(bad)
        assert fingers[1] - cube[1] == pytest.approx(0.03, abs=0.008) and abs(fingers[0] - cube[0]) < 0.01
        assert bad["max_reward"] < 2  # never lifted


def test_take_height_pinches_the_cube_that_much_off_centre(poses, nominal):
    high = play("joust", {"take_height": 0.025}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, high, strict=False):
        heights = []
        for episode in (good, bad):
            take = _first_close(episode["actions"], 6)
            heights.append(_tcp(episode, "left", take)[2] - episode["cubes"][take, 2])
        assert abs(heights[0]) < 0.006 and heights[1] - heights[0] == pytest.approx(0.025, abs=0.005)
        assert bad["max_reward"] >= 2 and not bad["success"]


def test_impatient_guard_closes_the_right_above_the_cube(poses, nominal):
    loose = play("joust", {"arrive_tol": 0.05}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, loose, strict=False):
        gaps = []
        for episode in (good, bad):
            close = _first_close(episode["actions"], 13)
            gaps.append(_tcp(episode, "right", close)[2] - episode["cubes"][close, 2])
        assert gaps[0] < 0.025 and gaps[1] - gaps[0] > 0.02  # it closed while still coming down
        assert not bad["success"]


def test_release_lead_lets_go_before_the_left_closes(poses):
    for episode in play("joust", {"release_lead": 30}, poses[:2], num_envs=2, record=True):
        assert _first_open(episode["actions"]) < _first_close(episode["actions"], 6)
        assert episode["max_reward"] >= 2 and not episode["success"]  # lifted, then dropped
        assert episode["cubes"][-1, 2] < 0.05  # back on the table
