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

It keeps a resume state (head weights, Adam, schedule, the windows' generator, the step and the loss log)
in `<output_dir>.partial/` every `save_every` steps, so that a killed run started again with the same
flags continues where it stopped, to the same weights bit for bit; the finished run removes it.

The object pose's normalization is re-taken from the refinement episodes, robustly (median and 1-99 %
range, as `WorldModel.set_stats`): only the head reads or predicts object poses, and it is retrained here.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tqdm.auto import tqdm

from r2s2r.data.provenance import dataset_provenance, read_provenance, write_provenance
from r2s2r.data.reader import ClipConfig, ClipDataset, feature_stats, match_frame_rate
from r2s2r.errors import SettingsChangedError
from r2s2r.files import atomic_write_text, load_safetensors, read_json, staged_directory
from r2s2r.model.configuration_world_model import StateHeadConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.model.state_head import pose_error, quat_matrix, tracking_features
from r2s2r.robots.spec import robot_spec
from r2s2r.training.checkpoint import flatten_optimizer, unflatten_optimizer


@dataclass
class HeadTrainConfig:
    """How to refine the head; see the module docstring."""

    steps: int = 3000  # optimizer steps (0: switch rules, fit the arms' tracking, train nothing)
    batch_size: int = 128  # windows per step
    window: int = 16  # frames per window: the head unrolls window - 1 chunks
    lr: float = 1e-3  # Adam, cosine-decayed to 0
    bootstrap: float = 0.8  # share of the windows each ensemble member trains on
    seed: int = 0  # sets the windows drawn and, where the head is rebuilt (upgraded), its initial weights
    save_every: int = 500  # steps between resume states (`<output_dir>.partial/`), what a killed run keeps

    def __post_init__(self) -> None:
        if self.save_every < 1:
            raise ValueError(f"head.save_every={self.save_every} must be >= 1; pass --head.save_every=500.")


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
    arm_tracking: bool = False  # ... or where a tracking model fitted to --data puts them (head.arm_tracking)
    still_mode: bool = False  # a pose mode that keeps the object exactly where it is (head.still_mode)
    holds: bool = False  # imagined holds are holds: rigid, and kept in mid-air until released (head.holds)
    contact: bool = False  # contact outcomes from the gripper-object geometry alone (head.contact)
    pads: bool = False  # with contact: grasps only of an object between the pads (head.pads)
    pad_overlap: float = 0.005  # m of the pads' faces an object must overlap (head.pad_overlap)
    falls: bool = False  # imagined objects that nothing can hold land on the table (head.falls)
    stops: bool = False  # with pads: an imagined closing gripper stops on the object between them
    balance: bool = False  # with pads: an imagined grasp lifts only an object centred over the pads
    pad_holds: bool = False  # with pads and holds: imagined holds only between the pads, rigid
    takes: bool = False  # with pad_holds and balance: a closing gripper takes a cube between its pads
    held_success: bool = False  # with pads: imagined success only while a gripper holds the object
    grip_servo: bool = False  # with pads: imagined grippers follow a servo fitted to --data (head.grip_servo)
    capture: bool = False  # with pads: imagined fingers closed narrower than the cube cannot grasp it
    squeeze: bool = False  # with pads: an imagined grasp lifts only when commanded past the cube's faces
    turns: bool = False  # with pad_holds: an imagined held cube turns rigidly with its gripper
    doubt: bool = False  # with pads: uncertainty rises where a grasp comes near a grasp rule's edge
    chance: bool = False  # with takes: grasps hold with odds fitted to --data, drawn per episode
    odds_doubt: bool = False  # with takes and doubt: those odds raise the uncertainty near even, alone
    substeps: bool = False  # with arm_targets and pads: observations follow the commands between frames
    pushes: bool = False  # with substeps: fingers moving into an object resting on the table push it
    drops: bool = False  # with substeps and pad_holds: an object let go in mid-air falls, or is caught
    rests: bool = False  # with pad_holds: imagined fingers squeezing an object rest on it
    closes: bool = False  # with pads: imagined fingers round an object close as the servo, stop on it
    success_touch: int = -1  # with contact: success = this gripper's finger touches the object off the table
    touch_finger: int = -1  # with success_touch: only this finger (MJCF order) counts; -1: any finger
    touch_outline: bool = False  # with success_touch: the fingers' tapered outline, not their boxes
    balance_margin: float = 0.003  # m, with balance: the object's centre at least this far inside the faces
    squeeze_depth: float = 0.04  # with squeeze: a grasp's command at least this far past the pads' meeting
    push_touch: float = 0.001  # m, with pushes: an object this far inside a finger a step earlier lay at it
    cameras: bool = True  # the head reads the views (head.reads_cameras); False: proprio and object pose
    # only, so --data and --heldout may be state-only recordings (r2s2r-record --world.cameras='[]')
    max_episodes: int = 0  # episodes per dataset to read (0: all)
    head: HeadTrainConfig = field(default_factory=HeadTrainConfig)  # optimisation of the refinement

    def __post_init__(self) -> None:
        if isinstance(self.data, str):
            self.data = [self.data]
        if not self.data:
            raise ValueError("no --data; give the LeRobot dataset(s) to refine on, e.g. --data='[DIR]'.")
        if self.head.steps < 0 or self.head.window < 2:
            raise ValueError("head.steps must be >= 0 and head.window >= 2 (one chunk to unroll).")


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


# Head fields that add no trained weights (rules of imagined steps, a fitted tracking model): switching only
# these keeps a refined head's weights.
RULES = (
    "arm_targets",
    "arm_tracking",
    "holds",
    "falls",
    "stops",
    "balance",
    "pad_holds",
    "takes",
    "held_success",
    "grip_servo",
    "capture",
    "squeeze",
    "turns",
    "doubt",
    "chance",
    "odds_doubt",
    "substeps",
    "pushes",
    "drops",
    "rests",
    "closes",
    "success_touch",
    "touch_finger",
    "balance_margin",
    "squeeze_depth",
    "pad_overlap",
    "push_touch",
    "touch_outline",
)


def rebuilds_head(model: WorldModel, **head: object) -> bool:
    """Whether `upgrade_head(model, **head)` rebuilds the trained part of its state head (a field other than
    the `RULES` differs), which must then be refined before use."""
    wanted = {**UPGRADES, **head}
    return any(getattr(model.config.head, k) != v for k, v in wanted.items() if k not in RULES)


def upgrade_head(model: WorldModel, seed: int = 0, **head: object) -> WorldModel:
    """The same world model with the current state head (`UPGRADES`): it reads the observed object pose and
    carries proprio and pose explicitly. The video model, the judge, the normalization and the cameras'
    trunk are copied; the rest of an older head is rebuilt from `seed` (the global RNG is left as it was),
    so it must be refined (`refine_head`) before use. `head` sets other StateHeadConfig fields (e.g.
    pose_modes=2). Where only `RULES` change, the whole head is kept (a new tracking model starts at zero:
    the last target). A model that already has that head is returned as is."""
    cfg = model.config
    wanted = {**UPGRADES, **head}
    if all(getattr(cfg.head, k) == v for k, v in wanted.items()):
        return model
    rebuild = rebuilds_head(model, **head)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        new = WorldModel(dataclasses.replace(cfg, head=dataclasses.replace(cfg.head, **wanted)))
    state = new.state_dict()
    for name, value in model.state_dict().items():
        keep = not rebuild or not name.startswith("state_head.") or name.startswith("state_head.trunk.")
        if keep and name in state and state[name].shape == value.shape:
            state[name] = value.clone()
    new.load_state_dict(state)
    new.state_head.set_scales(new)
    return new.to(next(model.parameters()).device)


def head_fields(cfg: RefineConfig) -> dict:
    """The StateHeadConfig fields a refinement asks for (`upgrade_head`'s keywords)."""
    return {
        "kinematics": cfg.kinematics, "arm_targets": cfg.arm_targets or cfg.arm_tracking,
        "arm_tracking": cfg.arm_tracking, "still_mode": cfg.still_mode,
        "holds": cfg.holds, "reads_cameras": cfg.cameras, "contact": cfg.contact,
        "pads": cfg.pads, "pad_overlap": cfg.pad_overlap, "falls": cfg.falls, "stops": cfg.stops,
        "balance": cfg.balance, "pad_holds": cfg.pad_holds, "takes": cfg.takes,
        "held_success": cfg.held_success, "grip_servo": cfg.grip_servo, "capture": cfg.capture,
        "squeeze": cfg.squeeze, "turns": cfg.turns, "doubt": cfg.doubt, "chance": cfg.chance,
        "odds_doubt": cfg.odds_doubt, "substeps": cfg.substeps, "pushes": cfg.pushes,
        "drops": cfg.drops, "rests": cfg.rests, "closes": cfg.closes, "success_touch": cfg.success_touch,
        "touch_finger": cfg.touch_finger, "balance_margin": cfg.balance_margin,
        "squeeze_depth": cfg.squeeze_depth, "push_touch": cfg.push_touch,
        "touch_outline": cfg.touch_outline,
    }  # fmt: skip


def refine_checkpoint(cfg: RefineConfig) -> dict:
    """Load, (upgrade,) refine, save to `output_dir` (atomically, with refine.json); the figures. A resume
    state in `partial_dir(output_dir)` is continued from (other settings are refused before any work)."""
    settings, partial = refine_settings(cfg), partial_dir(cfg.output_dir)
    check_refine_state(partial, settings)
    model = WorldModel.from_pretrained(cfg.checkpoint)
    if cfg.upgrade or cfg.pose_modes:
        fields_ = head_fields(cfg)
        if cfg.pose_modes:
            fields_["pose_modes"] = cfg.pose_modes
        if not cfg.head.steps and rebuilds_head(model, **fields_):
            raise ValueError(
                f"--head.steps=0 keeps {cfg.checkpoint}'s trained head, but the flags ask for another head "
                f"than it has (only {', '.join(RULES)} can change without training); give --head.steps."
            )
        model = upgrade_head(model, seed=cfg.head.seed, **fields_)
    elif not cfg.head.steps and not (
        model.state_head.tracks
        or model.state_head.servos
        or model.state_head.follows
        or model.state_head.odds
    ):
        raise ValueError("--head.steps=0 with --upgrade=false changes nothing; drop --upgrade=false.")
    episodes = [ep for root in cfg.data for ep in read_episodes(root, model, cfg.max_episodes)]
    heldout = read_episodes(cfg.heldout, model) if cfg.heldout else []
    figures: dict = {"checkpoint": cfg.checkpoint, "data": cfg.data, "episodes": len(episodes)}
    if heldout:
        figures["before"] = head_openloop(model, heldout)
    if model.state_head.tracks:
        figures["arm_tracking"] = fit_arm_tracking(model, episodes)
    if model.state_head.servos or model.state_head.follows or model.state_head.closes:
        figures["grip_servo"] = fit_grip_servo(model, episodes)
    if model.state_head.odds:
        figures["grasp_odds"] = fit_grasp_odds(model, episodes)
    start = time.perf_counter()
    log = refine_head(model, episodes, cfg.head, partial, settings) if cfg.head.steps else []
    figures["refine_seconds"] = round(time.perf_counter() - start, 1)
    figures["final_loss"] = log[-1]["loss"] if log else None
    if heldout:
        figures["after"] = head_openloop(model, heldout)
        if model.state_head.reads_objects and model.state_head.reads_cameras:
            figures["after_cameras_only"] = head_openloop(model, heldout, objects=False)
    out = Path(cfg.output_dir)
    model.save_pretrained(out)
    provenance = read_provenance(cfg.checkpoint) + [dataset_provenance(r, "refine_head") for r in cfg.data]
    write_provenance(out, provenance)
    atomic_write_text(out / "refine.json", json.dumps(figures, indent=1))
    shutil.rmtree(partial, ignore_errors=True)
    return figures


TRACKING_ROWS = 200_000  # frames `fit_arm_tracking` fits on at most (a fixed random draw of them)


@torch.no_grad()
def fit_arm_tracking(
    model: WorldModel, episodes: list[dict[str, torch.Tensor]], scale: float = 0.01, rounds: int = 8
) -> dict:
    """Fit `head.arm_tracking`'s linear model (each arm joint's `tracking_features` -> where it ends each
    frame, less the frame's last target) to `episodes` by least squares, joint by joint, in place. Frames
    where something stopped an arm (the table, the object) would drag a plain fit: each joint's fit is
    reweighted `rounds` times with Huber weights of `scale` radians. Returns the median and 99th-percentile
    error per joint and frame, in radians, of the last target alone and of the fitted model, on the frames
    fitted."""
    head = model.state_head
    targets, end = [], []
    for ep in episodes:
        arms = ep["observation.state"].double().index_select(-1, head.arm_index.cpu())
        chunks = ep["action"].double()  # (T-1,K,A): each frame's commanded targets
        end.append(arms[1 : len(chunks) + 1])
        targets.append(chunks.index_select(-1, head.arm_index.cpu())[: len(arms) - 1])
    targets, end = torch.cat(targets), torch.cat(end)
    if len(end) > TRACKING_ROWS:
        keep = torch.randperm(len(end), generator=torch.Generator().manual_seed(0))[:TRACKING_ROWS]
        targets, end = targets[keep], end[keep]
    X = tracking_features(targets)  # (N,A,F)
    Y = end - targets[:, -1]  # (N,A)
    W = torch.zeros(X.shape[1:], dtype=torch.float64)
    ridge = 1e-3 * torch.eye(X.shape[-1], dtype=torch.float64)
    for _ in range(rounds):
        weight = (scale / (Y - (X * W).sum(-1)).abs().clamp_min(1e-9)).clamp(max=1.0)  # (N,A) Huber
        for j in range(Y.shape[1]):
            Xw = X[:, j] * weight[:, j : j + 1]
            W[j] = torch.linalg.solve(Xw.T @ X[:, j] + ridge, Xw.T @ Y[:, j])
    head.tracking.copy_(W.to(head.tracking))
    before, after = Y.abs(), (Y - (X * W).sum(-1)).abs()
    return {
        "frames": len(X),
        "median_rad": {"last_target": before.median().item(), "tracked": after.median().item()},
        "p99_rad": {"last_target": before.quantile(0.99).item(), "tracked": after.quantile(0.99).item()},
    }


SERVO_GRID = {  # per control step, raw opening (0 closed .. 1 open): what `fit_grip_servo` tries
    "gain": (0.02, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3, 0.5, 1.0),
    "speed": (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.15),
    "band": (0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15),
}


@torch.no_grad()
def fit_grip_servo(model: WorldModel, episodes: list[dict[str, torch.Tensor]]) -> dict:
    """Fit `head.grip_servo` (a gain, a top speed and a dead band per control step) to the frames of
    `episodes` where no object was within CARRY_REACH of a gripper's grasp point, at the frame's start or its
    end (nothing stopped its fingers), in place: the grid `SERVO_GRID` point with the least mean absolute
    error of the opening at the frame's end, each frame played step by step from its start. Returns that
    error's median and 99th percentile for the servo, the frame's last command and no motion, and the fit."""
    head = model.state_head
    start, end, commands = [], [], []
    for ep in episodes:
        state, chunks = ep["observation.state"].float(), ep["action"].float()  # raw
        T = min(len(state) - 1, len(chunks))
        grips = state[:, head.grippers]
        free = torch.ones(T, len(head.grippers), dtype=torch.bool)
        if "observation.environment_state" in ep:
            cube = ep["observation.environment_state"].float()[: T + 1, :3]
            point = head.fk(state[: T + 1])[0]  # (T+1,G,3)
            far = (cube[:, None] - point).norm(dim=-1) > head.CARRY_REACH
            free = far[:-1] & far[1:]
        start.append(grips[:T][free])
        end.append(grips[1 : T + 1][free])
        commands.append(chunks[:T][..., head.grippers].transpose(1, 2)[free])  # (n,K)
    start, end, commands = torch.cat(start), torch.cat(end), torch.cat(commands)
    if not len(start):
        raise ValueError("no frame with the grippers free of the object to fit head.grip_servo on.")
    best = None
    for gain in SERVO_GRID["gain"]:
        for speed in SERVO_GRID["speed"]:
            for band in SERVO_GRID["band"]:
                head.grip_servo.copy_(torch.tensor([gain, speed, band]))
                error = (head.servo(start[:, None], commands[..., None])[:, 0] - end).abs().mean().item()
                if best is None or error < best[0]:
                    best = (error, (gain, speed, band))
    head.grip_servo.copy_(torch.tensor(best[1]))
    errors = {
        "servo": (head.servo(start[:, None], commands[..., None])[:, 0] - end).abs(),
        "last_command": (commands[:, -1] - end).abs(),
        "no_motion": (start - end).abs(),
    }
    return {
        "frames": len(start),
        "gain_speed_band": list(best[1]),
        "median": {k: round(v.median().item(), 4) for k, v in errors.items()},
        "p99": {k: round(v.quantile(0.99).item(), 4) for k, v in errors.items()},
    }


ODDS_WINDOW = 25  # model frames after a close within which its gripper must carry the object
ODDS_CLOSING = 3  # model frames from its first in which a close reaches its deepest command
ODDS_FRESH = 2  # model frames before a close's first within which the gripper was open (a fresh close)
# the sharpest edge `fit_grasp_odds` fits per factor (m, raw opening): the data places none more finely
# (a sampled frame is 0.2 s; a closing gripper moves a cube by millimetres before it holds)
ODDS_SHARPEST = (0.001, 0.01)


@torch.no_grad()
def grasp_events(
    model: WorldModel, episodes: list[dict[str, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every first close of each gripper on the object between its pads in `episodes` (the first frame that
    starts with the object in `between_pads` and ends with the gripper below HOLD_CLOSED, the gripper open
    at least that wide at its start or within ODDS_FRESH frames before: a gripper closing as it arrives
    has the object between its pads only once it has started to close): its
    `grasp_room` (N,2) at the frame's start (the squeeze: the deepest of the last commands of its first
    ODDS_CLOSING frames; imagined, the odds are read every frame); whether that gripper then carried
    the object (N,) bool (within ODDS_WINDOW frames and before it opens again: the object more than
    CARRY_AIRBORNE above the table, held by that gripper (closed, within CARRY_REACH, `gripped`), not by the
    other); which gripper (N,); and the episode's place in `episodes` (N,)."""
    head = model.state_head
    fk, G = head.fk, head.fk.num_grippers
    rooms, carried, which, source = [], [], [], []
    for e, ep in enumerate(episodes):
        if "observation.environment_state" not in ep:
            continue
        state, chunks = ep["observation.state"].float(), ep["action"].float()
        pose = ep["observation.environment_state"].float()
        T = min(len(state) - 1, len(chunks))
        point, rot = fk(state)  # (T+1,G,3), (T+1,G,3,3)
        cube = pose[:, :3]
        rel = (rot.transpose(-1, -2) @ (cube[:, None] - point)[..., None])[..., 0]  # (T+1,G,3)
        opening = state[:, head.grippers]  # (T+1,G)
        closed = opening < head.HOLD_CLOSED
        between = head.between_pads(rel) > 0.5
        fresh = ~closed[:T].clone()  # open at the frame's start or within ODDS_FRESH frames before it
        for back in range(1, ODDS_FRESH + 1):
            fresh[back:] |= ~closed[: T - back]
        closes = fresh & closed[1 : T + 1] & between[:T]  # (T,G)
        airborne = cube[:, 2] - fk.table_top > head.CARRY_AIRBORNE
        holds = closed & (rel.norm(dim=-1) < head.CARRY_REACH) & (head.gripped(rel) > 0.5)  # (T+1,G)
        stop = head.stop_at(rot, quat_matrix(pose[:, 3:7]))  # (T+1,G)
        room = head.grasp_room(rel[:T], rot[:T], stop[:T], chunks[:T, -1][:, head.grippers])  # (T,G,2)
        for g in range(G):
            first = closes[:, g].nonzero()
            if not len(first):
                continue
            k = int(first[0, 0])
            reopens = (~closed[k + 1 : k + 1 + ODDS_WINDOW, g]).nonzero()  # a grasp lasts until it opens
            after = slice(k + 1, k + 1 + (int(reopens[0, 0]) if len(reopens) else ODDS_WINDOW))
            others = [o for o in range(G) if o != g]
            alone = ~holds[after][:, others].any(-1)
            squeeze = room[k : k + ODDS_CLOSING, g, 1].max()  # the deepest command as it closes
            rooms.append(torch.stack([room[k, g, 0], squeeze]))
            carried.append(bool((airborne[after] & holds[after, g] & alone).any()))
            which.append(g)
            source.append(e)
    if not rooms:
        raise ValueError(
            "no gripper closed on the object between its pads in --data: nothing to fit head.chance's "
            "odds on; record grasps (the coverage demonstrator's) first."
        )
    return torch.stack(rooms), torch.tensor(carried), torch.tensor(which), torch.tensor(source)


ODDS_BINS = {  # the calibration tables `fit_grasp_odds` returns: bins of each factor's room
    "balance_m": (-1.0, 0.0, 0.003, 0.006, 0.01, 0.02, 1.0),
    "squeeze": (-5.0, 0.0, 0.04, 0.08, 0.12, 0.2, 0.3, 5.0),
}


def fit_odds(
    room: torch.Tensor,
    carried: torch.Tensor,
    which: torch.Tensor,
    unfitted: torch.Tensor,
    grippers: int,
    steps: int = 3000,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Maximum-likelihood fit of grasps' outcomes `carried` (N,) bool, as a base rate per gripper (`which`
    (N,) in 0..grippers-1) times one logistic curve per factor of their `room` (N,F): each factor's edge
    (F,) and width (F,) (no sharper than ODDS_SHARPEST), and the base rates (grippers,). `unfitted` (F,2):
    the edges and widths it starts from (and works in units of)."""
    unfitted = unfitted.double()
    scale = unfitted[:, 1].clone()
    floor = torch.tensor(ODDS_SHARPEST, dtype=torch.float64) / scale
    edge = (unfitted[:, 0] / scale).clamp(-5.0, 5.0).requires_grad_(True)  # in units of the widths
    width = torch.zeros(len(scale), dtype=torch.float64, requires_grad=True)  # log of (width - floor)
    base = torch.zeros(grippers, dtype=torch.float64, requires_grad=True)  # logit of each one's rate
    optimizer = torch.optim.Adam([edge, width, base], lr=0.05)
    x, y = room.double() / scale, carried.double()
    for _ in range(steps):
        soft = floor + width.exp()  # no edge sharper than the data can place it
        p = torch.sigmoid(base[which]) * torch.sigmoid((x - edge) / soft).prod(-1)
        loss = F.binary_cross_entropy(p.clamp(1e-6, 1 - 1e-6), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    soft = floor + width.detach().exp()
    return edge.detach() * scale, soft * scale, torch.sigmoid(base.detach())


def fit_grasp_odds(model: WorldModel, episodes: list[dict[str, torch.Tensor]]) -> dict:
    """Fit `head.chance`'s odds (each factor's edge and width, `grasp_odds`) to the grasps of `episodes`
    (`grasp_events`) by maximum likelihood (`fit_odds`), in place. A grasp's outcome is modelled as a base
    rate per gripper (whatever else made that episode fail: the head leaves those to its other rules, so
    only the curves are kept) times `odds_of` its room. Fitted on the even episodes' grasps and judged on
    the odd ones' (log loss against a constant rate and against the rules the odds replace), then refitted
    on all. Returns those figures, the fit, and per factor the observed and predicted carry rate by bins of
    room."""
    head = model.state_head
    room, carried, which, source = grasp_events(model, episodes)
    y, G = carried.double(), head.fk.num_grippers
    unfitted = torch.tensor(head.ODDS_UNFITTED, dtype=torch.float64)

    def predict(edge, width, rate) -> torch.Tensor:
        return rate[which] * torch.sigmoid((room.double() - edge) / width).prod(-1)

    def log_loss(p: torch.Tensor, rows: torch.Tensor) -> float:
        return F.binary_cross_entropy(p[rows].clamp(1e-6, 1 - 1e-6), y[rows]).item()

    even, odd = source % 2 == 0, source % 2 == 1
    half = predict(*fit_odds(room[even], carried[even], which[even], unfitted, G))
    rules = torch.sigmoid((room.double() - unfitted[:, 0]) / unfitted[:, 1]).prod(-1)
    rules_rate = torch.stack([y[even & (which == g)].mean() for g in range(G)])[which] * rules
    constant = torch.full_like(y, y[even].mean().item())
    edge, width, rate = fit_odds(room, carried, which, unfitted, G)
    head.grasp_odds.copy_(torch.stack([edge, width], -1).to(head.grasp_odds))
    p = predict(edge, width, rate)
    tables = {}
    for f, (name, bins) in enumerate(ODDS_BINS.items()):
        cut = torch.bucketize(room[:, f].double(), torch.tensor(bins, dtype=torch.float64))
        tables[name] = [
            {"bin": f"{bins[b - 1]:g} .. {bins[b]:g}", "grasps": int((cut == b).sum()),
             "carried": round(y[cut == b].mean().item(), 3), "predicted": round(p[cut == b].mean().item(), 3)}
            for b in range(1, len(bins)) if (cut == b).any()
        ]  # fmt: skip
    return {
        "grasps": len(y),
        "per_gripper": [int((which == g).sum()) for g in range(G)],
        "carried": round(y.mean().item(), 3),
        "edge_width": [
            [round(a, 5), round(b, 5)] for a, b in zip(edge.tolist(), width.tolist(), strict=True)
        ],
        "base_rate": [round(r, 3) for r in rate.tolist()],
        "odd_episodes_log_loss": {
            "odds": round(log_loss(half, odd), 4),
            "rules": round(log_loss(rules_rate, odd), 4),
            "constant": round(log_loss(constant, odd), 4),
        },  # fmt: skip
        "calibration": tables,
    }


def partial_dir(output_dir: str | Path) -> Path:
    """Where a refinement into `output_dir` keeps its resume state until the refined model is saved: beside
    it, so that `output_dir` only ever holds a finished world model."""
    out = Path(output_dir).resolve()
    return out.with_name(f"{out.name}.partial")


def head_settings(cfg: HeadTrainConfig) -> dict:
    """The fields of `cfg` that decide the refined weights (all but `save_every`), keyed by flag."""
    return {f"head.{k}": v for k, v in dataclasses.asdict(cfg).items() if k != "save_every"}


def refine_settings(cfg: RefineConfig) -> dict:
    """What decides a refinement's weights, keyed by flag (paths made absolute), as JSON values: a resumed
    run must ask for the same."""
    flags = (
        "max_episodes",
        "upgrade",
        "pose_modes",
        "kinematics",
        "arm_targets",
        "arm_tracking",
        "still_mode",
        "holds",
        "contact",
        "pads",
        "pad_overlap",
    )
    settings = {
        "checkpoint": str(Path(cfg.checkpoint).resolve()),
        "data": [str(Path(root).resolve()) for root in cfg.data],
        **{name: getattr(cfg, name) for name in (*flags, "cameras")},
        **head_settings(cfg.head),
    }
    return json.loads(json.dumps(settings))


def check_refine_state(directory: Path, settings: dict) -> dict | None:
    """The resume state in `directory` (its state.json), None where there is none. One made with other
    `settings` is refused with a `SettingsChangedError` naming each changed flag and the fix."""
    if not (directory / "state.json").is_file():
        return None
    state = read_json(directory / "state.json", f"delete {directory} to start the refinement over.")
    saved = state.get("settings", {})
    changes = [
        f"--{k} was {saved.get(k)!r}, now {settings.get(k)!r}"
        for k in sorted(saved.keys() | settings.keys())
        if saved.get(k) != settings.get(k)
    ]
    if changes:
        raise SettingsChangedError(
            f"{directory} holds a refinement started with other settings ({'; '.join(changes)}); re-run "
            f"with the flags it was started with, or delete {directory} (or pick another --output_dir) to "
            "start over."
        )
    return state


def save_refine_state(
    directory: Path, step: int, params: dict, optimizer, schedule, gen, log, settings
) -> None:
    """Write the resume state after `step` steps into `directory`, whole or not at all (`staged_directory`):
    the trained weights `params`, Adam's and the schedule's state, the generator, the loss log and the
    `settings` it was made with; safetensors and JSON, no pickles."""
    tensors, meta = flatten_optimizer(optimizer.state_dict())
    state = dict(step=step, log=log, optimizer=meta, scheduler=schedule.state_dict(), settings=settings)
    with staged_directory(directory) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in params.items()}, tmp / "head.safetensors")
        save_file(tensors, tmp / "optimizer.safetensors")
        save_file({"generator": gen.get_state()}, tmp / "rng.safetensors")
        (tmp / "state.json").write_text(json.dumps(state, indent=1))


def load_refine_state(directory: Path, state: dict, params: dict, optimizer, schedule, gen) -> int:
    """Restore what `save_refine_state` wrote (`state`: its state.json); the step to continue from."""
    fix = f"delete {directory} to start the refinement over."
    weights = load_safetensors(directory / "head.safetensors", fix)
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(weights[name])
    tensors = load_safetensors(directory / "optimizer.safetensors", fix)
    optimizer.load_state_dict(unflatten_optimizer(tensors, state["optimizer"]))
    schedule.load_state_dict(state["scheduler"])
    gen.set_state(load_safetensors(directory / "rng.safetensors", fix)["generator"])
    return int(state["step"])


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
    model: WorldModel,
    episodes: list[dict[str, torch.Tensor]],
    cfg: HeadTrainConfig,
    state_dir: str | Path | None = None,
    settings: dict | None = None,
) -> list[dict]:
    """Train `model.state_head` in place (trunk frozen) on `episodes` (`ClipDataset.episode` samples).

    Returns the loss log, one row per 100 steps. With `state_dir`, the resume state is written there every
    `cfg.save_every` steps and at the end, with `settings` (default: `head_settings(cfg)`), and a state found
    there is continued from, to the same weights as an uninterrupted run; other settings are refused
    (`check_refine_state`). The caller removes `state_dir` once the refined model is saved.
    """
    head, M = model.state_head, model.config.head.ensemble
    gen = torch.Generator().manual_seed(cfg.seed)
    data = _episode_tensors(model, episodes)
    T = data["states"].shape[1]
    window = min(cfg.window, T)
    named = {name: p for name, p in head.named_parameters() if not name.startswith("trunk.")}
    params = list(named.values())
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, cfg.steps)
    state_dir = Path(state_dir) if state_dir else None
    settings = head_settings(cfg) if settings is None else settings
    start, log = 0, []
    if state_dir and (state := check_refine_state(state_dir, settings)):
        start, log = load_refine_state(state_dir, state, named, optimizer, schedule, gen), state["log"]
    head.train()
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="refining the state head",
               unit="step", leave=False)  # fmt: skip
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
        if state_dir and ((step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps):
            save_refine_state(state_dir, step + 1, named, optimizer, schedule, gen, log, settings)
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
            pred = head.decode(latent, imagined=True)
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
