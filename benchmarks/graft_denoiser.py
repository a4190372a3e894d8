"""Put the video model (denoiser) of one world-model checkpoint into another, keeping the other's state head,
judge (unless --judge) and object statistics.

The committed demo model (`assets/world_model_small`) is a video model trained by `train_small.py` whose
state head was replaced and refined afterwards (`r2s2r-refine-head`, `benchmarks/studies/head.py`). A
better video model trained on the same recordings can take the old one's place without refining the head
again. Both must read the same views at the same size and frame rate, and normalize proprio and actions
alike (the denoiser reads both): anything else is refused.

Usage:
    python benchmarks/graft_denoiser.py --video outputs/bench/train_small/checkpoints/last/pretrained_model \\
        --into assets/world_model_small --out assets/world_model_small --half
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import r2s2r.robots.aloha  # noqa: F401  (torch + triton before MuJoCo's GL)

# isort: split
from r2s2r.model.modeling_world_model import WorldModel

# What only the denoiser depends on: these come from the video checkpoint.
DENOISER_FIELDS = (
    "patch_size", "context_frames", "width", "depth", "heads", "mlp_ratio", "stack_context", "joint_tokens",
    "context_tokens", "relative_actions", "context_noise", "mean_fraction", "predict_delta", "delta_scale",
    "data_std", "sampling_steps", "view_balance", "arm_sketch",
    "object_sketch", "object_jitter",
)  # fmt: skip
SHARED_FIELDS = (
    "robot", "action_dim", "state_dim", "env_state_dim", "cameras", "image_height", "image_width",
    "frame_stride",
)  # fmt: skip


def graft(video: WorldModel, into: WorldModel, judge: bool = False) -> WorldModel:
    """A model with `into`'s config and weights, except the denoiser and its config fields from `video`
    (and with `judge`, `video`'s judge too)."""
    a, b = video.config.to_dict(), into.config.to_dict()
    if diff := {k: (a[k], b[k]) for k in SHARED_FIELDS if a[k] != b[k]}:
        raise ValueError(
            f"the checkpoints see different data ({diff}); train the video model on the same views."
        )
    for name in ("state_mean", "state_std", "action_mean", "action_std"):
        if not torch.allclose(getattr(video, name), getattr(into, name), rtol=1e-5, atol=1e-6):  # float sums
            raise ValueError(
                f"{name} differs between the checkpoints: they were trained on different recordings; train "
                "the video model on the recordings the head was refined on."
            )
    config = type(into.config)(**{**b, **{k: a[k] for k in DENOISER_FIELDS}})
    model = WorldModel(config)
    kept = {k: v for k, v in into.state_dict().items() if not k.startswith("denoiser.")}
    missing, unexpected = model.load_state_dict(kept, strict=False)  # head, judge, statistics
    assert not unexpected and all(k.startswith("denoiser.") for k in missing), (missing, unexpected)
    model.denoiser.load_state_dict(video.denoiser.state_dict())
    if judge:
        model.judge.load_state_dict(video.judge.state_dict())
    model.state_head.set_scales(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--video", required=True, help="checkpoint whose denoiser to take")
    parser.add_argument("--into", required=True, help="checkpoint whose state head, judge and stats to keep")
    parser.add_argument("--out", required=True, help="where to write the result (may be --into)")
    parser.add_argument("--judge", action="store_true", help="take the --video checkpoint's judge as well")
    parser.add_argument("--half", action="store_true", help="store weight matrices in float16")
    args = parser.parse_args()
    model = graft(WorldModel.from_pretrained(args.video), WorldModel.from_pretrained(args.into), args.judge)
    readme = Path(args.into, "README.md")
    kept = (
        readme.read_text()
        if readme.is_file() and Path(args.out).resolve() == Path(args.into).resolve()
        else None
    )
    out = model.save_pretrained(args.out, half_matrices=args.half)  # replaces the directory as a whole
    if kept is not None:  # writing over --into: its README (how it was made) stays, to be updated by hand
        Path(out, "README.md").write_text(kept)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
