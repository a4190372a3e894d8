"""Record any policy in a reference world (MuJoCo ALOHA or gym-pusht's PushT, `robots/worlds.py`) as a
LeRobot v3 dataset, written by LeRobot's own writer.

Episodes run in lockstep batches of `world.num_envs`. Each batch is rolled out in memory, then written
episode by episode through `LeRobotDataset.add_frame` / `save_episode`, finalized, and committed (see
`commit.py`). A failure anywhere in a batch leaves the dataset at the previous commit; re-running the same
command continues with the first missing episode, so nothing is duplicated and nothing half-written stays.

Episode `i` is a pure function of (`seed`, `i`): its initial object pose comes from
`SeedSequence([seed, i])`, and policies draw their own randomness from what they observe, so the same seed
reproduces the same episode whatever the batch size or how often the run was interrupted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from r2s2r.data.commit import PARTIAL_SUFFIX, read_commit, restore_commit, write_commit
from r2s2r.errors import DiskFullError
from r2s2r.files import is_disk_full
from r2s2r.policies.episodes import (
    DISTRIBUTIONS,
    EpisodeBatch,
    batch_labels,
    episode_batches,
    in_order,
    play_episodes,
)
from r2s2r.policies.policy import PolicyConfig, PolicyError, load_policy
from r2s2r.robots.aloha import TASK_TEXT, WorldConfig
from r2s2r.robots.spec import PUSHT_EPISODE_LENGTH, EmbodimentSpec
from r2s2r.robots.worlds import make_world, world_spec

log = logging.getLogger(__name__)

ALOHA_EPISODE_LENGTH = 400  # control steps: 8 s at 50 Hz, as LeRobot's ALOHA datasets

# Settings that must not change when a recording is resumed: they define what an episode is.
_RESUME_KEYS = (
    "task",
    "cameras",
    "image_height",
    "image_width",
    "ood_margin",
    "episode_length",
    "distribution",
    "seed",
    "policy_path",
    "policy_kwargs",
    "vcodec",
    "fps",
)


@dataclass
class RecordConfig:
    """What to record, with which policy, and where."""

    root: str = "outputs/datasets/transfer_cube"  # dataset folder; re-running resumes it
    repo_id: str = "local/aloha_transfer_cube"  # LeRobot repo id stored in the metadata (never pushed)
    num_episodes: int = 8  # total episodes the dataset should hold when done
    episode_length: int = ALOHA_EPISODE_LENGTH  # control steps per episode; pusht reads 400 as 300 (30 s)
    distribution: str = "mixed"  # initial object poses: id (task's box) | ood (ring) | mixed (alternate)
    seed: int = 0  # episode i is a pure function of (seed, i)
    vcodec: str = "h264"  # h264 (decord reads it) | libsvtav1 (LeRobot's default, torchcodec only) | hevc
    workers: int = 0  # processes that simulate and render batches in parallel; 0 = this process only
    world: WorldConfig = field(default_factory=WorldConfig)  # the reference world and how it is observed
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # who acts

    def __post_init__(self) -> None:
        if self.world.task == "pusht" and self.episode_length == ALOHA_EPISODE_LENGTH:
            self.episode_length = PUSHT_EPISODE_LENGTH  # the default is ALOHA's length; PushT has its own
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution='{self.distribution}' must be one of {DISTRIBUTIONS}.")
        if self.num_episodes < 1 or self.episode_length < 2:
            raise ValueError(
                f"num_episodes={self.num_episodes} must be >= 1 and "
                f"episode_length={self.episode_length} >= 2."
            )
        if self.workers < 0:
            raise ValueError(f"workers={self.workers} must be >= 0 (0 simulates in this process).")
        if self.vcodec not in ("h264", "hevc", "libsvtav1"):
            raise ValueError(f"vcodec='{self.vcodec}' must be h264, hevc or libsvtav1.")

    def resume_key(self, fps: int) -> dict:
        w = self.world
        return {
            "task": w.task, "cameras": list(w.cameras), "image_height": w.image_height,
            "image_width": w.image_width, "ood_margin": w.ood_margin, "episode_length": self.episode_length,
            "distribution": self.distribution, "seed": self.seed, "policy_path": self.policy.path,
            "policy_kwargs": json.loads(json.dumps(self.policy.kwargs)),  # as recorded: tuples are lists
            "vcodec": self.vcodec, "fps": fps,
        }  # fmt: skip


@dataclass
class RecordSummary:
    root: Path
    num_episodes: int  # episodes in the dataset now
    new_episodes: int  # episodes this call recorded
    successes: int  # successful episodes among all of them
    seconds: float  # wall time of this call
    episodes: list[dict]  # per-episode labels (index, distribution, initial pose, success, ...)


def dataset_features(spec: EmbodimentSpec, world: WorldConfig) -> dict:
    """LeRobot feature spec of a reference-world recording."""
    joints = list(spec.joint_names)
    features = {
        f"observation.images.{cam}": {
            "dtype": "video",
            "shape": (world.image_height, world.image_width, 3),
            "names": ["height", "width", "channels"],
        }
        for cam in world.cameras
    }
    features.update({
        "observation.state": {"dtype": "float32", "shape": (spec.state_dim,), "names": joints},
        "action": {"dtype": "float32", "shape": (spec.action_dim,), "names": joints},
        "observation.environment_state": {"dtype": "float32", "shape": (world.object_pose_dim,),
                                          "names": world.object_pose_names},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.success": {"dtype": "bool", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    })  # fmt: skip
    return features


@contextlib.contextmanager
def _batch_datasets_cache():
    """A `datasets` cache of this batch's own, removed after it. Opening a dataset copies its episode
    table into the `datasets` cache, a new copy whenever the files changed, that is after every batch: in
    the shared cache a long recording left gigabytes behind."""
    import datasets

    cache, before = tempfile.mkdtemp(prefix="r2s2r-batch-cache-"), datasets.config.HF_DATASETS_CACHE
    datasets.config.HF_DATASETS_CACHE = cache
    try:
        yield
    finally:
        datasets.config.HF_DATASETS_CACHE = before
        shutil.rmtree(cache, ignore_errors=True)


@contextlib.contextmanager
def _without_reading_frames(dataset_class):
    """Open a LeRobot dataset for appending without loading its frames. LeRobot reads every frame of a
    dataset it opens (and copies them into the `datasets` cache, a new copy each time the files changed);
    a writer that only appends never reads them, and reopening a growing recording batch after batch cost
    time and disk quadratic in its length (a 5,000-episode recording left 70 GB of cache). The frames table
    starts empty instead, as it does for a dataset LeRobot creates."""
    load, check = dataset_class.load_hf_dataset, dataset_class._check_cached_episodes_sufficient
    dataset_class.load_hf_dataset = dataset_class.create_hf_dataset
    dataset_class._check_cached_episodes_sufficient = lambda self: True
    try:
        yield
    finally:
        dataset_class.load_hf_dataset, dataset_class._check_cached_episodes_sufficient = load, check


def _open_dataset(cfg: RecordConfig, root: Path, spec: EmbodimentSpec, fps: int):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if (root / "meta" / "info.json").is_file():
        with _without_reading_frames(LeRobotDataset):
            return LeRobotDataset(cfg.repo_id, root=root, vcodec=cfg.vcodec)
    return LeRobotDataset.create(
        cfg.repo_id, fps=fps, features=dataset_features(spec, cfg.world), root=root,
        robot_type=spec.name, use_videos=True, vcodec=cfg.vcodec,
    )  # fmt: skip


def _quiet_writers() -> None:
    """Keep libx264's per-file statistics and datasets' per-episode progress bars off the console."""
    import av
    import datasets

    av.logging.set_libav_level(av.logging.ERROR)
    datasets.disable_progress_bars()  # LeRobot re-enables them whenever it loads a dataset
    # LeRobot's histogram of the bool `next.success` column casts it to uint8, correctly, and warns.
    warnings.filterwarnings("ignore", message="Converting input from bool", category=RuntimeWarning)


@contextlib.contextmanager
def _without_image_embedding(dataset):
    """LeRobot embeds image bytes into each episode's table before writing its parquet by mapping a function
    over every row, 2-3 s for a 400-frame episode even when no column holds an image (videos are separate
    files). For datasets without image features that map changes nothing, so it is skipped there."""
    import lerobot.datasets.lerobot_dataset as writer

    if any(f["dtype"] == "image" for f in dataset.features.values()):
        yield
        return
    embed = writer.embed_images
    writer.embed_images = lambda table: table
    try:
        yield
    finally:
        writer.embed_images = embed


def _write_batch(dataset, frames: list[list[dict]], task_text: str) -> None:
    _quiet_writers()
    with _without_image_embedding(dataset):
        for episode in frames:
            for frame in episode:
                dataset.add_frame({**frame, "task": task_text})
            dataset.save_episode()
    dataset.finalize()
    images = dataset.root / "images"  # LeRobot's PNG staging area, emptied by each encoded episode
    if images.is_dir() and not any(p.is_file() for p in images.rglob("*")):
        shutil.rmtree(images)


def _commit_batch(
    cfg: RecordConfig, target: Path, spec, frames: list, episodes: list[dict], kept: int
) -> None:
    """Write one played batch into `target` and commit it with `episodes` (all of them, this batch's too).

    Whatever fails (a full disk, Ctrl-C, an encoder error), the dataset goes back to its last commit (a
    first batch, which has none, is removed) before the error propagates, so nothing half-written stays; a
    full disk is reported as a `DiskFullError` that says so.
    """
    dataset = None
    try:
        with _batch_datasets_cache():
            dataset = _open_dataset(cfg, target, spec, spec.control_hz)
            _write_batch(dataset, frames, TASK_TEXT[cfg.world.task])
        write_commit(target, {"config": cfg.resume_key(spec.control_hz), "episodes": episodes})
    except BaseException as e:
        _abandon_writers(dataset)
        full = is_disk_full(e, target)  # before the roll-back frees space
        _roll_back(target)
        if full:
            raise DiskFullError(
                f"the disk is full: recording into {cfg.root} failed; the batch was rolled back and the "
                f"dataset keeps its {kept} complete episodes: free space and re-run the command to resume."
            ) from e
        raise


def _abandon_writers(dataset) -> None:
    """Drop a failed batch's open parquet writers and buffered metadata without writing them (their files
    are rolled back), so that LeRobot's destructors find nothing left to flush."""
    if dataset is None:
        return
    for owner in (dataset, dataset.meta):
        if getattr(owner, "metadata_buffer", None):
            owner.metadata_buffer.clear()
        if getattr(owner, "writer", None) is not None:
            with contextlib.suppress(Exception):
                owner.writer.close()
            owner.writer = None


def _roll_back(target: Path) -> None:
    """Put `target` back to its last commit; remove it if it has none (a first batch)."""
    try:
        commit = read_commit(target)
        if commit is None:
            shutil.rmtree(target, ignore_errors=True)
        else:
            restore_commit(target, commit)
    except Exception as e:  # the re-run rolls back what this could not
        log.warning("could not roll %s back now (%s); re-running the same command will", target, e)


def _resume_state(cfg: RecordConfig, root: Path, key: dict) -> list[dict]:
    """Episodes already committed at `root` (empty for a new dataset); rolls back a killed batch."""
    partial = root.with_name(root.name + PARTIAL_SUFFIX)
    if partial.exists():  # a first batch that never committed
        shutil.rmtree(partial)
    if not root.exists():
        return []
    commit = read_commit(root)
    if commit is None:
        raise ValueError(
            f"{root} exists but is not an r2s2r recording (no r2s2r_recording.json); "
            "pick a new --root or delete that folder."
        )
    changed = {k: (commit["config"].get(k), v) for k, v in key.items() if commit["config"].get(k) != v}
    if changed:
        diff = "; ".join(f"{k}: recorded {old!r}, now {new!r}" for k, (old, new) in changed.items())
        raise ValueError(
            f"cannot resume {root} with different settings ({diff}); use the same ones or a new --root."
        )
    removed = restore_commit(root, commit)
    if removed:
        log.warning(
            "rolled %s back to its last complete batch (removed %d leftover files)", root, len(removed)
        )
    return commit["episodes"]


def batches(cfg: RecordConfig, first_episode: int = 0) -> list[EpisodeBatch]:
    """The lockstep batches of `cfg`'s episode set from `first_episode` on."""
    return episode_batches(cfg.world, cfg.num_episodes, cfg.distribution, cfg.seed, first_episode)


_WORKER: dict = {}  # the world and policy of this process (or of a rollout worker process)


def _worker_init(cfg: RecordConfig) -> None:
    import r2s2r.robots.aloha  # noqa: F401  (torch and triton before MuJoCo's GL, in the new process too)

    if "world" in _WORKER:  # a world left by an earlier call in this process
        _WORKER["world"].close()
    _WORKER["world"], _WORKER["policy"] = make_world(cfg.world), load_policy(cfg.policy)


def _worker_play(cfg: RecordConfig, batch: EpisodeBatch, render: bool, keep_frames: bool) -> dict:
    return play_episodes(
        _WORKER["world"], _WORKER["policy"], batch, cfg.episode_length, cfg.seed, cfg.policy.path,
        render_every=int(render), keep_frames=keep_frames,
    )  # fmt: skip


def _played(cfg: RecordConfig, todo: list[EpisodeBatch], render: bool = True, keep_frames: bool = True):
    """Yield (batch, played) in order, simulated here or by `cfg.workers` processes working ahead."""
    units = [(cfg, batch, render, keep_frames) for batch in todo]
    yield from zip(todo, in_order(_worker_play, units, cfg.workers, _worker_init, (cfg,)), strict=True)


def record(cfg: RecordConfig) -> RecordSummary:
    """Record (or finish recording) `cfg.num_episodes` episodes of `cfg.policy` into `cfg.root`."""
    start = time.perf_counter()
    root = Path(cfg.root)
    load_policy(cfg.policy)  # fail on a bad policy before touching anything
    spec = world_spec(cfg.world)
    key = cfg.resume_key(spec.control_hz)
    episodes = _resume_state(cfg, root, key)
    resumed_from = len(episodes)
    bar = tqdm(total=cfg.num_episodes, initial=min(resumed_from, cfg.num_episodes), desc="record", unit="ep")
    played = _played(cfg, batches(cfg, resumed_from))
    while True:
        try:
            batch, result = next(played)
        except StopIteration:
            break
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise PolicyError(
                f"{first}; none of them was written, the dataset keeps its {len(episodes)} complete episodes "
                "(re-run to resume)."
            ) from e
        target = root if root.exists() else root.with_name(root.name + PARTIAL_SUFFIX)
        _commit_batch(
            cfg, target, spec, result["frames"], episodes + batch_labels(batch, result), len(episodes)
        )
        episodes += batch_labels(batch, result)
        if target != root:
            target.rename(root)  # the first complete batch makes the dataset appear, atomically
        bar.update(len(batch.indices))
        bar.set_postfix(success=f"{sum(e['success'] for e in episodes)}/{len(episodes)}")
    bar.close()
    return RecordSummary(
        root=root,
        num_episodes=len(episodes),
        new_episodes=len(episodes) - resumed_from,
        successes=sum(e["success"] for e in episodes),
        seconds=time.perf_counter() - start,
        episodes=episodes,
    )


def evaluate(cfg: RecordConfig, render: bool = False) -> list[dict]:
    """The labels `record(cfg)` would write (success, success step, ID/OOD ...), without writing anything.

    Episodes are exactly those `record` would play; without rendering this is physics and policy only,
    about 20x faster, for policies that do not look at images.
    """
    labels = []
    todo = batches(cfg)
    played = _played(cfg, todo, render, keep_frames=False)
    for batch, result in tqdm(played, total=len(todo), desc="evaluate", unit="batch"):
        labels += batch_labels(batch, result)
    return labels


def summary_text(summary: RecordSummary) -> str:
    """One line: where, how many episodes, success per ID/OOD (any step / still held at the end), and the
    episodes a physics fault stopped, if any."""
    by_dist: dict[str, list[dict]] = {}
    for e in summary.episodes:
        by_dist.setdefault(e["distribution"], []).append(e)
    rates = ", ".join(
        f"{d}: {sum(e['success'] for e in v)}/{len(v)} succeeded "
        f"({sum(e['success_at_end'] for e in v)} held at the end)"
        for d, v in sorted(by_dist.items())
    )
    stopped = [e["episode_index"] for e in summary.episodes if "physics_stopped_at" in e]
    faults = (
        f"; {len(stopped)} stopped by a physics fault, labelled physics_stopped_at (episodes "
        f"{', '.join(map(str, stopped[:10]))}{' ...' if len(stopped) > 10 else ''})"
        if stopped
        else ""
    )
    return (
        f"{summary.root}: {summary.num_episodes} episodes "
        f"({summary.new_episodes} new, {summary.seconds:.1f} s); {rates}{faults}"
    )
