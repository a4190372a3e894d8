"""A state head without cameras (head.reads_cameras=False): it refines on, and imagines from, state-only
recordings, ignores images where they are given, and refuses an observation without the object pose."""

from __future__ import annotations

import pytest
import torch

from helpers.recordings import blind_model, record_state_only
from r2s2r.eval.imagined import ImaginedEvalConfig, evaluate_imagined, read_results
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import PolicyConfig
from r2s2r.rollout.world_model_env import WorldModelEnv
from r2s2r.training.head import HeadTrainConfig, RefineConfig, refine_checkpoint, refine_head


@pytest.fixture(scope="module")
def state_only(tmp_path_factory):
    """Two demonstrator episodes recorded without any camera (proprio, actions, object pose)."""
    return record_state_only(tmp_path_factory.mktemp("state") / "demo", seed=7)


def test_a_blind_head_needs_the_object_pose():
    with pytest.raises(ValueError, match="head.reads_objects=True"):
        WorldModelConfig.tiny(head=dict(reads_cameras=False, reads_objects=False))
    model = WorldModel(WorldModelConfig.tiny(head=dict(reads_cameras=False)))
    assert not any(k.startswith("state_head.trunk.") for k in model.state_dict())
    with pytest.raises(ValueError, match="needs observation.environment_state"):
        model.state_head.encode(None, torch.zeros(2, model.config.state_dim))
    env = WorldModelEnv(model, 2, render=False)
    with pytest.raises(ValueError, match="needs observation.environment_state"):
        env.reset({"observation.state": torch.zeros(2, model.config.state_dim)})


def test_a_blind_head_ignores_images_and_refines_on_a_state_only_recording(recorded, state_only):
    model, episodes = blind_model(state_only)
    assert not any(k.startswith("observation.images.") for k in episodes[0])  # no video was read
    state = model.norm("state", torch.stack([ep["observation.state"][0] for ep in episodes]))
    pose = model.norm("env", torch.stack([ep["observation.environment_state"][0] for ep in episodes]))
    images = torch.rand(2, model.config.num_views, 3, model.config.image_height, model.config.image_width)
    with torch.no_grad():
        torch.testing.assert_close(
            model.state_head.encode(images, state, pose),
            model.state_head.encode(None, state, pose),
            rtol=0,
            atol=0,
        )
    # every training encoding is shown the pose: nothing else tells a blind head where the object is
    assert bool(model.state_head.sees_objects(64, generator=torch.Generator().manual_seed(0)).all())
    log = refine_head(model, episodes, HeadTrainConfig(steps=60, batch_size=8, window=4))
    assert log[-1]["loss"] < 0.5 * log[0]["loss"]

    env = WorldModelEnv(model, 2, render=False)  # imagines from state and pose, no images
    first = {
        k: torch.stack([ep[k][0] for ep in episodes])
        for k in ("observation.state", "observation.environment_state")
    }
    obs = env.reset(first)
    assert set(obs) == {"observation.state", "observation.environment_state"}
    obs, reward, _, info = env.step(episodes[0]["action"][0][None].repeat(2, 1, 1).float())
    assert info["imagined"] and obs["observation.state"].shape == (2, model.config.state_dim)
    assert reward.shape == (2,) and info["uncertainty"].shape == (2,)


def test_refine_and_imagined_evaluation_run_on_state_only_recordings(state_only, tmp_path):
    model, _ = blind_model(state_only)
    ckpt = str(model.save_pretrained(tmp_path / "blind"))
    figures = refine_checkpoint(
        RefineConfig(
            checkpoint=ckpt, data=[state_only], heldout=state_only, output_dir=str(tmp_path / "refined"),
            cameras=False, head=HeadTrainConfig(steps=20, batch_size=8, window=3),
        )
    )  # fmt: skip
    assert figures["after"]["episodes"] == 2 and "after_cameras_only" not in figures
    cfg = ImaginedEvalConfig(
        checkpoint=str(tmp_path / "refined"), starts=(state_only,),
        output=str(tmp_path / "eval" / "ep.jsonl"),
        policy=PolicyConfig(path="r2s2r.robots.demonstrators:make_demonstrator"),
        samples_per_start=2, batch_size=2, max_steps=10, seed=0, render=False,
    )  # fmt: skip
    summary = evaluate_imagined(cfg)
    rows = read_results(tmp_path / "eval" / "ep.jsonl")
    assert summary["all"]["trials"] == 4 == len(rows) and {r["split"] for r in rows} == {"id", "ood"}
    with pytest.raises(ValueError, match="has no camera"):  # the video path does need the views
        evaluate_imagined(
            ImaginedEvalConfig(**{**cfg.__dict__, "render": True, "output": str(tmp_path / "v" / "ep.jsonl")})
        )
