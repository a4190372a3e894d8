"""Tests of family 25, `lqr`: the optimiser's model and costs against hand-computed values, iLQR's
convergence and what its flaws do to a plan, the knobs' checks, determinism, and a real rollout (a grasp,
a lift and a hand-over). Heights in the rollout come from MuJoCo's kinematics of the reported joints."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: F401  (torch before MuJoCo)
from gym_aloha.constants import START_ARM_POSE

from families import lqr
from families.arm import Arm
from families.lqr import Ilqr, LqrKnobs, TcpGoal


def test_dynamics_is_the_per_joint_lag():
    F, G = lqr.dynamics(np.full(6, 0.5))
    q, q_prev, u = np.full(6, 1.0), np.zeros(6), np.full(6, 3.0)
    x = F @ np.concatenate([q, q_prev]) + G @ u
    np.testing.assert_allclose(x[:6], 2.0)  # 1 + 0.5 (3 - 1)
    np.testing.assert_allclose(x[6:], 1.0)  # the old q becomes q_prev


def test_running_cost_by_hand():
    # q = 0, q_prev = -0.1, u = 0.1 on every joint, rate a: q' = 0.1 a, so velocity 0.1 a, acceleration
    # q' - 2 q + q_prev = 0.1 a - 0.1, lead 0.1; weights 1, 20, 0.1. The wrist's a = 0.4: 0.0016 + 20 * 0.0036
    # + 0.001 = 0.0746; the waist's a = 0.9: 0.0081 + 20 * 0.0001 + 0.001 = 0.0111.
    H = lqr.running_hessian(LqrKnobs())
    per_joint = [0.0111, 0.0111, 0.0049 + 20 * 0.0009 + 0.001, 0.003025 + 20 * 0.002025 + 0.001, 0.0746,
                 0.0064 + 20 * 0.0004 + 0.001]  # fmt: skip
    z = np.concatenate([np.zeros(6), np.full(6, -0.1), np.full(6, 0.1)])
    assert z @ H @ z == pytest.approx(sum(per_joint))


def test_task_error_vanishes_only_at_the_goal():
    arm = Arm("right")
    q = np.array(START_ARM_POSE[8:14])
    p, R = arm.fk(q)
    assert np.abs(TcpGoal(arm, p, R).error(q)).max() < 1e-12
    flipped = R @ np.diag([1.0, -1.0, -1.0])  # half a turn about the approach: a small-angle error is 0
    e = TcpGoal(arm, p, flipped).error(q)
    assert np.linalg.norm(e) == pytest.approx(lqr.ROT_WEIGHT * np.sqrt(8.0))  # |R - R diag(1,-1,-1)| = sqrt 8


def plan_to(knobs: LqrKnobs, steps: int = 80) -> tuple[float, object]:
    arm = Arm("right")
    q0 = np.array(START_ARM_POSE[8:14])
    cube = np.array([0.1, 0.5, 0.02])
    goal = TcpGoal(arm, cube + [0.0, 0.0, 0.1], lqr.right_grasp_rot(arm, cube[:2], 0.0))
    plan = Ilqr(knobs, arm).solve(q0, q0, goal, steps)
    return float(np.linalg.norm(goal.error(plan.x[-1, :6])[:3])), plan


def test_converged_plan_reaches_the_goal_and_flaws_stop_it_short():
    nominal, plan = plan_to(LqrKnobs())
    one_iteration, _ = plan_to(LqrKnobs(iterations=1))
    low_final, _ = plan_to(LqrKnobs(final_weight=3.0))
    assert nominal < 1e-3
    assert one_iteration > 0.05  # one Gauss-Newton step from the start pose: not converged
    assert low_final > 0.02  # the goal weight too low: the velocity cost wins, the arm stops short
    assert plan.u.shape == (80, 6) and plan.K.shape == (80, 6, 12)
    costs = [plan_to(LqrKnobs(iterations=n))[1].cost for n in (1, 3, 12)]
    assert costs[0] > costs[1] > costs[2]  # every accepted iteration lowers the cost


def test_bad_kwargs_raise_clear_errors():
    with pytest.raises(ValueError, match="bogus"):
        lqr.make_policy(bogus=1)
    with pytest.raises(ValueError, match="iterations"):
        lqr.make_policy(iterations=0)
    with pytest.raises(ValueError, match="gain_scale"):
        lqr.make_policy(gain_scale=1.5)
    with pytest.raises(ValueError, match="tempo"):
        lqr.make_policy(tempo=2.0)
    for kwargs in lqr.FAMILY_SETTINGS.values():
        LqrKnobs(**kwargs)  # every named setting is valid


def fake_batch() -> dict[str, torch.Tensor]:
    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0], dtype=np.float32)
    env = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    return {"observation.state": torch.from_numpy(state)[None],
            "observation.environment_state": torch.from_numpy(env)[None]}  # fmt: skip


def actions_of(seed: int, steps: int = 3) -> np.ndarray:
    policy = lqr.make_policy(seed=seed, cube_noise=0.01)
    return np.stack([policy.select_action(fake_batch()).numpy() for _ in range(steps)])


def test_same_seed_same_actions_other_seed_other_actions():
    a, b, c = actions_of(0), actions_of(0), actions_of(1)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-5  # another reading error, another plan


def test_nominal_grasps_lifts_and_hands_over_in_a_real_rollout():
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy, right = lqr.make_policy(), Arm("right")
    tcp_z, cube_z, rewards = [], [], []
    with AlohaWorld(WorldConfig(cameras=(), num_envs=1)) as world:
        obs = world.reset(initial_poses("id", 1), False)
        policy.reset()
        for _ in range(310):
            step = world.step(policy.select_action(to_batch(obs)).numpy(), False)
            obs = step.observation
            tcp_z.append(right.fk(obs["observation.state"][0, 7:13].astype(float))[0][2])
            cube_z.append(float(obs["observation.environment_state"][0, 2]))
            rewards.append(float(step.reward[0]))
    assert abs(tcp_z[118] - (0.02 + lqr.GRASP_UP)) < 0.01  # descended to the grasp height by step 120
    assert cube_z[255] > 0.18  # carried up to the hand-over (the cube rests at 0.02)
    assert max(rewards) == 4  # the left's finger touched the cube in the air
    phases = [(side, name) for side, name, _ in policy.plans[0].plans]
    assert phases[:2] == [("right", "above"), ("right", "descend")]
