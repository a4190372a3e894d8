"""RL in imagination: PPO (stable-baselines3) on the state-dynamics head, deployed in the reference world.

`train_rl(cfg)`:

1. reads the world model's own training recordings (`data`) and, with `head_steps`, first refines the
   world model's state-dynamics head on them (`training/head.py`; the refined model is saved in the run
   and travels with the exported policy): their episode starts are where imagined
   episodes begin; their frames and actions are the behaviour-cloning data when `init='bc'`; replaying
   their logged actions calibrates the uncertainty that counts as "outside the data's support";
2. builds the actor: from scratch, behaviour-cloned on the recordings (`init='bc'`, a weak starting policy),
   or from an exported policy directory (fine-tuning it);
3. runs PPO in `ImaginedEnv` (thousands of imagined episodes, never a reference-world step), in rounds of
   `iterations` PPO updates; the first `warmup_rounds` train the critic only, so that a good starting actor
   is not pushed around by a critic that knows nothing yet;
4. after every round: saves the PPO state (weights, optimizer, step count) atomically as safetensors + JSON
   (`ppo/`: no pickle; a run begun before that resumes from its `ppo.zip`), exports the actor as
   a policy directory (`rl/policy.py`), and appends a progress row: imagined return, imagined success,
   share of episodes that left the support, frames with physics violations; every `eval_every` rounds, and
   after the last, the exported policy plays `eval_episodes` reference-world episodes (held-out initial
   poses from `eval_seed`, used for nothing but this report), so imagined and reference success can be
   compared as training goes; and `verify_episodes` imagined episodes are re-played with the video model,
   the judge and the checker (`verify_with_video`): a policy the head scores as successful but the judge,
   reading the imagined frames, does not, is likely exploiting the head.

A world model whose state head reads no cameras (`r2s2r-refine-head --cameras=false`) starts imagined
episodes from proprio and the recorded object pose alone, so its policy must read the pose too
(`observation='state'`); on state-only recordings the video re-check has no first frames and is skipped
(its row says so).

Re-running with the same settings resumes after the last saved round; round r reseeds every generator
from (seed, r) and restarts the imagined episodes, so a killed and resumed run ends exactly where an
uninterrupted one does. `rounds` may be raised to train further.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tqdm.auto import tqdm

from r2s2r.files import append_text, atomic_write_text, load_safetensors, read_json, staged_directory
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import PolicyConfig, load_policy
from r2s2r.rl.checks import episode_summary, imagined_eval, reference_eval, verify_with_video
from r2s2r.rl.env import ImaginedEnv, RewardConfig, calibrate_floor, calibrate_support
from r2s2r.rl.policy import (
    ACTIONS,
    OBSERVATIONS,
    ActionMap,
    ActorSpec,
    ImaginationPolicy,
    build_actor,
    export_policy,
    feature_dim,
    features,
    is_rl_policy,
)
from r2s2r.training.checkpoint import flatten_optimizer, unflatten_optimizer
from r2s2r.training.head import HeadTrainConfig, refine_head
from r2s2r.training.head import read_episodes as read_dataset

INITS = ("scratch", "bc", "residual")
PPO_STATE = "ppo"  # <output_dir>/ppo/: PPO's weights, optimizer and step count (safetensors + JSON)


@dataclass
class RLConfig:
    """What to train in which world model, how, and how to check it in the reference world."""

    checkpoint: str = "assets/world_model_small"  # the world model (WorldModel directory) to train in
    head_steps: int = 0  # first refine its state head on `data` for this many steps (training/head.py)
    head_window: int = 16  # frames per refinement unroll
    data: str = "outputs/rl/data"  # LeRobot dataset the world model was trained on: starts, BC, support
    max_episodes: int = 0  # episodes of `data` to read (0: all)
    output_dir: str = "outputs/rl/run"  # checkpoints, progress.jsonl, the exported policy/
    observation: str = "latent"  # latent: cube pose from the cameras | state: from environment_state
    action: str = "absolute"  # absolute: the actor outputs joint targets | delta: changes of the last ones
    init: str = "scratch"  # scratch | bc (cloned on `data`) | residual (on `base`) | an exported policy dir
    base: PolicyConfig = field(default_factory=PolicyConfig)  # init=residual: the policy it corrects
    residual_scale: float = 0.2  # init=residual: action stds per unit of actor output
    bc_steps: int = 3000  # behaviour-cloning steps (init=bc)
    bc_successes_only: bool = False  # clone only the episodes that succeeded
    bc_log_std: float = -1.5  # exploration std (log, in actor units) after cloning
    log_std_init: float = -0.5  # exploration std (log) from scratch
    hidden: tuple[int, ...] = (256, 256)  # actor and critic hidden widths
    num_envs: int = 256  # imagined episodes in parallel
    horizon: int = 40  # world-model frames per imagined episode (40 x 10 control steps = 8 s)
    rounds: int = 10  # rounds of `iterations` PPO updates; checkpoint, progress row and export after each
    iterations: int = 4  # PPO updates per round, each on num_envs x horizon imagined frames
    warmup_rounds: int = 0  # first rounds that train the critic only (use with a good starting actor)
    learning_rate: float = 3e-4
    n_epochs: int = 5  # PPO epochs over each batch of imagined frames
    batch_size: int = 1280  # PPO minibatch (a divisor of num_envs x horizon is best)
    gamma: float = 0.98
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.0
    target_kl: float = 0.05  # PPO stops an update's epochs early past this KL (keeps fine-tuning near init)
    reward: RewardConfig = field(default_factory=RewardConfig)
    support_quantile: float = 0.99  # calibrate reward.support_threshold to this quantile (0: never end early)
    floor_quantile: float = 0.0  # calibrate reward.uncertainty_floor to this quantile of logged frames
    check_physics: bool = True  # physics-checker penalties on imagined frames
    eval_every: int = 0  # rounds between reference-world evaluations (0: after the last round only)
    eval_episodes: int = 20  # reference-world episodes per evaluation (ID and OOD alternating)
    eval_seed: int = 2  # initial poses of the evaluation episodes; keep them apart from the data's seed
    eval_envs: int = 10  # reference-world episodes in lockstep
    verify_episodes: int = 8  # imagined episodes re-played with the video model and judge at each evaluation
    episode_length: int = 400  # control steps per reference-world episode
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        self.hidden = tuple(self.hidden)
        if self.observation not in OBSERVATIONS:
            raise ValueError(f"observation={self.observation!r} must be one of {OBSERVATIONS}.")
        if self.action not in ACTIONS:
            raise ValueError(f"action={self.action!r} must be one of {ACTIONS}.")
        if self.init == "residual":
            self.action = "residual"
        elif self.action == "residual":
            raise ValueError("action='residual' comes with init='residual' (and --base.path).")
        if self.init not in INITS and not is_rl_policy(self.init):
            raise ValueError(
                f"init={self.init!r} must be one of {INITS} or a policy directory exported by r2s2r-rl."
            )
        checks = {
            "num_envs": self.num_envs >= 1, "horizon": self.horizon >= 1, "rounds": self.rounds >= 1,
            "iterations": self.iterations >= 1, "warmup_rounds": self.warmup_rounds >= 0,
            "eval_episodes": self.eval_episodes >= 0, "eval_every": self.eval_every >= 0,
            "support_quantile": 0 <= self.support_quantile < 1, "bc_steps": self.bc_steps >= 0,
            "floor_quantile": 0 <= self.floor_quantile < 1,
        }  # fmt: skip
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r} is out of range; see --help.")

    def fingerprint(self) -> dict:
        """The settings a resumed run must share (not how far it goes nor how it is evaluated)."""
        keep = json.loads(json.dumps(asdict(self)))
        for key in (
            "rounds",
            "output_dir",
            "device",
            "eval_every",
            "eval_episodes",
            "eval_envs",
            "verify_episodes",
        ):
            keep.pop(key)
        return keep


# ---------------------------------------------------------------------- data


def read_episodes(cfg: RLConfig, model: WorldModel) -> list[dict[str, torch.Tensor]]:
    """Every episode of `cfg.data` at the model's frame rate, all frames (ClipDataset.episode)."""
    return read_dataset(cfg.data, model, cfg.max_episodes)


def episode_starts(episodes: list[dict[str, torch.Tensor]], model: WorldModel) -> dict[str, torch.Tensor]:
    keys = [*model.config.camera_keys, "observation.state", "observation.environment_state"]
    return {k: torch.stack([ep[k][0] for ep in episodes]) for k in keys if k in episodes[0]}


@torch.no_grad()
def cloning_data(
    episodes: list[dict[str, torch.Tensor]],
    model: WorldModel,
    observation: str,
    horizon: int,
    action: str = "absolute",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(features (N,F), actor outputs (N,A)) of every recorded frame, as the policy would see and act.

    Frame t's target is the command at the end of its chunk; `ActionMap.label` turns it into the actor's
    output (for delta actions, measured from the command at the end of the previous chunk; at t = 0 from
    holding still).
    """
    actions = ActionMap(model, action)
    xs, ys = [], []
    for ep in episodes:
        state, chunk = ep["observation.state"].float(), ep["action"].float()  # (T,S), (T-1,stride,A)
        T = len(chunk)
        norm_state = model.norm("state", state[:T])
        if observation == "state":
            norm_env = model.norm("env", ep["observation.environment_state"][:T].float())
        else:
            frames = model.frames({k: ep[k][None, :T].float() for k in model.config.camera_keys})[0]
            norm_env = model.state_head.decode(model.state_head.encode(frames, norm_state))["env_state"]
        ends = actions.clip(chunk[:, -1])  # (T,A) the target each frame's chunk reaches
        previous = torch.cat([actions.hold(state[:1]), ends[:-1]])  # (T,A)
        phase = torch.arange(T, dtype=torch.float32) / horizon
        xs.append(features(model, norm_state, norm_env, previous, phase, action))
        ys.append(actions.label(previous, ends))
    return torch.cat(xs), torch.cat(ys)


# ---------------------------------------------------------------------- the actor in and out of SB3


def _linears(policy) -> list[torch.nn.Linear]:
    return [m for m in policy.mlp_extractor.policy_net if isinstance(m, torch.nn.Linear)] + [
        policy.action_net
    ]


def actor_of(policy, spec: ActorSpec) -> torch.nn.Sequential:
    """The SB3 policy's actor (mean) as the exported MLP."""
    actor = build_actor(spec)
    targets = [m for m in actor if isinstance(m, torch.nn.Linear)]
    for src, dst in zip(_linears(policy), targets, strict=True):
        dst.load_state_dict(src.state_dict())
    return actor


def load_actor_into(policy, actor: torch.nn.Sequential) -> None:
    sources = [m for m in actor if isinstance(m, torch.nn.Linear)]
    for src, dst in zip(sources, _linears(policy), strict=True):
        dst.load_state_dict(src.state_dict())


def behaviour_clone(policy, x: torch.Tensor, y: torch.Tensor, steps: int, seed: int) -> float:
    """Fit the SB3 policy's mean action to (x, y) by MSE; returns the final loss."""
    gen = torch.Generator().manual_seed(seed)
    params = [p for m in _linears(policy) for p in m.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    loss = torch.zeros(())
    for _ in tqdm(range(steps), desc="behaviour cloning", unit="step", leave=False):
        idx = torch.randint(len(x), (min(512, len(x)),), generator=gen)
        mean = policy.action_net(policy.mlp_extractor.forward_actor(x[idx]))
        loss = torch.nn.functional.mse_loss(mean, y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


# ---------------------------------------------------------------------- training


def _save_ppo(ppo, directory: Path) -> None:
    """PPO's state as safetensors + JSON (no pickles), written atomically: the policy's weights (actor,
    critic, log std), the optimizer's state and the step count; the rest is rebuilt from the config."""
    tensors, meta = flatten_optimizer(ppo.policy.optimizer.state_dict())
    weights = {k: v.detach().cpu().contiguous() for k, v in ppo.policy.state_dict().items()}
    with staged_directory(directory) as tmp:
        save_file(weights, tmp / "policy.safetensors")
        save_file(tensors, tmp / "optimizer.safetensors")
        atomic_write_text(
            tmp / "state.json", json.dumps({"num_timesteps": ppo.num_timesteps, "optimizer": meta})
        )


def _load_ppo(ppo, out: Path, device: str) -> None:
    """Put the state `_save_ppo` wrote into `ppo`, built as the run builds it."""
    directory = out / PPO_STATE
    fix = "the run's PPO state is damaged and cannot be resumed: train into a new --output_dir."
    state = read_json(directory / "state.json", fix)
    ppo.policy.load_state_dict(load_safetensors(directory / "policy.safetensors", fix, device))
    optimizer = load_safetensors(directory / "optimizer.safetensors", fix, device)
    ppo.policy.optimizer.load_state_dict(unflatten_optimizer(optimizer, state["optimizer"]))
    ppo.num_timesteps = int(state["num_timesteps"])


def _set_actor_trainable(policy, trainable: bool) -> None:
    for p in [*(q for m in _linears(policy) for q in m.parameters()), policy.log_std]:
        p.requires_grad_(trainable)


def train_rl(cfg: RLConfig) -> dict:
    """Train (or resume) as the module docstring says; returns the run's summary (also summary.json)."""
    from stable_baselines3.common.utils import set_random_seed

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    state = _saved_state(cfg, out)  # 1. the run to resume, if any
    model, episodes, world_model_dir = _world_model(cfg, out)  # 2. the world model, its head refined
    state = state or _first_state(cfg, model, episodes)  # 3. the support's calibration, once
    starts = episode_starts(episodes, model)
    env, spec = _imagined_env(cfg, model, episodes, starts, state)  # 4. imagined episodes, the actor's spec
    summary: dict = {
        "support_threshold": state["support_threshold"],
        "uncertainty_floor": env.reward_cfg.uncertainty_floor,
        "observation": cfg.observation,
    }
    ppo = _ppo(cfg, out, env, spec, episodes, model, world_model_dir, state, summary)  # 5. built or loaded
    rows = _progress(cfg, out, state, ppo, env, starts)  # 6. the starting actor, measured once
    bar = tqdm(total=cfg.rounds, initial=state["round"], desc="RL in imagination", unit="round")
    for r in range(state["round"], cfg.rounds):  # 7. rounds, each checkpointed
        set_random_seed(cfg.seed * 10_007 + r + 1)
        row = _train_round(cfg, r, ppo, env)
        _save_ppo(ppo, out / PPO_STATE)
        export_policy(out / "policy", actor_of(ppo.policy, spec), spec, world_model_dir)
        if r + 1 == cfg.rounds or (cfg.eval_every and (r + 1) % cfg.eval_every == 0):
            row |= _measure(cfg, ppo, env, out / "policy", starts)
        state["round"] = r + 1
        atomic_write_text(out / "state.json", json.dumps(state, indent=2))
        _append(out / "progress.jsonl", row)
        rows.append(row)
        bar.update(1)
        bar.set_postfix(
            ret=f"{row['training'].get('return', float('nan')):.2f}",
            succ=f"{row['training'].get('success', 0):.2f}",
        )
    bar.close()
    summary.update({
        "rounds": state["round"], "timesteps": int(ppo.num_timesteps), "progress": rows,
        "policy": str(out / "policy"), "seconds_this_call": round(time.perf_counter() - start, 1),
    })  # fmt: skip
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    return summary


def _saved_state(cfg: RLConfig, out: Path) -> dict | None:
    """The state of the run in `out` (None for a new one); a run with other settings is refused."""
    state_file, fingerprint = out / "state.json", cfg.fingerprint()
    fix = "the run's state is damaged: train into a new --output_dir."
    state = read_json(state_file, fix) if state_file.is_file() else None
    if state is not None and state["config"] != fingerprint:
        changed = sorted(k for k in fingerprint if state["config"].get(k) != fingerprint[k])
        raise ValueError(
            f"{out} holds a run with other settings ({', '.join(changed)}); use another --output_dir or the "
            "same settings to resume it."
        )
    return state


def _world_model(cfg: RLConfig, out: Path) -> tuple[WorldModel, list[dict], str | Path]:
    """The world model the run trains in, the recordings it starts from, and the model's directory: with
    `head_steps`, a refined copy made once in the run (and reused on resume)."""
    model = WorldModel.from_pretrained(cfg.checkpoint, device=cfg.device).eval()
    if not model.config.head.reads_cameras and cfg.observation != "state":
        raise ValueError(
            f"{cfg.checkpoint}'s state head reads no cameras, so a policy trained in it cannot read the cube "
            "pose from them: pass --observation=state (the pose from observation.environment_state)."
        )
    episodes = read_episodes(cfg, model)
    if not cfg.head_steps:
        return model, episodes, cfg.checkpoint
    world_model_dir = out / "world_model"
    if not (world_model_dir / "model.safetensors").is_file():
        refine_head(
            model, episodes, HeadTrainConfig(steps=cfg.head_steps, window=cfg.head_window, seed=cfg.seed)
        )
        model.save_pretrained(world_model_dir)
    return WorldModel.from_pretrained(world_model_dir, device=cfg.device).eval(), episodes, world_model_dir


def _first_state(cfg: RLConfig, model: WorldModel, episodes: list[dict]) -> dict:
    """A new run's state: round 0 and the reward's support threshold and uncertainty floor, calibrated on
    the recordings where the config leaves them to a quantile."""
    state_only = cfg.observation == "state"
    threshold, floor = cfg.reward.support_threshold, cfg.reward.uncertainty_floor
    if cfg.support_quantile and not threshold:
        threshold = calibrate_support(model, episodes, cfg.support_quantile, state_only)
    if cfg.floor_quantile and not floor:
        floor = calibrate_floor(model, episodes, cfg.floor_quantile, state_only)
    return {
        "config": cfg.fingerprint(),
        "round": 0,
        "support_threshold": threshold,
        "uncertainty_floor": floor,
    }


def _imagined_env(
    cfg: RLConfig, model: WorldModel, episodes: list[dict], starts: dict, state: dict
) -> tuple[ImaginedEnv, ActorSpec]:
    """The batched imagined environment PPO trains in, and the spec of the actor it trains."""
    reward = RewardConfig(**{
        **asdict(cfg.reward), "support_threshold": state["support_threshold"],
        "uncertainty_floor": state["uncertainty_floor"],
    })  # fmt: skip
    base = load_policy(replace(cfg.base, device=cfg.device)) if cfg.init == "residual" else None
    env = ImaginedEnv(
        model, starts, cfg.num_envs, cfg.horizon, reward, cfg.observation,
        check_physics=cfg.check_physics, action=cfg.action, seed=cfg.seed, base=base,
        residual_scale=cfg.residual_scale,
    )  # fmt: skip
    spec = ActorSpec(
        observation=cfg.observation, action=cfg.action, feature_dim=feature_dim(model, cfg.action),
        action_dim=model.config.action_dim, hidden=cfg.hidden, frame_stride=model.config.frame_stride,
        horizon_frames=cfg.horizon, robot=model.config.robot, residual_scale=cfg.residual_scale,
        base={"path": cfg.base.path, "kwargs": cfg.base.kwargs} if base is not None else None,
    )  # fmt: skip
    return env, spec


def _ppo(cfg, out, env, spec, episodes, model, world_model_dir, state, summary):
    """PPO over `env`: loaded from the run's checkpoint, or built with its starting actor (from scratch,
    behaviour-cloned, or an exported policy) and checkpointed as round 0."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import set_random_seed

    if state["round"] > 0 and not (out / PPO_STATE).is_dir():  # a run begun before PPO_STATE existed
        return PPO.load(out / "ppo.zip", env=env, device=cfg.device)  # its own zip: a trusted pickle
    set_random_seed(cfg.seed)
    arch = dict(net_arch=dict(pi=list(cfg.hidden), vf=list(cfg.hidden)), log_std_init=cfg.log_std_init)
    ppo = PPO(
        "MlpPolicy", env, policy_kwargs=arch,
        n_steps=cfg.horizon, batch_size=cfg.batch_size, n_epochs=cfg.n_epochs,
        learning_rate=cfg.learning_rate, gamma=cfg.gamma, gae_lambda=cfg.gae_lambda,
        clip_range=cfg.clip_range, ent_coef=cfg.ent_coef, target_kl=cfg.target_kl, device=cfg.device,
        verbose=0, seed=cfg.seed,
    )  # fmt: skip
    if state["round"] > 0:
        _load_ppo(ppo, out, cfg.device)
        return ppo
    if cfg.init == "bc":
        x, y = cloning_data(episodes, model, cfg.observation, cfg.horizon, cfg.action)
        if cfg.bc_successes_only:
            keep = torch.cat([
                torch.full((len(ep["action"]),), bool(ep.get("episode_success", True))) for ep in episodes
            ])  # fmt: skip
            x, y = x[keep], y[keep]
        summary["bc_loss"] = behaviour_clone(ppo.policy, x, y, cfg.bc_steps, cfg.seed)
        ppo.policy.log_std.data.fill_(cfg.bc_log_std)
    elif cfg.init not in INITS:  # an exported policy directory
        init = ImaginationPolicy(cfg.init)
        if init.spec.feature_dim != spec.feature_dim or init.spec.hidden != spec.hidden:
            raise ValueError(
                f"init={cfg.init} has {init.spec.feature_dim} features and hidden {init.spec.hidden}; "
                f"this run has {spec.feature_dim} and {spec.hidden}: pass --hidden to match it."
            )
        load_actor_into(ppo.policy, init.actor)
        ppo.policy.log_std.data.fill_(cfg.bc_log_std)
    export_policy(out / "initial_policy", actor_of(ppo.policy, spec), spec, world_model_dir)
    _save_ppo(ppo, out / PPO_STATE)
    atomic_write_text(out / "state.json", json.dumps(state, indent=2))
    atomic_write_text(out / "progress.jsonl", "")
    return ppo


def _progress(cfg: RLConfig, out: Path, state: dict, ppo, env: ImaginedEnv, starts: dict) -> list[dict]:
    """The progress rows of the saved rounds (a row written after the last checkpoint goes), starting with
    the starting actor's, measured as every later round is."""
    progress_file = out / "progress.jsonl"
    rows = _read_rows(progress_file, state["round"])
    atomic_write_text(progress_file, "".join(json.dumps(r) + "\n" for r in rows))
    if not rows:
        rows.append({"round": 0, "timesteps": 0, **_measure(cfg, ppo, env, out / "initial_policy", starts)})
        _append(progress_file, rows[-1])
    return rows


def _measure(cfg: RLConfig, ppo, env: ImaginedEnv, policy_dir: Path, starts: dict) -> dict:
    """The actor in imagination, re-played with the video model, and in the reference world (as set)."""
    row = {"imagined": imagined_eval(ppo.policy, env, cfg.seed)}
    if cfg.verify_episodes:
        row["verified"] = verify_with_video(policy_dir, starts, cfg.verify_episodes, cfg.horizon, cfg.seed)
    if cfg.eval_episodes:
        row["reference"] = reference_eval(
            policy_dir, cfg.eval_episodes, cfg.eval_seed, cfg.episode_length, cfg.eval_envs
        )
    return row


def _train_round(cfg: RLConfig, r: int, ppo, env: ImaginedEnv) -> dict:
    """Round r: imagined episodes restarted from seed (seed, r), `iterations` PPO updates; its row."""
    env.seed(cfg.seed * 10_007 + r + 1)
    ppo._last_obs = env.reset()
    ppo._last_episode_starts = np.ones(cfg.num_envs, dtype=bool)
    env.pop_episodes()
    _set_actor_trainable(ppo.policy, r >= cfg.warmup_rounds)
    round_start = time.perf_counter()
    ppo.learn(cfg.iterations * cfg.num_envs * cfg.horizon, reset_num_timesteps=False)
    return {
        "round": r + 1, "timesteps": int(ppo.num_timesteps),
        "seconds": round(time.perf_counter() - round_start, 2),
        "training": episode_summary(env.pop_episodes()), "critic_only": r < cfg.warmup_rounds,
    }  # fmt: skip


def _read_rows(path: Path, rounds: int) -> list[dict]:
    """Progress rows of rounds 0..`rounds`; a half-written last line (a killed write) is dropped."""
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row["round"] <= rounds:
            rows.append(row)
    return rows


def _append(path: Path, row: dict) -> None:
    append_text(path, json.dumps(row) + "\n")
