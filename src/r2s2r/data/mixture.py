"""Several LeRobot datasets, of any known robots and tasks, as one training set for one world model.

`r2s2r-train --data.root=[a,b,c]` reads each dataset with `ClipDataset` at the model's frame rate (a robot
recorded at another control rate gets its own frame stride), at the views of its own robot, and yields
samples tagged with three more entries the world model reads:

    robot_index    ()  row of the robot in `WorldModelConfig.robots` (whose projections to use)
    task_index     ()  row of the dataset's task in `WorldModelConfig.tasks` (the task embedding)
    actions_known  ()  False for a dataset listed in `--data.action_free`: its actions and proprio are
                       zeroed here and the model reads them as unknown (footage without actions)

Each batch holds clips of one (robot, task) group, since their shapes differ between groups;
`MixtureBatchSampler` draws the group of batch b and its clips as a pure function of (seed, b), so a
resumed run sees the batches a run that never stopped would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from r2s2r.data.reader import ClipConfig, ClipDataset, feature_stats
from r2s2r.errors import DamagedFileError
from r2s2r.files import read_json
from r2s2r.robots.spec import robot_spec

# what a dataset without actions keeps: frames and the labels of what they show, no actions, no proprio
UNKNOWN_WITHOUT_ACTIONS = ("action", "observation.state")


def split_roots(root: str | list | tuple) -> list[str]:
    """`--data.root` as a list: a single folder, or several as `[a,b,c]`."""
    if isinstance(root, (list, tuple)):
        return [str(r) for r in root]
    text = str(root).strip()
    if text.startswith("[") and text.endswith("]"):
        roots = [r.strip().strip("'\"") for r in text[1:-1].split(",") if r.strip()]
        if not roots:
            raise ValueError("--data.root=[] names no dataset; give at least one folder.")
        return roots
    return [text]


def dataset_robot(root: str | Path, default: str = "aloha") -> str:
    """The robot that recorded a LeRobot dataset (`robot_type` in meta/info.json), `default` if unset."""
    info = Path(root, "meta", "info.json")
    if not info.is_file():
        raise FileNotFoundError(f"{root} is not a LeRobot dataset (no meta/info.json); check --data.root.")
    robot = read_json(info, "restore it from a copy or record the dataset again.").get("robot_type")
    return str(robot or default)


def dataset_task(dataset: ClipDataset) -> str:
    """The dataset's task text (its first, if it holds several)."""
    tasks = dataset.meta.tasks
    if tasks is None or len(tasks) == 0:
        raise DamagedFileError(f"{dataset.root} lists no task in meta/tasks.parquet; record it again.")
    return str(tasks.index[0])


@dataclass
class Source:
    """One dataset of the mixture."""

    dataset: ClipDataset
    robot: str
    task: str
    actions_known: bool


def open_sources(
    cfg: ClipConfig, frame_rate: int, own_cameras: tuple[str, ...], own_robot: str = ""
) -> list[Source]:
    """Every dataset of `cfg.root` at `frame_rate` Hz: the own robot's (the first dataset's, or `own_robot`)
    at `own_cameras`, another robot's at all its views. `cfg.episodes` selects episodes of the first only."""
    roots = split_roots(cfg.root)
    free = {str(Path(r).resolve()) for r in split_roots(list(cfg.action_free))}
    if unknown := free - {str(Path(r).resolve()) for r in roots}:
        raise ValueError(f"--data.action_free names {sorted(unknown)}, which are not in --data.root.")
    own = own_robot or dataset_robot(roots[0], cfg.robot or "aloha")
    sources = []
    for i, root in enumerate(roots):
        robot = dataset_robot(root, cfg.robot or "aloha")
        robot_spec(robot)  # an unknown robot is refused here, naming the known ones
        one = replace(cfg, root=root, robot=robot, frame_rate=frame_rate, action_free=(),
                      cameras=own_cameras if robot == own else (),
                      episodes=cfg.episodes if i == 0 else None)  # fmt: skip
        dataset = ClipDataset(one)
        known = str(Path(root).resolve()) not in free
        sources.append(Source(dataset, robot, dataset_task(dataset), known))
    return sources


def robot_stats(sources: list[Source], robot: str) -> dict[str, dict[str, torch.Tensor]]:
    """Action and proprio statistics of `robot`, pooled over its datasets with actions (all of them if
    none has)."""
    mine = [s for s in sources if s.robot == robot]
    mine = [s for s in mine if s.actions_known] or mine
    stats = {}
    for key in UNKNOWN_WITHOUT_ACTIONS:
        rows = np.concatenate([s.dataset.data[key][_used_rows(s.dataset)] for s in mine])
        stats[key] = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in feature_stats(rows).items()}
    return stats


def _used_rows(dataset: ClipDataset) -> np.ndarray:
    return np.concatenate([np.nonzero(dataset.data["episode_index"] == ep)[0] for ep in dataset.episodes])


class MixtureDataset(torch.utils.data.Dataset):
    """The clips of every source, in order, tagged with robot, task and whether actions are known."""

    def __init__(self, sources: list[Source], robots: list[str], tasks: list[str]):
        self.sources, self.robots, self.tasks = sources, robots, tasks
        self._cum = np.concatenate([[0], np.cumsum([len(s.dataset) for s in sources])])

    def __len__(self) -> int:
        return int(self._cum[-1])

    def __getitem__(self, idx: int) -> dict[str, torch.Tensor]:
        k = int(np.searchsorted(self._cum, idx, side="right") - 1)
        source = self.sources[k]
        sample = source.dataset[int(idx - self._cum[k])]
        if not source.actions_known:
            for key in UNKNOWN_WITHOUT_ACTIONS:
                sample[key] = torch.zeros_like(sample[key])
        sample["robot_index"] = torch.tensor(self.robots.index(source.robot))
        sample["task_index"] = torch.tensor(self.tasks.index(source.task))
        sample["actions_known"] = torch.tensor(source.actions_known)
        return sample

    def groups(self) -> list[np.ndarray]:
        """Clip indices of each (robot, task) group: the clips one batch may mix."""
        return [np.concatenate([self._clips(k) for k in group]) for group in self._source_groups()]

    def group_weights(self, action_free_share: float) -> list[np.ndarray] | None:
        """Per group, each clip's chance of being drawn, so that `action_free_share` of a batch comes from
        the action-free datasets where a group has both kinds; None (uniform) for a share of 0."""
        if action_free_share == 0:
            return None
        weights = []
        for group in self._source_groups():
            free = np.concatenate([[not self.sources[k].actions_known] * len(self._clips(k)) for k in group])
            w = np.ones(len(free))
            if free.any() and not free.all():
                w = np.where(free, action_free_share / free.sum(), (1 - action_free_share) / (~free).sum())
            weights.append(w / w.sum())
        return weights

    def _source_groups(self) -> list[list[int]]:
        by_group: dict[tuple[str, str], list[int]] = {}
        for k, s in enumerate(self.sources):
            by_group.setdefault((s.robot, s.task), []).append(k)
        return list(by_group.values())

    def _clips(self, k: int) -> np.ndarray:
        return np.arange(self._cum[k], self._cum[k + 1])


class MixtureBatchSampler(torch.utils.data.Sampler):
    """Batches of one group each: batch b's group (drawn in proportion to the groups' clips) and its clips
    (without repeats; with `weights`, each group's clip probabilities) are a pure function of (seed, b);
    `start_batch` skips the batches already trained on, and process `rank` of `world` takes every
    world-th batch."""

    def __init__(
        self, groups: list[np.ndarray], batch_size: int, seed: int, start_batch: int = 0,
        rank: int = 0, world: int = 1, weights: list[np.ndarray] | None = None,
    ):  # fmt: skip
        if small := [len(g) for g in groups if len(g) < batch_size]:
            raise ValueError(f"a dataset group has {small[0]} clips, fewer than one batch of {batch_size}; "
                             "record more data or lower --batch_size.")  # fmt: skip
        self.groups, self.batch_size, self.seed = groups, batch_size, seed
        self.start, self.rank, self.world = start_batch, rank, world
        sizes = np.array([len(g) for g in groups], dtype=np.float64)
        self.weights = sizes / sizes.sum()
        self.clip_weights = weights

    def batch(self, b: int) -> list[int]:
        rng = np.random.default_rng([self.seed, b])
        g = int(rng.choice(len(self.groups), p=self.weights))
        p = None if self.clip_weights is None else self.clip_weights[g]
        return self.groups[g][rng.choice(len(self.groups[g]), self.batch_size, replace=False, p=p)].tolist()

    def __iter__(self):
        b = self.start
        while True:
            yield self.batch(b * self.world + self.rank)
            b += 1
