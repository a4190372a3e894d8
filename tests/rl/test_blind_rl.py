"""RL in a world model whose state head reads no cameras: it trains from state-only recordings on the
object pose, skips the video re-check those recordings cannot start, and plays the reference world unseen."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers.recordings import blind_model, record_state_only
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.rl.env import ImaginedEnv
from r2s2r.rl.policy import ImaginationPolicy
from r2s2r.rl.train import RLConfig, episode_starts, read_episodes, train_rl


@pytest.fixture(scope="module")
def blind(tmp_path_factory):
    """Two demonstrator episodes recorded without cameras, and a tiny blind world model on their stats."""
    root = record_state_only(tmp_path_factory.mktemp("state") / "demo", seed=11)
    model, _ = blind_model(root)
    return root, model.save_pretrained(tmp_path_factory.mktemp("wm") / "blind")


def config(blind, output_dir, **overrides) -> RLConfig:
    root, checkpoint = blind
    cfg = dict(
        checkpoint=str(checkpoint), data=root, output_dir=str(output_dir), init="scratch",
        observation="state", num_envs=8, horizon=4, rounds=1, iterations=1, n_epochs=1, batch_size=32,
        hidden=(16,), check_physics=False, support_quantile=0.0, eval_episodes=2, eval_envs=2,
        episode_length=20, verify_episodes=2,
    )  # fmt: skip
    cfg.update(overrides)
    return RLConfig(**cfg)


def test_a_blind_world_model_starts_imagination_from_the_recorded_pose(blind):
    model = WorldModel.from_pretrained(blind[1])
    episodes = read_episodes(config(blind, "unused"), model)
    starts = episode_starts(episodes, model)
    assert not any(k.startswith("observation.images.") for k in starts)  # nothing to decode
    env = ImaginedEnv(model, starts, 2, 4, observation="state", check_physics=False)
    obs = env.reset()
    S, E = model.config.state_dim, model.config.env_state_dim
    truth = starts["observation.environment_state"].float()
    order = [int(np.argmin([np.abs(o[S : S + E] - model.norm("env", t).numpy()).max() for t in truth]))
             for o in obs]  # fmt: skip
    for o, i in zip(obs, order, strict=True):  # each env reads its own start's pose and proprio, exactly
        np.testing.assert_allclose(o[S : S + E], model.norm("env", truth[i]).numpy(), atol=1e-6)
        np.testing.assert_allclose(
            o[:S], model.norm("state", starts["observation.state"][i]).numpy(), atol=1e-6
        )
    with pytest.raises(ValueError, match="observation='state'"):
        ImaginedEnv(model, starts, 2, 4, observation="latent", check_physics=False)


def test_rl_in_a_blind_world_model_trains_evaluates_and_exports(blind, tmp_path):
    with pytest.raises(ValueError, match="--observation=state"):
        train_rl(config(blind, tmp_path / "latent", observation="latent"))
    summary = train_rl(config(blind, tmp_path / "run"))
    first, last = summary["progress"][0], summary["progress"][-1]
    assert last["round"] == 1 and last["reference"]["all"]["trials"] == 2  # played, without rendering
    assert "no camera frames" in first["verified"]["skipped"]  # the video model had nothing to start from
    policy = ImaginationPolicy(summary["policy"])
    assert policy.spec.observation == "state"
    spec = json.loads((tmp_path / "run" / "policy" / "rl_policy.json").read_text())
    assert spec["observation"] == "state"
    batch = {
        "observation.state": torch.zeros(1, 14),
        "observation.environment_state": torch.tensor([[0.1, 0.5, 0.05, 1.0, 0.0, 0.0, 0.0]]),
    }
    policy.reset()
    action = policy.select_action(batch)  # no images: the pose is all it needs
    assert action.shape == (1, 14) and torch.isfinite(action).all()
