"""Scripted transfer-cube demonstrators: they succeed, are deterministic per episode, and their knobs bite."""

import r2s2r.robots.aloha  # noqa: F401, I001  (sets MUJOCO_GL and loads torch before MuJoCo)

import numpy as np
import pytest

from r2s2r.robots.aloha import AlohaWorld, WorldConfig
from r2s2r.robots.demonstrators import DemonstratorConfig, ScriptedDemonstrator, make_demonstrator
from r2s2r.robots.ik import BimanualIK
from r2s2r.policies.policy import PolicyConfig, load_policy, to_policy_batch

# Four ID cube positions (x, y) spread over gym-aloha's box: two corners, the centre, one edge.
FIXED_XY = [(0.02, 0.42), (0.18, 0.58), (0.10, 0.50), (0.05, 0.57)]
STEPS = 400  # the reference episode length: 8 s at 50 Hz


def poses(xy: list[tuple[float, float]]) -> np.ndarray:
    """Initial cube poses (N,7) at the given xy, resting orientation, z as sampled by the world."""
    return np.array([[x, y, 0.05, 1.0, 0.0, 0.0, 0.0] for x, y in xy])


def rollout(policy, object_poses: np.ndarray, steps: int) -> dict[str, np.ndarray]:
    """Run one batch in lockstep; return actions (T,B,14), rewards (T,B) and success flags (T,B)."""
    world = AlohaWorld(WorldConfig(num_envs=len(object_poses), cameras=()))
    obs = world.reset(object_poses, render=False)
    policy.reset()
    actions, rewards, success = [], [], []
    for _ in range(steps):
        action = policy.select_action(to_policy_batch(obs))
        assert action.dtype.is_floating_point and tuple(action.shape) == (len(object_poses), 14)
        result = world.step(action.numpy(), render=False)
        obs = result.observation
        actions.append(action.numpy())
        rewards.append(result.reward)
        success.append(result.success)
    return {"actions": np.stack(actions), "reward": np.stack(rewards), "success": np.stack(success)}


@pytest.fixture(scope="module")
def nominal_run():
    policy = make_demonstrator(skill="nominal", seed=0)
    return policy, rollout(policy, poses(FIXED_XY), STEPS)


@pytest.fixture(scope="module")
def sloppy_run():
    policy = make_demonstrator(skill="sloppy", seed=0)
    return policy, rollout(policy, poses(FIXED_XY), STEPS)


def test_nominal_succeeds_and_holds_to_the_end(nominal_run):
    policy, run = nominal_run
    assert run["success"].any(axis=0).all(), f"max reward per env: {run['reward'].max(axis=0)}"
    assert run["success"][-1].all(), "the left arm should still hold the cube up at the last step"
    for script in policy.scripts:  # the whole plan, retreat included, fits the episode with margin
        done_at = dict((stage, t) for t, stage in script.events)["done"]
        assert done_at <= 360 and script.attempts == 1


def test_same_seed_and_pose_give_same_actions_alone_and_in_batch():
    target = (0.13, 0.46)
    alone = rollout(make_demonstrator(skill="noisy", seed=7), poses([target]), 120)["actions"][:, 0]
    others = [(0.03, 0.55), (0.19, 0.41), (0.07, 0.44), (0.16, 0.52), (0.0, 0.6), (0.11, 0.58), (0.2, 0.4)]
    batch_xy = others[:5] + [target] + others[5:]  # a batch of 8, the episode at position 5
    batched = rollout(make_demonstrator(skill="noisy", seed=7), poses(batch_xy), 120)["actions"][:, 5]
    np.testing.assert_array_equal(alone, batched)
    other_seed = rollout(make_demonstrator(skill="noisy", seed=8), poses([target]), 120)["actions"][:, 0]
    assert not np.array_equal(alone, other_seed), "the seed should change a noisy demonstrator's actions"


def test_sloppy_differs_from_nominal(nominal_run, sloppy_run):
    _, nominal = nominal_run
    _, sloppy = sloppy_run
    assert not np.allclose(nominal["actions"], sloppy["actions"], atol=1e-3)
    # For these four poses and seed 0, sloppy (no retries, high, late, shaky grasps) fails on two of them.
    assert sloppy["success"].any(axis=0).tolist() == [False, True, True, False]
    assert sloppy["success"].any(axis=0).sum() < nominal["success"].any(axis=0).sum()


def test_failed_grasp_is_detected_and_retried():
    # A grasp point 5 cm too high closes the fingers above the cube: the script must see the empty
    # gripper, re-open and re-approach once (max_retries=1), then give up rather than carry nothing.
    policy = make_demonstrator(skill="nominal", seed=0, grasp_offset_z=0.05, max_retries=1)
    run = rollout(policy, poses([(0.10, 0.50)]), 260)
    stages = [stage for _, stage in policy.scripts[0].events]
    assert stages == ["approach", "descend", "approach", "descend", "give_up"]
    assert not run["success"].any()


@pytest.mark.parametrize(
    ("knobs", "words"),
    [
        ({"joint_noise": -0.1}, ["joint_noise", "-0.1", ">= 0"]),
        ({"speed": 0.0}, ["speed", "0.0", "between"]),
        ({"max_retries": 1.5}, ["max_retries", "1.5", "whole number"]),
        ({"hesitation_prob": 2}, ["hesitation_prob", "2", "[0, 1]"]),
        ({"align_to_cube": "yes"}, ["align_to_cube", "yes", "true or false"]),
    ],
)
def test_bad_knob_values_are_rejected_with_the_field_and_a_fix(knobs, words):
    with pytest.raises(ValueError) as err:
        make_demonstrator(**knobs)
    for word in words:
        assert word in str(err.value)


def test_unknown_knob_skill_or_task_is_rejected():
    with pytest.raises(ValueError, match="unknown demonstrator knob"):
        make_demonstrator(grasp_offset=0.01)
    with pytest.raises(ValueError, match="not a preset"):
        make_demonstrator(skill="expert")
    with pytest.raises(ValueError, match="transfer_cube"):
        make_demonstrator(task="stacking")
    with pytest.raises(ValueError, match="seed"):
        make_demonstrator(seed=-1)


def test_presets_are_valid_and_knobs_override_them():
    policy = make_demonstrator(skill="sloppy", max_retries=2)
    assert isinstance(policy, ScriptedDemonstrator)
    assert policy.cfg.max_retries == 2 and policy.cfg.grasp_offset_z > 0  # the rest of the preset stays
    assert DemonstratorConfig().joint_noise == 0.0


def test_loads_through_the_policy_path_with_json_friendly_kwargs():
    cfg = PolicyConfig(
        path="r2s2r.robots.demonstrators:make_demonstrator", kwargs={"skill": "noisy", "seed": 3}
    )
    policy = load_policy(cfg)
    assert isinstance(policy, ScriptedDemonstrator) and policy.seed == 3 and policy.cfg.joint_noise > 0


def test_ik_reaches_a_reachable_pose_from_the_start_pose():
    ik = BimanualIK()
    start = np.array([[0.0, -0.96, 1.16, 0.0, -0.3, 0.0]] * 2)  # gym-aloha's START_ARM_POSE arms
    goal_q = np.array([[0.3, -0.2, 0.5, 0.4, 0.6, -0.5], [-0.2, 0.1, 0.4, -0.3, 0.8, 0.2]])
    goal_pos, goal_rot = ik.fk(goal_q)
    q = start
    for _ in range(40):  # 40 control steps of 3 iterations, as a demonstrator would spend on a jump
        q = ik.solve(q, goal_pos, goal_rot, iters=3)
    pos, rot = ik.fk(q)
    np.testing.assert_allclose(pos, goal_pos, atol=1e-4)
    np.testing.assert_allclose(rot, goal_rot, atol=1e-3)
    assert (q >= ik.lower).all() and (q <= ik.upper).all()


def test_mix_draws_a_preset_per_episode_deterministically():
    from r2s2r.robots.demonstrators import MIX, PRESETS, DemonstratorConfig, make_demonstrator

    mixed = make_demonstrator(skill="mix", seed=3)
    poses = np.random.default_rng(0).uniform(0, 1, (40, 7)).astype(np.float32)
    drawn = [mixed.episode_config(mixed.episode_rng(p)) for p in poses]
    again = [mixed.episode_config(mixed.episode_rng(p)) for p in poses]
    assert drawn == again  # a function of (seed, initial pose) only
    names = {n for n in MIX for d in drawn if d == DemonstratorConfig(**PRESETS[n])}
    assert len(names) >= 4  # 40 episodes over six presets: several skill levels in one dataset
    with pytest.raises(ValueError, match="takes no knobs"):
        make_demonstrator(skill="mix", joint_noise=0.1)
