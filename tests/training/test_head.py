"""State-head refinement: it fits the recordings better over long unrolls and leaves the cameras' trunk,
the video model and the judge untouched."""

from __future__ import annotations

import torch

from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.training.head import HeadConfig, head_openloop, refine_head


def test_refining_the_head_lowers_its_open_loop_error_and_touches_nothing_else(recorded):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny())
    data = ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"), frame_rate=10))
    model.set_stats(data.stats)
    episodes = [data.episode(ep) for ep in data.episodes]
    frozen = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("state_head.")}
    frozen.update({k: v.clone() for k, v in model.state_dict().items() if k.startswith("state_head.trunk.")})
    env_out = model.state_head.env_out.weight.detach().clone()
    before = head_openloop(model, episodes, seconds=(0.5,))
    log = refine_head(model, episodes, HeadConfig(steps=60, batch_size=8, window=4))
    after = head_openloop(model, episodes, seconds=(0.5,))
    assert log[-1]["loss"] < log[0]["loss"]
    assert after["object_error_m"]["0.5s"] < before["object_error_m"]["0.5s"]
    assert before["episodes"] == after["episodes"] == 2 and 0 <= after["outcome_agreement"] <= 1
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in frozen.items())
    assert not torch.equal(state["state_head.env_out.weight"], env_out)  # the head itself did change
