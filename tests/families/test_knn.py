"""Tests of family 28, `knn`: retrieval (k = 1 on a stored state returns its stored action; the cube weight
decides between a near cube and near joints; the temperature moves the blend between nearest and mean; the
time window), the delayed cube reading, action noise by seed, the knobs' checks, the demonstration poses and
file (regenerated identically), the teacher's grasp geometry, and real rollouts (the nominal policy hands the
cube over; blind to the cube it never lifts it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: F401  (torch before MuJoCo)

from families import knn
from families.knn import KnnEpisode, KnnKnobs, Library


@pytest.fixture(scope="module")
def library() -> Library:
    return Library.load(knn.N_DEMOS)


def test_k1_query_equal_to_a_stored_state_returns_that_demos_next_actions_exactly(library):
    d, s = 37, 150
    knobs = KnnKnobs(k=1, chunk=3)
    idx, steps, dist = library.neighbours(knobs, s, library.states[d, s], library.cubes[d, s])
    assert (idx[0], steps[0], dist[0]) == (d, s, 0.0)
    chunk = library.chunk(knobs, s, library.states[d, s], library.cubes[d, s])
    np.testing.assert_array_equal(chunk, library.actions[d, s : s + 3])
    with np.load(knn.DEMO_FILE) as f:  # float16 on disk, returned unchanged
        np.testing.assert_array_equal(chunk, f["actions"][d, s : s + 3].astype(float))


def two_demos() -> Library:
    """Demo 0: joints equal to the query's, cube 5 cm off; demo 1: cube on the query's, one joint 0.2 off."""
    states = np.zeros((2, 5, 14))
    states[1, :, 2] = 0.2
    cubes = np.zeros((2, 5, 3))
    cubes[0, :, 0] = 0.05
    actions = np.stack([np.full((5, 14), 1.0), np.full((5, 14), 2.0)])
    return Library(states, actions, cubes)


def test_cube_weight_decides_which_neighbour_is_picked():
    lib, state, cube = two_demos(), np.zeros(14), np.zeros(3)
    # cube_weight 10: demo 0 is 10 * 0.05 = 0.5 away, demo 1 0.2 away; cube_weight 1: 0.05 against 0.2.
    far_cube = lib.neighbours(KnnKnobs(k=1, cube_weight=10.0), 2, state, cube)
    near_cube = lib.neighbours(KnnKnobs(k=1, cube_weight=1.0), 2, state, cube)
    assert far_cube[0][0] == 1 and far_cube[2][0] == pytest.approx(0.2)
    assert near_cube[0][0] == 0 and near_cube[2][0] == pytest.approx(0.05)
    assert lib.chunk(KnnKnobs(k=1, cube_weight=10.0), 2, state, cube)[0, 0] == 2.0
    assert lib.chunk(KnnKnobs(k=1, cube_weight=1.0), 2, state, cube)[0, 0] == 1.0


def test_temperature_moves_the_blend_from_the_nearest_to_the_mean():
    lib, state, cube = two_demos(), np.zeros(14), np.zeros(3)

    def first(temperature: float) -> float:
        return lib.chunk(KnnKnobs(k=2, temperature=temperature), 2, state, cube)[0, 0]

    assert first(1e-3) == pytest.approx(2.0)  # demo 1 (0.2 away) against demo 0 (0.5 away)
    assert first(1e6) == pytest.approx(1.5)  # a plain mean
    expected = (2.0 + np.exp(-0.3 / 0.15) * 1.0) / (1 + np.exp(-0.3 / 0.15))
    assert first(0.15) == pytest.approx(expected)


def test_matching_is_limited_to_the_window_and_pulled_toward_the_clock(library):
    d, s = 3, 60
    state, cube = library.states[d, s], library.cubes[d, s]
    _, steps, _ = library.neighbours(KnnKnobs(k=1, window=5), 100, state, cube)
    assert 95 <= steps[0] <= 105  # the exact state at step 60 lies outside the window
    idx, steps, dist = library.neighbours(KnnKnobs(k=1, window=40, time_weight=0.0), 100, state, cube)
    assert (idx[0], steps[0], dist[0]) == (d, s, 0.0)
    idx, steps, dist = library.neighbours(KnnKnobs(k=1, window=40), 100, state, cube)
    assert idx[0] == d and s <= steps[0] < 100 and dist[0] <= 0.003 * 40 + 1e-12  # pulled toward t


def fake_batch(cube_x: float = 0.1) -> dict:
    from gym_aloha.constants import START_ARM_POSE

    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0], dtype=np.float32)
    env = np.array([cube_x, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    return {"observation.state": state[None], "observation.environment_state": env[None]}


def test_delayed_cube_reading_reports_the_prior_then_lags(library):
    episode = KnnEpisode(KnnKnobs(cube_delay=2), library, np.zeros(7))
    readings = []
    for t in range(4):
        episode.action(t, fake_batch(cube_x=0.01 * t), 0)
        readings.append(episode.reading()[0])
    assert readings == pytest.approx([0.10, 0.10, 0.0, 0.01])


def test_noise_is_seeded_and_zero_noise_plays_the_blend(library):
    def actions(**kw) -> np.ndarray:
        policy = knn.KnnPolicy(KnnKnobs(**kw), library)
        batch = {k: torch.from_numpy(v) for k, v in fake_batch().items()}
        return np.stack([policy.select_action(batch).numpy()[0] for _ in range(20)])

    clean = actions()
    blend = library.chunk(KnnKnobs(), 0, fake_batch()["observation.state"][0].astype(float),
                          np.array([0.1, 0.5, 0.02]))  # fmt: skip
    np.testing.assert_allclose(clean[:8], blend, atol=1e-6)  # float32 of the first chunk
    a, b, c = (
        actions(action_noise=0.02, seed=0),
        actions(action_noise=0.02, seed=0),
        actions(action_noise=0.02, seed=1),
    )
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3
    assert np.abs(a - clean)[:, [6, 13]].max() < 1e-6  # grippers carry no noise


def test_bad_kwargs_are_refused_and_every_setting_is_valid():
    bad = {"bogus": 1, "k": 0, "demos": 0, "cube_weight": -1.0, "window": -1, "temperature": 0.0, "chunk": 0,
           "action_noise": -0.1, "cube_delay": -1}  # fmt: skip
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            knn.make_policy(**{name: value})
    with pytest.raises(ValueError, match="demos"):
        Library.load(knn.N_DEMOS + 1)
    for kwargs in knn.FAMILY_SETTINGS.values():
        KnnKnobs(**kwargs)
    assert 8 <= len(knn.FAMILY_SETTINGS) <= 10 and "nominal" in knn.FAMILY_SETTINGS


def test_demo_poses_cover_the_box_from_the_first_few_and_avoid_benchmark_seeds():
    poses = knn.demo_poses(knn.N_DEMOS)
    (x0, x1), (y0, y1) = knn.DEMO_BOX
    assert poses[:, 0].min() >= x0 and poses[:, 0].max() <= x1 and poses[:, 1].min() >= y0
    assert poses[:, 1].max() <= y1
    first = poses[:8, :2]  # the first eight already reach all four quarters of the box
    quarters = {(x > (x0 + x1) / 2, y > (y0 + y1) / 2) for x, y in first}
    assert len(quarters) == 4
    np.testing.assert_array_equal(knn.demo_poses(3, first=5), poses[5:8])
    from families.measure import initial_poses

    bench = initial_poses("id", 25)[:, :2]
    gaps = np.linalg.norm(poses[:, None, :2] - bench[None], axis=-1)
    assert gaps.min() > 1e-4  # no demonstration starts from a benchmark episode's pose


def test_demo_file_regenerates_identically_for_its_first_episodes():
    fresh = knn.record_demos(2)
    with np.load(knn.DEMO_FILE) as stored:
        assert knn.DEMO_FILE.stat().st_size < 3e6
        np.testing.assert_array_equal(fresh["index"], stored["index"][:2])
        for key in ("states", "actions", "cubes"):
            np.testing.assert_array_equal(fresh[key], stored[key][:2])


def test_teacher_grasps_top_down_across_the_x_faces():
    from gym_aloha.constants import START_ARM_POSE

    right = knn.Arm("right")
    left = knn.Arm("left", model=right.model)
    home = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0])
    for xy in ([0.0, 0.40], [0.25, 0.65]):
        frames = dict((t, q) for t, q, _ in knn.teacher_keyframes(np.array(xy), left, right, home)["right"])
        pos, R = right.fk(frames[knn.RIGHT_TIMES["grasp"]])
        np.testing.assert_allclose(pos, [*xy, knn.CUBE_HALF + knn.GRIP_HEIGHT], atol=2e-3)
        assert R[2, 0] == pytest.approx(-1.0, abs=1e-3)  # approach straight down
        assert abs(R[0, 1]) == pytest.approx(1.0, abs=1e-3)  # fingers close along world x


def rollout(kwargs: dict) -> float:
    """Highest staged reward of one real ID episode (the first benchmark pose): 2 lifted, 4 handed over."""
    from families.measure import initial_poses, play

    return play("knn", kwargs, initial_poses("id", 1), 1)[0]["max_reward"]


def test_nominal_hands_over_and_joints_only_never_lifts_in_real_rollouts():
    assert rollout({}) == 4
    assert rollout({"cube_weight": 0.0}) < 2
