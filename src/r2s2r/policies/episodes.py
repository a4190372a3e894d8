"""Playing a policy in the reference world (ALOHA or PushT, built by `robots/worlds.py`): which episodes, in
which lockstep batches, and what happened.

Episode `i` of a set is a pure function of (`seed`, `i`): its initial object pose comes from
`SeedSequence([seed, i])`, ID and OOD alternating in a `mixed` set, and a batch seeds torch from its first
episode for stochastic learned policies, so the same seed reproduces the same episodes whatever the batch
size, the number of worker processes or how often a run was interrupted. The recorder, the search's
reference-world evaluation and RL's deployment check all play their episodes through here.

`play_batch` returns, per env:

| key            | shape      | what                                                              |
|----------------|------------|-------------------------------------------------------------------|
| `reward`       | (B, T)     | the task's reward after each step (gym-aloha's stages, PushT's coverage) |
| `success`      | (B, T)     | the task's success after each step                                |
| `frames`       | B x T dict | LeRobot frames (observation, action, next.*), only with keep_frames |
| `policy_labels`| B dicts    | what the policy says of each episode (`episode_labels()`), or None |
| `stopped_at`   | (B,)       | the step a physics fault stopped each env at (-1: none), ALOHA's e-stop |
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from r2s2r.policies.policy import Policy, check_action, to_policy_batch
from r2s2r.robots.aloha import WorldConfig
from r2s2r.robots.worlds import World, initial_object_poses

DISTRIBUTIONS = ("id", "ood", "mixed")
LAPSE_STEPS = 50  # 1 s at reward 0 after the first contact: the object was lost (contacts flicker for less)


def initial_pose(world: WorldConfig, distribution: str, seed: int, index: int) -> tuple[np.ndarray, str]:
    """The initial object pose of episode `index` of a set, and whether it is ID or OOD."""
    if distribution == "mixed":
        distribution = "id" if index % 2 == 0 else "ood"
    rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
    pose = initial_object_poses(world, distribution, rng, 1)[0]
    return pose, distribution


@dataclass
class EpisodeBatch:
    """Episodes played together, one per lockstep env of the world."""

    indices: list[int]  # episodes this batch plays
    padded: list[int]  # the same, padded with repeats of the last one to fill every lockstep env
    poses: np.ndarray  # (num_envs, world.object_pose_dim) initial object poses
    dists: list[str]  # "id" / "ood" per padded episode


def episode_batches(
    world: WorldConfig, num_episodes: int, distribution: str, seed: int, first: int = 0
) -> list[EpisodeBatch]:
    """The lockstep batches (`world.num_envs` envs each) that cover episodes `first` .. `num_episodes - 1`."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution='{distribution}' must be one of {DISTRIBUTIONS}.")
    batches = []
    for start in range(first, num_episodes, world.num_envs):
        indices = list(range(start, min(start + world.num_envs, num_episodes)))
        padded = indices + [indices[-1]] * (world.num_envs - len(indices))
        poses, dists = zip(*(initial_pose(world, distribution, seed, i) for i in padded), strict=True)
        batches.append(EpisodeBatch(indices, padded, np.stack(poses), list(dists)))
    return batches


def play_batch(
    world: World,
    policy: Policy,
    poses: np.ndarray,
    steps: int,
    policy_name: str,
    episodes: list[int] | None = None,
    render_every: int = 1,
    keep_frames: bool = True,
) -> dict[str, Any]:
    """Play `policy` from `poses` for `steps` control steps (see the module docstring for what it returns).

    The world renders its cameras at reset and after every `render_every`-th step (0: never, for policies
    that do not look); `episodes` (the episode each env plays) only serves to name episodes in errors.
    """
    obs = world.reset(poses, render=render_every > 0)
    policy.reset()
    B = len(poses)
    reward, success = np.zeros((B, steps), np.float32), np.zeros((B, steps), bool)
    stopped_at = np.full(B, -1)  # the step at which the world stopped an env on a physics fault
    frames: list[list[dict]] = [[] for _ in range(B)]
    for t in range(steps):
        try:
            raw_action = policy.select_action(to_policy_batch(obs))
        except Exception as e:
            raise RuntimeError(f"policy {policy_name} raised at step {t}: {type(e).__name__}: {e}") from e
        action = check_action(raw_action, B, world.spec.action_dim, policy_name, episodes)
        result = world.step(action, render=render_every > 0 and (t + 1) % render_every == 0)
        reward[:, t], success[:, t] = result.reward, result.success
        stopped_at[(stopped_at < 0) & result.info.get("stopped", np.zeros(B, bool))] = t
        if keep_frames:
            for b in range(B):
                frames[b].append({
                    **{key: value[b] for key, value in obs.items()},
                    "action": action[b],
                    "next.reward": reward[b, t : t + 1],
                    "next.success": success[b, t : t + 1],
                    "next.done": np.array([t == steps - 1], dtype=bool),
                })  # fmt: skip
        obs = result.observation
    labels = policy.episode_labels() if hasattr(policy, "episode_labels") else None
    return {
        "reward": reward, "success": success, "frames": frames if keep_frames else None,
        "policy_labels": labels, "stopped_at": stopped_at,
    }  # fmt: skip


def play_episodes(
    world: World,
    policy: Policy,
    batch: EpisodeBatch,
    steps: int,
    seed: int,
    policy_name: str,
    render_every: int = 1,
    keep_frames: bool = True,
) -> dict[str, Any]:
    """`play_batch` for one batch of a seeded episode set: torch is seeded from (seed, first episode), and
    only the batch's own episodes (not the padding) are returned."""
    torch.manual_seed(seed * 1_000_003 + batch.indices[0])  # for stochastic learned policies
    try:
        played = play_batch(
            world, policy, batch.poses, steps, policy_name, batch.padded, render_every, keep_frames
        )
    except Exception as e:
        raise RuntimeError(f"episodes {batch.indices[0]}..{batch.indices[-1]} failed: {e}") from e
    n = len(batch.indices)
    return {
        "reward": played["reward"][:n],
        "success": played["success"][:n],
        "frames": played["frames"][:n] if keep_frames else None,
        "policy_labels": played["policy_labels"][:n] if played["policy_labels"] is not None else None,
        "stopped_at": played["stopped_at"][:n],
    }


def label_episode(
    reward: np.ndarray, success: np.ndarray, episode_index: int, pose: np.ndarray, dist: str
) -> dict:
    """Per-episode labels from one episode's (T,) staged rewards and successes, so any policy's episodes
    get them.

    `success` is gym-aloha's definition (top reward at any step); `success_at_end` also asks that the
    object still be held at the last step; `recovered` marks a success that came after the object was
    lost: `LAPSE_STEPS` steps without any contact reward after the first contact (a missed grasp or a
    drop, then a new attempt). Contact rewards flicker for a few steps even in clean episodes.
    """
    reward, success = np.asarray(reward, dtype=float), np.asarray(success, dtype=bool)
    first = int(np.argmax(success)) if success.any() else len(success)
    touched = np.nonzero(reward[:first] > 0)[0]
    longest_lapse = _longest_run(reward[touched[0] : first] == 0) if len(touched) else 0
    return {
        "episode_index": episode_index,
        "distribution": dist,
        "initial_object_pose": [round(float(v), 6) for v in pose],
        "success": bool(success.any()),
        "success_at_end": bool(success[-1]),
        "success_step": first if success.any() else -1,
        "recovered": bool(success.any() and longest_lapse >= LAPSE_STEPS),
        "max_reward": float(reward.max()),
    }


def batch_labels(batch: EpisodeBatch, played: dict[str, Any]) -> list[dict]:
    """`label_episode` for every episode of a played batch, with what the policy says of it (e.g. the
    perturbation a coverage demonstrator drew) as `perturbation`, and the step at which a physics fault
    stopped it, if one did, as `physics_stopped_at` (it scores 0 from there on: a failure unless it had
    already succeeded)."""
    labels = []
    for b, ep in enumerate(batch.indices):
        labels.append(
            label_episode(played["reward"][b], played["success"][b], ep, batch.poses[b], batch.dists[b])
        )
        if played.get("policy_labels") is not None:
            labels[-1]["perturbation"] = played["policy_labels"][b]
        if played.get("stopped_at") is not None and played["stopped_at"][b] >= 0:
            labels[-1]["physics_stopped_at"] = int(played["stopped_at"][b])
    return labels


def _longest_run(mask: np.ndarray) -> int:
    """Length of the longest run of True in a 1-D bool array."""
    best = run = 0
    for value in mask:
        run = run + 1 if value else 0
        best = max(best, run)
    return best


def in_order(
    run: Callable[..., Any],
    units: Iterable[tuple],
    workers: int,
    setup: Callable[..., None],
    setup_args: tuple = (),
) -> Iterator[Any]:
    """Yield `run(*unit)` for each unit, in order: here (`workers` = 0, after `setup(*setup_args)`) or in
    `workers` spawned processes, each set up once, working ahead.

    At most `workers` units are in flight, so memory stays bounded by a few results whatever their number.
    Spawned, not forked: a fork would copy this process's GL and decoder state.
    """
    if workers == 0:
        setup(*setup_args)
        for unit in units:
            yield run(*unit)
        return
    context = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(workers, mp_context=context, initializer=setup, initargs=setup_args) as pool:
        pending: deque = deque()
        for unit in units:
            pending.append(pool.submit(run, *unit))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
