"""The `pivot` family acts as claimed in the real MuJoCo reference world: a top-down grasp, the cube handed
over tipped 45 degrees about the right's finger axis, a left that takes it diagonally from above; its knobs
do what they are labelled.

Every measurement is taken on the recorded trajectory (actions, proprio, cube poses), with gripper poses
from MuJoCo's own kinematics of the recorded joint state, not from the family's.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from test_families import _fingers_xy_at_close, _first_close, _first_open, _gripper_axes, _tcp

from families.measure import initial_poses, play
from families.pivot import FAMILY_SETTINGS, RELEASE_WAIT, TIP_DEG, PivotKnobs


def _cube_axes(episode: dict, step: int) -> np.ndarray:
    """(3,3) orientation of the cube (columns: its x, y, z axes in the world) at `step`."""
    w, x, y, z = episode["cubes"][step, 3:7]
    return Rotation.from_quat([x, y, z, w]).as_matrix()


def _tilt_deg(axes: np.ndarray) -> float:
    """Degrees between world z and the cube axis nearest it: 0 for a cube lying flat."""
    return float(np.degrees(np.arccos(np.abs(axes[2, :]).max())))


def _face_misalignment_deg(episode: dict, step: int) -> float:
    """Degrees between the left's approach and the cube face normal nearest it, at `step`."""
    approach = _gripper_axes(episode, "left", step)[:, 0]
    return float(np.degrees(np.arccos(np.abs(_cube_axes(episode, step).T @ approach).max())))


def _first_move(actions: np.ndarray) -> int:
    """First step at which the right's joint command leaves where it started."""
    return int(np.nonzero(np.abs(actions[:, 7:13] - actions[0, 7:13]).max(axis=1) > 1e-4)[0][0])


def _reversals(actions: np.ndarray, end: int) -> int:
    """How often the right's joint commands turn back (speed above 0.1 rad/s) before step `end`: ringing."""
    v = np.diff(actions[:end, 7:13], axis=0)
    return int(np.sum((v[1:] * v[:-1] < 0) & (np.abs(v[1:]) > 2e-3)))


@pytest.fixture(scope="module")
def poses() -> np.ndarray:
    return initial_poses("id", 3)


@pytest.fixture(scope="module")
def nominal(poses) -> list[dict]:
    return play("pivot", {}, poses, num_envs=3, record=True)


def test_settings_are_ten_and_valid():
    assert len(FAMILY_SETTINGS) == 10 and FAMILY_SETTINGS["nominal"] == {}
    for kwargs in FAMILY_SETTINGS.values():
        PivotKnobs(**kwargs)  # every setting names real knobs with valid values


def test_nominal_hands_over_a_tipped_cube(nominal):
    for episode in nominal:
        assert episode["success"]
        fingers, cube = _fingers_xy_at_close(episode)
        assert np.linalg.norm(fingers - cube) < 0.005  # a centred grasp ...
        grasp = _first_close(episode["actions"], 13)
        assert _gripper_axes(episode, "right", grasp)[2, 0] < -0.97  # ... from straight above
        take = _first_close(episode["actions"], 6)
        assert 40 < _tilt_deg(_cube_axes(episode, take)) < 50  # the cube is handed over tipped ~45 degrees
        right, left = _gripper_axes(episode, "right", take), _gripper_axes(episode, "left", take)
        assert right[0, 0] < -0.6 and right[2, 0] < -0.6  # the right points down toward -x ...
        assert left[0, 0] > 0.6 and left[2, 0] < -0.6  # ... the left down toward +x, ...
        assert left[0, 1] ** 2 + left[2, 1] ** 2 > 0.95  # ... its fingers closing in the x-z plane
        assert _face_misalignment_deg(episode, take) < 8  # square to the tipped faces
        assert 0.19 < episode["cubes"][take, 2] < 0.25
        assert (
            _first_open(episode["actions"]) == take + RELEASE_WAIT
        )  # the right lets go after the left closes


def test_grasp_offset_lands_off_centre_and_still_holds(poses):
    for episode in play("pivot", {"grasp_offset": 0.02}, poses, num_envs=3, record=True):
        fingers, cube = _fingers_xy_at_close(episode)
        assert fingers[0] - cube[0] == pytest.approx(0.02, abs=0.004)  # 2 cm off along x: near the edge
        assert abs(fingers[1] - cube[1]) < 0.005
        assert episode["success"]


def test_planner_tick_sets_when_the_arm_first_moves(poses, nominal):
    slow = play("pivot", {"replan_every": 35}, poses, num_envs=3, record=True)
    for good, lagging in zip(nominal, slow, strict=True):
        assert _first_move(good["actions"]) == 5  # the first IK goal that differs comes at the second tick
        assert _first_move(lagging["actions"]) == 35
        # Every phase waits for its next tick: the whole task runs late.
        assert _first_close(lagging["actions"], 6) > _first_close(good["actions"], 6) + 60


def test_low_damping_rings(poses, nominal):
    ringing = play("pivot", {"damping_ratio": 0.05}, poses, num_envs=3, record=True)
    for good, bad in zip(nominal, ringing, strict=True):
        good_close, bad_close = _first_close(good["actions"], 13), _first_close(bad["actions"], 13)
        assert _reversals(good["actions"], good_close) <= 6
        assert _reversals(bad["actions"], bad_close) >= 15
        assert bad_close > good_close + 20  # the grasp waits for the joints to settle


def test_tip_error_is_met_by_the_left_only_when_it_reads_the_cube(poses):
    blind_kwargs = FAMILY_SETTINGS["undertip_blind"]
    read = play("pivot", {"tip_error_deg": blind_kwargs["tip_error_deg"]}, poses, num_envs=3, record=True)
    blind = play("pivot", blind_kwargs, poses, num_envs=3, record=True)
    tipped = TIP_DEG + blind_kwargs["tip_error_deg"]
    for seen, unseen in zip(read, blind, strict=True):
        for episode in (seen, unseen):
            assert _tilt_deg(_cube_axes(episode, _first_close(episode["actions"], 6))) == pytest.approx(
                tipped, abs=5
            )
        assert _face_misalignment_deg(seen, _first_close(seen["actions"], 6)) < 8
        assert _face_misalignment_deg(unseen, _first_close(unseen["actions"], 6)) > 12
        assert seen["success"]


def test_left_offset_takes_the_cube_that_much_shallower(poses, nominal):
    shallow = play("pivot", {"left_offset": 0.05}, poses, num_envs=3, record=True)
    for good, bad in zip(nominal, shallow, strict=True):
        depths = []
        for episode in (good, bad):
            take = _first_close(episode["actions"], 6)
            approach = _gripper_axes(episode, "left", take)[:, 0]
            depths.append(float((episode["cubes"][take, :3] - _tcp(episode, "left", take)) @ approach))
        assert depths[0] == pytest.approx(0.012, abs=0.006)  # LEFT_DEPTH 5 mm plus the arm's sag
        assert depths[1] - depths[0] == pytest.approx(0.05, abs=0.005)
        assert bad["max_reward"] >= 2 and not bad["success"]  # lifted by the right, never taken
