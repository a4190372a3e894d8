"""Tests of family 19, `mimic`: the checkpoints, the learned policy's interface and a real rollout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from families import mimic
from families.measure import initial_poses

NOMINAL = "bc_final"


def _batch(state: np.ndarray, cube: np.ndarray) -> dict[str, torch.Tensor]:
    return {
        "observation.state": torch.from_numpy(state).float(),
        "observation.environment_state": torch.from_numpy(cube).float(),
    }


def test_every_setting_names_a_checkpoint_of_the_documented_shapes():
    names = {kw.get("checkpoint", NOMINAL) for kw in mimic.FAMILY_SETTINGS.values()}
    total = 0
    for name in names:
        path = mimic.WEIGHTS / f"{name}.npz"
        total += path.stat().st_size
        assert path.stat().st_size <= 300_000, name
        net = mimic.load_checkpoint(name)
        chunk, hidden = int(net["meta"][0]), int(net["meta"][1])
        assert chunk == mimic.CHUNK
        assert net["W0"].shape == (32, hidden) and net["W1"].shape == (hidden, hidden)
        assert net["W2"].shape == (hidden, mimic.CHUNK * 14)
        assert all(v.dtype == np.float32 for k, v in net.items() if k != "meta")
    assert total <= 3_000_000


def test_policy_is_deterministic_and_reads_no_image():
    rng = np.random.default_rng(3)
    state = np.tile([0, -0.96, 1.16, 0, -0.3, 0, 0.1], 2)[None].repeat(2, 0) + rng.normal(0, 0.01, (2, 14))
    cube = np.array([[0.1, 0.5, 0.05, 1, 0, 0, 0], [0.05, 0.45, 0.05, 1, 0, 0, 0]])
    runs = []
    for _ in range(2):
        policy = mimic.make_policy(action_noise=0.02, seed=5)
        policy.reset()
        runs.append([policy.select_action(_batch(state, cube)).numpy() for _ in range(3)])
    np.testing.assert_array_equal(np.stack(runs[0]), np.stack(runs[1]))
    other = mimic.make_policy(action_noise=0.02, seed=6)
    other.reset()
    assert not np.allclose(other.select_action(_batch(state, cube)).numpy(), runs[0][0])
    assert runs[0][0].shape == (2, 14)


def test_bad_kwarg_and_missing_checkpoint_are_named():
    with pytest.raises(ValueError, match="speed"):
        mimic.make_policy(speed=2.0)
    with pytest.raises(ValueError, match="execute"):
        mimic.make_policy(execute=mimic.CHUNK + 1)
    with pytest.raises(FileNotFoundError, match="no_such_run"):
        mimic.make_policy(checkpoint="no_such_run")


def test_expert_succeeds_on_a_fixed_pose():
    pose = np.array([[0.12, 0.47, 0.05, 1.0, 0.0, 0.0, 0.0]])
    result = mimic.rollout(mimic.ExpertPolicy(), pose)
    assert result["success"].all()


def test_nominal_checkpoint_grasps_and_lifts_the_cube():
    poses = initial_poses("id", 2, seed=4242)  # neither the demos' seed root nor measure.py's
    result = mimic.rollout(mimic.make_policy(), poses, num_envs=2)
    cubes, states = result["cubes"], result["states"]
    # Lifted: the cube centre rises well above its resting height (0.02 m) ...
    assert (cubes[:, 140:220, 2].max(axis=1) > 0.12).all()
    # ... in the right's fingers, stopped by the cube short of closed (~0.6 on the cube, 0.1 at the start).
    assert ((states[:, 180, 13] > 0.3) & (states[:, 180, 13] < 0.9)).all()
