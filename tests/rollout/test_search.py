"""Action search: N=1 is the base policy, decisions are deterministic for a seed, limits are never broken."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import PolicyConfig, PolicyError, load_policy, to_policy_batch
from r2s2r.robots.aloha import AlohaWorld, WorldConfig
from r2s2r.robots.demonstrators import make_demonstrator
from r2s2r.robots.spec import robot_spec
from r2s2r.rollout.search import SearchConfig, SearchPolicy, fork_policy, make_perturbed_policy
from r2s2r.rollout.value import BaseValue

POSES = np.array([[0.05, 0.45, 0.05, 1, 0, 0, 0], [0.15, 0.55, 0.05, 1, 0, 0, 0]])


@pytest.fixture(scope="module")
def model(recorded):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny())  # 2 views, 5 control steps per frame
    model.set_stats(ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"))).stats)
    return model.eval()


@pytest.fixture(scope="module")
def world():
    cfg = WorldConfig(num_envs=2, cameras=("top", "left_wrist"), image_height=32, image_width=32)
    with AlohaWorld(cfg) as w:
        yield w


def play(world, policy, steps=20) -> torch.Tensor:
    """Actions (T,B,A) of `policy` in the reference world, rendering every step."""
    obs = world.reset(POSES)
    policy.reset()
    actions = []
    for _ in range(steps):
        action = policy.select_action(to_policy_batch(obs))
        actions.append(torch.as_tensor(action).float())
        obs = world.step(actions[-1].numpy()).observation
    return torch.stack(actions)


def test_one_candidate_is_the_base_policy(model, world):
    base = play(world, make_demonstrator(skill="noisy", seed=3))
    search = SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, SearchConfig(num_candidates=1))
    assert torch.equal(play(world, search), base)
    assert search.decisions == []  # nothing was searched


def test_search_is_deterministic_for_a_seed_and_changes_the_actions(model, world):
    def run(seed):
        cfg = SearchConfig(  # exploring: no pessimism nor trust region, so the seed shows in the actions
            num_candidates=8,
            horizon=2,
            iterations=1,
            policy_samples=2,
            seed=seed,
            arm_noise=0.05,
            pessimism=0.0,
            deviation_weight=0.0,
        )
        policy = SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, cfg)
        return play(world, policy), policy

    a, policy = run(0)
    b, _ = run(0)
    c, _ = run(1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert len(policy.decisions) == 4  # 20 steps, a decision every model frame (5 control steps)
    d = policy.decisions[0]
    assert d.candidates == 16 and d.rounds == 2  # 8 candidates in each of two CEM rounds
    assert d.chosen_score.shape == (2,) and (d.chosen_score >= d.base_score).all()
    base = play(world, make_demonstrator(skill="noisy", seed=3))
    assert not torch.equal(a, base)  # the search did change what was sent


def test_fork_shares_weights_but_not_running_state(recorded):
    act = make_demonstrator(skill="noisy", seed=3)
    world = AlohaWorld(WorldConfig(num_envs=2, cameras=()))
    obs = to_policy_batch(world.reset(POSES, render=False))
    act.select_action(obs)
    fork = fork_policy(act)
    assert torch.equal(fork.select_action(obs), act.select_action(obs))  # same state, same next action
    fork.reseed(5)
    assert fork.scripts[0].rng is not act.scripts[0].rng


def test_a_candidate_beyond_a_joint_limit_is_never_executed(model, world):
    """A base policy that commands the right shoulder past its range: the search clips its plan into the
    range, and what is sent stays within every range, however wide the perturbations."""
    spec = robot_spec("aloha")
    lower, upper = torch.tensor(spec.position_lower), torch.tensor(spec.position_upper)
    cfg = SearchConfig(num_candidates=6, horizon=1, iterations=1, arm_noise=2.0, gripper_noise=2.0)
    base = load_policy(PolicyConfig(path="helpers.policies:make_reach", kwargs={"target": 3.6}))
    search = SearchPolicy(base, model, cfg)
    sent = play(world, search, steps=20)
    assert (sent >= lower - 1e-6).all() and (sent <= upper + 1e-6).all()
    # From step 10 on the base's right shoulder (8) targets pass its 1.26 rad range: from the decision at
    # step 10 its plan is clipped into the range before any candidate is built from it; not before.
    late = search.decisions[2:]
    assert len(late) == 2 and all(int(d.clipped.min()) >= 1 for d in late)
    assert (search.decisions[0].clipped == 0).all()


def test_bad_settings_are_refused(model):
    with pytest.raises(ValueError, match="replan_every=20 control steps is longer than the imagined horizon"):
        SearchPolicy(make_demonstrator(), model, SearchConfig(horizon=2, replan_every=20))
    with pytest.raises(ValueError, match=r"SearchConfig.elite_frac=0 is out of range"):
        SearchConfig(elite_frac=0)
    search = SearchPolicy(make_demonstrator(), model, SearchConfig(num_candidates=4))
    world = AlohaWorld(WorldConfig(num_envs=2, cameras=()))
    obs = to_policy_batch(world.reset(POSES, render=False))
    with pytest.raises(KeyError, match="the observation lacks"):
        search.select_action(obs)


def test_the_search_loads_as_a_policy_through_an_import_path(model, world, tmp_path):
    ckpt = model.save_pretrained(tmp_path / "tiny")
    kwargs = {"checkpoint": str(ckpt), "base": {"kwargs": {"skill": "noisy", "seed": 3}}, "num_candidates": 1}
    search = load_policy(PolicyConfig(path="r2s2r.rollout.search:make_search_policy", kwargs=kwargs))
    assert isinstance(search, SearchPolicy) and search.name.startswith("search(N=1):demonstrator")
    assert torch.equal(play(world, search), play(world, make_demonstrator(skill="noisy", seed=3)))
    message = (
        r"make_search_policy' failed to load: .*unknown search setting\(s\) \['candidates'\]; known: base"
    )
    with pytest.raises(PolicyError, match=message):
        load_policy(PolicyConfig(path="r2s2r.rollout.search:make_search_policy", kwargs={"candidates": 4}))


def test_video_recheck_and_time_budget(model, world):
    cfg = SearchConfig(num_candidates=6, horizon=1, iterations=3, recheck_top=3, time_budget=1e-9)
    search = SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, cfg)
    play(world, search, steps=10)
    for d in search.decisions:
        assert d.rounds == 1  # the budget was spent after the first round, whatever `iterations` says
        scores = d.extra["video_scores"]  # the 3 best by the state head, re-imagined with the video model
        assert scores.shape == (3, 2) and np.isfinite(scores).all()


def test_the_trust_region_holds_the_search_to_the_base_plan(model, world):
    """A prohibitive charge on straying keeps the base plan in every decision, so the base's actions are sent
    unchanged; without the charge (and without pessimism) the same search departs from it."""

    def run(weight):
        cfg = SearchConfig(num_candidates=8, horizon=2, iterations=1, arm_noise=0.05, pessimism=0.0,
                           deviation_weight=weight)  # fmt: skip
        search = SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, cfg)
        return play(world, search), search

    base = play(world, make_demonstrator(skill="noisy", seed=3))
    held, search = run(1e6)
    assert all(d.chose_base.all() for d in search.decisions) and torch.equal(held, base)
    free, search = run(0.0)
    assert not all(d.chose_base.all() for d in search.decisions) and not torch.equal(free, base)


def test_a_blind_head_searches_from_proprio_and_the_object_pose_alone(recorded):
    """With a state head that reads no cameras, the search decides from an observation without images (a
    reference world that renders nothing) and departs from the base plan as with cameras."""
    torch.manual_seed(0)
    blind = WorldModel(WorldModelConfig.tiny(head=dict(reads_cameras=False)))
    blind.set_stats(ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"))).stats)
    cfg = SearchConfig(
        num_candidates=8, horizon=2, iterations=1, arm_noise=0.05, pessimism=0.0, deviation_weight=0.0
    )
    with AlohaWorld(WorldConfig(num_envs=2, cameras=())) as world:
        obs = world.reset(POSES)
        assert not any(k.startswith("observation.images.") for k in to_policy_batch(obs))
        search = SearchPolicy(make_demonstrator(skill="noisy", seed=3), blind.eval(), cfg)
        searched = play(world, search)
        base = play(world, make_demonstrator(skill="noisy", seed=3))
    assert len(search.decisions) == 4 and not torch.equal(searched, base)
    seeing = SearchPolicy(make_demonstrator(skill="noisy", seed=3), WorldModel(WorldModelConfig.tiny()), cfg)
    with pytest.raises(KeyError, match="lacks"), AlohaWorld(WorldConfig(num_envs=2, cameras=())) as world:
        play(world, seeing, 5)  # a head that reads cameras still needs them


def test_a_warm_start_carries_the_last_correction_on(model, world):
    """The last decision's offsets, moved on by the steps since and the last step held, are tried again, so a
    correction can persist; the warm search is deterministic, keeps N candidates per round, and differs from
    the cold one."""
    cfg = dict(num_candidates=8, horizon=2, iterations=1, arm_noise=0.05, pessimism=0.0, deviation_weight=0.0)
    warm_cfg = SearchConfig(**cfg, warm_start=True)
    search = SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, warm_cfg)
    offsets = torch.arange(2 * 10 * 1, dtype=torch.float32).reshape(2, 10, 1)  # B=2, P=2 frames x 5 steps
    expected = torch.tensor([5, 6, 7, 8, 9, 9, 9, 9, 9, 9], dtype=torch.float32)
    assert torch.equal(search._shifted(offsets)[0, :, 0], expected)
    assert torch.equal(search._shifted(offsets)[1, :, 0], expected + 10)

    warm = play(world, search)
    assert torch.equal(
        warm, play(world, SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, warm_cfg))
    )
    assert all(d.candidates == 16 for d in search.decisions)
    cold_cfg = SearchConfig(**cfg, warm_start=False)
    cold = play(world, SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, cold_cfg))
    assert not torch.equal(warm, cold)
    assert torch.equal(warm[:5], cold[:5])  # the first decision has nothing to carry on


def test_a_gain_margin_keeps_the_base_plan_unless_a_candidate_beats_it_by_more(model, world):
    """With `min_gain`, a decision leaves the base plan only where the best candidate's predicted gain over it
    exceeds the margin: a margin between the two envs' first gains keeps one env on its base plan and lets
    the other depart; a margin above every gain sends the base's actions unchanged."""
    cfg = dict(num_candidates=8, horizon=2, iterations=1, arm_noise=0.05, pessimism=0.0, deviation_weight=0.0)

    def run(margin):
        search = SearchPolicy(
            make_demonstrator(skill="noisy", seed=3), model, SearchConfig(**cfg, min_gain=margin)
        )
        return play(world, search), search

    free, search = run(0.0)
    first = search.decisions[0].extra["predicted_gain"]  # (B,), both envs gain something
    assert (first > 0).all() and first[0] != first[1]
    margin = float(first.mean())
    _, split = run(margin)
    assert np.array_equal(split.decisions[0].extra["predicted_gain"], first)  # the same candidates, scored
    assert np.array_equal(split.decisions[0].chose_base, first <= margin)  # one env kept, one departed
    held, search = run(1e6)
    assert all(d.chose_base.all() for d in search.decisions)
    assert torch.equal(held, play(world, make_demonstrator(skill="noisy", seed=3)))
    assert not torch.equal(free, held)


def test_a_base_value_adds_the_odds_from_where_each_candidate_ends(model, world, tmp_path):
    """With a base value, each candidate's score gains value_weight x the value's odds (its members' mean -
    pessimism x std) at the state each head member imagines at the candidate's end, read at the control step
    it ends on; a zero weight leaves every action as without a value."""
    torch.manual_seed(1)
    value = BaseValue("aloha", 14, 7, episode_steps=100, members=2, hidden=8)
    value.save_pretrained(tmp_path / "value")
    explore = dict(
        num_candidates=8, horizon=2, iterations=1, arm_noise=0.05, pessimism=0.0, deviation_weight=0.0
    )
    plain = play(
        world, SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, SearchConfig(**explore))
    )
    cfg = SearchConfig(**explore, value=str(tmp_path / "value"), value_weight=0.0)
    assert torch.equal(plain, play(world, SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, cfg)))

    only_value = SearchConfig(
        num_candidates=8, horizon=2, value=str(tmp_path / "value"), value_weight=5.0, progress_weight=0.0,
        success_weight=0.0, uncertainty_weight=0.0, violation_weight=0.0, deviation_weight=0.0, pessimism=0.5,
    )  # fmt: skip
    search = SearchPolicy(make_demonstrator(skill="noisy", seed=3), model, only_value)
    batch = to_policy_batch(world.reset(POSES))
    search.step = 7  # the candidates end 2 frames x 5 control steps later: step 17
    state, env = search._state(batch), search._env(batch)
    latent = model.state_head.encode(
        search._frames(batch), model.norm("state", state), model.norm("env", env)
    )
    plan = search._within_limits(state[:, None].expand(2, 10, 14).clone())
    offsets = 0.02 * torch.randn(3, 2, 10, 14, generator=torch.Generator().manual_seed(0))
    score, refused = search._score(latent, state, env, plan + offsets, offsets)
    assert not refused.any()
    with torch.no_grad():  # the same by hand: roll the head over each candidate, read the value at its end
        z, flat = latent.repeat(3, 1), (plan + offsets).reshape(6, 10, 14)
        for h in range(2):
            z = model.state_head.step(z, model.norm_chunks(flat[:, 5 * h : 5 * (h + 1)]))
        decoded = model.state_head.decode(z)
        ends = model.unnorm("state", decoded["state"]), model.unnorm("env", decoded["env_state"])  # (6,M,·)
        odds = value(ends[0].flatten(0, 1), ends[1].flatten(0, 1), torch.full((6 * 3,), 17))
        per_member = (odds.mean(0) - 0.5 * odds.std(0, unbiased=False)).reshape(6, 3)  # (N*B, head members)
        total = 5.0 * per_member
        expected = (total.mean(1) - 0.5 * total.std(1, unbiased=False)).reshape(3, 2)
        later = value(ends[0].flatten(0, 1), ends[1].flatten(0, 1), torch.full((6 * 3,), 90))
    assert torch.allclose(score, expected, atol=1e-5)
    assert expected.std() > 0  # the candidates end in different places, which the odds tell apart
    assert not torch.allclose(later, odds)  # and the time left is part of what the value reads
    with pytest.raises(FileNotFoundError, match="r2s2r-fit-value"):
        SearchPolicy(make_demonstrator(), model, SearchConfig(value=str(tmp_path / "none")))


def test_perturbed_policy_holds_seeded_offsets_of_the_set_spread_within_the_ranges():
    """The search's blind proposals: an offset per env drawn every `every` steps and held between draws,
    std `arm_noise` on arm joints and `gripper_noise` on grippers, the same for a seed and first observation
    whatever the batch, clipped into range."""
    spec = robot_spec("aloha")
    lower, upper = torch.tensor(spec.position_lower), torch.tensor(spec.position_upper)
    state = (lower + upper)[None].repeat(2000, 1) / 2  # mid-range: no clipping for small offsets
    state[:, 0] += torch.arange(2000) * 1e-5  # envs that start apart draw apart
    reach = {"path": "helpers.policies:make_reach", "kwargs": {"target": 0.3, "steps": 4}}

    def offsets(seed, steps=8, **kw):
        base, policy = load_policy(PolicyConfig(**reach)), make_perturbed_policy(base=reach, seed=seed, **kw)
        base.reset(), policy.reset()
        obs = {"observation.state": state}
        return torch.stack([policy.select_action(obs) - base.select_action(obs) for _ in range(steps)])

    a = offsets(0, every=3, arm_noise=0.02, gripper_noise=0.05)  # (8,B,14)
    assert torch.equal(a, offsets(0, every=3, arm_noise=0.02, gripper_noise=0.05))
    assert not torch.allclose(a, offsets(1, every=3, arm_noise=0.02, gripper_noise=0.05))
    for start in (0, 3, 6):  # held within each block of 3 steps, new at each block
        block = a[start : start + 3]
        assert torch.allclose(block, block[:1].expand_as(block), atol=1e-6)
    assert (a[3] - a[0]).abs().min() > 0 and (a[6] - a[3]).abs().min() > 0
    grippers = list(spec.gripper_indices)
    arms = [i for i in range(14) if i not in grippers]
    assert abs(a[0][:, arms].std().item() / 0.02 - 1) < 0.05
    assert abs(a[0][:, grippers].std().item() / 0.05 - 1) < 0.05
    assert torch.equal(offsets(0, arm_noise=0.0, gripper_noise=0.0), torch.zeros(8, 2000, 14))
    # An env's offsets do not depend on its batch: env 7 alone draws what it drew among 2000.
    alone = make_perturbed_policy(base=reach, seed=0, every=3, arm_noise=0.02, gripper_noise=0.05)
    base = load_policy(PolicyConfig(**reach))
    alone.reset(), base.reset()
    one = {"observation.state": state[7:8]}
    torch.testing.assert_close(alone.select_action(one) - base.select_action(one), a[0, 7:8])
    wild = make_perturbed_policy(base=reach, arm_noise=5.0, gripper_noise=5.0)
    sent = wild.select_action({"observation.state": state})
    assert (sent >= lower - 1e-6).all() and (sent <= upper + 1e-6).all() and (sent == upper).any()
    with pytest.raises(ValueError, match="must be >= 0 and every=0 >= 1"):
        make_perturbed_policy(base=reach, every=0)


def test_follow_up_plays_the_base_on_closed_loop_and_rescores_the_finalists(recorded, world):
    """With `followup`, the base plan and the best `followup_top` candidates are scored again with the base
    reacting, in the head, to where each leaves the robot; the base plan is always a finalist."""
    torch.manual_seed(0)  # arms at their commanded targets: the untrained head's imagined joints move
    model = WorldModel(WorldModelConfig.tiny(head=dict(arm_targets=True)))
    model.set_stats(ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"))).stats)
    model.eval()
    cfg = SearchConfig(num_candidates=8, horizon=2, iterations=0, followup=2, followup_top=3, arm_noise=0.05)
    search = SearchPolicy(load_policy(PolicyConfig(path="helpers.policies:make_hold")), model, cfg)
    batch = to_policy_batch(world.reset(POSES))
    state, env = search._state(batch), search._env(batch)
    frames = search._frames(batch)
    latent = model.state_head.encode(frames, model.norm("state", state), model.norm("env", env))
    first = search.base.select_action(batch)
    planner = fork_policy(search.base)
    plan = search._imagine_plan(latent, batch, planner, first)  # (2,10,14)
    offsets = 0.05 * torch.randn(8, 2, 10, 14, generator=torch.Generator().manual_seed(1))
    offsets[0] = 0  # the base plan
    scores, _ = search._score(latent, state, env, plan + offsets, offsets)
    order = scores.argsort(dim=0, descending=True, stable=True)

    after = [search._base_after(latent, batch, planner, plan + o) for o in offsets]  # (2,10,14) each
    assert after[0].shape == (2, 10, 14)
    assert not torch.allclose(after[1], after[2])  # the base reacts to where each candidate left it
    with torch.no_grad():  # the follow-up by hand: a copy of the planner acting on the head's decoded state
        fork, z = fork_policy(planner), latent
        for h in range(2):
            z = model.state_head.step(z, model.norm_chunks((plan + offsets[1])[:, 5 * h : 5 * (h + 1)]))
        decoded = model.state_head.decode(z)
        obs = {
            "observation.state": model.unnorm("state", decoded["state"].mean(1)),
            "observation.environment_state": model.unnorm("env", decoded["env_state"].mean(1)),
        }
        torch.testing.assert_close(after[1][:, 0], fork.select_action(obs).float())

    chosen = search._follow_up(latent, batch, state, env, plan, offsets, order, planner)[0]  # (B,)
    for b in range(2):
        finalists = [0] + [int(i) for i in order[:4, b] if i != 0][:3]
        rescored = [
            search._score(
                latent[b : b + 1],
                state[b : b + 1],
                env[b : b + 1],
                torch.cat([plan + offsets[i], after[i]], dim=1)[None, b : b + 1],
                offsets[i][None, b : b + 1],
            )[0].item()  # fmt: skip
            for i in finalists
        ]
        assert int(chosen[b]) == finalists[int(np.argmax(rescored))]
