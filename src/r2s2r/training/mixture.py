"""Models over several datasets, robots and tasks, and fine-tuning a pretrained model on a new dataset.

`mixture_config` turns a base config (a preset, or a pretrained model's) and the datasets to train on into
the config of the model that learns from them: the first dataset's robot and task are the model's own (its
state head and judge serve them), every other robot becomes an `EmbodimentConfig` with its own projections,
and every task text a row of the task embedding. `adapt_pretrained` then loads a pretrained model's
weights into that model wherever a weight of the same name has the same shape (projections of the robots
it knows, the shared denoiser, the head's parts whose sizes do not depend on the task), grows the task
embedding by the new tasks, and keeps each known robot's normalization, so the projections read the
numbers they were trained on. A dataset of a robot the pretrained model does not know is refused: no
projection exists for its actions.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import torch

from r2s2r.data.mixture import Source, robot_stats
from r2s2r.errors import UserError
from r2s2r.model.configuration_world_model import EmbodimentConfig, WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.robots.spec import robot_spec

log = logging.getLogger(__name__)
STAT_BUFFERS = ("state_mean", "state_std", "action_mean", "action_std")


class UnknownRobotError(UserError, ValueError):
    """A fine-tuning dataset's robot has no projection in the pretrained model."""


def model_frame_rate(config: WorldModelConfig) -> int:
    """Model frames per second: the own robot's control rate over its frame stride."""
    hz = robot_spec(config.robot).control_hz
    if hz % config.frame_stride:
        raise ValueError(f"frame_stride={config.frame_stride} does not divide {config.robot}'s {hz} Hz.")
    return hz // config.frame_stride


def check_known_robot(pretrained: WorldModelConfig, robot: str, where: str) -> None:
    """Refuse a dataset whose robot the pretrained model has no projections for."""
    if robot not in pretrained.robots:
        raise UnknownRobotError(
            f"{where} was recorded by robot '{robot}', which the pretrained model does not know (it knows "
            f"{pretrained.robots}): no action or proprio projection can be made for it; train from scratch "
            "(no --init_from), or pretrain with data of that robot."
        )


def _sketchable(robot: str, action_dim: int, state_dim: int) -> bool:
    from r2s2r.robots.arm_sketch import ARM_CHAINS

    return robot in ARM_CHAINS and action_dim == state_dim


def mixture_config(
    base: WorldModelConfig, sources: list[Source], pretrained: bool = False
) -> WorldModelConfig:
    """The config of a model over `sources` (the first is its own robot and task), built on `base`: its
    architecture and, for a `pretrained` base, the robots and tasks it already knows (kept, in their order;
    a preset's robot is only a default)."""
    own = sources[0]
    spec = robot_spec(own.robot)
    env = own.dataset.data.get("observation.environment_state")
    env_dim = 0 if env is None else int(env.shape[1])
    cameras = tuple(k.removeprefix("observation.images.") for k in own.dataset.camera_keys)
    arm_sketch = base.arm_sketch and _sketchable(own.robot, spec.action_dim, spec.state_dim)
    others = {e.robot: e for e in base.embodiments}
    if pretrained and base.robot != own.robot:  # the base's own robot stays known, as another embodiment
        others[base.robot] = base.embodiment()
    for s in sources[1:]:
        if s.robot != own.robot and s.robot not in others:
            e = robot_spec(s.robot)
            views = tuple(k.removeprefix("observation.images.") for k in s.dataset.camera_keys)
            sketch = base.arm_sketch and _sketchable(s.robot, e.action_dim, e.state_dim)
            others[s.robot] = EmbodimentConfig(
                s.robot, e.action_dim, e.state_dim, views, s.dataset.stride, sketch
            )
    others.pop(own.robot, None)
    tasks = list(base.tasks) + [t for t in dict.fromkeys(s.task for s in sources) if t not in base.tasks]
    return replace(
        base, robot=own.robot, action_dim=spec.action_dim, state_dim=spec.state_dim, env_state_dim=env_dim,
        cameras=cameras, frame_stride=own.dataset.stride, arm_sketch=arm_sketch,
        object_sketch=base.object_sketch and arm_sketch and env_dim % 7 == 0 and env_dim > 0,
        embodiments=list(others.values()), tasks=tuple(tasks), task=own.task,
    )  # fmt: skip


def set_mixture_stats(model: WorldModel, sources: list[Source], keep: WorldModel | None = None) -> None:
    """Normalization of every robot: kept from `keep` (a pretrained model) for the robots it knows, else
    pooled over the robot's datasets; the object poses' from the own dataset."""
    own = model.config.robot
    model.set_stats(
        {k: v for k, v in sources[0].dataset.stats.items() if k == "observation.environment_state"}
    )
    for robot in model.config.robots:
        if keep is not None and robot in keep.config.robots:
            stats = {name: getattr(keep.stats_of(robot), name).clone() for name in STAT_BUFFERS}
            target = model.stats_of(robot)
            for name, value in stats.items():
                getattr(target, name).copy_(value)
        elif robot == own:
            model.set_stats(robot_stats(sources, robot))
        else:
            model.set_robot_stats(robot, robot_stats(sources, robot))
    model.state_head.set_scales(model)


def load_matching(model: WorldModel, pretrained: WorldModel) -> dict[str, list[str]]:
    """Copy every pretrained weight whose name and shape `model` shares (normalization is
    `set_mixture_stats`' job); the task embedding keeps its known rows and starts new tasks at their mean.
    Returns the names loaded, and those left at their initialisation (`fresh`)."""
    theirs = pretrained.state_dict()
    mine = model.state_dict()
    loaded, fresh = [], []
    for name, value in mine.items():
        if name.endswith(("_mean", "_std")):  # normalization: set_mixture_stats' job (and set_scales')
            continue
        if name == "denoiser.task_emb.weight" and name in theirs:
            value.copy_(_grown_tasks(theirs[name], pretrained.config.tasks, model.config.tasks))
            loaded.append(name)
        elif name in theirs and theirs[name].shape == value.shape:
            value.copy_(theirs[name])
            loaded.append(name)
        else:
            fresh.append(name)
    model.load_state_dict(mine)
    return {"loaded": loaded, "fresh": fresh}


def _grown_tasks(weight: torch.Tensor, old: tuple[str, ...], new: tuple[str, ...]) -> torch.Tensor:
    mean = weight.mean(dim=0)
    return torch.stack([weight[old.index(t)] if t in old else mean for t in new])


def adapt_pretrained(pretrained: WorldModel, sources: list[Source]) -> tuple[WorldModel, dict]:
    """A model over `sources` that starts from `pretrained` (see the module docstring)."""
    for s in sources:
        check_known_robot(pretrained.config, s.robot, str(s.dataset.root))
    config = mixture_config(pretrained.config, sources, pretrained=True)
    model = WorldModel(config)
    report = load_matching(model, pretrained)
    set_mixture_stats(model, sources, keep=pretrained)
    share = sum(model.state_dict()[k].numel() for k in report["loaded"]) / sum(
        p.numel() for p in model.parameters()
    )
    fresh = report["fresh"]
    log.info("started from the pretrained model: %d tensors loaded (%.0f %% of the weights), %d new: %s",
             len(report["loaded"]), 100 * share, len(fresh), ", ".join(fresh[:8]))  # fmt: skip
    return model, {**report, "loaded_share": share}
