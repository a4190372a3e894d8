"""A policy whose factory raises is named by its path; RL in a camera-free world model ends cleanly when its
video re-check is skipped; RL keeps its PPO state as safetensors + JSON, and a damaged one is named."""

from __future__ import annotations

import pytest

from helpers.failures import one_error, tiny_checkpoint, truncate
from helpers.recordings import blind_model, record_state_only
from r2s2r.scripts import eval as eval_cli
from r2s2r.scripts import record, rl

FACTORY = "helpers.policies:make_faulty"  # raises RuntimeError("the policy's server went away") when told


def test_a_factory_that_raises_is_named_in_record_and_eval(recorded, tmp_path, capfd, monkeypatch):
    import helpers.policies

    def broken(**kwargs):
        raise RuntimeError("factory failed to load weights")

    monkeypatch.setattr(helpers.policies, "make_broken", broken, raising=False)
    expected = (
        "policy.path='helpers.policies:make_broken' failed to load: RuntimeError: factory failed to load "
        "weights; fix the policy or its --policy.kwargs."
    )
    root = tmp_path / "demo"
    assert (
        record.main([f"--root={root}", "--num_episodes=1", "--policy.path=helpers.policies:make_broken"]) == 2
    )
    assert one_error(capfd, "r2s2r-record") == expected
    assert not root.exists() and not root.with_name("demo.partial").exists()
    checkpoint = tiny_checkpoint(recorded[0].root, tmp_path / "ckpt")
    out = tmp_path / "eval" / "episodes.jsonl"
    flags = [f"--checkpoint={checkpoint}", f"--starts=[{recorded[0].root}]", f"--output={out}"]
    assert eval_cli.main([*flags, "--policy.path=helpers.policies:make_broken"]) == 2
    assert one_error(capfd, "r2s2r-eval") == expected
    assert not out.exists()


def test_a_policy_that_raises_while_recording_is_named(tmp_path, capfd):
    root = tmp_path / "demo"
    flags = [f"--root={root}", "--num_episodes=2", "--episode_length=10", "--world.num_envs=2"]
    assert record.main([*flags, f"--policy.path={FACTORY}", "--policy.kwargs={at_step: 2}"]) == 2
    error = one_error(capfd, "r2s2r-record")
    assert error.startswith(
        f"episodes 0..1 failed: policy {FACTORY} raised at step 2: RuntimeError: the policy"
    )
    assert error.endswith(
        "none of them was written, the dataset keeps its 0 complete episodes (re-run to resume)."
    )
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def blind(tmp_path_factory):
    """Two demonstrator episodes recorded without cameras, and a tiny world model whose head reads none."""
    root = record_state_only(tmp_path_factory.mktemp("state") / "demo", seed=11)
    model, _ = blind_model(root)
    return root, model.save_pretrained(tmp_path_factory.mktemp("wm") / "blind")


def _rl_flags(blind, out, *extra):
    root, checkpoint = blind
    return [
        f"--checkpoint={checkpoint}", f"--data={root}", f"--output_dir={out}", "--observation=state",
        "--num_envs=8", "--horizon=4", "--rounds=1", "--iterations=1", "--n_epochs=1", "--batch_size=32",
        "--hidden=[16]", "--check_physics=false", "--support_quantile=0", "--eval_episodes=0",
        "--verify_episodes=2", *extra,
    ]  # fmt: skip


def test_rl_in_a_blind_world_model_says_the_video_check_was_skipped(blind, tmp_path, capfd):
    out = tmp_path / "rl"
    assert rl.main(_rl_flags(blind, out)) == 0
    printed = capfd.readouterr().out
    assert "full world model re-check skipped: the episode starts have no camera frames" in printed
    assert f"policy: {out / 'policy'}" in printed
    saved = sorted(p.name for p in (out / "ppo").iterdir())
    assert saved == ["optimizer.safetensors", "policy.safetensors", "state.json"]  # no pickle
    assert not (out / "ppo.zip").exists()
    truncate(out / "ppo" / "policy.safetensors", 0.5)
    assert rl.main(_rl_flags(blind, out, "--rounds=2")) == 2
    error = one_error(capfd, "r2s2r-rl")
    assert error.startswith(f"{out / 'ppo' / 'policy.safetensors'} is truncated or corrupt (")
    assert error.endswith(
        "the run's PPO state is damaged and cannot be resumed: train into a new --output_dir."
    )
