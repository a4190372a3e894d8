"""The committed coverage head (assets/world_model_coverage, `bash benchmarks/coverage.sh chosen`): the model
a user ranks their own policies with. Its data kept out every family it is judged on, its rules are the
chosen head's, and it imagines from a camera-free start with frames drawn at the logs' size."""

from __future__ import annotations

from pathlib import Path

import torch

from generalization import SCRIPTED_FAMILIES, held_out_zoo
from r2s2r.eval.generalization import held_out_violations
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.robots.spec import robot_spec
from r2s2r.rollout.head_frames import HeadFrames
from r2s2r.rollout.world_model_env import WorldModelEnv

ASSET = Path(__file__).parents[2] / "assets" / "world_model_coverage"
COVERAGE = "r2s2r.robots.perturbations:make_coverage_demonstrator"
DEMONSTRATOR = "r2s2r.robots.demonstrators:make_demonstrator"


def test_the_coverage_asset_saw_no_held_out_family_and_its_own_sources_are_caught():
    """Every scripted family of benchmarks/generalization.py is held out of its data; the coverage
    demonstrator and the nominal demonstrators, which recorded it, are named as its sources."""
    assert held_out_violations(ASSET, held_out_zoo(SCRIPTED_FAMILIES)) == []
    sources = {"coverage": {"path": COVERAGE, "family": "coverage"}, "demo": {"path": DEMONSTRATOR}}
    caught = held_out_violations(ASSET, sources)
    assert any(line.startswith("coverage ") and "outputs/coverage/part4" in line for line in caught)
    assert any(line.startswith("demo ") and "train" in line for line in caught)


def test_the_coverage_asset_is_the_chosen_head_and_draws_frames_from_its_state():
    """head_pushes' rules, head.drops, and head.turns, head.rests and head.success_touch (kept on families
    17 and 18); no camera read by the head; from a pose-only start (no image anywhere) 1 s of imagined
    frames toward a lifted left shoulder: the arms follow, the resting cube stays on the table where no
    finger comes, and the drawn frames have the logs' size and value range."""
    model = WorldModel.from_pretrained(ASSET)
    head = model.config.head
    assert not head.reads_cameras
    rules = ("pads", "takes", "pad_holds", "held_success", "substeps", "pushes", "drops", "arm_tracking")
    for rule in (*rules, "turns", "rests"):
        assert getattr(head, rule), rule
    assert head.success_touch == 0  # gym-aloha's own test: a finger of gripper 0 (the left) touches the cube
    assert not head.stops  # head_approach_nostops' weights
    frames = HeadFrames.from_pretrained(ASSET, robot_spec("aloha"))
    env = WorldModelEnv(model, num_envs=2, render=True, seed=0, head_frames=frames)
    home = [0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1]
    state = torch.tensor([home * 2] * 2)
    cube = torch.tensor([[0.05, 0.50, 0.02, 1.0, 0.0, 0.0, 0.0], [-0.04, 0.45, 0.02, 1.0, 0.0, 0.0, 0.0]])
    drawn = frames(state.double(), cube.double()).float()  # (B,V,3,H,W): the start's frames, drawn
    start = {key: drawn[:, v] for v, key in enumerate(model.config.camera_keys)}
    env.reset({**start, "observation.state": state, "observation.environment_state": cube})
    target = state.clone()
    target[:, 1] -= 0.1  # the left shoulder lifts a little, away from the cube
    for _ in range(model.config.frame_stride * 5):
        obs, _, _, _ = env.step(target)
    assert (obs["observation.state"][:, 1] < state[:, 1] - 0.05).all()
    torch.testing.assert_close(obs["observation.environment_state"][:, :3], cube[:, :3], rtol=0, atol=2e-3)
    images = [v for k, v in obs.items() if k.startswith("observation.images.")]
    assert len(images) == 3 and all(tuple(v.shape[-2:]) == frames.size for v in images)
    assert all(float(v.min()) >= 0.0 and float(v.max()) <= 1.0 for v in images)
