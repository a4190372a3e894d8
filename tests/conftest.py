"""Shared fixtures: tiny datasets recorded by the project's own recorder in a temporary folder."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
# One BLAS kernel and one thread, whatever the CPU: OpenBLAS picks its kernels by CPU (an AVX-512 machine
# sums in another order than an AVX2 one), and the families' stored models (promp_model.npz, gmr_model.npz)
# are checked to regenerate bit for bit, and some scripted rollouts are chaotic enough to follow the last bit.
os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
assert "numpy" not in sys.modules, "numpy was imported before tests/conftest.py could pin its BLAS"

import r2s2r.robots.aloha  # noqa: E402, F401  (loads torch + triton before MuJoCo's GL, see aloha.py)

# isort: split

import pytest  # noqa: E402

from r2s2r.data.recorder import RecordConfig, record  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import WorldConfig  # noqa: E402

TINY_WORLD = {"cameras": ("top", "left_wrist", "right_wrist"), "image_height": 48, "image_width": 64}
EPISODE_LENGTH = 50


def tiny_record_config(root, policy_path="r2s2r.robots.demonstrators:make_demonstrator", **overrides):
    """Two short demonstrator episodes (one ID, one OOD) at 48x64 in three views, in one lockstep batch."""
    kwargs = overrides.pop("policy_kwargs", {})
    world = WorldConfig(num_envs=overrides.pop("num_envs", 2), **TINY_WORLD)
    cfg = dict(root=str(root), num_episodes=2, episode_length=EPISODE_LENGTH, distribution="mixed", seed=7)
    cfg.update(overrides)
    return RecordConfig(world=world, policy=PolicyConfig(path=policy_path, kwargs=kwargs), **cfg)


@pytest.fixture(scope="session")
def recorded(tmp_path_factory):
    """A 2-episode demonstrator dataset, recorded once per test session; tests must not modify it."""
    cfg = tiny_record_config(tmp_path_factory.mktemp("data") / "demo")
    summary = record(cfg)
    return cfg, summary
