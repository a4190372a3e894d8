"""The perturbation engine does what its labels say, measured on the trajectory the reference world played:
a grasp asked 6 cm off lands 6 cm off, a hand-over aimed high closes high, a drop drops, a push moves the
cube; the coverage demonstrator's draws are labelled, reproducible and recorded beside each episode."""

import r2s2r.robots.aloha  # noqa: F401, I001  (sets MUJOCO_GL and loads torch before MuJoCo)

import numpy as np
import pytest

from r2s2r.data.commit import episode_labels
from r2s2r.data.recorder import RecordConfig, record
from r2s2r.policies.policy import PolicyConfig, to_policy_batch
from r2s2r.robots.aloha import AlohaWorld, WorldConfig
from r2s2r.robots.demonstrators import LEFT, RIGHT, DemonstratorConfig, make_demonstrator
from r2s2r.robots.ik import BimanualIK
from r2s2r.robots.perturbations import (
    KINDS,
    PerturbationRanges,
    draw_perturbation,
)

XY = [(0.05, 0.45), (0.15, 0.55)]  # two ID cube positions
STEPS = 320


def play(policy, steps: int = STEPS) -> dict[str, np.ndarray]:
    """States (T,B,14), cube poses (T,B,7) before each step, actions (T,B,14), success (T,B)."""
    poses = np.array([[x, y, 0.05, 1.0, 0.0, 0.0, 0.0] for x, y in XY])
    out = {k: [] for k in ("state", "cube", "action", "success")}
    with AlohaWorld(WorldConfig(num_envs=len(poses), cameras=())) as world:
        obs = world.reset(poses, render=False)
        policy.reset()
        for _ in range(steps):
            action = policy.select_action(to_policy_batch(obs)).numpy()
            out["state"].append(obs["observation.state"])
            out["cube"].append(obs["observation.environment_state"])
            out["action"].append(action)
            result = world.step(action, render=False)
            out["success"].append(result.success)
            obs = result.observation
    return {k: np.stack(v) for k, v in out.items()}


def grasp_points(states: np.ndarray) -> np.ndarray:
    """Both grippers' grasp points (...,2,3) from measured joints (...,14), by forward kinematics."""
    ik = BimanualIK()
    flat = states.reshape(-1, 14)
    points = np.stack([ik.fk(np.stack([s[0:6], s[7:13]]))[0] for s in flat])
    return points.reshape(*states.shape[:-1], 2, 3)


def hand_at_close(policy, run: dict, arm: int) -> np.ndarray:
    """Per env, the grasp point (B,3) of `arm` (world frame, from the measured joints) as its gripper starts
    to close."""
    return np.stack([
        grasp_points(run["state"][script.close_at[arm], b])[arm] for b, script in enumerate(policy.scripts)
    ])  # fmt: skip


@pytest.fixture(scope="module")
def nominal():
    policy = make_demonstrator(skill="nominal", max_retries=0)
    return policy, play(policy)


@pytest.mark.parametrize("offset", [(0.0, -0.06, 0.0), (0.05, 0.0, 0.03)])
def test_a_grasp_asked_off_closes_that_far_from_where_the_clean_one_does(nominal, offset):
    policy, run = nominal
    clean = hand_at_close(policy, run, RIGHT)
    assert run["success"].any(0).all()
    knobs = {f"grasp_offset_{a}": v for a, v in zip("xyz", offset, strict=True)}
    policy = make_demonstrator(skill="nominal", max_retries=0, **knobs)
    run = play(policy)
    np.testing.assert_allclose(hand_at_close(policy, run, RIGHT) - clean, [offset] * 2, atol=0.006)
    assert not run["success"].any()  # 6 cm beside, or 5 cm past and 3 cm above, a 4 cm cube: a miss


def test_a_handover_aimed_short_closes_short_of_where_the_clean_one_does(nominal):
    policy, run = nominal
    clean = hand_at_close(policy, run, LEFT)
    policy = make_demonstrator(skill="nominal", handover_offset_x=-0.03, max_retries=0)
    off = hand_at_close(policy, play(policy), LEFT) - clean
    np.testing.assert_allclose(off, [[-0.03, 0.0, 0.0]] * 2, atol=0.008)


def test_a_partial_close_stops_at_its_level_and_a_drop_lets_go_on_the_way(nominal):
    _, run = nominal
    assert run["action"][20:, :, 13].min() == pytest.approx(0.0)  # once open, the right hand shuts fully
    partial = play(make_demonstrator(skill="nominal", close_level=0.5, max_retries=0))
    assert partial["action"][20:, :, 13].min() == pytest.approx(0.5)
    policy = make_demonstrator(skill="nominal", drop_at=0.3, max_retries=0)
    dropped = play(policy)
    for b, script in enumerate(policy.scripts):
        carry = dict((stage, t) for t, stage in script.events)["transport"]
        lifted = dropped["cube"][carry, b, 2]
        assert lifted > 0.08 and dropped["cube"][carry + 60, b, 2] < lifted - 0.04  # it fell
    assert not dropped["success"].any()


def test_a_push_moves_the_cube_before_the_first_grasp(nominal):
    _, run = nominal
    policy = make_demonstrator(skill="nominal", push_distance=0.1, push_angle=np.pi / 2, max_retries=0)
    pushed = play(policy, steps=200)
    for b, script in enumerate(policy.scripts):
        stages = [stage for _, stage in script.events]
        assert stages[:4] == ["push", "push_down", "push_sweep", "approach"]
        approach = dict((stage, t) for t, stage in script.events)["approach"]
        moved = pushed["cube"][approach, b, :2] - pushed["cube"][0, b, :2]
        assert moved[1] > 0.02  # along the push, +y
        still = run["cube"][approach, b, :2] - run["cube"][0, b, :2]
        assert np.abs(still).max() < 0.002  # the nominal one has not touched it yet


def test_the_pads_box_and_their_stop_match_a_real_grasp(nominal):
    """While the nominal right hand carries the 4 cm cube, the cube's centre sits in the pad box
    (GraspKinematics.pad_box, from the MJCF) and the gripper reads the opening where its pads stand 2 cm
    from the closing axis (GraspKinematics.opening_at), within 0.02, as the reference world's physics
    squeezes it; its centre lies more than `head.balance`'s margin inside the faces across gravity."""
    import torch

    from r2s2r.robots.kinematics import GraspKinematics
    from r2s2r.robots.spec import robot_spec

    _, run = nominal
    fk = GraspKinematics(robot_spec("aloha"))
    carried = (run["cube"][..., 2] > 0.1) & (run["state"][..., 6] > 0.9)  # lifted, the left hand still open
    assert carried.sum() > 40
    states = torch.tensor(run["state"][carried], dtype=torch.float32)
    point, rot = fk(states)
    cube = torch.tensor(run["cube"][carried][:, :3], dtype=torch.float32)
    rel = (rot[:, 1].transpose(-1, -2) @ (cube - point[:, 1])[..., None])[..., 0]
    off = ((rel - fk.pad_centre).abs() - fk.pad_half).amax(0)
    assert (off < 0).all(), off
    stop = float(fk.opening_at(torch.tensor(fk.object_rest)))
    np.testing.assert_allclose(states[:, 13].numpy(), stop, atol=0.02)
    # and it hangs centred between the faces across gravity, past the margin `head.balance` asks for
    from r2s2r.model.state_head import StateDynamicsHead

    margin = fk.balance_margin(rel, rot[:, 1])
    assert (margin > StateDynamicsHead.BALANCE_MARGIN).all(), margin.min()


def test_an_approach_asked_level_and_rolled_closes_so(nominal):
    """`approach`: a grasp asked 0.8 rad shallower than the 60-degree pitch and rolled 0.5 rad about the
    pointing axis closes with the right gripper so, measured from its joints: pitch asin(-x_z) = 60 deg -
    0.8 rad, the closing axis's vertical component sin(0.5) cos(pitch) (0 for the nominal grasp)."""
    policy, run = nominal
    ik = BimanualIK()

    def axes(policy, run):  # the right gripper's pointing and closing axes (B,3) as it starts to close
        rot = [
            ik.fk(np.stack([s[0:6], s[7:13]]))[1][RIGHT]
            for s in (run["state"][script.close_at[RIGHT], b] for b, script in enumerate(policy.scripts))
        ]
        return np.stack([r[:, 0] for r in rot]), np.stack([r[:, 1] for r in rot])

    point, closing = axes(policy, run)
    np.testing.assert_allclose(np.arcsin(-point[:, 2]), np.radians(60.0), atol=0.05)
    np.testing.assert_allclose(closing[:, 2], 0.0, atol=0.05)
    policy = make_demonstrator(skill="nominal", grasp_pitch_error=-0.8, grasp_roll_error=0.5, max_retries=0)
    point, closing = axes(policy, play(policy, steps=200))
    pitch = np.radians(60.0) - 0.8
    np.testing.assert_allclose(np.arcsin(-point[:, 2]), pitch, atol=0.05)
    np.testing.assert_allclose(closing[:, 2], np.sin(0.5) * np.cos(pitch), atol=0.05)
    draws = [
        draw_perturbation(np.random.default_rng(i), PerturbationRanges(kinds=("approach",)))
        for i in range(200)
    ]
    rolls = np.array([d["grasp_roll_error"] for d in draws if d["kinds"]])
    pitches = np.array([d["grasp_pitch_error"] for d in draws if d["kinds"]])
    assert rolls.min() < -0.6 and rolls.max() > 0.6 and pitches.min() < -0.8 and pitches.max() > 0.4
    assert all(d["kinds"] in ([], ["approach"]) for d in draws)
    assert "approach" not in {
        k
        for i in range(400)
        for k in draw_perturbation(np.random.default_rng(i), PerturbationRanges())["kinds"]
    }


def test_draws_cover_every_kind_and_are_reproducible():
    ranges = PerturbationRanges()
    draws = [draw_perturbation(np.random.default_rng(i), ranges) for i in range(400)]
    assert draws == [draw_perturbation(np.random.default_rng(i), ranges) for i in range(400)]
    kinds = [d["kinds"] for d in draws]
    assert set(KINDS) == {k for ks in kinds for k in ks}
    clean = sum(not ks for ks in kinds) / len(kinds)
    single = sum(len(ks) == 1 for ks in kinds) / len(kinds)
    assert 0.1 < clean < 0.25 and single > 0.3  # 0.15 clean; 0.35 single, plus one-kind combined draws
    offsets = np.array([d[f"grasp_offset_{a}"] for d in draws if "grasp" in d["kinds"] for a in "xyz"])
    assert np.abs(offsets).max() <= 0.08 and np.abs(offsets).max() > 0.05  # up to +-8 cm, small ones common
    assert np.median(np.abs(offsets)) < 0.03
    with pytest.raises(ValueError, match="unknown perturbation kind"):
        PerturbationRanges(kinds=("grasp", "teleport"))


def test_recorded_coverage_episodes_carry_their_perturbation(tmp_path):
    def recorded(name):
        policy = PolicyConfig(
            path="r2s2r.robots.perturbations:make_coverage_demonstrator", kwargs={"seed": 3}
        )
        cfg = RecordConfig(
            root=str(tmp_path / name), num_episodes=6, episode_length=40, seed=5, policy=policy,
            world=WorldConfig(cameras=(), num_envs=3),
        )  # fmt: skip
        record(cfg)
        return episode_labels(tmp_path / name)

    labels = recorded("a")
    assert sorted(labels) == list(range(6))
    assert labels == recorded("b")  # the same seeds draw the same perturbations
    for label in labels.values():
        drawn = label["perturbation"]
        knobs = {k: v for k, v in drawn.items() if k != "kinds"}
        DemonstratorConfig(**knobs)  # every label is a valid set of knobs
        assert set(drawn["kinds"]) <= set(KINDS)
        assert ("grasp" in drawn["kinds"]) == ("grasp_offset_x" in knobs)
        assert ("push" in drawn["kinds"]) == ("push_distance" in knobs)
