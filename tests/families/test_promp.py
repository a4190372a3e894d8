"""Tests of family 30, `promp`: the basis (a partition of unity), the weight fit (exact on a trajectory the
basis spans), Gaussian conditioning (a hand-computed 2-D case; a demo's own context returns its weights when
the weights are linear in the context), the fitted gripper phases, time scaling, seeded samples, the knobs'
checks, the stored model (demos re-recorded identically, the nominal fit reproduced from them), and real
rollouts (the nominal policy hands the cube over; the unconditioned mean never lifts it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: F401  (torch before MuJoCo)

from families import promp
from families.promp import Primitive, PrompKnobs


@pytest.fixture(scope="module")
def primitive() -> Primitive:
    return Primitive(PrompKnobs())


def test_basis_sums_to_one_at_every_phase_and_peaks_at_its_centres():
    phase = np.linspace(0.0, 1.0, 1001)
    for n in (2, 6, 30):
        phi = promp.basis(phase, n)
        np.testing.assert_allclose(phi.sum(axis=1), 1.0, atol=1e-12)
        centres = promp.basis(np.linspace(0.0, 1.0, n), n)
        assert (centres.argmax(axis=1) == np.arange(n)).all()
    np.testing.assert_array_equal(promp.basis(np.array([1.5]), 6), promp.basis(np.array([1.0]), 6))


def test_weight_fit_is_exact_on_a_trajectory_the_basis_spans():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(8, 3))  # 8 basis functions, 3 joints
    traj = promp.basis(np.linspace(0, 1, 50), 8) @ W
    w = promp.fit_weights(traj[None], 8, 0.0)
    np.testing.assert_allclose(w[0], W.T.reshape(-1), atol=1e-8)  # joint-major
    shrunk = promp.fit_weights(traj[None], 8, 100.0)
    assert np.abs(shrunk).sum() < 0.5 * np.abs(w).sum()  # a large ridge pulls the weights toward zero


def test_gaussian_conditioning_matches_a_hand_computed_case():
    mean, cov = np.array([1.0, 0.0]), np.array([[2.0, 1.0], [1.0, 1.0]])
    mu, var = promp.condition(mean, cov, np.array([2.0]), 0.0)
    assert mu[0] == pytest.approx(3.0) and var[0, 0] == pytest.approx(1.0)  # 1 + 1/1 * 2, 2 - 1/1
    mu, var = promp.condition(mean, cov, np.array([2.0]), 1.0)
    assert mu[0] == pytest.approx(2.0) and var[0, 0] == pytest.approx(1.5)  # 1 + 1/2 * 2, 2 - 1/2


def test_conditioning_on_a_demos_context_returns_its_weights_when_they_are_linear_in_it():
    rng = np.random.default_rng(1)
    contexts = rng.uniform(0, 0.2, (12, 2))
    A, b = rng.normal(size=(20, 2)), rng.normal(size=20)
    stacked = np.concatenate([contexts @ A.T + b, contexts], axis=1)
    mean, centred = stacked.mean(0), stacked - stacked.mean(0)
    mu, cov = promp.condition(mean, centred.T @ centred / 12, contexts[5], 0.0)
    np.testing.assert_allclose(mu, stacked[5, :20], atol=1e-9)
    assert np.abs(cov).max() < 1e-9  # nothing left uncertain


def test_gripper_phases_are_the_teachers_switch_steps(primitive):
    T = promp.T_DEMO - 1
    assert primitive.switches["right_close"] * T == pytest.approx(promp.RIGHT_CLOSE)
    assert primitive.switches["right_open"] * T == pytest.approx(promp.RIGHT_OPEN)
    assert primitive.switches["left_close"] * T == pytest.approx(promp.LEFT_CLOSE)


def test_time_scale_plays_the_same_path_faster(primitive):
    fast = Primitive(PrompKnobs(time_scale=2.0))
    w = primitive.weights(np.array([0.1, 0.5]), np.random.default_rng(0))
    a1, a2 = primitive.actions(w), fast.actions(w)
    np.testing.assert_allclose(a2[:150, :6], a1[0:300:2, :6], atol=1e-9)
    assert a2[promp.RIGHT_CLOSE // 2 + 1, 13] < 1.0 <= a1[promp.RIGHT_CLOSE // 2 + 1, 13]


def test_samples_are_seeded_and_zero_temperature_plays_the_conditioned_mean(primitive):
    hot = Primitive(PrompKnobs(temperature=3.0))
    c = np.array([0.05, 0.45])
    mean = primitive.weights(c, np.random.default_rng(0))
    np.testing.assert_allclose(mean, promp.condition(primitive.mean, primitive.cov, c, 1e-6)[0])
    a, b = hot.weights(c, np.random.default_rng(3)), hot.weights(c, np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - mean).max() > 1e-3 and np.abs(a - hot.weights(c, np.random.default_rng(4))).max() > 1e-3


def test_conditioning_moves_the_grasp_with_the_cube(primitive):
    grasp = promp.RIGHT_KEYS[2][1] + 4  # a step while the right sits on the cube
    near = primitive.actions(primitive.weights(np.array([0.0, 0.5]), None))
    far = primitive.actions(primitive.weights(np.array([0.2, 0.5]), None))
    pos_near, _ = promp.Arm("right").fk(near[grasp, 7:13])
    pos_far, _ = promp.Arm("right").fk(far[grasp, 7:13])
    assert pos_far[0] - pos_near[0] == pytest.approx(0.2, abs=0.01)


def test_bad_kwargs_are_refused_and_every_setting_is_valid():
    bad = {"bogus": 1, "n_basis": 1, "ridge": -1.0, "demos": 0, "obs_std": -0.1, "temperature": -1.0,
           "cov_reg": -1.0, "cube_noise": -0.1, "time_scale": 0.0}  # fmt: skip
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            promp.make_policy(**{name: value})
    with pytest.raises(ValueError, match="demos"):
        Primitive(PrompKnobs(demos=promp.N_DEMOS + 1))
    for kwargs in promp.FAMILY_SETTINGS.values():
        PrompKnobs(**kwargs)
    assert 8 <= len(promp.FAMILY_SETTINGS) <= 10 and "nominal" in promp.FAMILY_SETTINGS


def test_demo_poses_avoid_the_benchmark_episodes():
    from families.measure import initial_poses

    poses = promp.demo_poses(promp.N_DEMOS)
    bench = np.concatenate([initial_poses("id", 25), initial_poses("ood", 25)])[:, :2]
    assert np.linalg.norm(poses[:, None, :2] - bench[None], axis=-1).min() > 1e-4
    np.testing.assert_array_equal(promp.demo_poses(2, first=7), poses[7:9])


def test_model_file_regenerates_identically():
    fresh = promp.record_demos(2)
    assert promp.MODEL_FILE.stat().st_size < 2e6
    with np.load(promp.MODEL_FILE) as stored:
        for key in ("joints", "grippers", "contexts", "index"):
            np.testing.assert_array_equal(fresh[key], stored[key][:2])
        refit = promp.fit_promp(stored["joints"], stored["contexts"], promp.N_BASIS, promp.RIDGE)
        np.testing.assert_array_equal(refit["mean"].astype(np.float32), stored["mean"])
        np.testing.assert_array_equal(refit["cov"].astype(np.float32), stored["cov"])


def rollout(kwargs: dict) -> float:
    """Highest staged reward of one real ID episode (the first benchmark pose): 2 lifted, 4 handed over."""
    from families.measure import initial_poses, play

    return play("promp", kwargs, initial_poses("id", 1), 1)[0]["max_reward"]


def test_nominal_hands_over_and_the_unconditioned_mean_never_lifts_in_real_rollouts():
    assert rollout({}) == 4
    assert rollout({"condition": False}) < 2
