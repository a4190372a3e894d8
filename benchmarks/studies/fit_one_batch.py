"""How fast can the denoiser fit one batch? A check on the architecture, not on the data.

Trains only the denoiser of a fresh `small` model on one fixed batch of 8 real clips, every sample at pure
noise (the conditional mean that one-step sampling reads), and prints the error of that prediction against
predicting "no change" every 20 steps, for each variant of the architecture given. A denoiser that cannot
fit 8 clips quickly will not learn what actions do from thousands in an hour of CPU either; this is how
channel-stacked context (`stack_context`) was chosen.

Usage:
    python benchmarks/studies/fit_one_batch.py --data outputs/bench/data/train   # ~3 min a variant, 2 cores
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
from common import machine_info, write_json  # noqa: E402
from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate  # noqa: E402
from r2s2r.model.configuration_world_model import WorldModelConfig  # noqa: E402
from r2s2r.model.modeling_world_model import WorldModel  # noqa: E402

VARIANTS = {
    "stacked context + joint tokens": dict(),
    "joint tokens only": dict(stack_context=False, context_tokens=True),
    "adaLN only": dict(stack_context=False, joint_tokens=False, context_tokens=True),
}


def fit(data: Path, overrides: dict, steps: int, lr: float, seed: int = 0) -> list[dict]:
    torch.manual_seed(seed)
    cfg = WorldModelConfig.small(mean_fraction=1.0, context_noise=0.0, **overrides)
    model = WorldModel(cfg)
    clips = ClipConfig(root=str(data), cameras=cfg.cameras, future_frames=1)
    match_frame_rate(clips, cfg.frame_stride)
    ds = ClipDataset(clips)
    model.set_stats(ds.stats)
    picks = np.random.default_rng(seed + 1).choice(len(ds), 8, replace=False)
    batch = torch.utils.data.default_collate([ds[int(i)] for i in picks])
    frames, K = model.frames(batch), cfg.context_frames
    chunks, states = model.norm_chunks(batch["action"]), model.norm("state", batch["observation.state"])
    poses = batch.get("observation.environment_state") if cfg.sketched_objects else None
    x0 = model.denoise_target(frames[:, K], frames[:, K - 1])
    optimizer = torch.optim.AdamW(model.denoiser.parameters(), lr=lr)
    curve, tic = [], time.perf_counter()
    for step in range(steps + 1):
        if step % 20 == 0:
            with torch.no_grad():
                B = x0.shape[0]
                out = model.denoiser(
                    torch.randn_like(x0),
                    torch.ones(B),
                    frames[:, :K],
                    torch.zeros(B),
                    model.denoiser_chunks(chunks[:, :K], states[:, :K]),
                    states[:, :K],
                    model.sketches(
                        chunks[:, :K], states[:, :K], None if poses is None else poses[:, K - 1 :]
                    ),
                )
                _, c_out = model.precondition(torch.ones(B))
                mse = float(((c_out * out - x0) ** 2).mean())
            curve.append({"step": step, "mse": mse, "no_change_mse": float((x0**2).mean())})
        if step == steps:
            break
        loss = model.denoise_loss(frames, states, chunks, poses)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    curve[-1]["seconds"] = time.perf_counter() - tic
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="outputs/bench/data/train", help="a recorded LeRobot dataset")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", default="benchmarks/results/archive/fit_one_batch.json")
    args = parser.parse_args()
    payload = {"benchmark": "fit_one_batch", "machine": machine_info(), "args": vars(args), "variants": {}}
    for name in args.variants:
        payload["variants"][name] = fit(Path(args.data), VARIANTS[name], args.steps, args.lr)
    print(f"\npure-noise prediction error on one batch of 8 clips (no-change guess at step 0), lr {args.lr}")
    print(
        "| variant | " + " | ".join(f"step {c['step']}" for c in payload["variants"][args.variants[0]]) + " |"
    )
    print("|---" * (len(payload["variants"][args.variants[0]]) + 1) + "|")
    for name, curve in payload["variants"].items():
        print(f"| {name} | " + " | ".join(f"{c['mse']:.3f}" for c in curve) + " |")
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
