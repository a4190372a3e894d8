"""What an RL run measures of its policy: in imagination, re-played with video, in the reference world.

`imagined_eval` plays the deterministic actor once per imagined env (the state head); `verify_with_video`
re-plays the exported policy closed-loop in the full world model (video, judge, checker), where a success
the head sees and the judge does not points at a policy exploiting the head; `reference_eval` plays it in
the reference world, on held-out initial poses.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from r2s2r.rl.env import ImaginedEnv
from r2s2r.rl.policy import ImaginationPolicy


@torch.no_grad()
def imagined_eval(policy, env: ImaginedEnv, seed: int) -> dict:
    """Each env plays one imagined episode with the deterministic actor: mean return, success, etc."""
    env.seed(seed)
    obs = env.reset()
    env.pop_episodes()
    first: dict[int, dict] = {}
    for _ in range(env.horizon):
        action, _ = policy.predict(obs, deterministic=True)
        obs, _, done, infos = env.step(action)
        for b in np.flatnonzero(done):
            first.setdefault(int(b), infos[b]["episode"])
    env.pop_episodes()
    return episode_summary(list(first.values()))


def episode_summary(episodes: list[dict]) -> dict:
    if not episodes:
        return {}
    return {
        "return": float(np.mean([e["r"] for e in episodes])),
        "success": float(np.mean([e["success"] for e in episodes])),
        "left_support": float(np.mean([e["left_support"] for e in episodes])),
        "violation_frames": float(np.mean([e["violation_frames"] for e in episodes])),
        "uncertainty": float(np.mean([e["uncertainty"] for e in episodes])),
        "episodes": len(episodes),
    }


@torch.no_grad()
def verify_with_video(
    policy_dir: str | Path, starts: dict[str, torch.Tensor], episodes: int, horizon: int, seed: int = 0
) -> dict:
    """The exported policy closed-loop in the full world model (`WorldModelEnv`: video model, judge, checker).

    The policy reads the imagined camera frames as it reads real ones. Per episode: does the judge see a
    success in some imagined frame, does the state head predict one, do they agree, and did the checker flag
    any frame. Where the head says success and the judge does not, the policy may be exploiting the head.
    """
    from r2s2r.rollout.world_model_env import WorldModelEnv

    policy = ImaginationPolicy(policy_dir)
    missing = [k for k in policy.model.config.camera_keys if k not in starts]
    if missing:  # state-only recordings: the video model has no first frames to start from
        return {"skipped": f"the episode starts have no camera frames ({', '.join(missing)})"}
    n = min(episodes, len(starts["observation.state"]))
    env = WorldModelEnv(policy.model, num_envs=n, sampling_steps=1, seed=seed)
    obs = env.reset({k: v[:n] for k, v in starts.items()})
    policy.reset()
    judge, head, flagged = (torch.zeros(n, dtype=torch.bool) for _ in range(3))
    for _ in range(horizon * policy.model.config.frame_stride):
        obs, _, _, info = env.step(policy.select_action(obs))
        if info["imagined"]:
            judge |= info["success"].cpu()
            head |= info["head_success"].cpu()
            flagged |= info["violations"].any(1)
    return {
        "judge_success": float(judge.float().mean()), "head_success": float(head.float().mean()),
        "agreement": float((judge == head).float().mean()), "physics_flagged": float(flagged.float().mean()),
        "episodes": n,
    }  # fmt: skip


def reference_eval(
    policy_dir: str | Path, episodes: int, seed: int, episode_length: int = 400, num_envs: int = 10
) -> dict:
    """Success of an exported policy over `episodes` reference-world episodes (ID and OOD alternating)."""
    from r2s2r.eval.imagined import success_rates
    from r2s2r.policies.episodes import episode_batches, play_episodes
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy = ImaginationPolicy(policy_dir)
    mc = policy.model.config
    cameras = tuple(mc.cameras) if policy.spec.observation == "latent" else ()  # a state policy sees none
    world_cfg = WorldConfig(
        cameras=cameras, image_height=mc.image_height, image_width=mc.image_width, num_envs=num_envs
    )
    render_every = mc.frame_stride if policy.spec.observation == "latent" else 0
    rows = []
    batches = episode_batches(world_cfg, episodes, "mixed", seed)
    with AlohaWorld(world_cfg) as world:
        for batch in tqdm(batches, desc="reference world", unit="batch", leave=False):
            played = play_episodes(
                world, policy, batch, episode_length, seed, str(policy_dir), render_every, keep_frames=False
            )
            rows += [
                {"episode": ep, "split": batch.dists[b], "success": bool(played["success"][b].any()),
                 "max_reward": float(played["reward"][b].max())}
                for b, ep in enumerate(batch.indices)
            ]  # fmt: skip
    return {
        **success_rates(rows, "success"),
        "mean_max_reward": float(np.mean([r["max_reward"] for r in rows])),
    }
