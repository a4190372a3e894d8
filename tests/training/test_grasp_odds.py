"""`head.chance`'s grasp events, read off whole recorded demonstrator episodes of the reference world."""

from __future__ import annotations

import pytest
import torch

from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate
from r2s2r.data.recorder import RecordConfig, record
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import PolicyConfig
from r2s2r.robots.aloha import WorldConfig
from r2s2r.training.head import fit_grasp_odds, grasp_events

DEMONSTRATOR = "r2s2r.robots.demonstrators:make_demonstrator"
RULES = dict(still_mode=True, contact=True, pads=True, holds=True, pad_holds=True, balance=True, takes=True)


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    """Six whole episodes (400 steps) of the demonstrator, state-only, and their outcomes."""
    root = tmp_path_factory.mktemp("odds") / "demos"
    summary = record(
        RecordConfig(
            root=str(root), num_episodes=6, episode_length=400, distribution="mixed", seed=5,
            world=WorldConfig(num_envs=6, cameras=()),
            policy=PolicyConfig(path=DEMONSTRATOR, kwargs={"skill": "sloppy"}),
        )
    )  # fmt: skip
    return str(root), [e["success"] for e in summary.episodes]


def _episodes(root: str, model: WorldModel) -> list[dict[str, torch.Tensor]]:
    clip = ClipConfig(root=root, cameras=(), future_frames=1, read_images=False)
    match_frame_rate(clip, model.config.frame_stride)
    dataset = ClipDataset(clip)
    return [dataset.episode(ep) for ep in dataset.episodes]


def test_grasp_events_are_the_closes_on_the_cube_labelled_by_the_carry(demos):
    """Every successful episode closes the right gripper on the resting cube and the left on the cube in
    mid-air, and both carry it (an episode succeeds only once the left holds it alone, off the table); the
    demonstrator closes fully, so every close is commanded well past where the pads meet the cube (> 0.3 of
    the range) with the cube's centre well inside the pads' faces (> 5 mm). An episode whose gripper closed
    on no cube gives no event, and episodes with no close at all give a clear error."""
    root, outcomes = demos
    assert any(outcomes)
    model = WorldModel(WorldModelConfig.tiny(head={**RULES, "chance": True}))
    episodes = _episodes(root, model)
    room, carried, which, source = grasp_events(model, episodes)
    right, left = 1, 0
    for e, success in enumerate(outcomes):
        mine = source == e
        if success:
            assert sorted(which[mine].tolist()) == [left, right]
            assert carried[mine].all()
            assert (room[mine, 0] > 0.005).all() and (room[mine, 1] > 0.3).all()
    assert len(source) >= 2 * sum(outcomes)
    keys = ("observation.state", "observation.environment_state", "action")
    still = [{k: ep[k][:5] for k in keys} for ep in episodes[:2]]  # the first frames: nothing closed yet
    with pytest.raises(ValueError, match="no gripper closed on the object"):
        grasp_events(model, still)
    figures = fit_grasp_odds(model, episodes)
    assert figures["grasps"] == len(source) and len(figures["edge_width"]) == 2
