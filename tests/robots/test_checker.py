"""The physics checker: every violation type found on a hand-made trajectory, none on clean ones."""

from __future__ import annotations

import numpy as np
import pytest

from r2s2r.policies.policy import to_policy_batch
from r2s2r.robots.aloha import AlohaWorld, WorldConfig
from r2s2r.robots.checker import VIOLATIONS, CheckerConfig, PhysicsChecker
from r2s2r.robots.demonstrators import make_demonstrator
from r2s2r.robots.spec import robot_spec

# gym-aloha's start pose (what AlohaWorld.reset gives), and a cube resting on its face at (0.1, 0.5).
HOME = np.array([0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1, 0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1])
CUBE = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0])
T, DT = 30, 0.1


@pytest.fixture(scope="module")
def checker():
    return PhysicsChecker(robot_spec("aloha"))


def still(T: int = T) -> tuple[np.ndarray, np.ndarray]:
    """Both arms at home and the cube resting, for T steps: (1,T,14), (1,T,7)."""
    return np.tile(HOME, (1, T, 1)), np.tile(CUBE, (1, T, 1))


def fired(checker, states, env=None, actions=None, dt=DT) -> dict[str, list[int]]:
    v = checker.check(states, dt, actions=actions, env_states=env)
    return {
        t: np.nonzero(v.flags[0, :, k])[0].tolist()
        for k, t in enumerate(VIOLATIONS)
        if v.flags[0, :, k].any()
    }


def test_still_robot_and_resting_cube_are_clean(checker):
    states, env = still()
    assert fired(checker, states, env, actions=states.copy()) == {}
    geo = checker.geometry(states[0, :1])
    assert geo["table_depth"][0] == geo["arm_depth"][0] == 0.0
    # The home grasp points (robots.ik's TCP) sit 20 cm either side of the middle, 31 cm up.
    np.testing.assert_allclose(np.abs(geo["tcp"][0, :, 0]), 0.198, atol=2e-3)
    np.testing.assert_allclose(geo["tcp"][0, :, 2], 0.307, atol=2e-3)


def test_a_real_demonstration_is_clean(checker):
    """120 steps of the nominal demonstrator in the reference world: reach, descend, grasp; nothing fires."""
    world = AlohaWorld(WorldConfig(num_envs=2, cameras=()))
    policy = make_demonstrator(skill="nominal", seed=0)
    obs = world.reset(
        np.array([[0.05, 0.45, 0.05, 1, 0, 0, 0], [0.15, 0.55, 0.05, 1, 0, 0, 0]]), render=False
    )
    policy.reset()
    states, env, actions = [], [], []
    for _ in range(120):
        action = policy.select_action(to_policy_batch(obs)).numpy()
        states.append(obs["observation.state"])
        env.append(obs["observation.environment_state"])
        actions.append(action)
        obs = world.step(action, render=False).observation
    states, env, actions = (np.stack(x, axis=1) for x in (states, env, actions))  # (2,120,...)
    for stride, dt in ((1, 0.02), (5, 0.1)):  # the control rate and the world model's frame rate
        v = checker.check(states[:, ::stride], dt, actions=actions[:, ::stride], env_states=env[:, ::stride])
        assert not v.flags.any(), v.counts()


def test_joint_limits(checker):
    states, _ = still()
    lower = robot_spec("aloha").position_lower
    states[0, 10:13, 1] = lower[1] - 0.4  # left shoulder 0.4 rad back past its range (margin 0.25)
    assert fired(checker, states) == {"joint_position": [10, 11, 12]}

    states, _ = still()
    states[0, 10:, 0] += 0.5  # the left waist turns 0.5 rad in 0.1 s: 5 rad/s over its 1.7 limit
    assert fired(checker, states) == {"joint_velocity": [10], "joint_acceleration": [9, 10]}

    states, _ = still()
    states[0, 15, 0] += 0.15  # out at 1.5 rad/s and straight back: speeds under 1.7 rad/s pass, ...
    assert fired(checker, states) == {"joint_acceleration": [15]}  # ... the turn (30 rad/s^2 > 21.4) does not


def test_gripper_state_and_commands(checker):
    states, _ = still()
    states[0, 5:, 6] = 2.3  # springs open beyond the 2.1 a gripper state can read, and stays there
    out = fired(checker, states)
    assert out["gripper_range"] == list(range(5, T)) and out["joint_velocity"] == [5]  # 22 units/s > 10.3
    states, _ = still()
    actions = states.copy()
    actions[0, 7, 13] = 1.2  # commanded gripper beyond 0..1
    actions[0, 9, 0] = 3.3  # commanded waist beyond its +-pi range (no margin for commands)
    assert fired(checker, states, actions=actions) == {"gripper_range": [7], "joint_position": [9]}


def test_collisions(checker):
    states, _ = still()
    states[0, 10:13, 8:10] = [0.9, 0.5]  # right shoulder forward, elbow down: the gripper through the table
    out = fired(checker, states)
    assert out["arm_table_collision"] == [10, 11, 12] and "arm_arm_collision" not in out
    assert checker.geometry(states[0, 10:11])["table_depth"][0] > 0.03

    states, _ = still()
    states[0, 10:13, [1, 8]] = 0.3  # both shoulders forward, elbows up: the grippers meet in the middle
    states[0, 10:13, [2, 9]] = -0.3
    out = fired(checker, states)
    assert out["arm_arm_collision"] == [10, 11, 12] and "arm_table_collision" not in out
    v = checker.check(states, DT, collisions=False)  # the MuJoCo pass can be switched off
    assert not v.flags[..., VIOLATIONS.index("arm_arm_collision")].any()


def test_object_rules(checker):
    states, env = still()
    env[0, 10:14, 2] = 0.02 - 0.025  # sunk 2.5 cm into the table, no gripper near
    assert fired(checker, states, env) == {"object_below_table": [10, 11, 12, 13]}

    states, env = still()
    env[0, 10:26, 2] = 0.12  # 10 cm up, unheld, for 1.6 s: a fall from there takes 0.14 s (+0.2 s grace)
    out = fired(checker, states, env)
    assert (
        list(out) == ["object_floating"]
        and out["object_floating"][0] == 14
        and out["object_floating"][-1] == 25
    )

    states, env = still()
    env[0, 10:, 0] = -0.5  # a 0.6 m jump in 0.1 s (6 m/s), still over the table
    assert fired(checker, states, env)["object_teleport"] == [10]
    states, env = still()
    env[0, 10:, 0] = 0.25  # 15 cm in one 0.1 s frame: slower than a flung cube, but nothing touched it
    assert fired(checker, states, env) == {"object_teleport": [10], "object_unpushed": [10]}

    states, env = still()
    env[0, 10:16, 0] = 0.1 + 0.03 * np.arange(1, 7)  # slides off at 0.3 m/s with nothing touching it
    env[0, 16:, 0] = env[0, 15, 0]
    assert fired(checker, states, env) == {"object_unpushed": [10]}

    states, env = still()
    env[0, :, 3:] = [0.9239, 0.3827, 0.0, 0.0]  # turned 45 deg about x: resting on an edge ...
    env[0, :, 2] = 0.02 * np.sqrt(2)  # ... its centre 2.83 cm up is resting, not floating
    assert fired(checker, states, env) == {}


def test_a_falling_cube_and_a_held_cube_are_not_floating(checker):
    states, env = still(40)
    height = 0.3 - 0.5 * 9.81 * (0.1 * np.arange(40)) ** 2  # let go 30 cm up: lands after 0.25 s
    env[0, :, 2] = np.maximum(height, 0.0) + 0.02
    assert fired(checker, states, env, dt=DT) == {}
    states, env = still()
    geo = checker.geometry(states[0, :1])
    env[0, :, :3] = geo["tcp"][0, 1]  # carried in the right gripper, 30 cm up, the whole time
    assert fired(checker, states, env) == {}


def test_bad_input_is_refused(checker):
    states, env = still()
    with pytest.raises(ValueError, match=r"expected \(B, T, 14\)"):
        checker.check(states[0], DT)
    with pytest.raises(ValueError, match="dt=0"):
        checker.check(states, 0.0)
    bad = states.copy()
    bad[0, 3, 3] = np.nan
    with pytest.raises(ValueError, match="states contain NaN"):
        checker.check(bad, DT)
    with pytest.raises(ValueError, match="env_states have shape"):
        checker.check(states, DT, env_states=env[..., :5])
    with pytest.raises(ValueError, match="must be a number >= 0"):
        CheckerConfig(collision_depth=-1.0)


def test_violation_summaries(checker):
    states, env = still()
    states[0, 10:13, 2] += 2.0  # elbow far past its range
    env[0, 20:24, 2] = -0.01
    both = np.concatenate([states, still()[0]])  # a violating and a clean trajectory
    v = checker.check(both, DT, env_states=np.concatenate([env, still()[1]]))
    assert v.first_step().tolist() == [10, -1]
    assert (
        v.counts(0)["joint_position"] == 3
        and v.counts(0)["object_below_table"] == 4
        and v.counts(1) == dict.fromkeys(VIOLATIONS, 0)
    )
    assert v.trajectory()[:, VIOLATIONS.index("joint_position")].tolist() == [True, False]
