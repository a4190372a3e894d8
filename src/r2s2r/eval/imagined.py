"""Closed-loop policy evaluation inside a trained world model: thousands of imagined episodes, batched.

Imagined episodes start from real first observations, the episode starts of one or more LeRobot datasets
(the hardware logs themselves, or any other recording); each start may seed several episodes that differ
only in sampling noise. The policy acts every control step on what `WorldModelEnv` returns, exactly as it
would on the robot; an episode succeeds when the judge (or, with `render=False` or `frames=head`, the state
head) first says so, and its success step, the judge's confidence, the world model's uncertainty and the
physics checker's flags (per violation type, frames flagged; first flagged step) are kept. Where frames are
imagined, whether the state head ever said success (`head_success`) is kept beside the judge's outcome:
the dynamics' verdict, and where the two disagree.

Episodes are grouped into fixed batches (one dataset each, in a fixed order), and batch `i` draws its noise
from `(seed, i)`, so the results are a pure function of the config, however often the run is stopped.
Each finished batch is appended to a JSONL file in one write; a killed run resumes after the last complete
batch, drops a half-written line, and never counts an episode twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from r2s2r.data.commit import episode_labels
from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate
from r2s2r.errors import ModelMismatchError
from r2s2r.eval.ranking import wilson_interval
from r2s2r.eval.video import write_side_by_side_views
from r2s2r.files import append_text, atomic_write_text
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import Policy, PolicyConfig, PolicyError, check_action, load_policy
from r2s2r.robots.checker import VIOLATIONS
from r2s2r.robots.spec import robot_spec
from r2s2r.rollout.head_frames import APPEARANCE_FILE, HeadFrames
from r2s2r.rollout.world_model_env import WorldModelEnv

log = logging.getLogger(__name__)


ROWS_VERSION = 2
FRAMES = ("video", "head")  # who draws the imagined frames: the video model, or the state head's state
POSE = "observation.environment_state"  # the object pose, where the logs recorded it


@dataclass
class ImaginedEvalConfig:
    """Which policy to run in which world model, from which starts, and where the results go."""

    checkpoint: str = "outputs/train/world_model/checkpoints/last/pretrained_model"  # WorldModel directory
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # who acts
    starts: tuple[str, ...] = ("outputs/datasets/transfer_cube",)  # LeRobot datasets whose episode starts
    # seed the imagined episodes (e.g. the hardware logs of this checkpoint)
    samples_per_start: int = 1  # imagined episodes per start, differing only in sampling noise
    max_steps: int = 0  # control steps per episode; 0 = the length of the start's own episode
    batch_size: int = 16  # imagined episodes stepped together
    render: bool = True  # imagine frames (any policy); False = state head only (state-only policies, fast)
    sampling_steps: int = 0  # denoising steps per frame; 0 = the model's own setting
    videos: tuple[int, ...] = ()  # episode indices (of the first start dataset) to write real | imagined MP4s
    output: str = "outputs/eval/imagined/episodes.jsonl"  # per-episode results, appended as batches finish
    seed: int = 0  # sampling noise: batch i uses (seed, i)
    device: str = "cpu"  # torch device of the world model and the policy's observations
    object_poses: bool = True  # start from the starts' object poses; False = ignore them (cameras + proprio)
    frames: str = "video"  # imagined frames: video (the video model samples them) | head (drawn from the
    # state head's state, rollout/head_frames.py; success is the head's; needs r2s2r-fit-frames first; a
    # start without object poses then reads them from its first frame)

    def __post_init__(self) -> None:
        self.starts = (self.starts,) if isinstance(self.starts, str) else tuple(self.starts)
        if self.frames not in FRAMES:
            raise ValueError(f"frames={self.frames!r} is not one of {FRAMES}.")
        if self.frames == "head" and not self.render:
            raise ValueError("frames=head draws imagined frames; it needs --render=true.")
        self.videos = tuple(int(v) for v in self.videos)
        if not self.starts:
            raise ValueError(
                "starts is empty; give at least one LeRobot dataset whose episode starts to use."
            )
        if self.samples_per_start < 1 or self.batch_size < 1 or self.max_steps < 0:
            raise ValueError(
                f"samples_per_start={self.samples_per_start} and batch_size={self.batch_size} must be >= 1, "
                f"max_steps={self.max_steps} >= 0 (0: each start's episode length)."
            )
        if self.videos and not self.render:
            raise ValueError("videos need imagined frames; drop --videos or set --render=true.")

    def fingerprint(self) -> dict:
        """The settings that define the results; resuming with different ones would mix two experiments."""
        keep = ("checkpoint", "policy", "starts", "samples_per_start", "max_steps", "batch_size", "render")
        out = {k: v for k, v in asdict(self).items() if k in keep + ("sampling_steps", "seed")}
        out["policy"] = {"path": self.policy.path, "kwargs": self.policy.kwargs}
        out["starts"] = [str(Path(s)) for s in self.starts]
        out["rows"] = ROWS_VERSION  # what a row holds (2: physics flags)
        if not self.object_poses:  # only when off, so that results written before the flag still resume
            out["object_poses"] = False
        if self.frames != "video":  # likewise; and a refitted appearance draws other frames
            out["frames"] = self.frames
            appearance = Path(self.checkpoint) / APPEARANCE_FILE
            if appearance.is_file():
                out["appearance"] = hashlib.sha256(appearance.read_bytes()).hexdigest()[:16]
            if not self.object_poses:  # the starts' poses are read from their first frames
                out["object_poses"] = "located"
        return json.loads(json.dumps(out))


@dataclass
class _Batch:
    index: int  # position in the fixed batch order: its noise seed
    start: int  # which start dataset
    units: list[tuple[int, int]]  # (episode, sample) pairs


def _plan(starts: list[ClipDataset], cfg: ImaginedEvalConfig) -> list[_Batch]:
    """Fixed batches: per dataset, samples outer and episodes inner, `batch_size` episodes each."""
    batches = []
    for d, ds in enumerate(starts):
        units = [(ep, s) for s in range(cfg.samples_per_start) for ep in ds.episodes]
        for i in range(0, len(units), cfg.batch_size):
            batches.append(_Batch(len(batches), d, units[i : i + cfg.batch_size]))
    return batches


def _batch_seed(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def open_results(
    path: Path,
    header: dict,
    key: tuple[str, ...] = ("start", "episode", "sample"),
    command: str = "r2s2r-eval",
) -> set[tuple]:
    """The `key` of every row already in the JSONL results file `path`; writes the header to a new file.

    A last line without its newline was cut by a kill mid-write: it is dropped (the whole batch reruns).
    Resuming with other settings is refused rather than mixing two experiments in one file.
    """
    if not path.is_file() or path.stat().st_size == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"header": header}) + "\n")
        return set()
    text = path.read_text()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        log.warning("%s ends in a half-written line (a killed run); dropping it", path)
        atomic_write_text(path, text)
    lines = text.splitlines()
    try:
        found = json.loads(lines[0])["header"]
    except (json.JSONDecodeError, KeyError, IndexError):
        raise ValueError(f"{path} is not an {command} results file; pick another --output.") from None
    if found != header:
        diff = sorted(k for k in set(found) | set(header) if found.get(k) != header.get(k))
        raise ValueError(
            f"{path} holds results of other settings (differs in {diff}); use another --output or delete it."
        )
    done = set()
    for line in lines[1:]:
        row = json.loads(line)
        done.add(tuple(row[k] for k in key))
    return done


def append_rows(path: Path, rows: list[dict]) -> None:
    """One write per batch, flushed: a kill leaves whole batches or one cut line, never a partial row, and a
    failed write (a full disk) leaves the file as it was."""
    append_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def _policy_name(cfg: PolicyConfig, policy: Policy) -> str:
    return getattr(policy, "name", None) or cfg.path


def run_batch(
    env: WorldModelEnv, policy: Policy, name: str, initial: dict, steps: int, labels: list[str], seed: int
) -> tuple[dict[str, np.ndarray], list[dict[str, torch.Tensor]]]:
    """Play one batch of imagined episodes; per-episode outcome arrays and the imagined observations.

    Raises `PolicyError` naming the policy and the episodes if the policy raises or misbehaves.
    """
    B, A = env.num_envs, env.cfg.action_dim
    obs = env.reset(initial, seed=seed)
    policy.reset()
    frames = [obs]
    success_step, physics_step, head_step = np.full(B, -1), np.full(B, -1), np.full(B, -1)
    judge_step = np.full(B, -1)  # with head-drawn frames: when the judge, reading them, first said success
    confidence, unc_sum, unc_max, n_frames = np.zeros(B), np.zeros(B), np.zeros(B), 0
    for t in range(steps):
        try:
            action = policy.select_action(obs)
        except Exception as e:
            raise PolicyError(f"policy {name} raised at step {t} of episodes {labels}: {e!r}") from e
        try:
            action = check_action(action, B, A, name, episodes=labels)
        except ValueError as e:
            raise PolicyError(str(e)) from None
        obs, _, _, info = env.step(torch.from_numpy(action))
        if not info["imagined"]:
            continue
        frames.append(obs)
        n_frames += 1
        prob = info["success_prob"].float().cpu().numpy()
        unc = info["uncertainty"].float().cpu().numpy()
        confidence, unc_sum, unc_max = np.maximum(confidence, prob), unc_sum + unc, np.maximum(unc_max, unc)
        newly = info["success"].cpu().numpy() & (success_step < 0)
        success_step[newly] = t + 1
        head_step[info["head_success"].cpu().numpy() & (head_step < 0)] = t + 1
        if "judge_success" in info:
            judge_step[info["judge_success"].cpu().numpy() & (judge_step < 0)] = t + 1
        flagged = info["violations"].cpu().numpy().any(1) & (physics_step < 0)
        physics_step[flagged] = t + 1
    outcome = {
        "success": success_step >= 0,
        "success_step": success_step,
        "head_success": head_step >= 0,
        "judge_success": judge_step >= 0 if env.head_frames is not None else None,
        "success_prob_max": confidence,
        "uncertainty_mean": unc_sum / max(n_frames, 1),
        "uncertainty_max": unc_max,
        "physics": env.violation_counts.cpu().numpy(),  # (B,K) flagged frames per violation type
        "physics_step": physics_step,
    }
    return outcome, frames


def check_start(
    config: WorldModelConfig, checkpoint: str, object_poses: bool, logs: str = "", frames: str = "video"
) -> None:
    """Refuse, in one line, starts the state head cannot read: a head without cameras needs the object pose,
    so it can neither ignore the logged poses (`object_poses=False`) nor start from `logs` that lack them,
    unless the poses are read from the cameras (`frames="head"`: `HeadFrames.locate`)."""
    if config.head.reads_cameras or frames == "head":
        return
    why = f"the state head of {checkpoint} reads no cameras (head.reads_cameras=false), only object poses"
    fix = "use a model whose head reads the cameras, such as assets/world_model_small, or --frames=head"
    if not object_poses:
        raise ModelMismatchError(f"--object_poses=false: {why}; {fix}, or keep --object_poses=true.")
    if logs:
        raise ModelMismatchError(f"{logs} has no object poses ({POSE}): {why}; {fix}.")


def _initial(
    ds: ClipDataset,
    episodes: list[int],
    device: str,
    object_poses: bool,
    head_frames: HeadFrames | None = None,
) -> tuple[dict, list[dict]]:
    """The episodes' first observations, batched for `WorldModelEnv.reset`, and each one's own; without
    `object_poses` the logged object pose is dropped, as if it had never been recorded. With `head_frames`
    a start without an object pose gets the one its first frame shows (`HeadFrames.locate`)."""
    firsts = [ds.start(ep) for ep in episodes]
    if not object_poses:
        firsts = [{k: v for k, v in f.items() if k != POSE} for f in firsts]
    keys = [k for k in firsts[0] if k.startswith("observation.")]
    initial = {k: torch.stack([f[k] for f in firsts]).to(device) for k in keys}
    if head_frames is not None and POSE not in initial and head_frames.geometry.object_qpos:
        images = torch.stack([initial[f"observation.images.{c}"] for c in head_frames.cameras], 1)
        initial[POSE] = head_frames.locate(images, initial["observation.state"])
    return initial, firsts


def _row(
    ds: ClipDataset, labels: dict, ep: int, s: int, first: dict, outcome: dict, b: int, steps: int
) -> dict:
    label = labels.get(ep, {})
    pose = label.get("initial_object_pose")
    if pose is None and "observation.environment_state" in first:
        pose = first["observation.environment_state"].tolist()
    real = first.get("episode_success")
    return {
        "start": str(ds.root),
        "episode": ep,
        "sample": s,
        "split": label.get("distribution", "all"),
        "initial_xy": [round(float(v), 4) for v in pose[:2]] if pose is not None else None,
        "real_success": bool(real) if real is not None else None,
        "steps": steps,
        "success": bool(outcome["success"][b]),
        "success_step": int(outcome["success_step"][b]),
        # the state head's verdict (without frames, the same as success)
        "head_success": bool(outcome["head_success"][b]),
        **({} if outcome["judge_success"] is None else {"judge_success": bool(outcome["judge_success"][b])}),
        "success_prob_max": round(float(outcome["success_prob_max"][b]), 6),
        "uncertainty_mean": round(float(outcome["uncertainty_mean"][b]), 5),
        "uncertainty_max": round(float(outcome["uncertainty_max"][b]), 5),
        # The physics checker's flagged imagined frames per violation type, and the first flagged step.
        "physics": {t: int(n) for t, n in zip(VIOLATIONS, outcome["physics"][b], strict=True) if n},
        "physics_step": int(outcome["physics_step"][b]),
    }


def _write_video(ds: ClipDataset, ep: int, frames: list[dict], b: int, cams: list[str], path: Path) -> None:
    """Real | imagined MP4 of one episode, both at the model's frame rate, cut to the shorter one."""
    real = ds.episode(ep)
    T = min(len(frames), real[cams[0]].shape[0])
    write_side_by_side_views(
        path,
        {c.removeprefix("observation.images."): real[c][:T] for c in cams},
        {
            c.removeprefix("observation.images."): torch.stack([f[c][b].cpu() for f in frames[:T]])
            for c in cams
        },
        fps=ds.fps / ds.stride,
    )


def _start_datasets(cfg: ImaginedEvalConfig, mc: WorldModelConfig) -> list[ClipDataset]:
    """The starts' datasets at the model's frame rate, each checked against what the state head can read."""
    datasets = []
    for root in cfg.starts:
        images = cfg.render or mc.head.reads_cameras  # a camera-free head's fast path reads no video
        clip = ClipConfig(
            root=root, cameras=mc.cameras, context_frames=1, future_frames=1, read_images=images
        )
        match_frame_rate(clip, mc.frame_stride)
        datasets.append(ClipDataset(clip))
        check_start(
            mc, cfg.checkpoint, cfg.object_poses, "" if POSE in datasets[-1].data else root, cfg.frames
        )
    return datasets


def evaluate_imagined(
    cfg: ImaginedEvalConfig, model: WorldModel | None = None, policy: Policy | None = None
) -> dict:
    """Run `cfg.policy` closed-loop in the world model; stream episodes to `cfg.output`; return the summary.

    `model` and `policy` may be passed already loaded (a Ray worker keeps one model for many policies).
    """
    model = model or WorldModel.from_pretrained(cfg.checkpoint, device=cfg.device)
    policy = policy or load_policy(cfg.policy)
    name = _policy_name(cfg.policy, policy)
    mc = model.config
    head_frames = (
        HeadFrames.from_pretrained(cfg.checkpoint, robot_spec(mc.robot)) if cfg.frames == "head" else None
    )
    datasets = _start_datasets(cfg, mc)
    out = Path(cfg.output)
    done = open_results(out, cfg.fingerprint())
    batches = _plan(datasets, cfg)
    todo = [b for b in batches if any((str(datasets[b.start].root), *u) not in done for u in b.units)]
    total = sum(len(b.units) for b in batches)
    bar = tqdm(
        total=total, initial=total - sum(len(b.units) for b in todo), desc=f"imagined {name}", unit="ep"
    )
    labels_of = [episode_labels(ds.root) for ds in datasets]
    env = None
    for batch in todo:
        ds, labels = datasets[batch.start], labels_of[batch.start]
        episodes = [ep for ep, _ in batch.units]
        steps = cfg.max_steps or max(ds.episode_length(ep) for ep in episodes)
        if env is None or env.num_envs != len(episodes):
            env = WorldModelEnv(
                model, len(episodes), cfg.device, cfg.sampling_steps or None, cfg.seed, render=cfg.render,
                head_frames=head_frames,
            )  # fmt: skip
        initial, firsts = _initial(ds, episodes, cfg.device, cfg.object_poses, head_frames)
        tags = [f"{ep}.{s}" for ep, s in batch.units]
        outcome, frames = run_batch(
            env, policy, name, initial, steps, tags, _batch_seed(cfg.seed, batch.index)
        )
        rows = [
            _row(ds, labels, ep, s, firsts[b], outcome, b, steps)
            for b, (ep, s) in enumerate(batch.units)
            if (str(ds.root), ep, s) not in done
        ]
        for b, (ep, s) in enumerate(batch.units):
            if batch.start == 0 and s == 0 and ep in cfg.videos:
                video = out.parent / "videos" / f"episode_{ep:06d}.mp4"
                _write_video(ds, ep, frames, b, mc.camera_keys, video)
        append_rows(out, rows)
        bar.update(len(batch.units))
    bar.close()
    summary = summarize(read_results(out))
    summary.update(policy=name, checkpoint=cfg.checkpoint, results=str(out))
    atomic_write_text(out.with_name("summary.json"), json.dumps(summary, indent=1))
    return summary


def read_results(path: str | Path) -> list[dict]:
    """The per-episode rows of a results file (header dropped)."""
    lines = Path(path).read_text().splitlines()
    return [json.loads(line) for line in lines[1:] if line.strip()]


SPLITS = ("all", "id", "ood")


def success_rates(rows: list[dict], key: str = "success") -> dict:
    """Success per split with Wilson 95 % intervals; `key` is 'success' (imagined) or 'real_success'."""
    out = {}
    for split in SPLITS:
        sel = [r for r in rows if split in ("all", r["split"])]
        if not sel:
            continue
        k, n = int(sum(bool(r[key]) for r in sel)), len(sel)
        out[split] = {"successes": k, "trials": n, "rate": k / n, "ci": list(wilson_interval(k, n))}
    return out


def summarize(rows: list[dict]) -> dict:
    """Imagined success rate with a Wilson 95 % interval, overall and per ID/OOD split, and the share of
    episodes the physics checker flagged (`physics_flagged`)."""
    out = success_rates(rows, "success")
    for split, rate in out.items():
        sel = [r for r in rows if split in ("all", r["split"])]
        rate["physics_flagged"] = sum(bool(r.get("physics")) for r in sel) / len(sel)
    return out


def results_digest(path: str | Path) -> str:
    """SHA-256 of the results rows in a canonical order: equal for equal results however they were run."""
    rows = sorted(read_results(path), key=lambda r: (r["start"], r["episode"], r["sample"]))
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
