"""Open-loop replay: logged action chunks fed to the world model from the logged first observation.

The world model starts from each episode's first real observation (its views, proprio and, where the
recording has it, the object pose, as imagined evaluation starts) and is fed the actions the robot actually
took, chunk by chunk, never seeing another real frame. Open-loop evaluation scores what comes out; the
judge's refit learns from it. All episodes of one call must have the same length.

Inputs, one dict per episode (as `ClipDataset.episode` gives them):

| key                               | shape          |
|-----------------------------------|----------------|
| `observation.images.<cam>`        | (T, 3, H, W)   |
| `observation.state`               | (T, S)         |
| `observation.environment_state`   | (T, E), optional |
| `action`                          | (T-1, stride, A) |

Output per episode: `frames` {key: (T,3,h,w)} at the model's resolution, `env_state` (T-1, E) of imagined
frames 1..T-1, and the judge's and the state head's verdicts `success` / `head_success` (bool).
"""

from __future__ import annotations

import torch

from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.rollout.world_model_env import WorldModelEnv


@torch.no_grad()
def imagine_episodes(
    model: WorldModel, episodes: list[dict], sampling_steps: int = 0, seed: int = 0, device: str = "cpu"
) -> list[dict]:
    """Replay each episode's logged chunks from its first observation (see the module docstring).

    `sampling_steps` = 0 uses the model's own setting; `seed` fixes the sampling noise.
    """
    env = WorldModelEnv(model, num_envs=len(episodes), device=device, sampling_steps=sampling_steps or None)
    keys = model.config.camera_keys
    first = {k: torch.stack([e[k][0] for e in episodes]) for k in keys}
    for key in ("observation.state", "observation.environment_state"):
        if key in episodes[0]:
            first[key] = torch.stack([e[key][0] for e in episodes])
    obs = env.reset(first, seed=seed)
    frames = {k: [obs[k]] for k in keys}
    env_states, judged, head_judged = [], [], []
    for t in range(episodes[0]["action"].shape[0]):
        chunk = torch.stack([e["action"][t] for e in episodes])  # (B,stride,A)
        obs, _, _, info = env.step(chunk)
        for k in keys:
            frames[k].append(obs[k])
        env_states.append(env.env_state)
        judged.append(info["success"])
        head_judged.append(info["head_success"])
    results = []
    for b in range(len(episodes)):
        results.append({
            "frames": {k: torch.stack([f[b] for f in frames[k]]).cpu() for k in keys},  # (T,3,H,W)
            "env_state": torch.stack([s[b] for s in env_states]).cpu(),  # (T-1,E) frames 1..T-1
            "success": bool(torch.stack([j[b] for j in judged]).any()),
            "head_success": bool(torch.stack([j[b] for j in head_judged]).any()),
        })  # fmt: skip
    return results
