"""Inference-time action search around a base policy: propose, imagine, check, score, act, replan.

`SearchPolicy` wraps any policy and is itself a policy (`reset()`, `select_action(batch)`), so it runs
wherever one does: the recorder, the imagined evaluation, `r2s2r-search`. Every `replan_every` control steps
it decides, for each env of the batch:

1. **propose**: the base policy's own plan for the next `horizon` model frames, imagined closed-loop with
   the state-dynamics head (a copy of the policy acts on imagined observations, so the real one is
   untouched); re-seeded copies of the base add its own alternative plans when it has a `reseed(seed)`
   method (the scripted demonstrators do, and ACT trained as a CVAE, drawing its latent from the prior);
   Gaussian offsets on the plan's joint targets (constant over each model frame) fill the rest, up to
   `num_candidates`, and CEM refits their mean and spread to the best ones over `iterations` rounds; with
   `warm_start` the last decision's offsets, moved on to now, are a candidate too and the first CEM round is
   centred on them, so a correction the search found (a grasp 1 cm further left) can persist over decisions
   instead of starting from zero each time (as MPC warm starts do);
2. **simulate** every candidate with the state-dynamics head in one batch, never decoding pixels;
3. **evaluate**: score = predicted progress (staged reward) + success, taken per ensemble member and
   combined pessimistically (mean - `pessimism` x std), + with a base `value` the odds of eventual success
   from where each member leaves the robot (so a short horizon still sees beyond itself), - uncertainty
   (ensemble disagreement) - physics violations of the predicted trajectory (`robots/checker.py`) - a
   trust-region charge on the distance from the base plan; a candidate whose commands leave the robot's
   joint or gripper range is never chosen; the best `recheck_top` are imagined again with the video model,
   read by the judge and checked, and re-ranked on that; with `followup` the base plan and the best
   `followup_top` are scored again over `followup` more frames in which a copy of the base plays on from
   where each leaves the robot, closed-loop in the head (the base reacts to a candidate's drift, and a
   behaviour-cloned policy reacts badly); with `min_gain` a decision changes course (leaves
   the base plan, or the correction under way that the warm start carries on) only for a candidate whose
   score beats the course's by more than that margin. The pessimism and the trust region are there because
   a search is an optimiser against the model: with plain mean scores, the more candidates it tried, the
   surer it found one whose predicted progress was the model's error (docs/benchmarks.md, "Action search");
4. **act**: between decisions each control step sends the base policy's action *at that step* (it still
   sees the real observations) plus the chosen candidate's offset for that step, clipped to the joint and
   gripper ranges, and replans.

With `num_candidates=1` the policy is the base policy, unchanged. Decisions are deterministic for a seed:
decision d of the e-th episode batch since construction draws its noise from (seed, e, d); a
`time_budget` stops CEM rounds early, so results then depend on the machine's speed.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import Policy, PolicyConfig, load_policy
from r2s2r.robots.checker import PhysicsChecker
from r2s2r.robots.spec import robot_spec
from r2s2r.rollout.value import BaseValue
from r2s2r.rollout.world_model_env import WorldModelEnv


@dataclass
class SearchConfig:
    """How the search proposes, simulates and scores candidate action chunks."""

    checkpoint: str = "assets/world_model_small"  # WorldModel directory that imagines the candidates
    num_candidates: int = 16  # N chunks scored per decision and round; 1 = the base policy, unchanged
    horizon: int = 2  # model frames (frame_stride control steps each) a candidate is imagined ahead
    replan_every: int = 0  # control steps between decisions; 0 = one model frame (frame_stride)
    iterations: int = 2  # CEM rounds after the first: each refits the offsets to the best candidates
    elite_frac: float = 0.25  # share of a round's candidates the next round is fitted to
    policy_samples: int = 3  # candidates from re-seeded copies of the base (if it has reseed(seed))
    arm_noise: float = 0.02  # rad: initial std of the offsets on arm joint targets
    gripper_noise: float = 0.05  # initial std of the offsets on gripper commands (0 closed .. 1 open)
    recheck_top: int = 0  # best candidates re-imagined with the video model and judge; 0 = head only
    followup: int = 0  # model frames the base plays on, closed-loop in the head, after the best candidates
    followup_top: int = 4  # candidates (besides the base plan) re-scored with the follow-up
    sampling_steps: int = 1  # denoising steps per frame in the re-check
    progress_weight: float = 1.0  # score per predicted staged-reward level, summed over the horizon
    success_weight: float = 4.0  # score for predicted success (highest probability over the horizon)
    uncertainty_weight: float = 20.0  # penalty per unit of ensemble disagreement (mean over the horizon)
    violation_weight: float = 2.0  # penalty per predicted physics violation (frames x types)
    pessimism: float = 2.0  # progress + success is the ensemble members' mean minus this many stds
    deviation_weight: float = 0.3  # penalty per mean squared offset from the base plan, in noise stds
    warm_start: bool = True  # also try the last decision's offsets, moved on, and centre CEM on them
    value: str = ""  # a base value (rollout/value.py, r2s2r-fit-value) fitted on the base policy's episodes:
    # each candidate also scores value_weight x the odds of success from where it ends, so a 0.4 s horizon
    # can tell a reach that will close on the cube from one that will miss it; "" = none
    value_weight: float = 4.0  # score for the base value's odds of success at a candidate's end
    min_gain: float = 0.0  # change course (from the base plan or the correction under way) only for more
    time_budget: float = 0.0  # s per decision; CEM stops when it is spent (0 = no limit, deterministic)
    seed: int = 0  # noise of decision d in episode batch e: (seed, e, d)
    device: str = "cpu"  # torch device of the world model

    def __post_init__(self) -> None:
        checks = {
            "num_candidates": self.num_candidates >= 1,
            "horizon": self.horizon >= 1,
            "replan_every": self.replan_every >= 0,
            "iterations": self.iterations >= 0,
            "elite_frac": 0 < self.elite_frac <= 1,
            "policy_samples": self.policy_samples >= 0,
            "recheck_top": self.recheck_top >= 0,
            "followup": self.followup >= 0,
            "followup_top": self.followup_top >= 1,
            "time_budget": self.time_budget >= 0,
            "min_gain": self.min_gain >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"SearchConfig.{name}={getattr(self, name)!r} is out of range; see --help.")
        for name in ("arm_noise", "gripper_noise", "progress_weight", "success_weight",
                     "uncertainty_weight", "violation_weight", "value_weight"):  # fmt: skip
            if not getattr(self, name) >= 0:
                raise ValueError(f"SearchConfig.{name}={getattr(self, name)!r} must be >= 0.")


def fork_policy(policy: Policy) -> Policy:
    """A copy of `policy` with its own running state (queues, scripts, RNGs) but shared network weights."""
    memo: dict[int, Any] = {}
    for value in vars(policy).values():
        if isinstance(value, nn.Module):
            for tensor in [*value.parameters(), *value.buffers()]:
                memo[id(tensor)] = tensor
    return copy.deepcopy(policy, memo)


@dataclass
class Decision:
    """What one decision did, for benchmarks and debugging."""

    seconds: float  # wall time of the decision
    rounds: int  # CEM rounds run (the first included)
    candidates: int  # candidates scored, all rounds
    chosen_score: np.ndarray  # (B,) score of the chosen candidate
    base_score: np.ndarray  # (B,) score of the base plan
    chose_base: np.ndarray  # (B,) whether the base plan won
    clipped: np.ndarray  # (B,) base proposals (plan, re-seeded plans) clipped into the robot's ranges
    extra: dict = field(default_factory=dict)


class SearchPolicy:
    """A base policy with inference-time search in a world model (see the module docstring)."""

    def __init__(self, base: Policy, model: WorldModel, cfg: SearchConfig | None = None):
        self.base, self.cfg = base, cfg or SearchConfig()
        self.model = model.to(self.cfg.device).eval()
        mc = model.config
        self.stride, self.plan_steps = mc.frame_stride, self.cfg.horizon * mc.frame_stride
        self.every = self.cfg.replan_every or self.stride
        if self.every > self.plan_steps:
            raise ValueError(
                f"replan_every={self.every} control steps is longer than the imagined horizon "
                f"({self.cfg.horizon} frames x {self.stride} = {self.plan_steps}); raise horizon or replan "
                "sooner."
            )
        spec = robot_spec(mc.robot)
        self.checker = PhysicsChecker(spec)
        self.frame_dt = self.stride / spec.control_hz
        self.lower = torch.tensor(spec.position_lower, dtype=torch.float32)
        self.upper = torch.tensor(spec.position_upper, dtype=torch.float32)
        self.noise = torch.full((mc.action_dim,), self.cfg.arm_noise)
        self.noise[list(spec.gripper_indices)] = self.cfg.gripper_noise
        self.levels = torch.arange(mc.reward_levels, dtype=torch.float32, device=self.cfg.device)
        self.value = BaseValue.from_pretrained(self.cfg.value) if self.cfg.value else None
        if self.value is not None and not mc.env_state_dim:
            raise ValueError(
                f"value={self.cfg.value} reads the object pose, which the world model does not predict "
                "(env_state_dim=0); search without a value or with a model that has object state."
            )
        self.name = f"search(N={self.cfg.num_candidates}):{getattr(base, 'name', type(base).__name__)}"
        self.episodes = 0  # episode batches started (reset calls): part of the noise seed
        self.decisions: list[Decision] = []
        self.reset()

    # ------------------------------------------------------------------ policy interface
    def reset(self) -> None:
        self.base.reset()
        self.step = 0
        self.offsets: torch.Tensor | None = None  # (B, plan_steps, A) of the current decision
        self.episodes += 1

    @torch.no_grad()
    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The base action plus the chosen offset for this step, within the robot's ranges: (B,A)."""
        base_action = torch.as_tensor(self.base.select_action(batch)).float().cpu()  # (B,A)
        if self.cfg.num_candidates > 1:
            if self.step % self.every == 0:
                self.offsets = self._decide(batch, base_action)
            base_action = base_action + self.offsets[:, self.step % self.every]
        self.step += 1
        return self._within_limits(base_action)

    def _within_limits(self, actions: torch.Tensor) -> torch.Tensor:
        """Commands (...,A) clipped to the robot's joint ranges and the grippers' 0..1."""
        return torch.minimum(torch.maximum(actions, self.lower), self.upper)

    # ------------------------------------------------------------------ one decision
    def _decide(self, batch: dict[str, torch.Tensor], first: torch.Tensor) -> torch.Tensor:
        """Offsets (B, plan_steps, A) of the best candidate for each env."""
        start = time.perf_counter()
        cfg = self.cfg
        gen = torch.Generator().manual_seed(
            int(np.random.SeedSequence([cfg.seed, self.episodes, self.step]).generate_state(1)[0])
        )
        # 1. Where the robot is, as the head encodes it.
        state, env = self._state(batch), self._env(batch)
        norm_env = None if env is None else self.model.norm("env", env.to(self.cfg.device))
        frames = self._frames(batch) if self.model.config.head.reads_cameras else None  # a blind head: none
        latent = self.model.state_head.encode(frames, self.model.norm("state", state), norm_env)
        # 2. The base's plan and its own alternatives; after the plan `planner` stands where the base will.
        planner = fork_policy(self.base)
        plan, proposals, clipped, course, mean = self._proposals(latent, batch, planner, first, gen)
        # 3. CEM rounds around them, every candidate scored.
        candidates, scores, rounds = self._cem(latent, state, env, plan, proposals, mean, gen, start)
        # 4. The best, after the follow-up, the video re-check and the minimum gain have had their say.
        order = scores.argsort(dim=0, descending=True, stable=True)  # on ties the earlier: the base first
        order, extra = self._final_order(latent, batch, state, env, plan, candidates, order, planner)
        B = first.shape[0]
        best_score = scores[order[0], torch.arange(B)]
        if cfg.min_gain > 0:  # a gain this small is more likely the model's error than the plan's merit
            change = best_score - scores[course, torch.arange(B)] > cfg.min_gain  # (B,)
            order = torch.where(change, order[0], course)[None]
        extra["predicted_gain"] = (best_score - scores[0]).numpy()  # (B,) the best's over the base plan's
        self.decisions.append(
            Decision(
                seconds=time.perf_counter() - start,
                rounds=rounds,
                candidates=len(candidates),
                chosen_score=scores[order[0], torch.arange(B)].numpy(),
                base_score=scores[0].numpy(),
                chose_base=(order[0] == 0).numpy(),
                clipped=clipped.numpy(),
                extra=extra,
            )
        )
        return candidates[order[0], torch.arange(B)]  # (B,P,A)

    def _proposals(self, latent, batch, planner, first, gen):
        """The base plan (B,P,A) within the joint ranges; the proposals' offsets from it (M,B,P,A): the base's
        own (zero) first, its reseeded alternatives, the last correction carried on (warm start); how many
        of the base's plans had commands past a range (B,); each env's course, the proposal that goes on as
        now (B,); and the CEM's starting mean (B,H,A)."""
        cfg, B, A = self.cfg, first.shape[0], first.shape[1]
        plans = [self._imagine_plan(latent, batch, planner, first)]  # (B,P,A) each
        warm = cfg.warm_start and self.offsets is not None  # the last correction, if any, takes a place
        for _ in range(min(cfg.policy_samples, cfg.num_candidates - 1 - warm)):  # the base's own alternatives
            fork = fork_policy(self.base)
            if not hasattr(fork, "reseed"):
                break
            fork.reseed(int(torch.randint(2**31, (1,), generator=gen)))
            plans.append(self._imagine_plan(latent, batch, fork, first))
        # The plans as the robot would execute them: commands past a joint or gripper range are clipped into
        # it (MuJoCo's ctrlrange would clamp them too); `clipped` counts the plans that were.
        raw = torch.stack(plans)  # (M,B,P,A)
        clipped = torch.from_numpy(self.checker.commands(raw.numpy()).any(axis=(2, 3))).sum(0)  # (B,)
        plan = self._within_limits(raw[0])  # the base plan: offsets are measured from it
        proposals = self._within_limits(raw) - plan  # (M,B,P,A), the base's own first
        mean = torch.zeros(B, cfg.horizon, A)
        course = torch.zeros(B, dtype=torch.long)  # per env, what goes on as now: the base plan (0), or ...
        if warm:  # N >= 2 here, and a place was kept for it above
            kept = self._shifted(self.offsets)  # the last correction, carried on: (B,P,A)
            kept = self._within_limits(plan + kept) - plan
            proposals = torch.cat([proposals, kept[None]])
            under_way = self.offsets.abs().amax(dim=(1, 2)) > 0  # (B,) ... the correction under way
            course = torch.where(under_way, len(proposals) - 1, course)
            mean = kept.reshape(B, cfg.horizon, self.stride, A).mean(2)
        return plan, proposals, clipped, course, mean

    def _cem(self, latent, state, env, plan, proposals, mean, gen, start):
        """CEM over offsets that are constant within each model frame, from `mean` (B,H,A) and the search's
        noise: every candidate of every round (R*N,B,P,A), its score (R*N,B), and the rounds run."""
        cfg, B = self.cfg, plan.shape[0]
        std = self.noise.expand(B, cfg.horizon, plan.shape[-1]).clone()
        pool, pool_scores = [], []
        rounds = 0
        while True:
            rounds += 1
            fixed = proposals if rounds == 1 else proposals[:0]  # later rounds: all from the refitted CEM
            noise = mean + std * torch.randn(
                cfg.num_candidates - len(fixed), B, cfg.horizon, plan.shape[-1], generator=gen
            )
            # Perturbed plans are kept within the joint and gripper ranges too.
            perturbed = self._within_limits(plan + noise.repeat_interleave(self.stride, dim=2)) - plan
            candidates = torch.cat([fixed, perturbed])  # (N,B,P,A)
            score, _ = self._score(latent, state, env, plan + candidates, candidates)  # (nothing refused now)
            pool.append(candidates)
            pool_scores.append(score)
            spent = cfg.time_budget and time.perf_counter() - start > cfg.time_budget
            if rounds > cfg.iterations or spent or len(noise) == 0:
                break
            elite = max(2, int(round(cfg.elite_frac * len(noise))))
            top = score[len(fixed) :].topk(min(elite, len(noise)), dim=0).indices  # (e,B) among the noise
            chosen = noise[top, torch.arange(B)]  # (e,B,H,A)
            mean, std = chosen.mean(0), chosen.std(0, unbiased=False).clamp(min=1e-3)
        return torch.cat(pool), torch.cat(pool_scores), rounds

    def _final_order(self, latent, batch, state, env, plan, candidates, order, planner):
        """The candidates' order (k,B) after the follow-up re-score and the video re-check, if on; and what
        the re-check adds to the decision's record."""
        cfg, B, extra = self.cfg, plan.shape[0], {}
        if cfg.followup:
            order = self._follow_up(latent, batch, state, env, plan, candidates, order, planner)
        if cfg.recheck_top > 1:
            k = min(cfg.recheck_top, len(candidates))
            top = candidates[order[:k], torch.arange(B)]  # (k,B,P,A)
            pick, video_scores = self._recheck(batch, plan, top)
            order = order[:k].gather(0, pick[None])
            extra = {"video_scores": video_scores.numpy()}
        return order, extra

    @torch.no_grad()
    def _follow_up(self, latent, batch, state, env, plan, candidates, order, planner) -> torch.Tensor:
        """The order (1,B) after re-scoring the base plan and the best `followup_top` candidates with the base
        policy playing on after each, closed-loop in the state head, for `followup` more frames.

        Within the horizon a candidate is scored as if the base would carry on as planned; but the base
        reacts to where the candidate leaves the robot, and a policy that never saw its own drift (ACT,
        behaviour-cloned) reacts badly: played blind, the search's offsets halve ACT's success
        (benchmarks/studies/search_headroom.py). Here each finalist's score includes what the base does next.
        """
        B, k = plan.shape[0], min(self.cfg.followup_top, len(candidates) - 1)
        best = order[: k + 1]  # (k+1,B): per env the best k other than the base plan (index 0), in order
        others = best.gather(0, torch.argsort((best == 0).int(), dim=0, stable=True)[:k])
        finalists = torch.cat([torch.zeros(1, B, dtype=torch.long), others])  # (k+1,B), the base plan first
        offsets = candidates[finalists, torch.arange(B)]  # (k+1,B,P,A)
        chunks = torch.stack(
            [
                torch.cat([plan + o, self._base_after(latent, batch, planner, plan + o)], dim=1)
                for o in offsets
            ]
        )  # fmt: skip  (k+1,B,P+F,A)
        followed, _ = self._score(latent, state, env, chunks, offsets)  # (k+1,B)
        pick = followed.argmax(0)  # ties: the base plan
        return finalists.gather(0, pick[None])

    @torch.no_grad()
    def _base_after(self, latent, batch, planner: Policy, chunk: torch.Tensor) -> torch.Tensor:
        """(B,F,A) the actions a copy of `planner` (the base, as it stands after the plan) takes for
        `followup` frames once `chunk` (B,P,A) has been played, imagined closed-loop with the state head."""
        model, fork, z = self.model, fork_policy(planner), latent
        obs = {k: v for k, v in self._initial(batch).items() if not k.startswith("observation.images.")}
        for frame in chunk.split(self.stride, dim=1):
            z = model.state_head.step(z, model.norm_chunks(frame.to(self.cfg.device)))
        actions = []
        for f in range(self.cfg.followup):
            decoded = model.state_head.decode(z, imagined=True)
            obs["observation.state"] = model.unnorm("state", decoded["state"].mean(1)).cpu()
            if "observation.environment_state" in obs:
                obs["observation.environment_state"] = model.unnorm("env", decoded["env_state"].mean(1)).cpu()
            frame = [torch.as_tensor(fork.select_action(obs)).float().cpu() for _ in range(self.stride)]
            actions.append(torch.stack(frame, dim=1))
            if f < self.cfg.followup - 1:
                z = model.state_head.step(z, model.norm_chunks(actions[-1].to(self.cfg.device)))
        return torch.cat(actions, dim=1)

    def _shifted(self, offsets: torch.Tensor) -> torch.Tensor:
        """Offsets (B,P,A) of the last decision moved on by the `every` steps since, the last step held."""
        rest = offsets[:, self.every :]
        return torch.cat([rest, offsets[:, -1:].expand(-1, self.every, -1)], dim=1)

    def _imagine_plan(
        self, latent: torch.Tensor, batch: dict, fork: Policy, first: torch.Tensor
    ) -> torch.Tensor:
        """The plan (B,P,A) of a copy of the base policy, imagined closed-loop with the state head.

        `first` is the action the real base policy just chose; the copy, taken after that choice, goes on
        from the imagined observations (proprio and object state, as `WorldModelEnv(render=False)` gives
        them) that the plan leads to. `latent` (B,L) encodes the real observation.
        """
        model = self.model
        obs = {k: v for k, v in self._initial(batch).items() if not k.startswith("observation.images.")}
        actions, z = [first], latent
        for j in range(1, self.plan_steps):
            if j % self.stride == 0:  # a model frame: roll the head over the chunk just planned
                chunk = torch.stack(actions[-self.stride :], dim=1).to(self.cfg.device)
                z = model.state_head.step(z, model.norm_chunks(chunk))
                decoded = model.state_head.decode(z, imagined=True)
                obs["observation.state"] = model.unnorm("state", decoded["state"].mean(1)).cpu()
                if "observation.environment_state" in obs:
                    obs["observation.environment_state"] = model.unnorm(
                        "env", decoded["env_state"].mean(1)
                    ).cpu()
            try:
                actions.append(torch.as_tensor(fork.select_action(obs)).float().cpu())
            except KeyError as e:
                raise KeyError(
                    f"{self.name}: the base policy needs {e} to plan in imagination, which has proprio and "
                    "object state but no frames; search around a policy that acts on state."
                ) from None
        return torch.stack(actions, dim=1)

    def _penalties(self, offsets: torch.Tensor, uncertainty, violations) -> torch.Tensor:
        """(N,B) what a candidate with offsets (N,B,P,A) pays for uncertainty, violations and straying."""
        cfg = self.cfg
        deviation = (offsets / self.noise.clamp(min=1e-3)).square().mean(dim=(2, 3))  # (N,B)
        return (
            cfg.uncertainty_weight * uncertainty
            + cfg.violation_weight * violations
            + cfg.deviation_weight * deviation
        )

    @torch.no_grad()
    def _score(self, latent, state, env, chunks, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores (N,B) of candidates `chunks` (N,B,T,A), and which were refused (N,B).

        `offsets` (N,B,P,A) are the candidates' offsets from the base plan (the trust region's distance);
        T >= P control steps are imagined (T > P: the base's follow-up after the candidate, `followup`).

        Predicted progress and success are scored per ensemble member and combined pessimistically
        (mean - `pessimism` x std over members): a candidate must look good to every member, not only to
        the one whose error it happens to exploit.
        """
        cfg, model = self.cfg, self.model
        N, B, T, A = chunks.shape
        frames = T // self.stride
        flat = chunks.reshape(N * B, T, A)
        refused = torch.from_numpy(self.checker.commands(flat.numpy()).any(axis=(1, 2))).reshape(N, B)
        z = latent.repeat(N, 1)  # (N*B,L): candidate-major, env-minor, as `flat`
        states = [state.cpu().repeat(N, 1)]
        envs = [env.repeat(N, 1)] if env is not None else None
        M = model.config.head.ensemble
        progress, success, uncertainty = torch.zeros(N * B, M), torch.zeros(N * B, M), torch.zeros(N * B)
        for h in range(frames):
            chunk = flat[:, h * self.stride : (h + 1) * self.stride].to(cfg.device)
            z = model.state_head.step(z, model.norm_chunks(chunk))  # (N*B,M,L)
            decoded = model.state_head.decode(z, imagined=True)
            progress += (decoded["reward_logits"].softmax(-1) @ self.levels).cpu()  # (N*B,M)
            success = torch.maximum(success, decoded["success_logit"].sigmoid().cpu())
            uncertainty += model.state_head.disagreement(decoded).cpu() / frames
            states.append(model.unnorm("state", decoded["state"].mean(1)).cpu())
            if envs is not None:
                envs.append(model.unnorm("env", decoded["env_state"].mean(1)).cpu())
        trajectory = torch.stack(states, dim=1).double().numpy()  # (N*B,H+1,S), the real state first
        objects = torch.stack(envs, dim=1).double().numpy() if envs is not None else None
        flags = self.checker.check(trajectory, self.frame_dt, env_states=objects).flags[:, 1:]
        violations = torch.from_numpy(flags.sum(axis=(1, 2))).float()
        value = cfg.progress_weight * progress + cfg.success_weight * success  # (N*B,M) per member
        if self.value is not None:  # where each member leaves the robot, judged by the base's odds from there
            at = model.unnorm("state", decoded["state"]).flatten(0, 1).cpu()  # (N*B*M,S)
            env_at = model.unnorm("env", decoded["env_state"]).flatten(0, 1).cpu()
            step = torch.full((len(at),), self.step + T)
            odds = self.value(at, env_at, step)  # (V,N*B*M) per value member
            # where the value's members disagree (states unlike the base's episodes) its odds are discounted
            odds = odds.mean(0) - cfg.pessimism * odds.std(0, unbiased=False)
            value = value + cfg.value_weight * odds.reshape(N * B, M)
        value = value.mean(1) - cfg.pessimism * value.std(1, unbiased=False)
        score = value.reshape(N, B) - self._penalties(
            offsets, uncertainty.reshape(N, B), violations.reshape(N, B)
        )
        return score.masked_fill(refused, -torch.inf), refused

    @torch.no_grad()
    def _recheck(self, batch: dict, plan, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top candidates plan + offsets (k,B,P,A), imagined with the video model: pick (B,), scores (k,B)."""
        k, B, P, A = offsets.shape
        chunks = plan + offsets
        env = WorldModelEnv(
            self.model, k * B, self.cfg.device, sampling_steps=self.cfg.sampling_steps,
            seed=int(self.episodes * 100_003 + self.step),
        )  # fmt: skip
        env.reset(
            {key: value.repeat(k, *[1] * (value.dim() - 1)) for key, value in self._initial(batch).items()}
        )
        flat = chunks.reshape(k * B, P, A)
        progress, success, uncertainty = torch.zeros(k * B), torch.zeros(k * B), torch.zeros(k * B)
        for h in range(self.cfg.horizon):
            _, reward, _, info = env.step(flat[:, h * self.stride : (h + 1) * self.stride])
            progress += reward.cpu()
            success = torch.maximum(success, info["success_prob"].cpu())
            uncertainty += info["uncertainty"].cpu() / self.cfg.horizon
        violations = env.violation_counts.sum(-1).float()
        value = self.cfg.progress_weight * progress + self.cfg.success_weight * success  # the judge's reading
        penalties = self._penalties(offsets, uncertainty.reshape(k, B), violations.reshape(k, B))
        score = value.reshape(k, B) - penalties
        refused = torch.from_numpy(self.checker.commands(flat.numpy()).any(axis=(1, 2))).reshape(k, B)
        score = score.masked_fill(refused, -torch.inf)
        return score.argmax(0), score

    # ------------------------------------------------------------------ observations
    def _initial(self, batch: dict) -> dict:
        keys = [*self.model.config.camera_keys, "observation.state", "observation.environment_state"]
        return {k: batch[k].float().cpu() for k in keys if k in batch}

    def _frames(self, batch: dict) -> torch.Tensor:
        missing = [k for k in self.model.config.camera_keys if k not in batch]
        if missing:
            raise KeyError(
                f"{self.name} decides from the cameras the world model was trained on; the observation lacks "
                f"{missing}. Render them at decision steps (every {self.every} control steps)."
            )
        images = {k: batch[k][:, None].float().to(self.cfg.device) for k in self.model.config.camera_keys}
        return self.model.frames(images)[:, 0]

    def _state(self, batch: dict) -> torch.Tensor:
        return batch["observation.state"].float().to(self.cfg.device)

    def _env(self, batch: dict) -> torch.Tensor | None:
        env = batch.get("observation.environment_state")
        return env.float().cpu() if env is not None and self.model.config.env_state_dim else None


class PerturbedPolicy:
    """A base policy plus the search's offsets, drawn at random instead of chosen: its blind proposals.

    Every `every` control steps each env draws a new Gaussian offset (std `arm_noise` rad on arm joint
    targets, `gripper_noise` on the grippers), held until the next draw as the search's candidates hold
    theirs over a model frame, and adds it to the base's action, clipped into the robot's ranges. Played in
    the reference world with several seeds, it measures what the search has to choose from around a
    policy (`benchmarks/studies/search_headroom.py`): how far the blind proposals fall below the base, and
    how often some seed succeeds where the base fails. An env's offsets are a function of `seed` and its
    first observation (proprio and object pose) only, so an episode gets the same ones in whatever batch or
    process it plays; with zero noise it is the base policy.
    """

    def __init__(
        self, base: Policy, robot: str = "aloha", arm_noise: float = 0.02, gripper_noise: float = 0.05,
        every: int = 10, seed: int = 0,
    ):  # fmt: skip
        if arm_noise < 0 or gripper_noise < 0 or every < 1:
            raise ValueError(
                f"arm_noise={arm_noise} and gripper_noise={gripper_noise} must be >= 0 and "
                f"every={every} >= 1."
            )
        spec = robot_spec(robot)
        self.base, self.every, self.seed = base, every, seed
        self.lower = torch.tensor(spec.position_lower, dtype=torch.float32)
        self.upper = torch.tensor(spec.position_upper, dtype=torch.float32)
        self.noise = torch.full((len(spec.position_lower),), float(arm_noise))
        self.noise[list(spec.gripper_indices)] = gripper_noise
        self.name = f"perturbed({arm_noise},{gripper_noise}):{getattr(base, 'name', type(base).__name__)}"
        self.reset()

    def reset(self) -> None:
        self.base.reset()
        self.step, self.offset, self.gens = 0, None, None

    def _generators(self, batch: dict[str, torch.Tensor]) -> list[torch.Generator]:
        """One generator per env, seeded by (seed, the bytes of its first proprio and object pose)."""
        keys = [k for k in ("observation.state", "observation.environment_state") if k in batch]
        first = torch.cat([batch[k].detach().float().cpu() for k in keys], dim=1).numpy()  # (B,S)
        return [
            torch.Generator().manual_seed(
                int(np.random.SeedSequence([self.seed, *row.view(np.uint32).tolist()]).generate_state(1)[0])
            )
            for row in first
        ]

    @torch.no_grad()
    def select_action(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.gens is None:
            self.gens = self._generators(batch)
        action = torch.as_tensor(self.base.select_action(batch)).float().cpu()  # (B,A)
        if self.step % self.every == 0:
            draws = torch.stack([torch.randn(action.shape[1], generator=g) for g in self.gens])
            self.offset = self.noise * draws
        self.step += 1
        return torch.minimum(torch.maximum(action + self.offset, self.lower), self.upper)


def make_perturbed_policy(base: dict | None = None, **kwargs: Any) -> PerturbedPolicy:
    """Import-path factory: `--policy.path=r2s2r.rollout.search:make_perturbed_policy --policy.kwargs=
    '{"base": {"path": "outputs/bench/zoo/act/step_3000"}, "seed": 3}'`."""
    return PerturbedPolicy(load_policy(PolicyConfig(**(base or {}))), **kwargs)


def make_search_policy(
    base: dict | None = None, checkpoint: str = SearchConfig.checkpoint, **search: Any
) -> SearchPolicy:
    """Import-path factory: `--policy.path=r2s2r.rollout.search:make_search_policy --policy.kwargs=
    '{"base": {"path": "r2s2r.robots.demonstrators:make_demonstrator", "kwargs": {"skill": "sloppy"}},
    "num_candidates": 16}'` runs the search wherever a policy runs."""
    known = {f.name for f in fields(SearchConfig)} - {"checkpoint"}
    if unknown := sorted(set(search) - known):
        raise ValueError(
            f"unknown search setting(s) {unknown}; known: base, checkpoint, {', '.join(sorted(known))}."
        )
    base_cfg = PolicyConfig(**(base or {}))
    cfg = SearchConfig(checkpoint=checkpoint, **search)
    model = WorldModel.from_pretrained(cfg.checkpoint, device=cfg.device)
    return SearchPolicy(load_policy(base_cfg), model, cfg)
