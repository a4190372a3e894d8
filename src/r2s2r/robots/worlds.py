"""The reference world a `WorldConfig` describes: MuJoCo ALOHA (`aloha.py`) or gym-pusht's PushT (`pusht.py`).

The recorder and the episode loop build worlds, read their specs and draw initial object poses through
here, so they never ask which robot they drive. Both worlds answer the same calls: `reset(poses, render)`
-> observation, `step(actions, render)` -> `StepResult`, `spec`, `close()`.

    cfg = WorldConfig(task="pusht", num_envs=2)
    with make_world(cfg) as world:
        obs = world.reset(initial_object_poses(cfg, "id", np.random.default_rng(0), 2))
"""

from __future__ import annotations

import numpy as np

from r2s2r.robots import aloha, pusht
from r2s2r.robots.aloha import AlohaWorld, WorldConfig
from r2s2r.robots.pusht import PushTConfig, PushTWorld
from r2s2r.robots.spec import EmbodimentSpec

World = AlohaWorld | PushTWorld


def pusht_config(cfg: WorldConfig) -> PushTConfig:
    """The PushT world of a pusht `cfg`, whose cameras and OOD margin `WorldConfig` read as PushT's."""
    return PushTConfig(
        cameras=cfg.cameras,
        image_height=cfg.image_height,
        image_width=cfg.image_width,
        num_envs=cfg.num_envs,
        ood_margin=cfg.ood_margin,
    )


def make_world(cfg: WorldConfig) -> World:
    """The lockstep world `cfg` describes; close it (or use it as a context manager) when done."""
    if cfg.task == "pusht":
        return PushTWorld(pusht_config(cfg))
    return AlohaWorld(cfg)


def world_spec(cfg: WorldConfig) -> EmbodimentSpec:
    """The robot spec of the world `cfg` describes; checks its settings, builds no physics."""
    if cfg.task == "pusht":
        return PushTWorld.spec_for(pusht_config(cfg))
    return AlohaWorld.spec_for(cfg)


def initial_object_poses(cfg: WorldConfig, distribution: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` initial object poses (n, `cfg.object_pose_dim`) from the world's `id` box or the `ood` ring around
    it (`cfg.ood_margin` wide), drawn by that world's own sampler."""
    if cfg.task == "pusht":
        return pusht.sample_object_poses(distribution, rng, n, cfg.ood_margin)
    return aloha.sample_object_poses(cfg.task, distribution, rng, n, cfg.ood_margin)
