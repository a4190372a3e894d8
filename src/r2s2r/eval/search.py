"""Action search judged where it counts: success in the reference world, with and without search.

For each number of candidates N in `candidates`, the base policy wrapped in `SearchPolicy` (N=1: the base
alone, unchanged) plays the same reference-world episodes: the recorder's initial object poses for
`seed`, ID and OOD alternating, all in lockstep batches. The world renders the world model's cameras at
its resolution only at decision steps, which is all the search looks at. Per N: success (gym-aloha's:
top reward at any step) with Wilson intervals overall and per ID/OOD, and the decision latency.

Each finished batch is appended to a JSONL file; a killed run resumes after the last complete batch and
counts nothing twice. A batch's search noise is a function of (seed, N, its first episode) only, so the
results do not depend on `workers` or on how often the run was stopped.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from r2s2r.eval.imagined import append_rows, open_results, success_rates
from r2s2r.files import atomic_write_text
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.episodes import EpisodeBatch, episode_batches, in_order, play_episodes
from r2s2r.policies.policy import PolicyConfig, load_policy
from r2s2r.robots.aloha import AlohaWorld, WorldConfig
from r2s2r.rollout.search import SearchConfig, SearchPolicy


@dataclass
class SearchEvalConfig:
    """Which base policy to search around, with which settings, over which reference-world episodes."""

    base: PolicyConfig = field(default_factory=PolicyConfig)  # the policy the search wraps
    search: SearchConfig = field(default_factory=SearchConfig)  # world model and search settings
    candidates: tuple[int, ...] = (1, 16)  # numbers of candidates N to compare; 1 = the base alone
    episodes: int = 20  # reference-world episodes per N (ID and OOD alternating)
    episode_length: int = 400  # control steps per episode (8 s at 50 Hz)
    num_envs: int = 10  # episodes simulated in lockstep
    workers: int = 0  # processes playing batches in parallel (0: this one)
    seed: int = 0  # initial object poses (as the recorder draws them) and search noise
    output: str = "outputs/search/episodes.jsonl"  # per-episode results, appended as batches finish

    def __post_init__(self) -> None:
        self.candidates = tuple(self.candidates)
        if not self.candidates or min(self.candidates) < 1:
            raise ValueError(f"candidates={self.candidates} must list numbers >= 1, e.g. '[1,4,16]'.")
        if self.episodes < 1 or self.num_envs < 1 or self.episode_length < 1 or self.workers < 0:
            raise ValueError("episodes, num_envs and episode_length must be >= 1 and workers >= 0.")

    def fingerprint(self) -> dict:
        keep = asdict(self)
        for key in ("workers", "output", "candidates"):  # how and where it runs, and how far it goes
            keep.pop(key)
        keep["search"].pop("num_candidates")
        keep["search"].pop("device")
        return json.loads(json.dumps(keep))


_WORKER: dict = {}


def _setup(cfg: SearchEvalConfig) -> None:
    import r2s2r.robots.aloha  # noqa: F401  (torch and triton before MuJoCo's GL, in a new process too)

    model = WorldModel.from_pretrained(cfg.search.checkpoint, device=cfg.search.device)
    seen = model.config.head.reads_cameras or cfg.search.recheck_top  # a blind head alone needs no frames
    world = WorldConfig(
        cameras=tuple(model.config.cameras) if seen else (), image_height=model.config.image_height,
        image_width=model.config.image_width, num_envs=cfg.num_envs,
    )  # fmt: skip
    _WORKER.update(model=model, world=AlohaWorld(world))


def _run_unit(cfg: SearchEvalConfig, n: int, batch: EpisodeBatch) -> list[dict]:
    """One lockstep batch of episodes at N candidates: a row per episode."""
    model, world = _WORKER["model"], _WORKER["world"]
    base = load_policy(cfg.base)
    seed = int(np.random.SeedSequence([cfg.search.seed, n, batch.indices[0]]).generate_state(1)[0])
    policy = SearchPolicy(
        base, model, SearchConfig(**{**asdict(cfg.search), "num_candidates": n, "seed": seed})
    )
    start = time.perf_counter()
    played = play_episodes(
        world, policy, batch, cfg.episode_length, cfg.seed, cfg.base.path,
        render_every=policy.every if n > 1 else 0, keep_frames=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    success = played["success"].any(1)
    success_step = np.where(success, played["success"].argmax(1) + 1, -1)  # control steps, 1-based
    decisions = policy.decisions
    latency = [d.seconds for d in decisions]
    rows = []
    for b, ep in enumerate(batch.indices):
        rows.append({
            "candidates": n,
            "episode": ep,
            "split": batch.dists[b],
            "initial_xy": [round(float(v), 4) for v in batch.poses[b, :2]],
            "success": bool(success[b]),
            "success_step": int(success_step[b]),
            "max_reward": float(played["reward"][b].max()),
            "decisions": len(decisions),
            "decision_seconds_mean": float(np.mean(latency)) if latency else 0.0,
            "chose_base": float(np.mean([d.chose_base[b] for d in decisions])) if decisions else 1.0,
            "predicted_gain": float(np.mean([d.extra["predicted_gain"][b] for d in decisions]))
            if decisions else 0.0,  # the head's score of each chosen candidate over the base plan's
            "batch_seconds": round(seconds, 3),
        })  # fmt: skip
    return rows


def read_rows(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()[1:] if line.strip()]


def summarize(rows: list[dict], candidates: tuple[int, ...]) -> dict:
    """Per N: success rates (Wilson 95 %) overall and per split, decision latency, base-kept share, and
    the episodes won and lost against the smallest N (paired: the same episodes)."""
    out = {}
    first = {r["episode"]: r["success"] for r in rows if r["candidates"] == min(candidates)}
    for n in candidates:
        sel = [r for r in rows if r["candidates"] == n]
        if not sel:
            continue
        searched = [r for r in sel if r["decisions"]]
        out[str(n)] = {
            **success_rates(sel, "success"),
            "decision_seconds_mean": float(np.mean([r["decision_seconds_mean"] for r in searched]))
            if searched else 0.0,
            "chose_base": float(np.mean([r["chose_base"] for r in sel])),
            "won": sum(r["success"] and not first[r["episode"]] for r in sel if r["episode"] in first),
            "lost": sum(first[r["episode"]] and not r["success"] for r in sel if r["episode"] in first),
        }  # fmt: skip
    return out


def evaluate_search(cfg: SearchEvalConfig) -> dict:
    """Play every (N, batch) not yet in `cfg.output`, then summarize; returns the summary."""
    path = Path(cfg.output)
    done = open_results(path, cfg.fingerprint(), key=("candidates", "episode"), command="r2s2r-search")
    probe = WorldModel.from_pretrained(cfg.search.checkpoint).config
    world = WorldConfig(cameras=tuple(probe.cameras), num_envs=cfg.num_envs)
    units = [
        (n, batch)
        for n in cfg.candidates
        for batch in episode_batches(world, cfg.episodes, "mixed", cfg.seed)
        if any((n, ep) not in done for ep in batch.indices)
    ]
    bar = tqdm(
        total=len(units), desc=f"search ({cfg.episodes} episodes x N={list(cfg.candidates)})", unit="batch"
    )
    for rows in _played(cfg, units):
        append_rows(path, rows)
        bar.update(1)
    bar.close()
    summary = {"base": cfg.base.path, "base_kwargs": cfg.base.kwargs, "by_candidates": {}}
    summary["by_candidates"] = summarize(read_rows(path), cfg.candidates)
    summary["results"] = str(path)
    atomic_write_text(path.with_name("summary.json"), json.dumps(summary, indent=2))
    return summary


def _played(cfg: SearchEvalConfig, units: list[tuple[int, EpisodeBatch]]):
    """Rows of each unit, in order, played here or by `cfg.workers` processes working ahead."""
    yield from in_order(_run_unit, [(cfg, n, batch) for n, batch in units], cfg.workers, _setup, (cfg,))
