"""Tests of family 23, `dmp`: the DMP's spring-damper and phase against closed forms, the fit against its
demonstration, Ijspeert's spatial scaling (a mirrored goal mirrors the shape), the hand-over geometry, the
knobs' checks, determinism, tau's timeline, and real rollouts (the nominal grasp lands on the cube and
hands it over; with goal coupling off it lands on the demonstration's cube instead)."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # noqa: F401  (torch before MuJoCo)

from families import dmp
from families.arm import Arm
from families.common import gripper_rot, minimum_jerk, piecewise
from families.dmp import Dmp, DmpKnobs, DmpRun


def test_basis_centres_are_evenly_spaced_in_time_and_amplitude_has_a_floor():
    centres, widths = dmp.basis(3)
    np.testing.assert_allclose(centres, [1.0, np.exp(-2.0), np.exp(-4.0)])
    assert widths[0] < widths[1]  # narrower (in phase) where the phase runs slowly
    got = dmp.amplitude(np.zeros(4), np.array([0.0005, -0.0005, -0.2, 0.0]))
    np.testing.assert_allclose(got, [0.001, -0.001, -0.2, 0.001])


def spring_only(duration: float = 1.0) -> Dmp:
    centres, widths = dmp.basis(5)
    return Dmp(centres, widths, np.zeros((1, 5)), duration, np.zeros(1), np.ones(1), ijspeert=False)


def test_without_forcing_a_dmp_is_a_critically_damped_spring():
    # tau^2 y'' = 25 (6.25 (g - y) - tau y') has the double root 12.5 / tau: y = g - (1 + w t) e^(-w t).
    run = DmpRun(spring_only(), np.zeros(1), np.ones(1), tau=1.0)
    y = [run.step()[0] for _ in range(10)][-1]  # 0.2 s
    assert y == pytest.approx(1 - 3.5 * np.exp(-2.5), abs=0.01)  # 0.7127
    ys = [run.step()[0] for _ in range(200)]
    assert max(ys) <= 1.0 + 1e-9 and ys[-1] == pytest.approx(1.0, abs=1e-6)  # no overshoot


def test_phase_decays_over_one_duration_and_phase_stopping_slows_it():
    run = DmpRun(spring_only(duration=2.0), np.zeros(1), np.ones(1), tau=0.5)  # runs 1 s = 50 steps
    for _ in range(49):
        run.step()
    assert not run.done and run.progress == pytest.approx(49 / 50, abs=0.02)
    run.step()
    assert run.done
    free, stopped = (DmpRun(spring_only(), np.zeros(1), np.ones(1), 1.0) for _ in range(2))
    free.step()
    stopped.step(lag=0.05, phase_stop=1000.0)  # 1 + 1000 * 0.05^2 = 3.5 times slower
    assert np.log(free.s) / np.log(stopped.s) == pytest.approx(3.5, rel=0.02)


def via_point_demo() -> np.ndarray:
    """(101, 1) 0 -> 1 over 2 s through an overshoot to 1.4 at 60 %."""
    times = [0.0, 0.6, 1.0]
    values = [np.zeros(1), np.full(1, 1.4), np.ones(1)]
    return np.stack([piecewise(times, values, k / 100, minimum_jerk) for k in range(101)])


def play(fitted: Dmp, start: float, goal: float, steps: int) -> np.ndarray:
    run = DmpRun(fitted, np.full(1, start), np.full(1, goal), 1.0)
    return np.array([start] + [run.step()[0] for _ in range(steps)])


def test_fit_reproduces_the_demo_and_too_few_basis_functions_lose_its_shape():
    demo = via_point_demo()[:, 0]
    rich = play(dmp.fit_dmp([demo[:, None]], 30, ijspeert=False), 0.0, 1.0, 100)
    poor = play(dmp.fit_dmp([demo[:, None]], 2, ijspeert=False), 0.0, 1.0, 100)
    assert np.abs(rich - demo).max() < 0.02
    assert rich.max() == pytest.approx(1.4, abs=0.02)  # the overshoot is learnt
    assert np.abs(poor - demo).max() > 5 * np.abs(rich - demo).max()


def test_ijspeert_scaling_mirrors_the_shape_for_a_mirrored_goal_and_fixed_forcing_does_not():
    demo = via_point_demo()
    scaled = play(dmp.fit_dmp([demo], 30, ijspeert=True), 0.0, -1.0, 100)
    fixed = play(dmp.fit_dmp([demo], 30, ijspeert=False), 0.0, -1.0, 100)
    assert np.abs(scaled + demo[:, 0]).max() < 0.02  # the classic amplitude flip: an overshoot below -1
    assert scaled.min() == pytest.approx(-1.4, abs=0.02)
    assert fixed.min() > -1.2  # the learnt push toward +1 is kept: it reaches -1 without the mirrored swing


def test_hand_over_is_nose_to_nose_across_the_meeting_point():
    right, left = dmp.right_handover_pose(), dmp.left_take_pose(dmp.MEET)
    c, s = np.cos(np.deg2rad(35)), np.sin(np.deg2rad(35))
    np.testing.assert_allclose(right[:3], dmp.MEET + 0.031 * np.array([c, 0, s]), atol=1e-9)
    np.testing.assert_allclose(left[:3], dmp.MEET - 0.031 * np.array([c, 0, s]), atol=1e-9)
    a_right = gripper_rot(*right[3:])[:, 0]
    a_left = gripper_rot(*left[3:])[:, 0]
    assert a_right @ a_left == pytest.approx(-1.0)  # coaxial, facing each other
    grasp = dmp.right_grasp_pose(np.array([0.1, 0.45, 0.05, 1.0, 0, 0, 0]))
    np.testing.assert_allclose(grasp[:3], [0.1, 0.45, 0.051])  # on the table, TCP 3.1 cm above the centre
    closing = gripper_rot(*grasp[3:])[:, 1]
    assert abs(closing[1]) == pytest.approx(1.0)  # fingers across the cube's y faces


def test_bad_kwargs_raise_clear_errors():
    bad = {"bogus": 1, "n_basis": 0, "demos": 10, "scaling": "pastor", "tau": 0.0, "phase_stop": -1.0,
           "pose_noise": -0.01}  # fmt: skip
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            dmp.make_policy(**{name: value})
    for kwargs in dmp.FAMILY_SETTINGS.values():
        DmpKnobs(**kwargs)  # every named setting is valid
    assert 8 <= len(dmp.FAMILY_SETTINGS) <= 10


def fake_batch() -> dict[str, torch.Tensor]:
    from gym_aloha.constants import START_ARM_POSE

    state = np.array(START_ARM_POSE[:6] + [1.0] + START_ARM_POSE[8:14] + [1.0], dtype=np.float32)
    env = np.array([0.1, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0], dtype=np.float32)
    return {"observation.state": torch.from_numpy(state)[None],
            "observation.environment_state": torch.from_numpy(env)[None]}  # fmt: skip


def test_same_seed_same_actions_other_seed_other_actions():
    def actions(seed: int) -> np.ndarray:
        policy, batch = dmp.make_policy(pose_noise=0.01, seed=seed), fake_batch()
        return np.stack([policy.select_action(batch).numpy() for _ in range(30)])

    a, b, c = actions(0), actions(0), actions(1)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3  # another bias on the cube reading aims the reach elsewhere


def test_tau_scales_the_reach_duration():
    def reach_steps(tau: float) -> int:
        policy, batch = dmp.make_policy(tau=tau), fake_batch()
        for t in range(400):
            policy.select_action(batch)
            if policy.plans[0].right_stage != "reach":
                return t
        return -1

    assert reach_steps(1.0) == pytest.approx(80, abs=1)  # the teacher's 1.6 s
    assert reach_steps(0.5) == pytest.approx(40, abs=1)


def rollout(kwargs: dict, steps: int) -> tuple[dict, object]:
    """One real ID episode (the first pose): right TCP where the right starts closing, cube path, rewards."""
    from families.measure import initial_poses, to_batch
    from r2s2r.robots.aloha import AlohaWorld, WorldConfig

    policy, right = dmp.make_policy(**kwargs), Arm("right")
    rec: dict = {"cube": [], "reward": [], "close_tcp": None}
    with AlohaWorld(WorldConfig(cameras=(), num_envs=1)) as world:
        obs = world.reset(initial_poses("id", 1), False)
        policy.reset()
        for _ in range(steps):
            step = world.step(policy.select_action(to_batch(obs)).numpy(), False)
            obs = step.observation
            if rec["close_tcp"] is None and policy.plans[0].right_stage == "close":
                rec["close_tcp"] = right.fk(obs["observation.state"][0, 7:13].astype(float))[0]
            rec["cube"].append(obs["observation.environment_state"][0, :3].copy())
            rec["reward"].append(float(step.reward[0]))
    return {k: np.array(v) for k, v in rec.items()}, policy.plans[0]


def test_nominal_grasps_the_cube_where_it_lies_and_hands_it_over_in_a_real_rollout():
    rec, episode = rollout({}, 260)
    cube0 = rec["cube"][20]  # landed
    assert np.linalg.norm(rec["close_tcp"][:2] - cube0[:2]) < 0.01  # the goal moved to the observed cube
    assert rec["close_tcp"][2] == pytest.approx(0.051, abs=0.01)  # 3.1 cm above the cube centre
    assert rec["cube"][:, 2].max() > 0.18  # carried up toward the hand-over at z = 0.22
    assert rec["reward"].max() == 4  # the left took it in the air
    assert episode.left_stage in ("close", "hold")


def test_without_goal_coupling_the_grasp_lands_on_the_demonstration_cube_in_a_real_rollout():
    rec, _ = rollout({"goal_coupling": False}, 110)
    cube0 = rec["cube"][20]
    assert np.linalg.norm(cube0[:2] - dmp.DEMO_CUBES[0]) > 0.04  # this episode's cube is elsewhere
    assert np.linalg.norm(rec["close_tcp"][:2] - dmp.DEMO_CUBES[0]) < 0.01
    assert rec["reward"].max() < 2  # never lifted
