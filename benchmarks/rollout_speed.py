"""Imagination throughput: how many imagined env steps, frames and state-head steps per second.

For each preset and batch size, times `WorldModelEnv.step` on full action chunks (one imagined frame of
every view per call) and the state-dynamics head alone (latent rollouts of thousands of candidates, no
pixels). Untrained weights: speed does not depend on what the model learned. On a GPU it also runs bf16
autocast (and torch.compile when asked) and reports the denoiser's achieved FLOP/s as a fraction of the
device's bf16 peak (given with --peak_tflops, e.g. 989 for an H100/H200 SXM dense bf16).

Usage:
    python benchmarks/rollout_speed.py                       # CPU: tiny, small, base (base at batch 1 only)
    python benchmarks/rollout_speed.py --device cuda --presets small base --batch_sizes 64 256 --max_gflop 0
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import machine_info, print_table, write_json  # noqa: E402
from r2s2r.model.configuration_world_model import WorldModelConfig  # noqa: E402
from r2s2r.model.modeling_world_model import WorldModel  # noqa: E402
from r2s2r.rollout.world_model_env import WorldModelEnv  # noqa: E402


def _timed(fn, min_seconds: float, device: torch.device) -> float:
    """Seconds per call of `fn`, after one warm-up call, over at least `min_seconds`."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds and calls >= 2:
            return elapsed / calls


def denoiser_flops(cfg: WorldModelConfig, batch: int) -> float:
    """Forward FLOPs of one denoiser call (matmuls only): 2 * tokens * (12 D^2 + 2 tokens D) per block."""
    tokens = cfg.sequence_length
    D = cfg.width
    per_block = 2 * tokens * (4 * D * D + 2 * D * int(D * cfg.mlp_ratio)) + 4 * tokens * tokens * D
    return batch * cfg.depth * per_block


def bench_env(
    preset: str,
    batch: int,
    device: torch.device,
    bf16: bool,
    compile_: bool,
    seconds: float,
    sampling_steps: int,
) -> dict:
    cfg = getattr(WorldModelConfig, preset)(sampling_steps=sampling_steps)
    model = WorldModel(cfg).to(device).eval()
    if compile_:
        model.denoiser = torch.compile(model.denoiser)
    env = WorldModelEnv(model, num_envs=batch, device=device)
    H, W = 96, 128
    start = {k: torch.rand(batch, 3, H, W, device=device) for k in cfg.camera_keys}
    start["observation.state"] = torch.zeros(batch, cfg.state_dim, device=device)
    env.reset(start)
    chunk = torch.zeros(batch, cfg.frame_stride, cfg.action_dim, device=device)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            env.step(chunk)

    per_frame = _timed(step, seconds, device)
    flops = denoiser_flops(cfg, batch) * cfg.sampling_steps / per_frame
    return {
        "preset": preset, "batch": batch, "device": str(device), "bf16": bf16, "compiled": compile_,
        "sampling_steps": cfg.sampling_steps,
        "imagined_frames_per_s": batch / per_frame,  # one frame = every view, `frame_stride` control steps
        "view_frames_per_s": batch * cfg.num_views / per_frame,
        "env_control_steps_per_s": batch * cfg.frame_stride / per_frame,
        "denoiser_tflops": flops / 1e12,
    }  # fmt: skip


def bench_head(preset: str, candidates: int, device: torch.device, bf16: bool, seconds: float) -> dict:
    """The state-dynamics head alone: one latent step + decode for `candidates` rollouts (all members)."""
    cfg = getattr(WorldModelConfig, preset)()
    head = WorldModel(cfg).to(device).eval().state_head
    latent = torch.zeros(candidates, cfg.head.ensemble, head.latent_size, device=device)
    flat = torch.zeros(candidates, cfg.chunk_dim, device=device)

    def head_step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            head.decode(head.step(latent, flat))

    per_step = _timed(head_step, seconds, device)
    return {"preset": preset, "candidates": candidates, "device": str(device), "bf16": bf16,
            "state_steps_per_s": candidates / per_step,  # candidate x model-frame steps, per second
            "control_steps_per_s": candidates * cfg.frame_stride / per_step}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--presets", nargs="+", default=["tiny", "small", "base"])
    parser.add_argument("--batch_sizes", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--sampling_steps", nargs="+", type=int, default=[1, 6], help="Euler steps per frame")
    parser.add_argument("--candidates", nargs="+", type=int, default=[1024, 16384], help="state-head batch")
    parser.add_argument(
        "--max_gflop", type=float, default=500.0,
        help="skip (preset, batch) whose denoiser forward exceeds this many GFLOP (base on a CPU); 0 = none",
    )  # fmt: skip
    parser.add_argument("--seconds", type=float, default=3.0, help="minimum timing window per measurement")
    parser.add_argument("--compile", action="store_true", help="torch.compile the denoiser (GPU)")
    parser.add_argument("--peak_tflops", type=float, default=0.0, help="device bf16 peak, for the fraction")
    parser.add_argument("--out", default="benchmarks/results/rollout_speed.json")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_grad_enabled(False)
    bf16 = device.type == "cuda"
    results, heads, skipped = [], [], []
    for preset in args.presets:
        cfg = getattr(WorldModelConfig, preset)()
        for batch in args.batch_sizes:
            if args.max_gflop and denoiser_flops(cfg, batch) / 1e9 > args.max_gflop:
                skipped.append(f"{preset} batch {batch}")
                continue
            for steps in args.sampling_steps:
                results.append(
                    bench_env(preset, batch, device, bf16, args.compile and bf16, args.seconds, steps)
                )
                if args.peak_tflops:
                    results[-1]["fraction_of_bf16_peak"] = results[-1]["denoiser_tflops"] / args.peak_tflops
        for candidates in args.candidates:
            heads.append(bench_head(preset, candidates, device, bf16, args.seconds))
    print_table(
        f"Imagined env steps on {device} (untrained weights; one frame = every view, 5 control steps)",
        ["preset", "batch", "sampling steps", "frames/s", "view-frames/s", "control steps/s", "TFLOP/s"],
        [[r["preset"], r["batch"], r["sampling_steps"], r["imagined_frames_per_s"], r["view_frames_per_s"],
          r["env_control_steps_per_s"], r["denoiser_tflops"]] for r in results],
    )  # fmt: skip
    print_table(
        f"State-dynamics head alone on {device} (latent step + decode, all ensemble members)",
        ["preset", "candidates", "state steps/s", "control steps/s"],
        [[h["preset"], h["candidates"], h["state_steps_per_s"], h["control_steps_per_s"]] for h in heads],
    )
    if skipped:
        print(f"skipped (denoiser forward over {args.max_gflop:g} GFLOP): {', '.join(skipped)}")
    payload = {"benchmark": "rollout_speed", "machine": machine_info(), "args": vars(args),
               "results": results, "state_head": heads, "skipped": skipped}  # fmt: skip
    write_json(args.out, payload)


if __name__ == "__main__":
    main()
