"""The `tuned` family: its stored parameters are complete and in bounds, its optimizer optimizes, and the
tuned controller really gets the cube into the left's hand off the table in the MuJoCo reference world (by
the route the tuning found: a drop and a pick from the table), better than its initial guess.
Rollouts are measured on the recorded trajectory (cube poses from the world)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from families.measure import initial_poses, play
from families.tuned import (
    FAMILY_SETTINGS,
    INITIAL,
    NAMES,
    PARAMS,
    PARAMS_FILE,
    TunedKnobs,
    cem_step,
    check_params,
    episode_score,
    from_unit,
    load_checkpoints,
    make_policy,
    rollout_returns,
    to_unit,
)


@pytest.fixture(scope="module")
def poses() -> np.ndarray:
    return initial_poses("id", 3)


def test_params_file_has_every_setting_with_named_bounded_params():
    stored = json.loads(PARAMS_FILE.read_text())["checkpoints"]
    assert len(FAMILY_SETTINGS) == 10
    for name, kwargs in FAMILY_SETTINGS.items():
        checkpoint = kwargs.get("checkpoint", "final")
        assert checkpoint == "initial" or checkpoint in stored, name
        params = load_checkpoints()[checkpoint]
        assert tuple(params) == NAMES  # the documented names, in order
        for key, value in params.items():
            low, high = PARAMS[key][:2]
            assert low <= value <= high, (name, key, value)
        TunedKnobs(**kwargs)
    # the tuning moved the parameters: the final policy is not the initial guess
    assert np.abs(to_unit(load_checkpoints()["final"]) - to_unit(INITIAL)).max() > 0.1


def test_unit_scaling_round_trips_and_clips():
    u = np.linspace(-1, 1, len(NAMES))
    assert np.allclose(to_unit(from_unit(u)), u)
    clipped = from_unit(np.full(len(NAMES), 3.0))
    assert all(clipped[n] == PARAMS[n][1] for n in NAMES)


def test_cem_finds_the_optimum_of_a_quadratic():
    # f(x) = -|x - c|^2 has its maximum 0 at c (by hand); start at the origin with a wide search
    c = np.array([0.5, -0.3, 0.2, 0.7])
    mean, std = np.zeros(4), np.full(4, 0.5)
    rng = np.random.default_rng(0)
    first_error = np.linalg.norm(mean - c)
    for _ in range(12):
        mean, std, _ = cem_step(mean, std, lambda X: -((X - c) ** 2).sum(axis=1), 32, rng, min_std=0.01)
    assert np.linalg.norm(mean - c) < 0.05 < first_error


def test_bad_kwargs_raise_naming_them():
    with pytest.raises(ValueError, match="grasp_pich"):
        make_policy(grasp_pich=40.0)
    with pytest.raises(ValueError, match="squeeze"):
        make_policy(squeeze=1.5)
    with pytest.raises(ValueError, match="no_such_run"):
        make_policy(checkpoint="no_such_run")
    with pytest.raises(ValueError, match="joint_noise"):
        make_policy(joint_noise=-0.1)
    with pytest.raises(ValueError, match="pace"):
        check_params({k: v for k, v in INITIAL.items() if k != "pace"})


def test_final_left_lifts_the_cube_it_picks_from_the_table(poses):
    # what CEM found (docstring): the cube drops out of the right's weak grasp, the left picks it up
    episodes = play("tuned", {}, poses, num_envs=3, record=True)
    for episode in episodes:
        cube_z, actions = episode["cubes"][:, 2], episode["actions"]
        assert episode["success"]
        right_closed = np.nonzero(actions[:, 13] < 0.9)[0][0]
        assert np.abs(episode["cubes"][right_closed:, :2] - episode["cubes"][0, :2]).max() > 0.02  # moved
        left_closed = np.nonzero(actions[:, 6] < 0.9)[0][0]
        assert cube_z[left_closed] < 0.03  # on the table (centre 2 cm up) when the left closes
        assert cube_z[-1] > 0.05 and actions[-1, 6] < 0.9  # held by the left 3 cm or more up at the end


def test_initial_guess_does_worse_than_final(poses):
    rewards = rollout_returns([INITIAL, load_checkpoints()["final"]], poses)
    initial, final = episode_score(rewards, "staged")
    assert final > initial + 0.1
    assert (rewards[1].max(axis=1) >= 4).sum() > (rewards[0].max(axis=1) >= 4).sum()


def test_noise_is_deterministic_per_seed(poses):
    one = play("tuned", {"joint_noise": 0.03, "seed": 1}, poses[:2], num_envs=2, record=True)
    again = play("tuned", {"joint_noise": 0.03, "seed": 1}, poses[:2], num_envs=2, record=True)
    other = play("tuned", {"joint_noise": 0.03, "seed": 2}, poses[:2], num_envs=2, record=True)
    for a, b, c in zip(one, again, other, strict=True):
        assert np.array_equal(a["actions"], b["actions"])
        assert not np.allclose(a["actions"], c["actions"])
