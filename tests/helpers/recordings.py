"""State-only recordings and a tiny blind world model for the tests of heads that read no cameras."""

from __future__ import annotations

from pathlib import Path

import torch

from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.data.recorder import RecordConfig, record
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import PolicyConfig
from r2s2r.robots.aloha import WorldConfig

DEMONSTRATOR = "r2s2r.robots.demonstrators:make_demonstrator"


def record_state_only(root: Path, seed: int) -> str:
    """Two 50-step demonstrator episodes recorded without any camera (proprio, actions, object pose)."""
    record(
        RecordConfig(
            root=str(root), num_episodes=2, episode_length=50, distribution="mixed", seed=seed,
            world=WorldConfig(num_envs=2, cameras=()), policy=PolicyConfig(path=DEMONSTRATOR),
        )
    )  # fmt: skip
    return str(root)


def blind_model(root: str) -> tuple[WorldModel, list[dict[str, torch.Tensor]]]:
    """A tiny world model whose head reads no cameras, on the statistics of `root`, and its episodes."""
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(head=dict(reads_cameras=False)))
    data = ClipDataset(ClipConfig(root=root, cameras=model.config.cameras, frame_rate=10, read_images=False))
    model.set_stats(data.stats)
    return model, [data.episode(ep) for ep in data.episodes]
