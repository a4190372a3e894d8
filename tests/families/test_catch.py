"""The `catch` family acts as claimed in the real MuJoCo reference world: the right lets go of the cube above
the left's open fingers and the left closes on it as it falls; its knobs do what they are labelled.

Every measurement is taken on the recorded trajectory (actions, proprio, cube poses), with tool points
from MuJoCo's own kinematics of the recorded joint state, not from the family's.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_families import _tcp

from families.catch import FAMILY_SETTINGS, CatchKnobs
from families.measure import initial_poses, play

FPS = 50
CUBE_REST_Z = 0.02  # the cube's centre when it lies on the table


def _release(actions: np.ndarray) -> int:
    """Step at which the right's gripper command first rises again after its grasp: the let-go."""
    closed = int(np.nonzero(actions[:, 13] < 0.5)[0][0])
    return closed + int(np.nonzero(np.diff(actions[closed:, 13]) > 0)[0][0]) + 1


def _catch(actions: np.ndarray) -> int:
    """Step at which the left's gripper command drops to closed: the catch."""
    return int(np.nonzero(np.diff(actions[:, 6]) < -0.3)[0][0]) + 1


@pytest.fixture(scope="module")
def poses() -> np.ndarray:
    return initial_poses("id", 3)


@pytest.fixture(scope="module")
def nominal(poses) -> list[dict]:
    return play("catch", {}, poses, num_envs=3, record=True)


def test_settings_are_ten_and_valid():
    assert len(FAMILY_SETTINGS) == 10 and FAMILY_SETTINGS["nominal"] == {}
    for kwargs in FAMILY_SETTINGS.values():
        CatchKnobs(**kwargs)  # every setting names real knobs with valid values


def test_nominal_is_a_catch(nominal):
    for episode in nominal:
        assert episode["success"]
        let_go, take = _release(episode["actions"]), _catch(episode["actions"])
        assert let_go < take  # the right lets go first ...
        z = episode["cubes"][:, 2]
        assert z[let_go] > 0.15  # ... high above the table ...
        assert z[take] <= z[let_go] - 0.001 and z[take + 1] < z[take]  # ... and the left closes on it falling
        assert _tcp(episode, "left", take)[2] < z[let_go]  # the left's fingers wait below the hanging cube
        assert z[take + 15] > 0.1 and z[-1] > 0.1  # caught in mid-air, kept off the table to the end


def test_drop_height_lowers_the_left_and_lengthens_the_fall(poses, nominal):
    # Tolerances: the arms sag a few millimetres under their servos, and the cube is caught anywhere on the
    # ~3 cm tall finger pads around the left's TCP (1-2 cm below it in checks).
    high = play("catch", {"drop_height": 0.08}, poses, num_envs=3, record=True)
    for drops, episodes in ((0.01, nominal), (0.08, high)):
        for episode in episodes:
            let_go, take = _release(episode["actions"]), _catch(episode["actions"])
            z = episode["cubes"][:, 2]
            assert z[let_go] - _tcp(episode, "left", take)[2] == pytest.approx(drops, abs=0.006)
            fall = z[let_go] - z[take + 10]  # held by then
            assert drops - 0.005 < fall < drops + 0.025
            assert episode["success"]


def test_left_offset_puts_the_cube_near_the_finger_tips(poses, nominal):
    shifted = play("catch", {"left_offset": 0.0475}, poses, num_envs=3, record=True)
    for offset, episodes in ((0.0, nominal), (0.0475, shifted)):
        for episode in episodes:
            take = _catch(episode["actions"])
            short = episode["cubes"][take, 0] - _tcp(episode, "left", take)[0]  # along the left's approach
            assert short == pytest.approx(offset, abs=0.005)


def test_release_speed_throws_the_cube_along_x(poses, nominal):
    thrown = play("catch", {"release_speed": 0.45}, poses, num_envs=3, record=True)
    for speed, episodes in ((0.0, nominal), (0.45, thrown)):
        for episode in episodes:
            let_go = _release(episode["actions"])
            x = episode["cubes"][:, 0]
            # The arm lags its command by a few steps; within 0.15 m/s of the commanded speed.
            assert (x[let_go + 3] - x[let_go]) / 3 * FPS == pytest.approx(speed, abs=0.15)


def test_close_delay_and_wide_opening(poses, nominal):
    late = play("catch", {"close_delay": 3}, poses, num_envs=3, record=True)
    wide = play("catch", {"left_open": 1.0}, poses, num_envs=3, record=True)
    for good, bad, open_wide in zip(nominal, late, wide, strict=True):
        assert _catch(bad["actions"]) - _release(bad["actions"]) == (
            _catch(good["actions"]) - _release(good["actions"]) + 3
        )  # the same fall seen, closed 3 steps later
        waiting = _release(open_wide["actions"]) - 1
        assert open_wide["states"][waiting, 6] > good["states"][waiting, 6] + 0.15  # fingers wider apart


def test_late_close_lets_the_cube_fall_through(poses):
    for episode in play("catch", FAMILY_SETTINGS["late_close"], poses, num_envs=3, record=True):
        let_go, take = _release(episode["actions"]), _catch(episode["actions"])
        assert episode["max_reward"] >= 2 and not episode["success"]  # lifted by the right, never taken
        cubes = episode["cubes"]
        assert cubes[-1, 2] == pytest.approx(CUBE_REST_Z, abs=0.003)  # it ends lying on the table ...
        assert np.linalg.norm(cubes[-1, :2] - cubes[let_go, :2]) < 0.05  # ... right below where it was let go
        # Two steps after the close command (the fingers' stroke) the cube is 3 cm below the TCP, past the
        # pads (about 3 cm tall there).
        assert cubes[take + 2, 2] < _tcp(episode, "left", take)[2] - 0.03
