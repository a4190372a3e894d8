"""Record any policy in the reference world as a LeRobot v3 dataset, written by LeRobot's own writer.

Episodes run in lockstep batches of `world.num_envs`. Each batch is rolled out in memory, then written
episode by episode through `LeRobotDataset.add_frame` / `save_episode`, finalized, and committed (see
`commit.py`). A failure anywhere in a batch leaves the dataset at the previous commit; re-running the same
command continues with the first missing episode, so nothing is duplicated and nothing half-written stays.

Episode `i` is a pure function of (`seed`, `i`): its initial object pose comes from
`SeedSequence([seed, i])`, and policies draw their own randomness from what they observe, so the same seed
reproduces the same episode whatever the batch size or how often the run was interrupted.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing as mp
import shutil
import time
import warnings
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from r2s2r.data.commit import read_commit, restore_commit, write_commit
from r2s2r.robots.aloha import TASK_TEXT, AlohaWorld, WorldConfig, sample_object_poses
from r2s2r.robots.spec import EmbodimentSpec
from r2s2r.rollout.policy import Policy, PolicyConfig, check_action, load_policy, to_policy_batch

log = logging.getLogger(__name__)

DISTRIBUTIONS = ("id", "ood", "mixed")
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
    episode_length: int = 400  # control steps per episode (50 Hz: 8 s, as LeRobot's ALOHA datasets)
    distribution: str = "mixed"  # initial object poses: id (gym-aloha's box) | ood (ring) | mixed (alternate)
    seed: int = 0  # episode i is a pure function of (seed, i)
    vcodec: str = "h264"  # h264 (decord reads it) | libsvtav1 (LeRobot's default, torchcodec only) | hevc
    workers: int = 0  # processes that simulate and render batches in parallel; 0 = this process only
    world: WorldConfig = field(default_factory=WorldConfig)  # the reference world and how it is observed
    policy: PolicyConfig = field(default_factory=PolicyConfig)  # who acts

    def __post_init__(self) -> None:
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
            "policy_kwargs": self.policy.kwargs, "vcodec": self.vcodec, "fps": fps,
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
    n_obj = world.object_pose_dim // 7
    obj_names = [f"obj{o}_{c}" for o in range(n_obj) for c in ("x", "y", "z", "qw", "qx", "qy", "qz")]
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
                                          "names": obj_names},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.success": {"dtype": "bool", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    })  # fmt: skip
    return features


def episode_initial_pose(cfg: RecordConfig, episode_index: int) -> tuple[np.ndarray, str]:
    """The initial object pose of episode `episode_index` and whether it is ID or OOD."""
    dist = cfg.distribution
    if dist == "mixed":
        dist = "id" if episode_index % 2 == 0 else "ood"
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, episode_index]))
    pose = sample_object_poses(cfg.world.task, dist, rng, 1, cfg.world.ood_margin)[0]
    return pose, dist


def rollout_batch(
    world: AlohaWorld,
    policy: Policy,
    poses: np.ndarray,
    episode_length: int,
    policy_name: str,
    episodes: list[int] | None = None,
    render: bool = True,
) -> list[list[dict]]:
    """Run the policy from `poses` for `episode_length` steps; one list of LeRobot frames per env.

    `episodes` (the episode index each env plays) only serves to name episodes in errors; with
    `render=False` the frames carry no images (for policies that do not look, e.g. demonstrators).
    """
    obs = world.reset(poses, render)
    policy.reset()
    batch_size = len(poses)
    frames: list[list[dict]] = [[] for _ in range(batch_size)]
    for t in range(episode_length):
        try:
            raw_action = policy.select_action(to_policy_batch(obs))
        except Exception as e:
            raise RuntimeError(f"policy {policy_name} raised at step {t}: {type(e).__name__}: {e}") from e
        action = check_action(raw_action, batch_size, world.spec.action_dim, policy_name, episodes)
        result = world.step(action, render)
        for b in range(batch_size):
            frame = {key: value[b] for key, value in obs.items()}
            frame["action"] = action[b]
            frame["next.reward"] = np.array([result.reward[b]], dtype=np.float32)
            frame["next.success"] = np.array([result.success[b]], dtype=bool)
            frame["next.done"] = np.array([t == episode_length - 1], dtype=bool)
            frames[b].append(frame)
        obs = result.observation
    return frames


def _open_dataset(cfg: RecordConfig, root: Path, spec: EmbodimentSpec, fps: int):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if (root / "meta" / "info.json").is_file():
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


def _write_batch(dataset, frames: list[list[dict]], task_text: str) -> None:
    _quiet_writers()
    for episode in frames:
        for frame in episode:
            dataset.add_frame({**frame, "task": task_text})
        dataset.save_episode()
    dataset.finalize()
    images = dataset.root / "images"  # LeRobot's PNG staging area, emptied by each encoded episode
    if images.is_dir() and not any(p.is_file() for p in images.rglob("*")):
        shutil.rmtree(images)


LAPSE_STEPS = 50  # 1 s at reward 0 after the first contact: the object was lost (contacts flicker for less)


def _label_episode(frames: list[dict], episode_index: int, pose: np.ndarray, dist: str) -> dict:
    """Per-episode labels, all derived from the recorded frames, so any policy's episodes get them.

    `success` is gym-aloha's definition (top reward at any step); `success_at_end` also asks that the
    object still be held at the last step; `recovered` marks a success that came after the object was
    lost: `LAPSE_STEPS` steps without any contact reward after the first contact (a missed grasp or a
    drop, then a new attempt). Contact rewards flicker for a few steps even in clean episodes.
    """
    success = np.array([f["next.success"][0] for f in frames])
    rewards = np.array([f["next.reward"][0] for f in frames])
    first = int(np.argmax(success)) if success.any() else len(frames)
    touched = np.nonzero(rewards[:first] > 0)[0]
    longest_lapse = _longest_run(rewards[touched[0] : first] == 0) if len(touched) else 0
    return {
        "episode_index": episode_index,
        "distribution": dist,
        "initial_object_pose": [round(float(v), 6) for v in pose],
        "success": bool(success.any()),
        "success_at_end": bool(success[-1]),
        "success_step": first if success.any() else -1,
        "recovered": bool(success.any() and longest_lapse >= LAPSE_STEPS),
        "max_reward": float(rewards.max()),
    }


def _longest_run(mask: np.ndarray) -> int:
    """Length of the longest run of True in a 1-D bool array."""
    best = run = 0
    for value in mask:
        run = run + 1 if value else 0
        best = max(best, run)
    return best


def _resume_state(cfg: RecordConfig, root: Path, key: dict) -> list[dict]:
    """Episodes already committed at `root` (empty for a new dataset); rolls back a killed batch."""
    partial = root.with_name(root.name + ".partial")
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


@dataclass
class _Batch:
    indices: list[int]  # episodes this batch records
    padded: list[int]  # the same, padded with repeats of the last one to fill every lockstep env
    poses: np.ndarray  # (num_envs, 7 * n_objects) initial object poses
    dists: list[str]  # "id" / "ood" per padded episode


def _batches(cfg: RecordConfig, first_episode: int) -> list[_Batch]:
    """The lockstep batches that cover episodes `first_episode` .. `num_episodes - 1`."""
    batches = []
    for first in range(first_episode, cfg.num_episodes, cfg.world.num_envs):
        indices = list(range(first, min(first + cfg.world.num_envs, cfg.num_episodes)))
        padded = indices + [indices[-1]] * (cfg.world.num_envs - len(indices))
        poses, dists = zip(*(episode_initial_pose(cfg, i) for i in padded), strict=True)
        batches.append(_Batch(indices, padded, np.stack(poses), list(dists)))
    return batches


def _play(
    world: AlohaWorld, policy: Policy, cfg: RecordConfig, batch: _Batch, render: bool
) -> list[list[dict]]:
    torch.manual_seed(cfg.seed * 1_000_003 + batch.indices[0])  # for stochastic learned policies
    try:
        frames = rollout_batch(
            world, policy, batch.poses, cfg.episode_length, cfg.policy.path, batch.padded, render
        )
    except Exception as e:
        raise RuntimeError(f"episodes {batch.indices[0]}..{batch.indices[-1]} failed: {e}") from e
    return frames[: len(batch.indices)]


_WORKER: dict = {}  # the world and policy of a rollout worker process


def _worker_init(cfg: RecordConfig) -> None:
    import r2s2r.robots.aloha  # noqa: F401  (torch and triton before MuJoCo's GL, in the new process too)

    _WORKER["world"], _WORKER["policy"] = AlohaWorld(cfg.world), load_policy(cfg.policy)


def _worker_play(cfg: RecordConfig, batch: _Batch, render: bool) -> list[list[dict]]:
    return _play(_WORKER["world"], _WORKER["policy"], cfg, batch, render)


def _played(cfg: RecordConfig, batches: list[_Batch], render: bool = True):
    """Yield (batch, frames) in order, simulated here or by `cfg.workers` processes working ahead.

    Each worker holds its own world and policy; at most `workers` batches are in flight, so memory stays
    bounded by a few batches of frames whatever the number of episodes.
    """
    if cfg.workers == 0:
        policy = load_policy(cfg.policy)
        with AlohaWorld(cfg.world) as world:
            for batch in batches:
                yield batch, _play(world, policy, cfg, batch, render)
        return
    context = mp.get_context("spawn")  # a fork would copy this process's GL and decoder state
    with cf.ProcessPoolExecutor(
        cfg.workers, mp_context=context, initializer=_worker_init, initargs=(cfg,)
    ) as pool:
        pending = deque()
        for batch in batches:
            pending.append((batch, pool.submit(_worker_play, cfg, batch, render)))
            if len(pending) >= cfg.workers:
                batch_done, future = pending.popleft()
                yield batch_done, future.result()
        while pending:
            batch_done, future = pending.popleft()
            yield batch_done, future.result()


def record(cfg: RecordConfig) -> RecordSummary:
    """Record (or finish recording) `cfg.num_episodes` episodes of `cfg.policy` into `cfg.root`."""
    start = time.perf_counter()
    root = Path(cfg.root)
    load_policy(cfg.policy)  # fail on a bad policy before touching anything
    spec = AlohaWorld.spec_for(cfg.world)
    key = cfg.resume_key(spec.control_hz)
    episodes = _resume_state(cfg, root, key)
    resumed_from = len(episodes)
    bar = tqdm(total=cfg.num_episodes, initial=min(resumed_from, cfg.num_episodes), desc="record", unit="ep")
    played = _played(cfg, _batches(cfg, resumed_from))
    while True:
        try:
            batch, frames = next(played)
        except StopIteration:
            break
        except Exception as e:
            raise RuntimeError(
                f"{e}; none of them was written, the dataset keeps its {len(episodes)} complete episodes "
                "(re-run to resume)."
            ) from e
        target = root if root.exists() else root.with_name(root.name + ".partial")
        _write_batch(_open_dataset(cfg, target, spec, spec.control_hz), frames, TASK_TEXT[cfg.world.task])
        episodes += [
            _label_episode(*a) for a in zip(frames, batch.indices, batch.poses, batch.dists, strict=False)
        ]
        write_commit(target, {"config": key, "episodes": episodes})
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
    batches = _batches(cfg, 0)
    for batch, frames in tqdm(
        _played(cfg, batches, render), total=len(batches), desc="evaluate", unit="batch"
    ):
        labels += [
            _label_episode(*a) for a in zip(frames, batch.indices, batch.poses, batch.dists, strict=False)
        ]
    return labels


def summary_text(summary: RecordSummary) -> str:
    """One line: where, how many episodes, and success per ID/OOD (any step / still held at the end)."""
    by_dist: dict[str, list[dict]] = {}
    for e in summary.episodes:
        by_dist.setdefault(e["distribution"], []).append(e)
    rates = ", ".join(
        f"{d}: {sum(e['success'] for e in v)}/{len(v)} succeeded "
        f"({sum(e['success_at_end'] for e in v)} held at the end)"
        for d, v in sorted(by_dist.items())
    )
    return (
        f"{summary.root}: {summary.num_episodes} episodes "
        f"({summary.new_episodes} new, {summary.seconds:.1f} s); {rates}"
    )
