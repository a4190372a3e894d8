"""Tests of family 24, `rrt`: the distance geometry and the trapezoid on hand-computed values, RRT-Connect
and shortcutting on a 2-D wall, the collision model on the real arm, the knobs' checks, determinism, and
real rollouts (the nominal grasp lands where the geometry says and the cube is handed over; a margin wider
than the pre-grasp's clearance leaves the right arm still). Gripper positions in the rollouts come from
MuJoCo's kinematics of the recorded joints (`Arm`), not from the family's own bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: F401  (torch before MuJoCo)

from families import rrt
from families.arm import Arm
from families.rrt import RRTKnobs


def test_segment_and_point_distances_match_hand_values():
    p0, p1 = np.array([[0.0, 0, 0]] * 4), np.array([[1.0, 0, 0]] * 4)
    q0 = np.array([[0.0, 1, 0], [0.5, -1, 0], [2.0, 0, 0], [0.5, 1, 1]])
    q1 = np.array([[1.0, 1, 0], [0.5, 1, 0], [3.0, 0, 0], [0.5, 1, -1]])
    # parallel 1 apart, crossing, collinear 1 beyond the end, skew 1 apart
    np.testing.assert_allclose(rrt.segment_distances(p0, p1, q0, q1), [1.0, 0.0, 1.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(rrt.point_distances(p0[:1], p1[:1], np.array([0.5, 2.0, 0])), [2.0])
    np.testing.assert_allclose(rrt.point_distances(p0[:1], p1[:1], np.array([-3.0, 4.0, 0])), [5.0])


def test_trapezoid_and_timed_path_keep_the_limits():
    assert rrt.trapezoid(1.0, 1.0, 2.0) == pytest.approx((1.5, 0.5, 1.0))  # 1 m at 1 m/s + 0.5 s ramp
    assert rrt.trapezoid(0.125, 1.0, 2.0) == pytest.approx((0.5, 0.25, 0.5))  # a triangle, top 0.5
    path = [np.zeros(6), np.array([0.6, 0.0, 0, 0, 0, 0]), np.array([0.6, -0.9, 0, 0, 0, 0.3])]
    q = np.concatenate([path[:1], rrt.timed(path, 1.2, 4.0)])  # (T+1, 6), from rest at the start
    v = np.abs(np.diff(q, axis=0)).max(axis=1) / rrt.DT
    assert v.max() <= 1.2 * 1.001
    np.testing.assert_allclose(q[-1], path[-1], atol=1e-12)
    assert len(q) - 1 == int(np.ceil(rrt.trapezoid(1.5, 1.2, 4.0)[0] / rrt.DT))  # path length 0.6 + 0.9


def wall_world():
    """A 2-D unit square with a wall x in [0.4, 0.6], y < 0.8: the straight line start -> goal is blocked."""
    free = lambda q: not (0.4 <= q[0] <= 0.6 and q[1] < 0.8)  # noqa: E731
    edge = lambda a, b: rrt.edge_clear(free, a, b, 0.01)  # noqa: E731
    return free, edge, (np.zeros(2), np.ones(2)), np.array([0.1, 0.1]), np.array([0.9, 0.1])


def test_rrt_connect_goes_around_a_wall_and_shortcutting_shortens_it():
    free, edge, bounds, start, goal = wall_world()
    assert not edge(start, goal)
    rng = np.random.default_rng(0)
    path = rrt.rrt_connect(start, goal, edge, bounds, RRTKnobs(iterations=500, step=0.1), rng)
    assert path is not None
    np.testing.assert_array_equal(path[0], start)
    np.testing.assert_array_equal(path[-1], goal)
    assert all(edge(a, b) for a, b in zip(path[:-1], path[1:], strict=True))
    assert max(q[1] for q in path) >= 0.8  # over the wall's top
    length = lambda p: np.linalg.norm(np.diff(np.array(p), axis=0), axis=1).sum()  # noqa: E731
    short = rrt.shortcut(path, edge, 200, rng)
    assert all(edge(a, b) for a, b in zip(short[:-1], short[1:], strict=True))
    assert length(short) < length(path) and len(short) < len(path)
    assert length(short) >= 2 * np.hypot(0.3, 0.7) + 0.2 - 0.02  # none is shorter than over the wall's top
    assert rrt.rrt_connect(start, goal, edge, bounds, RRTKnobs(iterations=0), rng) is None


def test_collision_model_sees_the_table_and_the_margin():
    from gym_aloha.constants import START_ARM_POSE

    right, start = Arm("right"), np.array(START_ARM_POSE[8:14])
    left = rrt.arm_capsules(Arm("left"), np.array(START_ARM_POSE[:6]), 1.0)  # the left at rest
    scene = lambda margin: rrt.Scene(right, 1.0, margin, [], left)  # noqa: E731
    assert scene(0.01).clear(start)
    rot = rrt.right_grasp_rots(np.array([0.1, 0.5, 0.02, 1, 0, 0, 0]))[0]
    into_table, err = right.ik(np.array([0.1, 0.5, -0.02]), rot, start, iters=200)
    assert err < 1e-3 and not scene(0.0).clear(into_table)  # finger tips 5 cm into the table
    pre, _ = right.ik(np.array([0.1, 0.5, 0.124]), rot, start, iters=200)
    cube = (np.array([0.1, 0.5, 0.02]), rrt.CUBE_RADIUS)
    assert rrt.Scene(right, 1.0, 0.01, [cube], left).clear(pre)
    assert not rrt.Scene(right, 1.0, 0.06, [cube], left).clear(pre)  # wide_margin_hold's failure


def test_bad_kwargs_raise_clear_errors():
    with pytest.raises(ValueError, match="bogus"):
        rrt.make_policy(bogus=1)
    for name, value in (
        ("step", 0.0),
        ("goal_bias", 1.5),
        ("ik", "best"),
        ("fallback", "retry"),
        ("speed", 0),
    ):
        with pytest.raises(ValueError, match=name):
            RRTKnobs(**{name: value})
    for kwargs in rrt.FAMILY_SETTINGS.values():
        RRTKnobs(**kwargs)  # every named setting is valid
    assert 8 <= len(rrt.FAMILY_SETTINGS) <= 10


def fake_batch() -> dict[str, torch.Tensor]:
    from gym_aloha.constants import START_ARM_POSE

    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0], dtype=np.float32)
    env = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    return {"observation.state": torch.from_numpy(state)[None],
            "observation.environment_state": torch.from_numpy(env)[None]}  # fmt: skip


def actions_of(seed: int, steps: int = 25) -> np.ndarray:
    policy = rrt.make_policy(seed=seed, shortcuts=0)
    batch = fake_batch()
    return np.stack([policy.select_action(batch).numpy() for _ in range(steps)])


def test_same_seed_same_actions_other_seed_other_actions():
    a, b, c = actions_of(0), actions_of(0), actions_of(1)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3  # another RRT draws another path


def rollout(kwargs: dict, steps: int) -> tuple[dict, object]:
    """One real ID episode (the first pose): right TCP and commands, cube poses, rewards."""
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy, right = rrt.make_policy(**kwargs), Arm("right")
    rec: dict[str, list] = {"tcp": [], "action": [], "cube": [], "reward": []}
    with AlohaWorld(WorldConfig(cameras=(), num_envs=1)) as world:
        obs = world.reset(initial_poses("id", 1), False)
        policy.reset()
        for _ in range(steps):
            action = policy.select_action(to_batch(obs)).numpy()
            step = world.step(action, False)
            obs = step.observation
            rec["tcp"].append(right.fk(obs["observation.state"][0, 7:13].astype(float))[0])
            rec["action"].append(action[0])
            rec["cube"].append(obs["observation.environment_state"][0, :3].astype(float))
            rec["reward"].append(float(step.reward[0]))
    return {k: np.array(v) for k, v in rec.items()}, policy.plans[0]


def test_nominal_grasp_lands_on_the_cube_and_the_cube_is_handed_over():
    rec, episode = rollout({}, 330)
    close = int(np.nonzero(rec["action"][:, 13] < 0.5)[0][0])  # the right's close command
    cube = rec["cube"][close]
    assert np.linalg.norm(rec["tcp"][close, :2] - cube[:2]) < 0.01  # centred over the cube
    assert abs(rec["tcp"][close, 2] - (rrt.GRASP_TIPS + rrt.TIP_REACH)) < 0.01  # tips 1.5 cm up
    assert rec["cube"][:, 2].max() > 0.18  # carried up toward the 22 cm hand-over
    assert np.linalg.norm(rec["cube"][-1] - rrt.HANDOVER) < 0.03
    assert rec["reward"].max() == 4  # the left's finger on the cube, the cube off the table
    assert [(arm, phase, outcome) for _, arm, phase, outcome in episode.plans] == [
        ("right", "pregrasp", "rrt"), ("right", "carry", "rrt"), ("left", "stage", "rrt")]  # fmt: skip


def test_a_margin_wider_than_the_pregrasp_clearance_leaves_the_right_arm_still():
    rec, episode = rollout(rrt.FAMILY_SETTINGS["wide_margin_hold"], 60)
    assert episode.plans[0][1:] == ("right", "pregrasp", "failed")
    np.testing.assert_allclose(rec["action"][:, 7:13], rec["action"][:1, 7:13].repeat(60, axis=0))
    assert rec["reward"].max() == 0
