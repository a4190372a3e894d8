"""Evaluate many policies in one world model: in this process, or fanned out over Ray workers.

Each Ray worker holds one replica of the world model and evaluates whole policies, episodes batched
inside (`evaluate_imagined`). Because an evaluation is a pure function of its config, the workers' results
files are identical to a single-process run's, whatever the number of workers or the order policies finish.
A policy that fails is reported with its error; the others go on.

Ray is started on this machine (a local cluster with `workers` CPUs) unless one is already running, e.g.
`ray.init(address="auto")` made by the caller to use a real cluster.
"""

from __future__ import annotations

import logging
import os
import sys

import torch
from tqdm.auto import tqdm

from r2s2r.eval.imagined import ImaginedEvalConfig, evaluate_imagined
from r2s2r.model.modeling_world_model import WorldModel

log = logging.getLogger(__name__)
# errors that belong to one policy (its loader, its actions, its logs); anything else is a bug and propagates
POLICY_ERRORS = (ValueError, KeyError, TypeError, FileNotFoundError, RuntimeError)


def _run_one(cfg: ImaginedEvalConfig, model: WorldModel) -> dict:
    try:
        return {"summary": evaluate_imagined(cfg, model=model), "error": None}
    except POLICY_ERRORS as e:
        log.error("policy %s failed: %s", cfg.policy.path, e)
        return {"summary": None, "error": f"{type(e).__name__}: {e}"}


class _Worker:
    """One world-model replica in a Ray worker process."""

    def __init__(self, checkpoint: str, device: str, threads: int, sys_path: list[str]):
        sys.path.extend(p for p in sys_path if p not in sys.path)  # import-path policies resolve as here
        torch.set_num_threads(threads)
        self.model = WorldModel.from_pretrained(checkpoint, device=device)

    def run(self, cfg: ImaginedEvalConfig) -> dict:
        return _run_one(cfg, self.model)


def evaluate_many(configs: list[ImaginedEvalConfig], workers: int = 0) -> list[dict]:
    """`{"summary", "error"}` per config, in the configs' order. All configs must share one checkpoint.

    `workers=0` runs here, one policy after the other, with one model; `workers>=1` starts that many Ray
    workers, each with `cpu_count // workers` torch threads.
    """
    if not configs:
        return []
    checkpoints = {(c.checkpoint, c.device) for c in configs}
    if len(checkpoints) > 1:
        raise ValueError(f"configs use several world models {sorted(checkpoints)}; evaluate one at a time.")
    checkpoint, device = checkpoints.pop()
    if workers <= 0:
        model = WorldModel.from_pretrained(checkpoint, device=device)
        return [_run_one(cfg, model) for cfg in configs]
    try:
        import ray
        from ray.util import ActorPool
    except ImportError:
        raise ImportError(
            "workers > 0 needs Ray: pip install 'r2s2r[ray]' (or run with --workers=0)."
        ) from None
    if not ray.is_initialized():
        ray.init(
            num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING
        )
    threads = max(1, (os.cpu_count() or 1) // workers)
    actor = ray.remote(num_cpus=1)(_Worker)
    pool = ActorPool([actor.remote(checkpoint, device, threads, list(sys.path)) for _ in range(workers)])
    results = pool.map(lambda a, cfg: a.run.remote(cfg), configs)  # map keeps the configs' order
    return list(tqdm(results, total=len(configs), desc=f"policies on {workers} Ray workers", unit="policy"))
