"""Rank policy checkpoints in imagination and compare with their hardware logs.

Input: a folder of hardware evaluation logs, one LeRobot dataset per checkpoint (`<logs_dir>/<name>/`),
and the matching policies: from a manifest (`--policies=zoo.yaml`, name -> path, kwargs, family) or, for
logs written by `r2s2r-record`, from the recording's own sidecar. Each policy is evaluated in the world
model from its logs' episode starts (`samples_per_start` imagined episodes each), so real and imagined
trials start from the same initial conditions, split the same way into ID and OOD. Each start reads the
logged object pose where there is one, unless `object_poses` is off (as for hardware that records none):
then it reads the cameras and proprio alone.

Output (`<output_dir>/`): `rank.json` (per policy: real vs imagined success with Wilson intervals per split,
per-start outcomes with the initial object position, chosen videos; per split: Pearson, Spearman, Kendall
with bootstrap intervals, MMRV, pairwise ordering accuracy, calibration), the per-policy JSONL results
(resumable), the videos, and `report.html` (`r2s2r-report`). With `noise_floor_dir`, a second real run of
the same policies, the same statistics between the two real runs are given beside: the floor that a
simulator judged against 50 + 50 real trials cannot be expected to beat. A model with a success map
(`success_map.py`) also gets each policy's mapped rate and the statistics of the mapped rates.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import yaml

from r2s2r.data.commit import PARTIAL_SUFFIX, check_committed, episode_labels, read_commit
from r2s2r.data.reader import load_frames_table
from r2s2r.eval.fanout import evaluate_many
from r2s2r.eval.imagined import (
    FRAMES,
    POSE,
    SPLITS,
    ImaginedEvalConfig,
    check_start,
    read_results,
    success_rates,
    summarize,
)
from r2s2r.eval.ranking import compare
from r2s2r.eval.success_map import SuccessMap, load_success_map, mapped_rates
from r2s2r.files import atomic_write_text, read_json
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.policies.policy import PolicyConfig

log = logging.getLogger(__name__)
NEAR_MISS_REWARD = 2  # a failure that lifted the cube (staged reward >= 2 of 4) came near


@dataclass
class RankConfig:
    """Which world model, which logs and policies, how many imagined trials, where to write."""

    checkpoint: str = "outputs/train/world_model/checkpoints/last/pretrained_model"  # WorldModel directory
    logs_dir: str = "outputs/logs"  # hardware logs: one LeRobot dataset per checkpoint, <logs_dir>/<name>/
    policies: str = ""  # YAML/JSON manifest {name: {path, kwargs, family}}; "" = each log's recorder sidecar
    noise_floor_dir: str = ""  # a second real run of the same policies (same layout), for the noise floor
    samples_per_start: int = 1  # imagined episodes per logged episode start
    max_steps: int = 0  # control steps per imagined episode; 0 = the logged episode's length
    batch_size: int = 16  # imagined episodes stepped together
    render: bool = True  # False: state head only (state-only policies; 10-100x faster, no videos)
    sampling_steps: int = 0  # denoising steps per frame; 0 = the model's own setting
    videos: int = 2  # real | imagined videos per policy: a success and a near miss where the logs have them
    workers: int = 0  # Ray workers (one world model each); 0 = evaluate here, one policy after another
    n_boot: int = 2000  # bootstrap resamples for the correlation intervals
    output_dir: str = "outputs/rank"  # rank.json, report.html, policies/<name>/ (results, videos)
    report: bool = True  # also write report.html
    seed: int = 0  # sampling noise
    device: str = "cpu"  # torch device of the world model
    object_poses: bool = True  # start from the logged object poses; False = ignore them (cameras + proprio)
    frames: str = "video"  # video (sampled by the video model) | head (drawn from the state head's state;
    # success is the head's; fit them first with r2s2r-fit-frames)

    def __post_init__(self) -> None:
        if self.frames not in FRAMES:
            raise ValueError(f"frames={self.frames!r} is not one of {FRAMES}.")
        if self.frames == "head" and not self.render:
            raise ValueError("frames=head draws imagined frames; it needs --render=true.")
        if self.videos and not self.render:
            self.videos = 0  # the fast path imagines no frames to show
        if self.workers < 0 or self.samples_per_start < 1:
            raise ValueError(
                f"workers={self.workers} must be >= 0 and samples_per_start={self.samples_per_start} >= 1."
            )


@dataclass
class Entry:
    """One checkpoint: its name, family, hardware logs and how to load it."""

    name: str
    logs: Path
    policy: PolicyConfig
    family: str = ""
    error: str | None = None
    real: list[dict] = field(default_factory=list)  # per logged episode: success, max reward


def _manifest(path: str) -> dict[str, dict]:
    if not path:
        return {}
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"policies manifest {path} does not exist; give a YAML/JSON file or leave it empty."
        )
    data = yaml.safe_load(Path(path).read_text()) or {}
    data = data.get("policies", data)
    if not isinstance(data, dict):
        raise ValueError(
            f"{path} must map policy names to {{path, kwargs, family}}, e.g. 'nominal: {{path: ...}}'."
        )
    return data


def discover(cfg: RankConfig) -> list[Entry]:
    """One `Entry` per dataset under `logs_dir`, with its policy from the manifest or the log's sidecar."""
    root = Path(cfg.logs_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"logs_dir {root} does not exist; point it at a folder of LeRobot datasets.")
    manifest = _manifest(cfg.policies)
    entries = []
    for folder in sorted(p for p in root.iterdir() if (p / "meta" / "info.json").is_file()):
        if folder.name.endswith(PARTIAL_SUFFIX):  # a recording killed in its first batch
            name = folder.name.removesuffix(PARTIAL_SUFFIX)
            entries.append(Entry(name, folder, PolicyConfig(), error=_unreadable(folder)))
            continue
        spec = manifest.get(folder.name)
        try:
            recording = read_commit(folder)
        except ValueError as e:
            entries.append(Entry(folder.name, folder, PolicyConfig(), error=str(e)))
            continue
        if spec is None and recording is not None:
            rec = recording["config"]
            spec = {"path": rec["policy_path"], "kwargs": rec["policy_kwargs"]}
        if spec is None:
            fix = f"add '{folder.name}: {{path: ...}}' to the --policies manifest"
            entries.append(
                Entry(folder.name, folder, PolicyConfig(), error=f"no policy for these logs; {fix}")
            )
            continue
        policy = PolicyConfig(path=spec["path"], kwargs=spec.get("kwargs") or {})
        entries.append(Entry(folder.name, folder, policy, family=str(spec.get("family", ""))))
    if missing := sorted(set(manifest) - {e.name for e in entries}):
        raise FileNotFoundError(f"the manifest names {missing} but {root} has no dataset folder for them.")
    if not entries:
        raise FileNotFoundError(f"no LeRobot dataset under {root} (looked for <name>/meta/info.json).")
    return entries


def _unreadable(folder: Path) -> str:
    """Why the logs in `folder` cannot be read (an interrupted recording, say)."""
    try:
        check_committed(folder)
    except ValueError as e:
        return str(e)
    return f"{folder} cannot be read"


def read_log_outcomes(root: Path) -> list[dict]:
    """Per logged episode: did it succeed (at any step), and its best staged reward; from the data itself.
    Logs that a recording left mid-batch, or with a damaged file, raise a `ValueError` that says so."""
    check_committed(root)
    info = read_json(root / "meta" / "info.json", "restore it from a copy or record the logs again.")
    if "next.success" not in info["features"]:
        raise ValueError(
            f"logs {root} have no success labels (no 'next.success' feature); label each frame's success "
            "when recording, or leave this checkpoint out."
        )
    columns = ["episode_index", "next.success"] + (
        ["next.reward"] if "next.reward" in info["features"] else []
    )
    table = load_frames_table(root).select_columns(columns).with_format("numpy")[:]
    episodes = table["episode_index"].reshape(-1)
    out = []
    for ep in np.unique(episodes):
        rows = episodes == ep
        reward = float(table["next.reward"][rows].max()) if "next.reward" in table else float("nan")
        out.append(
            {"episode": int(ep), "success": bool(table["next.success"][rows].any()), "max_reward": reward}
        )
    return out


def choose_videos(real: list[dict], count: int) -> list[tuple[int, str]]:
    """Episodes to show: the first real success and the nearest real miss (highest staged reward)."""
    picks = []
    successes = [r for r in real if r["success"]]
    misses = [r for r in real if not r["success"] and r["max_reward"] >= NEAR_MISS_REWARD]
    if successes:
        picks.append((successes[0]["episode"], "real success"))
    if misses:
        best = max(misses, key=lambda r: r["max_reward"])
        picks.append((best["episode"], f"near miss (real reward {best['max_reward']:g} of 4)"))
    return picks[:count]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def has_poses(logs: Path) -> bool:
    """Whether the logs recorded the object pose (`observation.environment_state`)."""
    return POSE in read_json(logs / "meta" / "info.json", "restore it from a copy.")["features"]


def poses_note(object_poses: bool, without: list[str], frames: str = "video") -> str:
    """One line for the report: where the imagined episodes' starts came from; `without` are the policies
    whose logs have no object poses."""
    read = " (each object's pose read from the first frame's fixed camera, --frames=head)"
    read = read if frames == "head" else ""
    only = "cameras and proprio only"
    if not object_poses:
        return f"not used: the imagined episodes started from {only} (--object_poses=false){read}"
    if without:
        return f"not in the logs of {', '.join(without)}: those started from {only}{read}"
    return (
        "used: the imagined episodes started from the logged object poses and proprio (and the cameras,"
        " where the model reads them)"
    )


def _head_rates(rows: list[dict], key: str = "head_success") -> dict | None:
    """The state head's verdict on the same imagined episodes (with `key="judge_success"`, the judge's on
    frames drawn from the head's state), per split; None for rows that do not keep it."""
    return success_rates(rows, key) if rows and all(key in r for r in rows) else None


def _policy_result(
    entry: Entry, rows: list[dict], videos: list[tuple[int, str]], out: Path, object_poses: bool
) -> dict:
    by_start: dict[int, list[dict]] = {}
    for r in rows:
        by_start.setdefault(r["episode"], []).append(r)
    starts = [group[0] for group in by_start.values()]  # one row per logged episode
    max_reward = {r["episode"]: r["max_reward"] for r in entry.real}
    episodes = [
        {
            "episode": s["episode"],
            "split": s["split"],
            "initial_xy": s["initial_xy"],
            "real_success": s["real_success"],
            "imagined_success": float(np.mean([g["success"] for g in by_start[s["episode"]]])),
            "near_miss": (not s["real_success"]) and max_reward.get(s["episode"], 0) >= NEAR_MISS_REWARD,
        }
        for s in starts
    ]
    folder = Path("policies") / _safe(entry.name)
    return {
        "name": entry.name,
        "family": entry.family,
        "policy": {"path": entry.policy.path, "kwargs": entry.policy.kwargs},
        "object_poses": object_poses and has_poses(entry.logs),  # the imagined starts read the logged poses
        "real": success_rates(starts, "real_success"),
        "imagined": summarize(rows),
        "imagined_head": _head_rates(rows),
        "imagined_judge": _head_rates(rows, "judge_success"),  # frames=head: the judge's cross-check
        "episodes": episodes,
        "videos": [
            {"episode": ep, "label": label, "path": str(folder / "videos" / f"episode_{ep:06d}.mp4")}
            for ep, label in videos
            if (out / folder / "videos" / f"episode_{ep:06d}.mp4").is_file()
        ],
    }


def ranking_metrics(real: dict[str, dict], other: dict[str, dict], n_boot: int, seed: int) -> dict:
    """Ranking statistics per split between two success-rate tables (policy -> split -> entry)."""
    out = {}
    for split in SPLITS:
        names = [n for n in real if split in real[n] and split in other.get(n, {})]
        if len(names) >= 2:
            out[split] = compare(
                [real[n][split]["rate"] for n in names],
                [other[n][split]["rate"] for n in names],
                n_boot,
                seed,
            )
    return out


def _noise_floor(cfg: RankConfig, real: dict[str, dict]) -> dict | None:
    """The same statistics between the logs and a second, independent real run of the same policies."""
    if not cfg.noise_floor_dir:
        return None
    second = {}
    for name in real:
        root = Path(cfg.noise_floor_dir) / name
        if not (root / "meta" / "info.json").is_file():
            raise FileNotFoundError(f"noise_floor_dir has no second run of '{name}' ({root}).")
        labels = episode_labels(root)
        rows = [
            {"split": labels.get(r["episode"], {}).get("distribution", "all"), "real_success": r["success"]}
            for r in read_log_outcomes(root)
        ]
        second[name] = success_rates(rows, "real_success")
    return ranking_metrics(real, second, cfg.n_boot, cfg.seed)


def _mapped(success_map: SuccessMap | None, policies: list[dict], cfg: RankConfig) -> dict | None:
    """With the model's success map: each policy's mapped rates (`imagined_mapped`, added in place) and
    their ranking statistics against the logs, with what the map was fitted on."""
    if success_map is None:
        return None
    for p in policies:
        p["imagined_mapped"] = mapped_rates(p["imagined"], success_map)
    real = {p["name"]: p["real"] for p in policies}
    mapped = {p["name"]: p["imagined_mapped"] for p in policies}
    return {"source": success_map.source, "metrics": ranking_metrics(real, mapped, cfg.n_boot, cfg.seed)}


def _eval_config(cfg: RankConfig, entry: Entry, videos: tuple[int, ...]) -> ImaginedEvalConfig:
    """One policy's imagined evaluation from its own logs' episode starts."""
    return ImaginedEvalConfig(
        checkpoint=cfg.checkpoint,
        policy=entry.policy,
        starts=(str(entry.logs),),
        samples_per_start=cfg.samples_per_start,
        max_steps=cfg.max_steps,
        batch_size=cfg.batch_size,
        render=cfg.render,
        sampling_steps=cfg.sampling_steps,
        videos=videos,
        output=str(Path(cfg.output_dir) / "policies" / _safe(entry.name) / "episodes.jsonl"),
        seed=cfg.seed,
        device=cfg.device,
        object_poses=cfg.object_poses,
        frames=cfg.frames,
    )


def rank(cfg: RankConfig) -> dict:
    """Evaluate every checkpoint of `logs_dir` in imagination, compare with the logs, write rank.json."""
    out = Path(cfg.output_dir)
    check_start(WorldModelConfig.load(cfg.checkpoint), cfg.checkpoint, cfg.object_poses, frames=cfg.frames)
    success_map = load_success_map(cfg.checkpoint)  # a broken one is refused before hours of imagining
    entries = discover(cfg)
    for e in entries:
        if e.error is None:
            try:
                e.real = read_log_outcomes(e.logs)
            except ValueError as err:
                e.error = str(err)
    live = [e for e in entries if e.error is None]
    picks = {e.name: choose_videos(e.real, cfg.videos) for e in live}
    configs = [_eval_config(cfg, e, tuple(ep for ep, _ in picks[e.name])) for e in live]
    for e, result in zip(live, evaluate_many(configs, cfg.workers), strict=True):
        e.error = result["error"]
    policies = [
        _policy_result(e, read_results(c.output), picks[e.name], out, cfg.object_poses)
        for e, c in zip(live, configs, strict=True)
        if e.error is None
    ]
    real = {p["name"]: p["real"] for p in policies}
    imagined = {p["name"]: p["imagined"] for p in policies}
    payload = {
        "checkpoint": cfg.checkpoint,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {
            k: getattr(cfg, k) for k in ("samples_per_start", "render", "seed", "object_poses", "frames")
        },
        "object_poses": poses_note(
            cfg.object_poses, [p["name"] for p in policies if not p["object_poses"]], cfg.frames
        ),
        "policies": policies,
        "failed": [{"name": e.name, "error": e.error} for e in entries if e.error],
        "metrics": ranking_metrics(real, imagined, cfg.n_boot, cfg.seed),
        "noise_floor": _noise_floor(cfg, real),
        "success_map": _mapped(success_map, policies, cfg),
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "rank.json", json.dumps(payload, indent=1))
    if cfg.report and policies:
        from r2s2r.eval.report import write_report

        write_report(out / "rank.json")
    return payload
