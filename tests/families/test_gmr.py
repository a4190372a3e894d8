"""Tests of family 31, `gmr`: EM (the log-likelihood never falls; the initialisations), GMR (a hand-computed
two-component 1-D case; exact on a linear relation), the cube's polar context, the policy's proprio
feedback and low-pass, seeded cube noise, the knobs' checks, the stored model (demos re-recorded
identically, the nominal fit reproduced from them, the fit close to the teacher at the grasp), and real
rollouts (the nominal policy hands the cube over; one EM iteration from a random start never lifts it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: F401  (torch before MuJoCo)

from families import gmr
from families.gmr import GmrEpisode, GmrKnobs


@pytest.fixture(scope="module")
def mixture() -> dict:
    return gmr.load_mixture(GmrKnobs())


def test_em_never_lowers_the_log_likelihood_and_finds_two_clusters():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal([0.0, 0.0], 0.3, (200, 2)), rng.normal([3.0, 1.0], 0.5, (200, 2))])
    fit = gmr.fit_gmm(X, 2, 30, 0.0, "random", seed=1)
    assert (np.diff(fit["loglik"]) >= -1e-9).all()
    assert fit["loglik"][-1] > fit["loglik"][0] + 0.1
    order = np.argsort(fit["means"][:, 0])
    np.testing.assert_allclose(fit["means"][order], [[0.0, 0.0], [3.0, 1.0]], atol=0.1)
    np.testing.assert_allclose(fit["weights"], 0.5, atol=0.02)


def test_initialisations_split_by_phase_and_cube_quadrant_or_by_seeded_rows():
    cubes = np.stack(np.meshgrid(np.linspace(0, 0.2, 4), np.linspace(0.4, 0.6, 4)), -1).reshape(16, 2)
    X = np.column_stack([np.tile(np.linspace(0, 1, 50), 16), np.repeat(cubes, 50, 0)])
    time = gmr.initial_gmm(X, 5, "time", 1e-6, 0)
    assert (np.diff(time["means"][:, 0]) > 0.15).all()  # five consecutive stretches of the phase
    grid = gmr.initial_gmm(X, 8, "grid", 1e-6, 0)
    first_bin = grid["means"][:4]  # phase bin 0, quadrants (x low/high) x (y low/high)
    assert (first_bin[2:, 1] > first_bin[:2, 1].max()).all() and (
        first_bin[1::2, 2] > first_bin[::2, 2]
    ).all()
    a, b = (gmr.initial_gmm(X, 4, "random", 1e-6, s)["means"] for s in (3, 3))
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - gmr.initial_gmm(X, 4, "random", 1e-6, 4)["means"]).max() > 1e-3


def test_gmr_matches_a_hand_computed_two_component_case():
    gmm = {"weights": np.array([0.5, 0.5]), "means": np.array([[0.0, 0.0], [2.0, 1.0]]),
           "covs": np.array([[[1.0, 0.5], [0.5, 1.0]], [[1.0, -0.5], [-0.5, 1.0]]])}  # fmt: skip
    # x = 1: equal responsibilities; predictions 0 + 0.5 (1 - 0) and 1 - 0.5 (1 - 2): mean 1.
    assert gmr.gmr(gmm, [[1.0]], 1)[0, 0] == pytest.approx(1.0)
    # x = 0: h2 / h1 = exp(-2); predictions 0 and 1 - 0.5 (0 - 2) = 2.
    h2 = np.exp(-2.0) / (1.0 + np.exp(-2.0))
    assert gmr.gmr(gmm, [[0.0]], 1)[0, 0] == pytest.approx(2.0 * h2)


def test_one_component_gmr_is_exact_linear_regression():
    rng = np.random.default_rng(3)
    inputs = rng.normal(size=(300, 3))
    A, b = rng.normal(size=(4, 3)), rng.normal(size=4)
    fit = gmr.fit_gmm(np.column_stack([inputs, inputs @ A.T + b]), 1, 2, 1e-9, "time")
    probe = rng.normal(size=(5, 3)) * 3.0  # far outside the data as well (reg 1e-9: the joint is singular)
    np.testing.assert_allclose(gmr.gmr(fit, probe, 3), probe @ A.T + b, atol=1e-6)


def test_polar_context_is_continuous_across_the_right_base_line():
    base = gmr.RIGHT_BASE[:2]
    np.testing.assert_allclose(gmr.polar(base + [-0.3, 0.0]), [0.0, 0.3], atol=1e-12)
    above, below = gmr.polar(base + [-0.4, 1e-4]), gmr.polar(base + [-0.4, -1e-4])
    assert abs(above[0] - below[0]) < 1e-3  # no 2 pi jump where the cube crosses the base's y
    heading_up, _ = gmr.right_angles(base + [-0.4, 1e-4])
    heading_down, _ = gmr.right_angles(base + [-0.4, -1e-4])
    assert abs(heading_up - heading_down) < 1e-3 and abs(heading_up - np.pi) < 1e-3


def episode(mixture: dict, **kwargs) -> GmrEpisode:
    lower, upper = np.full(12, -10.0), np.full(12, 10.0)
    return GmrEpisode(GmrKnobs(**kwargs), mixture, np.array([0.1, 0.5]), lower, upper)


def test_feedback_pulls_toward_the_expected_joints_and_the_filter_lags(mixture):
    plain, fed = episode(mixture, feedback_gain=0.0), episode(mixture, feedback_gain=0.7)
    t, push = 100, np.linspace(-0.1, 0.1, 12)
    state = np.zeros((1, 14))
    state[0, gmr.ARM_COLUMNS] = fed.expected[t] + push
    batch = {"observation.state": state}
    expected = plain.commands[t].copy()
    expected[[6, 13]] = np.clip(expected[[6, 13]], 0.0, 1.0)  # grippers clipped to [closed, open]
    np.testing.assert_allclose(plain.action(t, batch, 0), expected, atol=1e-12)
    np.testing.assert_allclose(
        fed.action(t, batch, 0)[gmr.ARM_COLUMNS], fed.commands[t, gmr.ARM_COLUMNS] - 0.7 * push
    )
    slow = episode(mixture, feedback_gain=0.0, smoothing=9.0)
    first, second = slow.action(80, batch, 0), slow.action(81, batch, 0)
    arms = gmr.ARM_COLUMNS  # (the grippers are clipped to [0, 1] after the filter)
    np.testing.assert_allclose(first[arms], slow.commands[80, arms])
    np.testing.assert_allclose(second[arms], first[arms] + (slow.commands[81, arms] - first[arms]) / 10.0)


def test_cube_noise_is_seeded_and_moves_the_grasp(mixture):
    cube = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0])
    state = np.zeros(14)

    def grasp(**kwargs) -> np.ndarray:
        policy = gmr.GmrPolicy(GmrKnobs(**kwargs), mixture)
        return policy._episode(policy.knobs, policy.left, policy.right, state, cube).commands[86]

    np.testing.assert_array_equal(grasp(cube_noise=0.02, seed=1), grasp(cube_noise=0.02, seed=1))
    assert np.abs(grasp(cube_noise=0.02, seed=1) - grasp(cube_noise=0.02, seed=2)).max() > 1e-3
    np.testing.assert_array_equal(grasp(), grasp(seed=5))


def test_bad_kwargs_are_refused_and_every_setting_is_valid():
    bad = {"bogus": 1, "n_components": 0, "cov_reg": 0.0, "demos": 0, "em_iters": -1, "init": "kmeans",
           "feedback_gain": -0.1, "smoothing": -1.0, "cube_noise": -0.1, "time_scale": 0.0}  # fmt: skip
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            gmr.make_policy(**{name: value})
    with pytest.raises(ValueError, match="n_components"):
        GmrKnobs(n_components=10)  # the grid start needs whole phase bins of 4 quadrants
    with pytest.raises(ValueError, match="demos"):
        gmr.load_mixture(GmrKnobs(demos=gmr.N_DEMOS + 1))
    for kwargs in gmr.FAMILY_SETTINGS.values():
        GmrKnobs(**kwargs)
    assert 8 <= len(gmr.FAMILY_SETTINGS) <= 12 and "nominal" in gmr.FAMILY_SETTINGS


def test_demo_poses_avoid_the_benchmark_episodes():
    from families.measure import initial_poses

    poses = gmr.demo_poses(gmr.N_DEMOS)
    bench = np.concatenate([initial_poses("id", 25), initial_poses("ood", 25)])[:, :2]
    assert np.linalg.norm(poses[:, None, :2] - bench[None], axis=-1).min() > 1e-4
    np.testing.assert_array_equal(gmr.demo_poses(2, first=7), poses[7:9])


def test_model_file_regenerates_identically(mixture):
    fresh = gmr.record_demos(2)
    assert gmr.MODEL_FILE.stat().st_size < 1e6
    with np.load(gmr.MODEL_FILE) as stored:
        for key in ("commands", "positions", "contexts", "index"):
            np.testing.assert_array_equal(fresh[key], stored[key][:2])
        X = gmr.demo_matrix(stored["commands"], stored["positions"], stored["contexts"])
        refit = gmr.fit_gmm(X, gmr.N_COMPONENTS, gmr.EM_ITERS, gmr.COV_REG, "grid")
        np.testing.assert_array_equal(refit["weights"], stored["weights"])
        np.testing.assert_array_equal(refit["means"], stored["means"])
        np.testing.assert_array_equal(refit["covs"].astype(np.float32), stored["covs"])


def test_nominal_regression_grasps_where_the_teacher_does(mixture):
    from families.arm import Arm

    right = Arm("right")
    left = Arm("left", model=right.model)
    for xy in ([0.02, 0.42], [0.18, 0.58]):
        teacher = gmr.teacher_commands(np.array(xy), left, right)
        regressed = GmrEpisode(
            GmrKnobs(), mixture, np.array(xy), np.full(12, -9.0), np.full(12, 9.0)
        ).commands
        grasp = gmr.RIGHT_KEYS[2][0] + 4
        tcp, _ = right.fk(regressed[grasp, 7:13])
        assert np.linalg.norm(tcp - right.fk(teacher[grasp, 7:13])[0]) < 0.01
        assert np.linalg.norm(tcp[:2] - xy) < 0.01


def rollout(kwargs: dict) -> float:
    """Highest staged reward of one real ID episode (the first benchmark pose): 2 lifted, 4 handed over."""
    from families.measure import initial_poses, play

    return play("gmr", kwargs, initial_poses("id", 1), 1)[0]["max_reward"]


def test_nominal_hands_over_and_a_one_iteration_random_start_never_lifts_in_real_rollouts():
    assert rollout({}) == 4
    assert rollout(gmr.FAMILY_SETTINGS["random_init"]) < 2
