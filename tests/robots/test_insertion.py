"""Scripted insertion demonstrator: it succeeds in the reference world, its grasp knobs bite, and it is
deterministic per seed."""

import r2s2r.robots.aloha  # noqa: F401, I001  (sets MUJOCO_GL and loads torch before MuJoCo)

import numpy as np
import pytest

from r2s2r.robots.aloha import AlohaWorld, WorldConfig, sample_object_poses
from r2s2r.robots.demonstrators import make_demonstrator
from r2s2r.robots.insertion import _InsertionScript
from r2s2r.policies.policy import to_policy_batch

STEPS = 400  # the reference episode length: 8 s at 50 Hz
ID_POSES = sample_object_poses("insertion", "id", np.random.default_rng(0), 10)  # (10,14) peg, socket


def rollout(policy, object_poses: np.ndarray, steps: int) -> dict[str, np.ndarray]:
    """Run one batch of insertion episodes in lockstep; return actions (T,B,14) and rewards (T,B)."""
    world = AlohaWorld(WorldConfig(task="insertion", num_envs=len(object_poses), cameras=()))
    obs = world.reset(object_poses, render=False)
    policy.reset()
    actions, rewards = [], []
    for _ in range(steps):
        action = policy.select_action(to_policy_batch(obs))
        result = world.step(action.numpy(), render=False)
        obs = result.observation
        actions.append(action.numpy())
        rewards.append(result.reward)
    return {"actions": np.stack(actions), "reward": np.stack(rewards), "max_reward": world.max_reward}


@pytest.fixture(scope="module")
def nominal_run():
    policy = make_demonstrator(task="insertion", skill="nominal", seed=0)
    return policy, rollout(policy, ID_POSES, STEPS)


def test_nominal_inserts_the_peg_on_id_starts(nominal_run):
    policy, run = nominal_run
    assert all(isinstance(script, _InsertionScript) for script in policy.scripts)
    success = (run["reward"] == run["max_reward"]).any(axis=0)
    held = run["reward"][-1] == run["max_reward"]
    # Measured: 10/10 on these starts, all still inserted at the last step (and 20/20 on another 20 ID
    # starts, 19/20 on 20 OOD ones), first success at step ~255.
    assert success.sum() >= 9, f"max reward per episode: {run['reward'].max(axis=0)}"
    assert held.sum() >= 8, f"reward at the last step: {run['reward'][-1]}"
    for script in policy.scripts:  # the whole plan fits the episode with margin
        assert dict((stage, t) for t, stage in script.events)["hold"] <= 300


def test_a_large_grasp_offset_succeeds_less_often(nominal_run):
    _, nominal = nominal_run
    sloppy = rollout(make_demonstrator(task="insertion", grasp_offset_x=0.04, seed=0), ID_POSES, STEPS)
    rates = [(run["reward"] == run["max_reward"]).any(axis=0).sum() for run in (nominal, sloppy)]
    # Measured: 5/10. Grasped 4 cm off-centre, the objects hang skewed in the hands: the peg stubs on the
    # socket's rim (reward 3) or is lost.
    assert rates[1] < rates[0] and rates[1] <= 7, rates


def test_same_seed_gives_the_same_actions_and_another_seed_does_not():
    poses = ID_POSES[:2]
    noisy = dict(task="insertion", joint_noise=0.01, grasp_noise=0.005, speed_jitter=0.1)
    first = rollout(make_demonstrator(seed=7, **noisy), poses, 150)["actions"]
    again = rollout(make_demonstrator(seed=7, **noisy), poses, 150)["actions"]
    np.testing.assert_array_equal(first, again)
    other = rollout(make_demonstrator(seed=8, **noisy), poses, 150)["actions"]
    assert not np.array_equal(first, other), "the seed should change a noisy demonstrator's actions"
