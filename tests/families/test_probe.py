"""Tests of family 33, `probe`: the search pattern and the take offsets against values computed by hand, the
grasp, offer and take checked by MuJoCo's own forward kinematics, the judgments by feel on crafted
observations, the knobs' checks, determinism, and real rollouts: the nominal controller hands the cube
over, and after a finger lands on the cube it finds it on its next try, where the same controller without
search gives up; a threshold above the held opening takes a held cube for a miss on every try."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gym_aloha.constants import START_ARM_POSE

from families import probe
from families.arm import Arm
from families.probe import ProbeKnobs
from helpers.kinematics import mujoco_tcp

CUBE = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0])
START = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0])
SQRT_HALF = np.sqrt(0.5)
# ID episode 12 (measure.py's poses, seed 0): the nominal reader is 20 mm off along the fingers' closing
# axis there, so the first try lands a finger on the cube's top.
LANDS_ON_TOP = 12


def episode(**kwargs) -> probe.ProbeEpisode:
    left = Arm("left")
    return probe.ProbeEpisode(ProbeKnobs(**kwargs), left, Arm("right", model=left.model), START, CUBE)


def test_search_pattern_and_take_offsets_by_hand():
    plan = episode(search_step=0.016)
    plan.guess = np.array([0.1, 0.5])
    # TCP 1.5 cm above the centre of a cube lying on the table (centre 2 cm up): z = 0.035
    np.testing.assert_allclose(plan.target(0), [0.1, 0.5, 0.035])
    np.testing.assert_allclose(plan.target(1), [0.1, 0.516, 0.035])  # first along y, the closing axis
    np.testing.assert_allclose(plan.target(2), [0.1, 0.484, 0.035])
    np.testing.assert_allclose(plan.target(3), [0.116, 0.5, 0.035])
    np.testing.assert_allclose(plan.target(5), [0.116, 0.516, 0.035])
    # the left heads 45 degrees, so its closing axis is (-1, 1, 0) / sqrt(2); 8 mm under the centre
    np.testing.assert_allclose(
        probe.left_take(np.zeros(3), 0.016), [-0.016 * SQRT_HALF, 0.016 * SQRT_HALF, -0.008], atol=1e-12
    )


def test_durations_scale_with_speed_and_never_drop_below_two_steps():
    assert ProbeKnobs().steps("reach") == 50 and ProbeKnobs(speed=0.4).steps("reach") == 125
    assert ProbeKnobs(speed=5.0).steps("grip") == 3  # 14 / 5 = 2.8
    assert ProbeKnobs(speed=5.0).steps("settle") == 2  # 5 / 5 = 1, held at 2


@pytest.mark.parametrize("xy", [(0.1, 0.5), (-0.04, 0.36), (0.24, 0.64)])
def test_grasp_offer_and_take_checked_by_mujoco(xy):
    right, left = Arm("right"), Arm("left")
    grasp = probe.grasp_point(np.array(xy))
    q, _ = right.ik(
        grasp + [0, 0, probe.HOVER], probe.gripper_rot(*probe.GRASP_ANGLES), START[7:13], iters=300
    )
    q, _ = right.ik(grasp, probe.gripper_rot(*probe.GRASP_ANGLES), q, iters=300)
    tcp, axes = mujoco_tcp("right", q)
    assert np.linalg.norm(tcp - grasp) < 3e-3 and axes[2, 0] < -0.995  # top-down
    assert abs(axes[:, 1] @ [0.0, 1.0, 0.0]) > 0.995  # closing on the y faces
    centre = np.array([*xy, probe.CUBE_HALF])
    assert np.linalg.norm(probe.held_centre(right, q) - centre) < 3e-3  # the cube's centre it holds
    offer = probe.HANDOVER + [0.0, 0.0, probe.GRASP_HEIGHT]
    q, _ = right.ik(offer, probe.gripper_rot(*probe.OFFER_ANGLES), q, iters=300)
    tcp, right_axes = mujoco_tcp("right", q)
    assert np.linalg.norm(tcp - offer) < 3e-3
    assert abs(right_axes[:, 1] @ [SQRT_HALF, SQRT_HALF, 0.0]) > 0.995  # turned an eighth turn
    take = probe.left_take(probe.HANDOVER, 0.0)
    q, _ = left.ik(take, probe.gripper_rot(*probe.TAKE_ANGLES), START[:6], iters=300)
    tcp, left_axes = mujoco_tcp("left", q)
    assert np.linalg.norm(tcp - take) < 3e-3
    assert abs(left_axes[:, 1] @ [-SQRT_HALF, SQRT_HALF, 0.0]) > 0.995  # across the free faces
    assert (
        abs(left_axes[:, 1] @ right_axes[:, 1]) < 0.03 and left_axes[:, 0] @ [SQRT_HALF, SQRT_HALF, 0] > 0.99
    )


def state_at_grasp(plan: probe.ProbeEpisode, above: float, opening: float) -> np.ndarray:
    """An observation.state with the right's TCP `above` its grasp and its fingers at `opening`."""
    rot = probe.gripper_rot(*probe.GRASP_ANGLES)
    q, _ = plan.arms["right"].ik(
        plan.target(plan.tries["right"]) + [0, 0, above], rot, START[7:13], iters=300
    )
    q, _ = plan.arms["right"].ik(plan.target(plan.tries["right"]) + [0, 0, above], rot, q, iters=300)
    state = START.copy()
    state[7:13], state[13] = q, opening
    return state


def judged(plan: probe.ProbeEpisode, above: float, opening: float) -> probe.Move:
    plan.moves["right"] = plan.hold(
        "right", 100, 1, None, plan.target(plan.tries["right"]), probe.GRASP_ANGLES
    )
    return plan.judge(100, state_at_grasp(plan, above, opening), CUBE)


def test_judgments_by_finger_opening_and_tcp_height():
    plan = episode()
    plan.guess = CUBE[:2]
    move = judged(plan, 0.0, 0.6)  # stalled at the cube's width, TCP down: a hold, lift
    assert plan.events[-1][1] == "right_hold" and move.then == plan.carry
    np.testing.assert_allclose(move.p1 - move.p0, [0.0, 0.0, probe.LIFT])
    move = judged(plan, 0.0, 0.2)  # fully shut: a miss, open, next try
    assert plan.events[-1][1] == "right_miss" and plan.grip["right"] == probe.GRIPPER_OPEN
    assert plan.tries["right"] == 1 and move.then == plan.rise
    judged(plan, 0.0, 0.85)  # stalled wider than the cube: a miss
    assert plan.events[-1][1] == "right_miss" and plan.tries["right"] == 2
    move = judged(plan, 0.0, 0.2)  # the third and last try missed: it gives up, open, where it is
    assert move.then is None and plan.tries["right"] == 2 and plan.grip["right"] == probe.GRIPPER_OPEN


def test_a_finger_on_the_cube_is_a_miss_before_closing():
    plan = episode()
    plan.guess = CUBE[:2]
    plan.moves["right"] = plan.hold("right", 80, 1, None, plan.target(0), probe.GRASP_ANGLES)
    move = plan.close(80, state_at_grasp(plan, 0.03, 0.97), CUBE)  # stopped 3 cm high: on the top
    assert plan.events[-1][1] == "right_touch" and plan.grip["right"] == probe.GRIPPER_OPEN
    assert move.p0[2] == pytest.approx(plan.target(0)[2] + 0.03, abs=2e-3)  # backs off to where it stands
    move = plan.close(90, state_at_grasp(plan, 0.002, 0.97), CUBE)  # down at the grasp: it closes
    assert plan.grip["right"] == 0.0 and move.then == plan.judge


def test_low_threshold_takes_shut_fingers_for_a_hold():
    plan = episode(hold_threshold=0.15)
    plan.guess = CUBE[:2]
    judged(plan, 0.0, 0.2)
    assert plan.events[-1][1] == "right_hold"


def test_unknown_and_invalid_knobs_are_refused():
    with pytest.raises(ValueError, match="unknown kwarg"):
        probe.make_policy(tries=3)
    with pytest.raises(ValueError, match="max_tries=0"):
        ProbeKnobs(max_tries=0)
    with pytest.raises(ValueError, match="squeeze=1.5"):
        ProbeKnobs(squeeze=1.5)
    with pytest.raises(ValueError, match="reading_bias"):
        ProbeKnobs(reading_bias=-0.01)
    with pytest.raises(ValueError, match="reread"):
        ProbeKnobs(reread="yes")


def test_family_settings_are_named_and_valid():
    names = list(probe.FAMILY_SETTINGS)
    assert len(names) == 10 and names[0] == "nominal" and probe.FAMILY_SETTINGS["nominal"] == {}
    for name, kwargs in probe.FAMILY_SETTINGS.items():
        assert not name.startswith("probe")
        ProbeKnobs(**kwargs)


def fake_batch() -> dict[str, torch.Tensor]:
    return {"observation.state": torch.from_numpy(START.astype(np.float32))[None],
            "observation.environment_state": torch.from_numpy(CUBE.astype(np.float32))[None]}  # fmt: skip


def actions_of(seed: int, steps: int = probe.READ + 20) -> np.ndarray:
    policy = probe.make_policy(seed=seed)
    return np.stack([policy.select_action(fake_batch()).numpy() for _ in range(steps)])


def test_same_seed_same_actions_other_seed_other_reading():
    a, b, c = actions_of(0), actions_of(0), actions_of(1)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[: probe.READ], c[: probe.READ])  # nothing read yet: the start pose
    assert np.abs(a - c).max() > 1e-4  # another bias, another guess


def rollout(poses: list[int], **kwargs):
    """ID episodes `poses` in one lockstep batch: the plans, cube positions, states and rewards per step."""
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy = probe.make_policy(**kwargs)
    cubes, states, rewards = [], [], []
    with AlohaWorld(WorldConfig(cameras=(), num_envs=len(poses))) as world:
        obs = world.reset(initial_poses("id", max(poses) + 1)[poses], False)
        policy.reset()
        for _ in range(probe.EPISODE_STEPS):
            step = world.step(policy.select_action(to_batch(obs)).numpy(), False)
            obs = step.observation
            cubes.append(obs["observation.environment_state"][:, :3].astype(float))
            states.append(obs["observation.state"].astype(float))
            rewards.append(step.reward.astype(float))
    return policy.plans, np.stack(cubes, 1), np.stack(states, 1), np.stack(rewards, 1)


def test_nominal_hands_over_and_finds_a_cube_it_first_landed_on():
    plans, cubes, states, rewards = rollout([0, LANDS_ON_TOP])
    assert [e[1] for e in plans[0].events] == ["right_hold", "left_hold"]  # first try, first take
    assert [e[1] for e in plans[1].events] == ["right_touch", "right_hold", "left_hold"]
    touch = plans[1].events[0]
    assert touch[3] > 0.025 and rewards[1, : touch[0]].max() <= 1  # stood on the top, never lifted it
    for b, plan in enumerate(plans):
        hold, take = plan.events[-2][0], plan.events[-1][0]
        assert rewards[b, hold] == 1 and cubes[b, plan.offered, 2] > 0.18  # the right alone lifts it ...
        first = int(np.argmax(rewards[b] == 4))  # ... and the left touches it in the air, during its take
        assert plan.offered < first <= take and rewards[b, plan.offered] == 2
        assert probe.ProbeKnobs().hold_threshold < plan.events[-1][2] < probe.WIDE  # judged by its opening
        assert states[b, -1, 13] > 0.9  # the right let go
        right_tcp, _ = mujoco_tcp("right", states[b, -1, 7:13])
        assert right_tcp[2] > probe.HANDOVER[2] + 0.05  # and rose away


def test_without_search_the_same_landing_ends_the_episode():
    plans, cubes, states, rewards = rollout([LANDS_ON_TOP], **probe.FAMILY_SETTINGS["no_search"])
    assert [e[1] for e in plans[0].events] == ["right_touch"]  # one try, given up
    assert rewards.max() <= 1 and cubes[0, -1, 2] < 0.03  # the cube never left the table


def test_high_threshold_takes_a_held_cube_for_a_miss():
    plans, cubes, states, rewards = rollout([0], **probe.FAMILY_SETTINGS["high_threshold"])
    events = plans[0].events
    assert len(events) == 3 and all(
        e[1] in ("right_miss", "right_touch") for e in events
    )  # 3 tries, none held
    opening, stood = events[0][2:]  # yet the first try held the cube: stalled at its width, TCP down
    assert 0.45 < opening < 0.75 and stood < probe.LANDED and rewards[0, events[0][0]] >= 1
    assert rewards.max() < 4 and plans[0].offered is None and states[0, -1, 13] > 0.9
