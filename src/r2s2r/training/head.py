"""Refine the state-dynamics head of a trained world model for long imagined rollouts (RL, search).

The world model's joint training fits the head on 3-frame unrolls from each clip's first frame, a few
thousand clips in all, and only after one step for the object pose and the reward: enough to steer the
video model, not to carry a 40-frame imagined episode. The head is small, so it can be trained on much more
of the same recordings in minutes on a CPU: `refine_head` keeps the camera trunk (its features of every
recorded frame are computed once), and trains the encoder, the ensemble dynamics and the decoders

- on `window`-frame unrolls starting at any frame of any episode, so that the encoding of a mid-episode
  frame (what a deployed policy reads) is trained as well as the episode start;
- with every prediction supervised at every frame, the encoded one included: proprio, object pose, staged
  reward, success;
- each ensemble member on its own bootstrap share of the windows (`bootstrap`), so that the members'
  disagreement grows where the data is thin rather than only where their initialisations differ.

The video model and the judge are not touched. `head_openloop` measures what matters for imagination:
the head replays each held-out episode's logged actions from its first frame; object-pose error at 1, 3
and 6 s, and outcome agreement (whether it predicts success at some frame exactly when the episode
succeeded).

`refine_checkpoint` (`r2s2r-refine-head`) does this to a saved world model on one or more recordings (the
model's own, and any policy rollouts worth adding) and writes a new world model; with `upgrade` it first
gives a checkpoint made before the current head that head (`upgrade_head`), which refinement then trains.

The object pose's normalization is re-taken from the refinement episodes, robustly (median and 1-99 %
range, as `WorldModel.set_stats`): only the head reads or predicts object poses, and it is retrained here.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from r2s2r.data.provenance import dataset_provenance, read_provenance, write_provenance
from r2s2r.data.reader import ClipConfig, ClipDataset, feature_stats, match_frame_rate
from r2s2r.files import atomic_write_text
from r2s2r.model.configuration_world_model import StateHeadConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.model.state_head import pose_error
from r2s2r.robots.spec import robot_spec


@dataclass
class HeadTrainConfig:
    """How to refine the head; see the module docstring."""

    steps: int = 3000  # optimizer steps
    batch_size: int = 128  # windows per step
    window: int = 16  # frames per window: the head unrolls window - 1 chunks
    lr: float = 1e-3  # Adam, cosine-decayed to 0
    bootstrap: float = 0.8  # share of the windows each ensemble member trains on
    seed: int = 0  # sets the windows drawn and, where the head is rebuilt (upgraded), its initial weights


@dataclass
class RefineConfig:
    """`r2s2r-refine-head`: refine a saved world model's state head and write a new world model."""

    checkpoint: str = "assets/world_model_small"  # the world model (WorldModel directory) to start from
    data: list[str] = field(default_factory=list)  # LeRobot datasets to refine on (its own recordings first)
    heldout: str = ""  # LeRobot dataset for the before/after figures (never trained on); "" skips them
    output_dir: str = "outputs/refine_head"  # the refined world model, and refine.json with the figures
    upgrade: bool = True  # give an older checkpoint the current head first (`upgrade_head`)
    pose_modes: int = 0  # free object-pose modes of the refined head (head.pose_modes); 0: the checkpoint's
    kinematics: bool = True  # relate the object to the grippers (head.kinematics); False: a pose-only head
    arm_targets: bool = False  # the arm joints end each frame at their last target (head.arm_targets)
    still_mode: bool = False  # a pose mode that keeps the object exactly where it is (head.still_mode)
    holds: bool = False  # imagined holds are holds: rigid, and kept in mid-air until released (head.holds)
    cameras: bool = True  # the head reads the views (head.reads_cameras); False: proprio and object pose
    # only, so --data and --heldout may be state-only recordings (r2s2r-record --world.cameras='[]')
    max_episodes: int = 0  # episodes per dataset to read (0: all)
    head: HeadTrainConfig = field(default_factory=HeadTrainConfig)  # optimisation of the refinement

    def __post_init__(self) -> None:
        if isinstance(self.data, str):
            self.data = [self.data]
        if not self.data:
            raise ValueError("no --data; give the LeRobot dataset(s) to refine on, e.g. --data='[DIR]'.")
        if self.head.steps < 1 or self.head.window < 2:
            raise ValueError("head.steps must be >= 1 and head.window >= 2 (one chunk to unroll).")


def read_episodes(root: str, model: WorldModel, max_episodes: int = 0) -> list[dict[str, torch.Tensor]]:
    """Every episode of the LeRobot dataset at `root`, all frames at the model's frame rate."""
    clip = ClipConfig(
        root=root, cameras=tuple(model.config.cameras), future_frames=1,
        read_images=model.config.head.reads_cameras,
    )  # fmt: skip
    match_frame_rate(clip, model.config.frame_stride)
    dataset = ClipDataset(clip)
    chosen = dataset.episodes[:max_episodes] if max_episodes else dataset.episodes
    return [dataset.episode(ep) for ep in tqdm(chosen, desc="reading episodes", unit="episode", leave=False)]


# Today's head: the current defaults of the head fields that the oldest checkpoints lack.
UPGRADES = {
    name: getattr(StateHeadConfig(), name)
    for name in ("reads_objects", "carries_state", "kinematics", "still_mode", "arm_targets", "holds")
}


def upgrade_head(model: WorldModel, seed: int = 0, **head: object) -> WorldModel:
    """The same world model with the current state head (`UPGRADES`): it reads the observed object pose and
    carries proprio and pose explicitly. The video model, the judge, the normalization and the cameras'
    trunk are copied; the rest of an older head is rebuilt from `seed` (the global RNG is left as it was),
    so it must be refined (`refine_head`) before use. `head` sets other StateHeadConfig fields (e.g.
    pose_modes=2). A model that already has that head is returned as is."""
    cfg = model.config
    wanted = {**UPGRADES, **head}
    if all(getattr(cfg.head, k) == v for k, v in wanted.items()):
        return model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        new = WorldModel(dataclasses.replace(cfg, head=dataclasses.replace(cfg.head, **wanted)))
    state = new.state_dict()
    for name, value in model.state_dict().items():
        keep = not name.startswith("state_head.") or name.startswith("state_head.trunk.")
        if keep and name in state:
            state[name] = value.clone()
    new.load_state_dict(state)
    new.state_head.set_scales(new)
    return new.to(next(model.parameters()).device)


def refine_checkpoint(cfg: RefineConfig) -> dict:
    """Load, (upgrade,) refine, save to `output_dir` (atomically, with refine.json); the figures."""
    model = WorldModel.from_pretrained(cfg.checkpoint)
    if cfg.upgrade or cfg.pose_modes:
        fields_ = {
            "kinematics": cfg.kinematics, "arm_targets": cfg.arm_targets, "still_mode": cfg.still_mode,
            "holds": cfg.holds, "reads_cameras": cfg.cameras,
        }  # fmt: skip
        if cfg.pose_modes:
            fields_["pose_modes"] = cfg.pose_modes
        model = upgrade_head(model, seed=cfg.head.seed, **fields_)
    episodes = [ep for root in cfg.data for ep in read_episodes(root, model, cfg.max_episodes)]
    heldout = read_episodes(cfg.heldout, model) if cfg.heldout else []
    figures: dict = {"checkpoint": cfg.checkpoint, "data": cfg.data, "episodes": len(episodes)}
    if heldout:
        figures["before"] = head_openloop(model, heldout)
    start = time.perf_counter()
    log = refine_head(model, episodes, cfg.head)
    figures["refine_seconds"] = round(time.perf_counter() - start, 1)
    figures["final_loss"] = log[-1]["loss"]
    if heldout:
        figures["after"] = head_openloop(model, heldout)
        if model.state_head.reads_objects and model.state_head.reads_cameras:
            figures["after_cameras_only"] = head_openloop(model, heldout, objects=False)
    out = Path(cfg.output_dir)
    model.save_pretrained(out)
    provenance = read_provenance(cfg.checkpoint) + [dataset_provenance(r, "refine_head") for r in cfg.data]
    write_provenance(out, provenance)
    atomic_write_text(out / "refine.json", json.dumps(figures, indent=1))
    return figures


@torch.no_grad()
def trunk_features(model: WorldModel, episode: dict[str, torch.Tensor]) -> torch.Tensor:
    """(T, V*4w) camera-trunk features of every frame of one episode; (T,0) for a head without cameras."""
    if not model.config.head.reads_cameras:
        return torch.zeros(len(episode["observation.state"]), 0)
    frames = model.frames({k: episode[k][None].float() for k in model.config.camera_keys})[0]  # (T,V,3,h,w)
    T, V = frames.shape[:2]
    return model.state_head.trunk(frames.flatten(0, 1)).reshape(T, -1)


def _labels(episode: dict[str, torch.Tensor], T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Staged reward and success of every frame (T,): frame 0 is the episode start (0, False)."""
    reward = torch.zeros(T, dtype=torch.long)
    success = torch.zeros(T)
    if "next.reward" in episode:
        reward[1:] = episode["next.reward"][: T - 1].long()
    if "next.success" in episode:
        success[1:] = episode["next.success"][: T - 1].float()
    return reward, success


def refine_head(
    model: WorldModel, episodes: list[dict[str, torch.Tensor]], cfg: HeadTrainConfig
) -> list[dict]:
    """Train `model.state_head` in place (trunk frozen) on `episodes` (`ClipDataset.episode` samples).

    Returns the loss log, one row per 100 steps.
    """
    head, M = model.state_head, model.config.head.ensemble
    gen = torch.Generator().manual_seed(cfg.seed)
    data = _episode_tensors(model, episodes)
    T = data["states"].shape[1]
    window = min(cfg.window, T)
    params = [p for name, p in head.named_parameters() if not name.startswith("trunk.")]
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, cfg.steps)
    head.train()
    log = []
    bar = tqdm(range(cfg.steps), desc="refining the state head", unit="step", leave=False)
    for step in bar:
        n = torch.randint(len(episodes), (cfg.batch_size,), generator=gen)
        t0 = torch.randint(T - window + 1, (cfg.batch_size,), generator=gen)
        weight = (torch.rand(cfg.batch_size, M, generator=gen) < cfg.bootstrap).float()  # (B,M) bootstrap
        seen = head.sees_objects(cfg.batch_size, generator=gen) if data["has_env"] else None
        loss = _window_loss(head, data, n, t0[:, None] + torch.arange(window), weight, seen)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == cfg.steps - 1:
            log.append({"step": step, "loss": loss.item()})
            bar.set_postfix(loss=f"{loss.item():.3f}")
    head.eval()
    return log


def _episode_tensors(model: WorldModel, episodes: list[dict[str, torch.Tensor]]) -> dict:
    """The episodes' first T frames (T: the shortest's), normalized and stacked: trunk features (N,T,F),
    proprio (N,T,S), chunks (N,T-1,C), object poses (N,T,E) (zeros (N,T,1) without), staged rewards and
    successes (N,T); `has_env` says whether the poses are real. The object pose's scale is re-taken
    robustly from these episodes (see WorldModel.set_stats)."""
    mc = model.config
    T = min(len(ep["action"]) for ep in episodes) + 1
    if T < 2:
        raise ValueError("episodes need at least two frames to train the head's dynamics.")
    has_env = mc.env_state_dim > 0 and "observation.environment_state" in episodes[0]
    if has_env:
        key = "observation.environment_state"
        stats = feature_stats(torch.cat([ep[key] for ep in episodes]).numpy())
        model.set_stats({key: {k: torch.as_tensor(v, dtype=torch.float32) for k, v in stats.items()}})
    rewards, successes = map(torch.stack, zip(*(_labels(ep, T) for ep in episodes), strict=True))
    return {
        "feats": torch.stack([trunk_features(model, ep)[:T] for ep in episodes]),
        "states": torch.stack([model.norm("state", ep["observation.state"][:T].float()) for ep in episodes]),
        "chunks": torch.stack([model.norm_chunks(ep["action"][: T - 1].float()) for ep in episodes]),
        "envs": torch.stack(
            [
                model.norm("env", ep["observation.environment_state"][:T].float())
                if has_env
                else torch.zeros(T, 1)
                for ep in episodes
            ]
        ),  # fmt: skip
        "rewards": rewards.clamp(0, mc.reward_levels - 1),
        "successes": successes,
        "has_env": has_env,
    }


def _window_loss(
    head, data: dict, n: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor, seen
) -> torch.Tensor:
    """The mean loss over a batch of windows: episodes `n` (B,), frames `idx` (B,W); every prediction of
    every frame, the encoded one included, each member weighted by its bootstrap `weight` (B,M)."""
    states, envs, has_env, M = data["states"], data["envs"], data["has_env"], weight.shape[1]
    t0 = idx[:, 0]
    first = envs[n, t0] if has_env else None
    latent = head.encode_features(data["feats"][n, t0], states[n, t0], first, seen)[:, None].expand(-1, M, -1)
    loss = torch.zeros(())
    for j in range(idx.shape[1]):
        t = idx[:, j]
        if j:
            before = (states[n, idx[:, j - 1]], envs[n, idx[:, j - 1]]) if has_env else None
            latent, pose_loss = head.step_supervised(
                latent,
                data["chunks"][n, idx[:, j - 1]],
                envs[n, t] if has_env else None,
                states[n, t],
                before,
            )
        pred = head.decode(latent)  # (B,M,·)
        per = (pred["state"] - states[n, t][:, None]).pow(2).mean(-1)  # (B,M)
        if has_env and j:
            per = per + pose_loss
        elif has_env:
            per = per + pose_error(pred["env_state"], envs[n, t][:, None])
            if head.carried:  # the cameras' own guess, for observations without a pose
                per = per + pose_error(head.camera_guess(latent), envs[n, t][:, None])
        per = per + F.cross_entropy(
            pred["reward_logits"].flatten(0, 1), data["rewards"][n, t].repeat_interleave(M), reduction="none"
        ).reshape(-1, M)
        per = per + F.binary_cross_entropy_with_logits(
            pred["success_logit"], data["successes"][n, t][:, None].expand(-1, M), reduction="none"
        )
        loss = loss + (per * weight).sum() / weight.sum().clamp_min(1)
    return loss / idx.shape[1]


def start_env(model: WorldModel, episode: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """The normalized object pose (1,E) an episode starts from, or None where it was not recorded."""
    if not model.config.env_state_dim or "observation.environment_state" not in episode:
        return None
    return model.norm("env", episode["observation.environment_state"][:1].float())


@torch.no_grad()
def head_openloop(
    model: WorldModel, episodes: list[dict[str, torch.Tensor]], seconds=(1, 3, 6), objects: bool = True
) -> dict:
    """Replay each episode's logged actions with the head from its first frame (see the module docstring).

    The head starts from the recorded object pose too where it reads one, unless `objects` is False."""
    head, mc = model.state_head, model.config
    fps = robot_spec(mc.robot).control_hz / mc.frame_stride  # model frames per second
    errors = {s: [] for s in seconds}
    agree, imagined, real = [], [], []
    start = time.perf_counter()
    for ep in episodes:
        feats = trunk_features(model, ep)
        latent = head.encode_features(
            feats[:1],
            model.norm("state", ep["observation.state"][:1].float()),
            start_env(model, ep) if objects else None,
        )
        chunks = model.norm_chunks(ep["action"].float())
        success = False
        for t in range(len(chunks)):
            latent = head.step(latent, chunks[t : t + 1])
            pred = head.decode(latent)
            success |= bool(pred["success_logit"].sigmoid().mean() > 0.5)
            for s in seconds:
                if t + 1 == round(s * fps) and "observation.environment_state" in ep:
                    pose = model.unnorm("env", pred["env_state"].mean(1))[0, :3]
                    errors[s].append(float((pose - ep["observation.environment_state"][t + 1, :3]).norm()))
        truth = bool(ep["episode_success"]) if "episode_success" in ep else False
        imagined.append(success)
        real.append(truth)
        agree.append(success == truth)
    return {
        "object_error_m": {f"{s}s": float(np.mean(v)) if v else None for s, v in errors.items()},
        "outcome_agreement": float(np.mean(agree)),
        "imagined_success": float(np.mean(imagined)),
        "real_success": float(np.mean(real)),
        "episodes": len(episodes),
        "seconds": round(time.perf_counter() - start, 2),
    }
