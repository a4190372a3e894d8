"""The `swivel` family acts as claimed in the real MuJoCo reference world: a top-down grasp, the cube
swivelled about the vertical in hand to face the left's shoulder, a level take on its top and bottom faces,
a release once the left's finger opening has stopped shrinking; its knobs do what they are labelled.

Every measurement is taken on the recorded trajectory (actions, proprio, cube poses), with gripper poses
from MuJoCo's own kinematics of the recorded joint state, not from the family's.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_families import _first_close, _first_open, _gripper_axes, _tcp

from families.common import cube_yaw
from families.measure import initial_poses, play
from families.swivel import (
    FAMILY_SETTINGS,
    GRIP_STEPS,
    HANDOVER,
    HOLD_STEPS,
    HOLD_STILL,
    SWIVEL_HEADING,
    SwivelKnobs,
)


def _quarter_deg(angle: float) -> float:
    """`angle` (rad) in degrees, modulo a quarter turn, in [-45, 45): a cube's faces repeat every 90."""
    return float((np.degrees(angle) + 45) % 90 - 45)


def _cube_swivel_deg(episode: dict, step: int) -> float:
    """Degrees from SWIVEL_HEADING to the cube's nearest face normal in the table plane, at `step`."""
    return _quarter_deg(cube_yaw(episode["cubes"][step, 3:7]) - SWIVEL_HEADING)


def _left_heading_deg(episode: dict, step: int) -> float:
    """Degrees from SWIVEL_HEADING to the left's approach in the table plane, at `step`."""
    approach = _gripper_axes(episode, "left", step)[:, 0]
    return _quarter_deg(np.arctan2(approach[1], approach[0]) - SWIVEL_HEADING)


def _reversals(actions: np.ndarray, end: int) -> int:
    """How often the arms' joint commands turn back (at over 0.1 rad/s) before step `end`: ringing."""
    v = np.diff(actions[:end][:, np.r_[0:6, 7:13]], axis=0)
    return int(np.sum((v[1:] * v[:-1] < 0) & (np.abs(v[1:]) > 2e-3)))


@pytest.fixture(scope="module")
def poses() -> np.ndarray:
    return initial_poses("id", 3)


@pytest.fixture(scope="module")
def nominal(poses) -> list[dict]:
    return play("swivel", {}, poses, num_envs=3, record=True)


def test_settings_are_ten_and_valid():
    assert len(FAMILY_SETTINGS) == 10 and FAMILY_SETTINGS["nominal"] == {}
    for kwargs in FAMILY_SETTINGS.values():
        SwivelKnobs(**kwargs)  # every setting names real knobs with valid values


def test_nominal_swivels_the_cube_and_takes_it_level(nominal):
    for episode in nominal:
        assert episode["success"]
        assert _gripper_axes(episode, "right", _first_close(episode["actions"], 13))[2, 0] < -0.97  # top-down
        take = _first_close(episode["actions"], 6)
        assert abs(np.degrees(cube_yaw(episode["cubes"][take, 3:7]))) > 15  # turned in hand, ...
        assert abs(_cube_swivel_deg(episode, take)) < 4  # ... a face toward the left's shoulder
        assert np.linalg.norm(episode["cubes"][take, :3] - HANDOVER) < 0.03
        left = _gripper_axes(episode, "left", take)
        assert abs(left[2, 0]) < 0.05 and abs(left[2, 1]) > 0.98  # level, fingers closing vertically ...
        assert abs(_left_heading_deg(episode, take)) < 4  # ... along the heading from its base


def test_right_opens_once_the_left_finger_opening_stops_shrinking(nominal):
    for episode in nominal:
        take, release = _first_close(episode["actions"], 6), _first_open(episode["actions"])
        assert GRIP_STEPS + HOLD_STEPS <= release - take <= GRIP_STEPS + HOLD_STEPS + 10
        shrink = -np.diff(episode["states"][take : release + 1, 6])
        assert shrink.max() > 3 * HOLD_STILL  # the left's fingers were closing ...
        assert np.all(shrink[-HOLD_STEPS:] < HOLD_STILL)  # ... and had stopped when the right let go


def test_swivel_error_is_met_by_the_left_only_when_it_reads_the_yaw(poses):
    read = play("swivel", {"swivel_error_deg": 40.0}, poses, num_envs=3, record=True)
    blind = play("swivel", FAMILY_SETTINGS["overswivel_blind"], poses, num_envs=3, record=True)
    for seen, unseen in zip(read, blind, strict=True):
        take = _first_close(seen["actions"], 6)
        assert _cube_swivel_deg(seen, take) == pytest.approx(40, abs=4)
        assert _left_heading_deg(seen, take) == pytest.approx(40, abs=4)  # the left follows the cube
        assert seen["success"]
        take = _first_close(unseen["actions"], 6)
        assert _cube_swivel_deg(unseen, take) == pytest.approx(30, abs=4)
        assert abs(_left_heading_deg(unseen, take)) < 8  # the left keeps its planned heading


def test_stiff_loop_and_late_state_make_the_loop_ring(poses, nominal):
    stiff = play("swivel", {"stiffness": 0.7}, poses, num_envs=3, record=True)
    late = play("swivel", {"latency": 3}, poses, num_envs=3, record=True)
    for good, loose, lagging in zip(nominal, stiff, late, strict=True):
        assert _reversals(good["actions"], 200) <= 20
        assert _reversals(loose["actions"], 200) >= 60  # the offset overshoots the servo's lag
        assert _reversals(lagging["actions"], 200) >= 30  # the offset chases an old pose


def test_high_grasp_holds_the_cube_that_much_lower_in_the_hand(poses, nominal):
    high = play("swivel", {"grasp_height": 0.025}, poses[:2], num_envs=2, record=True)
    for good, bad in zip(nominal, high, strict=False):
        heights = []
        for episode in (good, bad):
            close = _first_close(episode["actions"], 13)
            heights.append(_tcp(episode, "right", close)[2] - episode["cubes"][close, 2])
        assert heights[1] - heights[0] == pytest.approx(0.025, abs=0.004)


def test_weak_squeeze_lifts_the_cube_and_loses_it(poses):
    for episode in play("swivel", {"squeeze": 0.56}, poses[:2], num_envs=2, record=True):
        assert episode["max_reward"] >= 2 and not episode["success"]
        assert episode["cubes"][-1, 2] < 0.05  # back on the table
