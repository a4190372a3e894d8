"""Policies load from a LeRobot pretrained directory or an import path, and run the same way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy
from lerobot.policies.factory import make_pre_post_processors

from conftest import tiny_record_config
from r2s2r.data.recorder import record
from r2s2r.policies.policy import (
    ACTLatentAdapter,
    LeRobotPolicyAdapter,
    PolicyConfig,
    PolicyError,
    check_action,
    load_policy,
    to_policy_batch,
)
from r2s2r.rollout.search import fork_policy


@pytest.fixture(scope="module")
def act_dir(recorded, tmp_path_factory):
    """A tiny, untrained ACT saved the way `lerobot-train` saves checkpoints: weights + processors."""
    stats = LeRobotDatasetMetadata("local/test", root=recorded[0].root).stats
    cfg = ACTConfig(
        input_features={
            "observation.state": PolicyFeature(FeatureType.STATE, (14,)),
            "observation.images.top": PolicyFeature(FeatureType.VISUAL, (3, 48, 64)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (14,))},
        pretrained_backbone_weights=None,  # offline: no torchvision download
        dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1,
        chunk_size=5, n_action_steps=5, use_vae=False, device="cpu",
    )  # fmt: skip
    torch.manual_seed(0)
    policy = ACTPolicy(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    path = tmp_path_factory.mktemp("policies") / "act"
    policy.save_pretrained(path)
    pre.save_pretrained(path)
    post.save_pretrained(path)
    return path


def test_lerobot_directory_runs_with_its_processors(act_dir, recorded):
    policy = load_policy(PolicyConfig(path=str(act_dir)))
    assert isinstance(policy, LeRobotPolicyAdapter) and policy.config.type == "act"
    item = LeRobotDataset("local/test", root=recorded[0].root)[10]
    batch = {
        "observation.state": item["observation.state"][None].repeat(2, 1),
        "observation.images.top": item["observation.images.top"][None].repeat(2, 1, 1, 1),
        "observation.images.left_wrist": item["observation.images.left_wrist"][None].repeat(2, 1, 1, 1),
    }
    policy.reset()
    action = policy.select_action(batch)
    assert action.shape == (2, 14) and torch.isfinite(action).all()
    # The adapter equals LeRobot's own chain: normalize -> ACT -> unnormalize (not the bare network).
    raw = ACTPolicy.from_pretrained(act_dir)
    pre, post = make_pre_post_processors(raw.config, pretrained_path=str(act_dir))
    inputs = {k: v for k, v in batch.items() if k != "observation.images.left_wrist"}
    expected = post(raw.select_action(pre(inputs)))
    torch.testing.assert_close(action, expected)
    assert not torch.allclose(action, raw.select_action(inputs))  # normalization matters


def test_lerobot_directory_records_in_the_reference_world(act_dir, tmp_path):
    cfg = tiny_record_config(tmp_path / "act_log", policy_path=str(act_dir), episode_length=12)
    cfg.world.cameras = ("top",)
    summary = record(cfg)
    table = LeRobotDataset("local/test", root=summary.root).hf_dataset.with_format("numpy")[:]
    assert table["action"].shape == (24, 14) and np.isfinite(table["action"]).all()


def test_policy_missing_a_camera_says_so(act_dir, tmp_path):
    cfg = tiny_record_config(tmp_path / "act_log", policy_path=str(act_dir), episode_length=12)
    cfg.world.cameras = ("left_wrist",)
    with pytest.raises(RuntimeError, match=r"needs \['observation.images.top'\] but the observation has"):
        record(cfg)


def test_import_path_with_kwargs():
    policy = load_policy(
        PolicyConfig(path="helpers.policies:make_reach", kwargs={"target": 0.25, "steps": 2})
    )
    state = torch.zeros(3, 14)
    policy.reset()
    actions = [policy.select_action({"observation.state": state})[:, 8] for _ in range(3)]
    assert [a[0].item() for a in actions] == [0.0, 0.125, 0.25]  # linear ramp to the target in 2 steps


@pytest.mark.parametrize("path, kwargs, error, message", [
    ("helpers.policies:make_not_a_policy", {}, PolicyError, "lacks reset\\(\\) and select_action"),
    ("helpers.nope:make", {}, ValueError, "cannot import module 'helpers.nope'"),
    ("helpers.policies:make_nothing", {}, ValueError, "has no attribute 'make_nothing'"),
    ("no/such/dir", {}, ValueError, "neither an existing directory nor an import path"),
])  # fmt: skip
def test_bad_policy_paths(path, kwargs, error, message):
    with pytest.raises(error, match=message):
        load_policy(PolicyConfig(path=path, kwargs=kwargs))


def test_directory_without_config_and_kwargs_on_directory(tmp_path, act_dir):
    with pytest.raises(ValueError, match="directory without config.json"):
        load_policy(PolicyConfig(path=str(tmp_path)))
    with pytest.raises(ValueError, match="only applies to import-path factories"):
        load_policy(PolicyConfig(path=str(act_dir), kwargs={"x": 1}))


def test_kwargs_must_be_a_json_mapping():
    with pytest.raises(ValueError, match="must be a mapping"):
        PolicyConfig(kwargs="skill=noisy")
    with pytest.raises(ValueError, match="must hold JSON values"):
        PolicyConfig(kwargs={"f": object()})


def test_policy_batch_and_action_checks():
    obs = {
        "observation.images.top": np.full((2, 4, 6, 3), 255, np.uint8),
        "observation.state": np.ones((2, 14), np.float64),
    }
    batch = to_policy_batch(obs)
    assert (
        batch["observation.images.top"].shape == (2, 3, 4, 6) and batch["observation.images.top"].max() == 1.0
    )
    assert batch["observation.state"].dtype == torch.float32
    assert check_action(torch.zeros(2, 14), 2, 14, "p").dtype == np.float32
    with pytest.raises(ValueError, match=r"episode\(s\) \[11\]"):
        check_action(np.array([[0.0] * 14, [np.inf] * 14]), 2, 14, "p", episodes=[10, 11])


@pytest.fixture(scope="module")
def vae_act_dir(recorded, tmp_path_factory):
    """A tiny, untrained state-only ACT trained as a CVAE (use_vae), as benchmarks/zoo_act.py trains."""
    stats = LeRobotDatasetMetadata("local/test", root=recorded[0].root).stats
    cfg = ACTConfig(
        input_features={
            "observation.state": PolicyFeature(FeatureType.STATE, (14,)),
            "observation.environment_state": PolicyFeature(FeatureType.ENV, (7,)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (14,))},
        dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1,
        n_vae_encoder_layers=1, latent_dim=8, chunk_size=6, n_action_steps=6, use_vae=True, device="cpu",
    )  # fmt: skip
    torch.manual_seed(1)
    policy = ACTPolicy(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    path = tmp_path_factory.mktemp("policies") / "vae_act"
    policy.save_pretrained(path)
    pre.save_pretrained(path)
    post.save_pretrained(path)
    return path


def test_cvae_act_draws_its_alternative_plans_from_the_latent_prior(vae_act_dir, act_dir, recorded):
    """ACT with a CVAE loads as ACTLatentAdapter: deterministic (zero latent) until reseeded; a reseeded copy
    re-plans at once from a latent drawn with the seed's generator, its first action dropped."""
    assert type(load_policy(PolicyConfig(path=str(act_dir)))) is LeRobotPolicyAdapter  # use_vae=False
    policy = load_policy(PolicyConfig(path=str(vae_act_dir)))
    assert isinstance(policy, ACTLatentAdapter)
    item = LeRobotDataset("local/test", root=recorded[0].root).hf_dataset.with_format("torch")[10]
    batch = {k: item[k][None].repeat(2, 1) for k in ("observation.state", "observation.environment_state")}
    raw = ACTPolicy.from_pretrained(vae_act_dir)
    pre, post = make_pre_post_processors(raw.config, pretrained_path=str(vae_act_dir))

    def chunk(latent):  # (B,6,14) unnormalized chunk from a given latent, by LeRobot's own model
        hook = raw.model.encoder_latent_input_proj.register_forward_pre_hook(lambda m, a: (latent,))
        try:
            return torch.stack([post(a) for a in raw.predict_action_chunk(pre(batch)).unbind(1)], dim=1)
        finally:
            hook.remove()

    policy.reset()
    first = policy.select_action(batch)
    torch.testing.assert_close(first, chunk(torch.zeros(2, 8))[:, 0])  # the prior's mean: LeRobot's ACT
    fork, again = fork_policy(policy), fork_policy(policy)
    fork.reseed(7)
    again.reseed(7)
    draw = torch.randn(2, 8, generator=torch.Generator().manual_seed(7))
    expected = chunk(draw)
    got = [fork.select_action(batch) for _ in range(3)]
    for step, action in enumerate(got, start=1):  # the re-planned chunk from its second action on
        torch.testing.assert_close(action, expected[:, step])
    assert torch.equal(again.select_action(batch), got[0])  # same seed, same plan
    other = fork_policy(policy)
    other.reseed(8)
    assert not torch.allclose(other.select_action(batch), got[0])
    # The policy it was forked from goes on with its zero-latent chunk.
    torch.testing.assert_close(policy.select_action(batch), chunk(torch.zeros(2, 8))[:, 1])
