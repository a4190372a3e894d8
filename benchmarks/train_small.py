"""Train the `small` world model on the CPU from freshly recorded data, then score it open-loop.

1. record (or finish recording) the training set (mixed-skill demonstrators, ID and OOD cubes) and a
   held-out set with other seeds, through `r2s2r.data.recorder` (resumable: a re-run reuses them),
2. train `small` with `r2s2r.training.train` (resumable),
3. replay the held-out episodes open-loop: PSNR/SSIM per view at 1/3/6 s vs copy-last-frame, object error,
   outcome agreement, ID and OOD,
   With --head_from (e.g. assets/world_model_small), the open loop is replayed again with this run's video
   model grafted into that checkpoint (its refined state head, which `object_sketch` draws the cube from),
   with that checkpoint's judge and with this run's,
   Then the judge is fitted to this model's own imagined frames of the training recordings
   (`r2s2r-refit-judge`, --judge_steps) and the open loop replayed with it,
4. check the judge on real held-out frames (staged-reward accuracy, success F1) and that the state head's
   uncertainty is higher for actions unlike the data (random actions) than for the logged ones.
Prints a table and writes benchmarks/results/train_small.json.

Usage:
    python benchmarks/train_small.py                      # ~25 min recording + ~50 min training on 2 cores
    python benchmarks/train_small.py --train_episodes 40 --steps 300    # a quick look
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate  # noqa: E402
from r2s2r.data.recorder import RecordConfig, record  # noqa: E402
from r2s2r.eval.openloop import OpenLoopConfig, evaluate_openloop  # noqa: E402
from r2s2r.model.configuration_world_model import WorldModelConfig  # noqa: E402
from r2s2r.model.modeling_world_model import WorldModel  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import WorldConfig  # noqa: E402
from r2s2r.training.head import start_env  # noqa: E402
from r2s2r.training.train import TrainConfig, train  # noqa: E402


def record_sets(root: Path, train_episodes: int, heldout_episodes: int) -> dict:
    timings = {}
    for name, episodes, seed in (("heldout", heldout_episodes, 200), ("train", train_episodes, 100)):
        cfg = RecordConfig(
            root=str(root / name), num_episodes=episodes, distribution="mixed", seed=seed, workers=2,
            world=WorldConfig(num_envs=4), policy=PolicyConfig(kwargs={"skill": "mix"}),
        )  # fmt: skip
        summary = record(cfg)
        timings[name] = {"episodes": summary.num_episodes, "successes": summary.successes,
                         "seconds_this_run": summary.seconds}  # fmt: skip
    return timings


def _clips(model: WorldModel, root: Path, context_frames: int) -> ClipDataset:
    """Held-out clips at the model's frame rate."""
    cfg = ClipConfig(root=str(root), cameras=model.config.cameras, context_frames=context_frames)
    match_frame_rate(cfg, model.config.frame_stride)
    return ClipDataset(cfg)


@torch.no_grad()
def judge_on_real(model: WorldModel, heldout: Path) -> dict:
    """The judge on every real held-out frame: staged-reward accuracy and success precision/recall/F1."""
    ds = _clips(model, heldout, context_frames=1)
    correct = total = tp = fp = fn = 0
    for ep in ds.episodes:
        episode = ds.episode(ep)
        frames = model.frames({k: episode[k][None] for k in model.config.camera_keys})[0, 1:]  # (T-1,V,3,h,w)
        reward_logits, success_logit = model.judge(frames)
        reward = episode["next.reward"].long()
        correct += int((reward_logits.argmax(-1) == reward).sum())
        total += len(reward)
        pred, real = success_logit > 0, episode["next.success"].bool()
        tp, fp, fn = (
            tp + int((pred & real).sum()),
            fp + int((pred & ~real).sum()),
            fn + int((~pred & real).sum()),
        )
    precision = tp / max(tp + fp, 1)
    recall = tp / max(tp + fn, 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-9)
    return {
        "frames": total,
        "reward_accuracy": correct / total,
        "success_precision": precision,
        "success_recall": recall,
        "success_f1": f1,
    }


@torch.no_grad()
def uncertainty_check(model: WorldModel, heldout: Path, seed: int = 0) -> dict:
    """State-head disagreement after 2 s of logged actions vs 2 s of uniformly random joint targets."""
    from r2s2r.robots.spec import robot_spec

    spec = robot_spec(model.config.robot)
    ds = _clips(model, heldout, context_frames=1)
    rng = np.random.default_rng(seed)
    logged, random = [], []
    lo, hi = np.array(spec.position_lower), np.array(spec.position_upper)
    for ep in ds.episodes:
        episode = ds.episode(ep)
        frames = model.frames({k: episode[k][None, :1] for k in model.config.camera_keys})[:, 0]
        latent = model.state_head.encode(
            frames, model.norm("state", episode["observation.state"][:1]), start_env(model, episode)
        )
        noise = torch.tensor(rng.uniform(lo, hi, episode["action"][:20].shape), dtype=torch.float32)
        for actions, store in ((episode["action"][:20], logged), (noise, random)):
            z = latent
            for chunk in actions:
                z = model.state_head.step(z, model.norm_chunks(chunk[None]))
            store.append(float(model.state_head.disagreement(model.state_head.decode(z))))
    return {"logged_actions": float(np.mean(logged)), "random_actions": float(np.mean(random)),
            "ratio": float(np.mean(random) / max(np.mean(logged), 1e-9))}  # fmt: skip


@torch.no_grad()
def teacher_forced(model: WorldModel, heldout: Path, clips: int = 256, seed: int = 0) -> dict:
    """One model frame (0.2 s in `small`) ahead from real context, per view: model vs copy-last, and the
    model fed other clips' actions (if that scores as well, it ignores the actions).
    PSNR at model resolution. A model that sketches objects is given their real poses (the state head's
    one-frame error is about a centimetre)."""
    from r2s2r.eval.metrics import psnr
    from r2s2r.rollout.sampler import FrameSampler

    cfg = model.config
    ds = _clips(model, heldout, context_frames=cfg.context_frames)
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(ds), size=min(clips, len(ds)), replace=False)
    sampler, generator = FrameSampler(model, steps=1), torch.Generator().manual_seed(seed)
    scores = {name: {c: [] for c in cfg.cameras} for name in ("model", "copy_last", "wrong_actions")}
    K = cfg.context_frames
    for start in range(0, len(picks), 32):
        batch = torch.utils.data.default_collate([ds[int(i)] for i in picks[start : start + 32]])
        frames = model.frames(batch)  # (B,K+1,V,3,h,w)
        context, truth = frames[:, :K], frames[:, K]
        chunks = model.norm_chunks(batch["action"])[:, :K]
        states = model.norm("state", batch["observation.state"])[:, :K]
        poses = batch["observation.environment_state"][:, K - 1 : K + 1] if cfg.sketched_objects else None
        guesses = {
            "model": sampler.sample(context, chunks, states, generator=generator, poses=poses),
            "copy_last": context[:, -1],
            "wrong_actions": sampler.sample(
                context, chunks.roll(1, dims=0), states, generator=generator, poses=poses
            ),
        }
        for name, guess in guesses.items():
            per_image = psnr((guess + 1) / 2, (truth + 1) / 2, max_db=60.0)  # (B,V)
            for v, cam in enumerate(cfg.cameras):
                scores[name][cam].extend(per_image[:, v].tolist())
    return {name: {cam: float(np.mean(x)) for cam, x in by_cam.items()} for name, by_cam in scores.items()}


def _checkpoint_step(output_dir: Path) -> int:
    state = output_dir / "checkpoints" / "last" / "training_state" / "state.json"
    return int(json.loads(state.read_text())["step"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default="outputs/bench", help="data, checkpoints and videos go here")
    parser.add_argument("--train_episodes", type=int, default=160)
    parser.add_argument("--heldout_episodes", type=int, default=32)
    parser.add_argument(
        "--steps", type=int, default=6000, help="optimizer steps (6,000: about 50 minutes on 2 cores)"
    )
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--sampling_steps", type=int, nargs="+", default=[1, 6], help="open-loop with each")
    parser.add_argument("--model", type=json.loads, default={},
                        help="small preset overrides, JSON: '{\"relative_actions\": true}'")  # fmt: skip
    parser.add_argument(
        "--judge_steps",
        type=int,
        default=2000,
        help="steps of r2s2r-refit-judge after training (0: keep the jointly trained judge)",
    )
    parser.add_argument("--head_from", default=None,
                        help="also replay open-loop with this run's video model grafted into this checkpoint "
                             "(its state head and judge, and with this run's judge)")  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/train_small.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", force=True)
    root = Path(args.root)
    payload = {"benchmark": "train_small", "machine": machine_info(), "args": vars(args)}

    tic = time.perf_counter()
    payload["data"] = record_sets(root / "data", args.train_episodes, args.heldout_episodes)
    payload["data"]["seconds"] = time.perf_counter() - tic

    cfg = TrainConfig(output_dir=str(root / "train_small"), preset="small", steps=args.steps,
                      model=WorldModelConfig.small(**args.model),
                      batch_size=args.batch_size, save_every=250, log_every=50, num_workers=2)  # fmt: skip
    cfg.data.root = str(root / "data" / "train")
    cfg.resume = (Path(cfg.output_dir) / "checkpoints" / "last").exists()
    start_step = _checkpoint_step(Path(cfg.output_dir)) if cfg.resume else 0
    tic = time.perf_counter()
    checkpoint = train(cfg)
    seconds = time.perf_counter() - tic
    fresh_steps = args.steps - start_step
    payload["training"] = {"steps": args.steps, "batch_size": args.batch_size, "seconds_this_run": seconds,
                           "checkpoint": str(checkpoint),
                           "samples_per_s": fresh_steps * args.batch_size / max(seconds, 1e-9)}  # fmt: skip

    payload["openloop"], payload["openloop_seconds"] = {}, {}
    for steps in args.sampling_steps:
        tic = time.perf_counter()
        payload["openloop"][steps] = heldout_openloop(checkpoint, root, f"openloop_small_{steps}steps", steps)
        payload["openloop_seconds"][steps] = time.perf_counter() - tic
    if args.judge_steps:
        from r2s2r.training.judge import JudgeConfig, refit_judge

        judged = root / "train_small_judged"
        tic = time.perf_counter()
        payload["judge_refit"] = refit_judge(JudgeConfig(
            checkpoint=str(checkpoint), data=[str(root / "data" / "train")], output_dir=str(judged),
            steps=args.judge_steps, sampling_steps=args.sampling_steps[0],
        ))  # fmt: skip
        payload["judge_refit"]["seconds"] = time.perf_counter() - tic
        payload["openloop_judged"] = heldout_openloop(
            judged, root, "openloop_small_judged", args.sampling_steps[0]
        )
        checkpoint = judged  # the judge checks below read the fitted one
    if args.head_from:
        payload["openloop_grafted"] = grafted_openloop(
            checkpoint, Path(args.head_from), root, args.sampling_steps[0]
        )
    model = WorldModel.from_pretrained(checkpoint)
    payload["judge_on_real"] = judge_on_real(model, root / "data" / "heldout")
    payload["uncertainty"] = uncertainty_check(model, root / "data" / "heldout")
    payload["teacher_forced"] = teacher_forced(model, root / "data" / "heldout")
    report(payload)
    write_json(args.out, payload)


def heldout_openloop(checkpoint: Path, root: Path, name: str, steps: int) -> dict:
    """Open-loop summary of `checkpoint` on the held-out recordings, written to root/name (6 videos)."""
    ol = OpenLoopConfig(
        checkpoint=str(checkpoint), output_dir=str(root / name), videos=6, sampling_steps=steps
    )
    ol.data.root = str(root / "data" / "heldout")
    return evaluate_openloop(ol)["summary"]


def grafted_openloop(checkpoint: Path, head_from: Path, root: Path, steps: int) -> dict:
    """Open loop of this run's video model in `head_from`'s model: with its judge, and with this run's."""
    from graft_denoiser import graft

    video, results = WorldModel.from_pretrained(checkpoint), {}
    for name, own_judge in (("their_judge", False), ("this_run_judge", True)):
        directory = root / f"grafted_{name}"
        graft(video, WorldModel.from_pretrained(head_from), judge=own_judge).save_pretrained(directory)
        summary = heldout_openloop(directory, root, f"openloop_grafted_{name}", steps)
        results[name] = {"head_from": str(head_from), "summary": summary}
    return results


def report(payload: dict) -> None:
    for steps, summary in payload["openloop"].items():
        report_openloop(summary, f"{steps} sampling step(s)")
    if "openloop_judged" in payload:
        report_openloop(payload["openloop_judged"], "judge fitted to imagined frames (r2s2r-refit-judge)")
    for name, grafted in payload.get("openloop_grafted", {}).items():
        report_openloop(grafted["summary"], f"video model grafted into {grafted['head_from']} ({name})")
    tf = payload["teacher_forced"]
    rows = [[cam, tf["model"][cam], tf["copy_last"][cam], tf["wrong_actions"][cam]] for cam in tf["model"]]
    print_table("One model frame ahead from real context (PSNR dB)", ["view", "model", "copy-last",
                "model, other clips' actions"], rows)  # fmt: skip
    j, u = payload["judge_on_real"], payload["uncertainty"]
    print(
        f"\njudge on {j['frames']} real held-out frames: reward accuracy {100 * j['reward_accuracy']:.1f} %, "
        f"success F1 {j['success_f1']:.3f}"
    )
    print(
        f"state-head uncertainty after 2 s: logged actions {u['logged_actions']:.4f}, random actions "
        f"{u['random_actions']:.4f} ({u['ratio']:.1f}x)"
    )
    t = payload["training"]
    print(f"training: {t['steps']} steps of {t['batch_size']} clips, {t['samples_per_s']:.1f} clips/s")


def report_openloop(summary: dict, label: str) -> None:
    rows = []
    for split, entry in summary.items():
        for cam, by_h in entry["model"].items():
            for h, m in by_h.items():
                base = entry["copy_last"][cam][h]
                gain = m["psnr"] - base["psnr"]
                rows.append([split, cam, h, m["psnr"], base["psnr"], gain, m["ssim"], base["ssim"]])
    header = ["split", "view", "horizon", "PSNR", "copy-last", "gain dB", "SSIM", "copy-last"]
    title = f"Open-loop alignment on held-out episodes, {label} (model resolution)"
    print_table(title, header, rows)
    rows = []
    for split, e in summary.items():
        errors = "/".join(f"{100 * v:.1f}" for v in (e.get("object_error_m") or {}).values() if v is not None)
        agreement, success = e.get("outcome_agreement") or 0, e.get("real_success_rate") or 0
        head = e.get("head_outcome_agreement") or 0
        rows.append([split, e["episodes"], 100 * agreement, 100 * head, 100 * success, errors])
    header = ["split", "episodes", "agreement %", "head's %", "logged success %", "object err 1s/3s/6s (cm)"]
    print_table(f"Outcome agreement and object error, {label}", header, rows)


if __name__ == "__main__":
    main()
