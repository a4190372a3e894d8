"""The tiny world model on real clips from the project's own recorder: losses, gradients, checkpoints."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.model.state_head import StateDynamicsHead


@pytest.fixture(scope="module")
def clips(recorded):
    return ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"), future_frames=2))


def _batch(clips, indices=(0, 17, 40, 66)):
    items = [clips[i] for i in indices]
    return {k: torch.stack([it[k] for it in items]) for k in items[0]}


def _model(clips, **overrides):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(**overrides))
    model.set_stats(clips.stats)
    return model


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"relative_actions": False, "context_tokens": True},
        {"arm_sketch": True, "view_balance": 1.0, "object_sketch": True},
    ],
    ids=["default", "absolute_long", "sketch_balanced_objects"],
)
def test_loss_is_finite_and_every_parameter_learns(clips, overrides):
    model = _model(clips, **overrides)
    batch = _batch(clips)
    loss, logs = model(batch)
    assert torch.isfinite(loss) and set(logs) == {"loss", "denoise", "state", "judge"}
    assert logs["loss"] == pytest.approx(logs["denoise"] + logs["state"] + 0.5 * logs["judge"], rel=1e-5)
    # DiT's zero-initialised output layer and adaLN-Zero gates make the denoiser the zero map at first:
    # update 1 moves the output layer, update 2 the gates and modulations, and from then on every
    # parameter must receive a gradient.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss = model(batch)[0]
    loss.backward()
    dead = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert dead == []
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_stats_are_taken_from_the_data(clips):
    model = _model(clips)
    torch.testing.assert_close(model.action_mean, clips.stats["action"]["mean"])
    torch.testing.assert_close(model.state_std, clips.stats["observation.state"]["std"].clamp_min(1e-2))
    raw = torch.randn(4, 14)
    torch.testing.assert_close(model.unnorm("state", model.norm("state", raw)), raw)


def test_save_load_is_exact(clips, tmp_path):
    model = _model(clips)
    path = model.save_pretrained(tmp_path / "ckpt")
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    loaded = WorldModel.from_pretrained(path)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    batch = _batch(clips)
    torch.manual_seed(3)
    expected = model(batch)[0]
    torch.manual_seed(3)
    assert torch.equal(loaded(batch)[0], expected)
    model.save_pretrained(path)  # overwriting an existing checkpoint is atomic and leaves no temp dirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_half_matrices_halve_the_file_and_keep_statistics_exact(clips, tmp_path):
    model = _model(clips)
    full = model.save_pretrained(tmp_path / "full") / "model.safetensors"
    half = model.save_pretrained(tmp_path / "half", half_matrices=True) / "model.safetensors"
    assert half.stat().st_size < 0.6 * full.stat().st_size
    loaded = WorldModel.from_pretrained(half.parent)
    for name, a in model.state_dict().items():
        b = loaded.state_dict()[name]
        assert b.dtype == torch.float32, name
        if a.dim() >= 2:
            assert torch.equal(b, a.half().float()), name
        else:  # biases, norms and the normalization statistics are stored as they are
            assert torch.equal(b, a), name


def test_checkpoint_from_another_config_is_refused(clips, tmp_path):
    path = _model(clips).save_pretrained(tmp_path / "ckpt")
    with pytest.raises(ValueError, match=r"another config \(width: checkpoint 32 vs requested 64"):
        WorldModel.from_pretrained(path, config=WorldModelConfig.tiny(width=64))
    config = json.loads((path / "config.json").read_text())
    config["depth"] = 3  # weights of a 2-block model under a 3-block config
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="do not fit its config.json"):
        WorldModel.from_pretrained(path)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        WorldModel.from_pretrained(tmp_path)


def test_bad_configs():
    with pytest.raises(ValueError, match="image_height=30 is not a multiple of patch_size=8"):
        WorldModelConfig.tiny(image_height=30)
    with pytest.raises(ValueError, match="width=30 must be divisible by heads=4"):
        WorldModelConfig.tiny(width=30, heads=4)
    with pytest.raises(ValueError, match="context_tokens=False needs stack_context=True"):
        WorldModelConfig.tiny(context_tokens=False, stack_context=False)
    with pytest.raises(ValueError, match="view_balance=-1 must be in"):
        WorldModelConfig.tiny(view_balance=-1)
    with pytest.raises(ValueError, match="head.contact=True needs head.kinematics=True"):
        WorldModelConfig.tiny(head=dict(contact=True, kinematics=False))
    with pytest.raises(ValueError, match="head.pads=True needs head.contact=True"):
        WorldModelConfig.tiny(head=dict(pads=True))


def test_missing_camera_in_batch(clips):
    model = _model(clips, cameras=("top", "right_wrist"))
    batch = _batch(clips)
    with pytest.raises(KeyError, match="no 'observation.images.right_wrist'"):
        model(batch)


def test_presets_grow():
    sizes = [
        sum(p.numel() for p in WorldModel(getattr(WorldModelConfig, n)()).parameters())
        for n in ("tiny", "small")
    ]
    assert sizes[0] < 200_000 < 2_000_000 < sizes[1] < 10_000_000


def test_delta_parameterisation_round_trips():
    model = WorldModel(WorldModelConfig.tiny(delta_scale=0.5))
    last = torch.full((1, 2, 3, 32, 32), 0.2)
    frame = torch.full((1, 2, 3, 32, 32), -0.1)
    target = model.denoise_target(frame, last)
    assert torch.allclose(target, torch.full_like(target, -0.6))  # (-0.1 - 0.2) / 0.5
    assert torch.allclose(model.frame_from_target(target, last), frame)
    assert torch.equal(model.frame_from_target(torch.zeros_like(target), last), last)  # zero change: copy
    direct = WorldModel(WorldModelConfig.tiny(predict_delta=False))
    assert torch.equal(direct.denoise_target(frame, last), frame)


def test_head_uncertainty_is_higher_off_the_data(clips):
    """After some training on real clips the ensemble agrees more on logged than on random actions."""
    model = _model(clips)
    head = model.state_head
    optimizer = torch.optim.Adam(head.parameters(), lr=3e-3)
    batch = _batch(clips, indices=range(0, len(clips), 4))
    frames = model.frames(batch)
    states, chunks = model.norm("state", batch["observation.state"]), model.norm_chunks(batch["action"])
    for _ in range(60):
        loss = model.state_loss(frames, states, chunks, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        start = head.encode(frames[:, 0], states[:, 0])
        generator = torch.Generator().manual_seed(0)
        random = (
            torch.rand(batch["action"].shape, generator=generator) * 6 - 3
        )  # joint targets in [-3, 3] rad
        spread = {}
        for name, actions in (("logged", batch["action"]), ("random", random)):
            latent = start
            for t in range(actions.shape[1]):
                latent = head.step(latent, model.norm_chunks(actions[:, t]))
            spread[name] = float(head.disagreement(head.decode(latent)).mean())
    # untrained members already disagree 3x more on wild inputs; training must shrink it on the data only
    assert spread["random"] > 5 * spread["logged"]


@pytest.mark.parametrize("context_tokens", [True, False])
@pytest.mark.parametrize("joint_tokens", [True, False])
def test_joint_tokens_carry_each_joints_action_to_the_patches(joint_tokens, context_tokens):
    """With the global (adaLN) action path cut, one joint's action still reaches the target's patches
    through its own token when `joint_tokens` is on, and cannot when it is off; with or without the
    context frames' patches in the sequence (which sets its length). The arm sketches, which also carry the
    targets, are off."""
    cfg = WorldModelConfig.tiny(joint_tokens=joint_tokens, context_tokens=context_tokens, arm_sketch=False)
    torch.manual_seed(0)
    den = WorldModel(cfg).denoiser
    with torch.no_grad():
        for p in den.parameters():  # leave the zero-initialised start: every path carries signal
            p.normal_(0, 0.2)
        for p in den.action_emb.parameters():
            p.zero_()
    lengths = []
    den.blocks[0].register_forward_hook(lambda module, args, out: lengths.append(args[0].shape[1]))
    B, K, V = 2, cfg.context_frames, cfg.num_views
    noisy, context = torch.randn(B, V, 3, 32, 32), torch.randn(B, K, V, 3, 32, 32)
    sigma, context_sigma = torch.full((B,), 0.5), torch.zeros(B)
    chunks = torch.randn(B, K, cfg.chunk_dim * cfg.action_features)  # as WorldModel.denoiser_chunks gives
    states = torch.randn(B, K, cfg.state_dim)
    moved = chunks.clone()
    moved[:, -1, 3 :: cfg.action_dim] += 1.0  # joint 3, every control step of the last chunk
    with torch.no_grad():
        out = den(noisy, sigma, context, context_sigma, chunks, states)
        out_moved = den(noisy, sigma, context, context_sigma, moved, states)
    joints = 28 if joint_tokens else 0  # 14 action + 14 proprio tokens per frame
    patches = (K + 1 if context_tokens else 1) * V * cfg.patches_per_frame
    assert lengths[0] == cfg.sequence_length == patches + (K + 1) * joints
    changed = (out_moved - out).abs().max().item()
    assert changed > 1e-3 if joint_tokens else changed == 0.0


@pytest.mark.parametrize("stack_context, context_tokens", [(True, True), (False, True), (True, False)])
def test_stacked_context_reaches_its_own_patch_without_attention(stack_context, context_tokens):
    """With every block still the identity (adaLN-Zero at init), a target patch reads the context frames'
    pixels at its own place when `stack_context` is on, and nothing of them when it is off; the same
    whether or not the context frames' patches are also tokens."""
    cfg = WorldModelConfig.tiny(stack_context=stack_context, context_tokens=context_tokens, arm_sketch=False)
    torch.manual_seed(0)
    den = WorldModel(cfg).denoiser
    with torch.no_grad():
        den.patch_out.weight.normal_(0, 0.2)  # untrained output layer is zero: let it show its input
    B, K, V = 1, cfg.context_frames, cfg.num_views
    noisy, context = torch.randn(B, V, 3, 32, 32), torch.randn(B, K, V, 3, 32, 32)
    chunks = torch.randn(B, K, cfg.chunk_dim * cfg.action_features)
    args = (torch.ones(B), torch.zeros(B), chunks, torch.randn(B, K, cfg.state_dim))
    moved = context.clone()
    moved[:, -1, 1, :, 8:16, 16:24] += 1.0  # last context frame, view 1, the patch at row 1, column 2
    with torch.no_grad():
        change = (den(noisy, args[0], moved, *args[1:]) - den(noisy, args[0], context, *args[1:])).abs()
    if stack_context:
        assert change[0, 1, :, 8:16, 16:24].min() > 0  # that patch changes ...
        change[0, 1, :, 8:16, 16:24] = 0
    assert change.max() == 0  # ... and nothing else does


def test_sketches_reach_their_own_patch_and_come_from_proprio_targets_and_object_poses(clips):
    """The denoiser reads the sketches at the target's patches, each at its place only, like the stacked
    context; the model draws the arms from the last context frame's proprio and the last chunk's final
    targets, and the cube from the object poses it is given for the last context frame and the target."""
    cfg = WorldModelConfig.tiny(object_sketch=True)
    assert cfg.arm_sketch and cfg.sketched_objects == 1
    torch.manual_seed(0)
    den = WorldModel(cfg).denoiser
    with torch.no_grad():
        den.patch_out.weight.normal_(0, 0.2)
        den.sketch_in["aloha"].weight.normal_(0, 0.2)  # zero at init, like the output layer
    B, K, V = 1, cfg.context_frames, cfg.num_views
    args = (torch.randn(B, V, 3, 32, 32), torch.ones(B), torch.randn(B, K, V, 3, 32, 32), torch.zeros(B))
    rest = (torch.randn(B, K, cfg.chunk_dim * cfg.action_features), torch.randn(B, K, cfg.state_dim))
    sketch = torch.zeros(B, 2, V, 3, 32, 32)  # left arm, right arm, cube
    for channel in (1, 2):  # at the targets, view 0, the right arm / the cube, patch row 2, column 1
        moved = sketch.clone()
        moved[:, 1, 0, channel, 16:24, 8:16] = 1.0
        with torch.no_grad():
            change = (den(*args, *rest, moved) - den(*args, *rest, sketch)).abs()
        assert change[0, 0, :, 16:24, 8:16].min() > 0
        change[0, 0, :, 16:24, 8:16] = 0
        assert change.max() == 0
    with pytest.raises(ValueError, match="built with arm_sketch: pass the arms' sketches"):
        den(*args, *rest)

    model = _model(clips, object_sketch=True)
    batch = _batch(clips)
    states = model.norm("state", batch["observation.state"])[:, :K]
    chunks = model.norm_chunks(batch["action"])[:, :K]
    poses = batch["observation.environment_state"][:, K - 1 : K + 1]  # (B,2,7)
    drawn = model.sketches(chunks, states, poses)
    assert drawn.shape == (4, 2, V, 3, 32, 32)
    assert model._sketches["aloha"].cameras == [
        model._sketches["aloha"].model.camera(c).id for c in ("top", "left_wrist")
    ]
    now = model._sketches["aloha"](batch["observation.state"][:, K - 1], poses[:, 0])
    torch.testing.assert_close(drawn[:, 0], now)
    torch.testing.assert_close(
        drawn[:, 1], model._sketches["aloha"](batch["action"][:, K - 1, -1], poses[:, 1])
    )
    assert (drawn[:, 1] - drawn[:, 0]).abs().max() > 0.5  # the arms move within a chunk of these clips
    assert drawn[:, :, 0, 2].amax(dim=(-2, -1)).min() > 0.5  # the cube is on the table, in the top view
    shifted = poses.clone()
    shifted[..., 0] += 0.1  # the cube 10 cm along x: only its channel changes
    moved = model.sketches(chunks, states, shifted)
    torch.testing.assert_close(moved[:, :, :, :2], drawn[:, :, :, :2])
    assert (moved[:, :, 0, 2] - drawn[:, :, 0, 2]).abs().amax() > 0.5
    with pytest.raises(ValueError, match="sketches objects .* pass their poses"):
        model.sketches(chunks, states)
    no_objects = _model(clips, object_sketch=False)
    assert no_objects.config.sketched_objects == 0
    torch.testing.assert_close(no_objects.sketches(chunks, states), drawn[:, :, :, :2])
    assert _model(clips, arm_sketch=False).sketches(chunks, states) is None
    assert WorldModelConfig.tiny(object_sketch=True, env_state_dim=0).sketched_objects == 0
    with pytest.raises(ValueError, match="env_state_dim=9 is not a multiple of 7"):
        WorldModelConfig.tiny(object_sketch=True, env_state_dim=9)


def test_object_poses_are_jittered_together_and_training_needs_them(clips):
    """Training draws the cube moved by one random offset per sample (std object_jitter), the same at both
    frames, so its motion between them stays exact; orientations are untouched. Data without object poses
    is refused by a model that sketches objects."""
    model = _model(clips, object_sketch=True, object_jitter=0.02)
    torch.manual_seed(1)
    poses = torch.randn(4000, 2, 7)
    jittered = model.jitter_poses(poses)
    shift = jittered[:, 0, :3] - poses[:, 0, :3]
    torch.testing.assert_close(jittered[:, 1, :3] - poses[:, 1, :3], shift)
    torch.testing.assert_close(jittered[..., 3:], poses[..., 3:])
    assert shift.std().item() == pytest.approx(0.02, rel=0.05)
    assert shift.mean().abs().item() < 0.002
    batch = _batch(clips)
    del batch["observation.environment_state"]
    with pytest.raises(ValueError, match="object_sketch needs observation.environment_state"):
        model(batch)


def test_committed_demo_checkpoint_still_loads():
    """The checkpoint the demo starts from (assets/) must load into today's code with today's small preset."""
    from pathlib import Path

    path = Path(__file__).parents[2] / "assets" / "world_model_small"
    model = WorldModel.from_pretrained(path, config=WorldModelConfig.small())
    assert model.state_mean.dtype == torch.float32 and model.state_std.min() >= 1e-2  # stats came along
    assert next(model.denoiser.parameters()).dtype == torch.float32  # float16 on disk, float32 in memory


def test_committed_state_model_loads_reads_no_cameras_and_puts_the_arms_at_their_targets():
    """The demo's state-path model (assets/world_model_blind): a head that reads no cameras, arms at their
    commanded targets. From a state-only start (no image anywhere), 2 s of imagined frames toward other
    arm targets end every frame with the arm joints exactly there, and the grippers and cube stay finite."""
    from pathlib import Path

    from r2s2r.rollout.world_model_env import WorldModelEnv

    model = WorldModel.from_pretrained(Path(__file__).parents[2] / "assets" / "world_model_blind")
    cfg = model.config
    assert not cfg.head.reads_cameras and cfg.head.arm_targets and cfg.head.kinematics
    env = WorldModelEnv(model, num_envs=2, render=False, seed=0)
    state = torch.tensor([[0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1] * 2] * 2)
    cube = torch.tensor([[0.05, 0.50, 0.021, 1.0, 0.0, 0.0, 0.0], [-0.04, 0.45, 0.021, 1.0, 0.0, 0.0, 0.0]])
    env.reset({"observation.state": state, "observation.environment_state": cube})
    arms = [i for i in range(14) if i not in (6, 13)]
    for frame in range(10):
        target = state.clone()
        target[:, arms] += 0.02 * (frame + 1)
        for _ in range(cfg.frame_stride):
            obs, _, _, info = env.step(target)
        torch.testing.assert_close(obs["observation.state"][:, arms], target[:, arms], rtol=0, atol=1e-5)
    assert (
        torch.isfinite(obs["observation.environment_state"]).all()
        and torch.isfinite(info["uncertainty"]).all()
    )


def test_kinematic_head_carries_the_cube_rigidly_with_the_gripper(clips):
    """A kinematic head's pose modes: free keeps the cube where it is; "carried by gripper g" moves it with
    g's grasp frame, checked against MuJoCo's own kinematics of the robot's MJCF; in training, with the
    true next joints."""
    import mujoco

    from r2s2r.robots.checker import PhysicsChecker
    from r2s2r.robots.spec import robot_spec

    model = _model(clips, head=dict(still_mode=False))  # kinematics on: one free pose mode + one per gripper
    head, cfg = model.state_head, model.config
    assert head.kinematic and head.modes == 3
    checker = PhysicsChecker(robot_spec("aloha"))
    home = torch.tensor([0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1, 0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1])
    moved = home.clone()
    moved[:6] += torch.tensor([0.2, 0.1, -0.15, 0.3, 0.2, -0.4])  # the left arm moves, the right does not

    def grasp(state, link="vx300s_left/gripper_link"):  # MuJoCo: a grasp point and gripper orientation
        checker.data.qpos[:] = checker.qpos(state.double().numpy()[None])[0]
        mujoco.mj_kinematics(checker.model, checker.data)
        body = checker.model.body(link).id
        rot = checker.data.xmat[body].reshape(3, 3).copy()  # MjData's arrays change with the next call
        return checker.data.xpos[body] + rot @ [0.12, 0, 0], rot

    point, rot = grasp(home)
    cube = point + rot @ [0.01, -0.005, 0.002]  # just off the point between the left pads
    pose = torch.tensor([*cube, 1.0, 0.0, 0.0, 0.0], dtype=torch.float32)
    L, S = cfg.head.latent_dim, cfg.state_dim
    with torch.no_grad():  # an untrained head predicts no change; make it predict this joint motion
        head.dynamics.b2[:, L : L + S] = model.norm("state", moved) - model.norm("state", home)
        carried = [model.norm("state", home)[None], model.norm("env", pose)[None]]
        latent = torch.cat([torch.zeros(1, L), *carried], -1)
        chunk = torch.zeros(1, cfg.chunk_dim)
        out = {}
        # Untrained odds are even, but the right gripper is out of reach of a cube at the left one's pads:
        # its carried mode is ruled out, so the draw reads halves (free, left).
        for name, draw in (("free", 0.1), ("left", 0.5), ("right, out of reach", 0.9)):
            nxt = head.step(latent, chunk, draw=torch.tensor([draw]))
            out[name] = model.unnorm("env", head.decode(nxt)["env_state"][0, 0]).double().numpy()
    point2, rot2 = grasp(moved)
    expected = point2 + rot2 @ rot.T @ (cube - point)
    assert np.abs(out["left"][:3] - expected).max() < 1e-4
    assert np.abs(expected - cube).max() > 0.05  # the left gripper did move the cube, a lot
    np.testing.assert_allclose(out["free"][:3], cube, atol=1e-4)  # nothing carried it
    right, right_rot = grasp(home, "vx300s_right/gripper_link")
    assert np.linalg.norm(cube - right) > head.CARRY_REACH
    np.testing.assert_allclose(out["right, out of reach"], out["left"], atol=0)
    # A cube at the right one's pads, the right arm moving: the same draw now falls on its carried mode.
    moved_right = home.clone()
    moved_right[7:13] += moved[:6] - home[:6]  # the left arm's motion, on the right arm
    at_pads = right + right_rot @ [0.01, -0.005, 0.002]
    with torch.no_grad():
        head.dynamics.b2[:, L : L + S] = model.norm("state", moved_right) - model.norm("state", home)
        near = torch.tensor([*at_pads, 1.0, 0.0, 0.0, 0.0], dtype=torch.float32)
        at_right = torch.cat([torch.zeros(1, L), carried[0], model.norm("env", near)[None]], -1)
        nxt = head.step(at_right, chunk, draw=torch.tensor([0.9]))  # halves: free, right
        got = model.unnorm("env", head.decode(nxt)["env_state"][0, 0]).double().numpy()[:3]
    point3, rot3 = grasp(moved_right, "vx300s_right/gripper_link")
    assert np.abs(got - (point3 + rot3 @ right_rot.T @ (at_pads - right))).max() < 1e-4
    assert np.abs(got - at_pads).max() > 0.05
    # Training: the mode nearest the truth continues; a carried mode only where it is clearly nearer.
    with torch.no_grad():
        nudge = torch.zeros(cfg.env_state_dim)
        nudge[0] = 5e-4 / float(model.env_std[0])  # the free mode is 0.5 mm off in x; carried ones exact
        head.dynamics.b2[:, L + S : L + S + cfg.env_state_dim] = nudge
        for joints, truth, winner in ((moved, expected, "left"), (home, cube, "free")):
            head.dynamics.b2[:, L : L + S] = model.norm("state", joints) - model.norm("state", home)
            goal = model.norm("env", torch.tensor([*truth, 1.0, 0.0, 0.0, 0.0], dtype=torch.float32))
            nxt, _ = head.step_supervised(latent, chunk, goal[None])
            got = model.unnorm("env", head.decode(nxt)["env_state"][0, 0]).double().numpy()[:3]
            # still arms, still cube: every mode is right within 1 mm, and "free" must win the tie
            target = truth + ([5e-4, 0, 0] if winner == "free" else 0)
            np.testing.assert_allclose(got, target, atol=1e-4)
        # The head's own proprio is wrong (it predicts still arms) but the left arm did move and carry the
        # cube: scored with the true next joints, "carried by left" is exact and wins; with the head's
        # joints it would be the free mode's tie, and the free mode would learn a cube that stays behind.
        head.dynamics.b2[:, L : L + S] = 0.0
        goal = model.norm("env", torch.tensor([*expected, 1.0, 0.0, 0.0, 0.0], dtype=torch.float32))
        nxt, _ = head.step_supervised(latent, chunk, goal[None], model.norm("state", moved)[None])
        got = model.unnorm("env", head.decode(nxt)["env_state"][0, 0]).double().numpy()[:3]
        np.testing.assert_allclose(got, expected, atol=1e-4)
        np.testing.assert_allclose(model.unnorm("state", head.decode(nxt)["state"][0, 0]), home, atol=1e-5)
        # A cube that went centimetres with the left gripper was carried, even where the free mode came
        # nearer: here the free mode is exact and "carried by left" 2 mm off; the carried mode still wins.
        E = cfg.env_state_dim
        head.dynamics.b2[:, L : L + S] = model.norm("state", moved) - model.norm("state", home)
        truth = expected + np.array([0.002, 0.0, 0.0])
        goal = model.norm("env", torch.tensor([*truth, 1.0, 0.0, 0.0, 0.0], dtype=torch.float32))
        head.dynamics.b2[:, L + S : L + S + E] = goal - model.norm("env", pose)
        free = model.unnorm(
            "env", head.decode(head.step(latent, chunk, draw=torch.tensor([0.1])))["env_state"]
        )
        np.testing.assert_allclose(free[0, 0, :3].double().numpy(), truth, atol=1e-4)  # free is exact
        nxt, _ = head.step_supervised(latent, chunk, goal[None])
        got = model.unnorm("env", head.decode(nxt)["env_state"][0, 0]).double().numpy()[:3]
        np.testing.assert_allclose(got, expected, atol=1e-4)
        # From the recorded frames alone: the left gripper carried it (2 mm off rigid, moved centimetres);
        # a cube that stayed put was carried by nobody, even between still grippers.
        h, m, p0 = (
            model.norm("state", home)[None],
            model.norm("state", moved)[None],
            model.norm("env", pose)[None],
        )
        assert head.carried_by(h, p0, m, goal[None]).tolist() == [[True, False]]
        far = model.norm("env", torch.tensor([*(expected + [0.0, 0.0, 0.02]), 1.0, 0.0, 0.0, 0.0]))[None]
        assert head.carried_by(h, p0, m, far).tolist() == [[False, False]]  # 2 cm off: slipped, not carried
        # A cube that stayed put in mid-air at the still left pads is held there (a pausing hand), by the
        # left gripper only; not while the left gripper opens by more than CARRY_RELEASE (it is let go),
        # though closing further still holds it; and the same cube counted as on the table (below
        # CARRY_AIRBORNE) is carried by nobody, as a resting cube beside a still gripper must be.
        assert cube[2] > head.CARRY_AIRBORNE
        assert head.carried_by(h, p0, h, p0).tolist() == [[True, False]]
        for change, held in ((0.03, False), (0.01, True), (-0.05, True)):
            grip = home.clone()
            grip[6] += change  # normalized opening, 0 = closed
            assert head.carried_by(h, p0, model.norm("state", grip)[None], p0).tolist() == [[held, False]]
        head.CARRY_AIRBORNE = float(cube[2]) + 0.01
        assert head.carried_by(h, p0, h, p0).tolist() == [[False, False]]


def test_imagined_holds_keep_a_lifted_cube_in_the_closed_hand_rigidly(clips):
    """With head.holds, a cube in mid-air at a closed, not-opening gripper's pads goes with that gripper
    whatever the draw, and a carried cube moves rigidly with it within CARRY_TOLERANCE; an opening or open
    gripper, or a cube resting on the table, leaves the pick to the draw (here: free, keeping it in place)."""
    import mujoco

    from r2s2r.robots.checker import PhysicsChecker
    from r2s2r.robots.spec import robot_spec

    checker = PhysicsChecker(robot_spec("aloha"))

    def grasp(state):  # MuJoCo: the left grasp point and gripper orientation
        checker.data.qpos[:] = checker.qpos(state.double().numpy()[None])[0]
        mujoco.mj_kinematics(checker.model, checker.data)
        body = checker.model.body("vx300s_left/gripper_link").id
        rot = checker.data.xmat[body].reshape(3, 3).copy()
        return checker.data.xpos[body] + rot @ [0.12, 0, 0], rot

    home = torch.tensor([0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1, 0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1])
    moved = home.clone()
    moved[:6] += torch.tensor([0.2, 0.1, -0.15, 0.3, 0.2, -0.4])  # the left arm moves, the right does not
    point, rot = grasp(home)
    cube = point + rot @ [0.01, -0.005, 0.002]  # just off the point between the left pads, in mid-air
    point2, rot2 = grasp(moved)
    rigid = point2 + rot2 @ rot.T @ (cube - point)
    chunk = torch.zeros(1, WorldModelConfig.tiny().chunk_dim)

    def imagine(holds, start=home, end=moved, slip=0.0, draw=0.1, airborne=None):
        """One imagined frame; the cube's end (m). The untrained odds are even and the right gripper is out
        of reach, so the draw reads halves: free (0.1), carried by the left (0.9)."""
        model = _model(clips, head=dict(still_mode=False, holds=holds))
        head, cfg = model.state_head, model.config
        if airborne is not None:
            head.CARRY_AIRBORNE = airborne
        L, S, E = cfg.head.latent_dim, cfg.state_dim, cfg.env_state_dim
        pose = model.norm("env", torch.tensor([*cube, 1.0, 0.0, 0.0, 0.0], dtype=torch.float32))
        with torch.no_grad():
            head.dynamics.b2[:, L : L + S] = model.norm("state", end) - model.norm("state", start)
            change = torch.zeros(3, E)  # per mode: free, carried by left, carried by right
            change[1, 0] = slip / float(model.env_std[0])  # "carried by left" departs from rigid along x
            head.dynamics.b2[:, L + S : L + S + 3 * E] = change.flatten()
            latent = torch.cat([torch.zeros(1, L), model.norm("state", start)[None], pose[None]], -1)
            nxt = head.step(latent, chunk, draw=torch.tensor([draw]))
            return model.unnorm("env", head.decode(nxt)["env_state"][0, 0])[:3].double().numpy()

    assert cube[2] > StateDynamicsHead.CARRY_AIRBORNE and float(home[6]) < StateDynamicsHead.HOLD_CLOSED
    np.testing.assert_allclose(imagine(False), cube, atol=1e-4)  # the draw: free, the cube left in the air
    np.testing.assert_allclose(imagine(True), rigid, atol=1e-4)  # held: it went with the left hand
    assert np.linalg.norm(rigid - cube) > 0.05
    # The carried mode's own change is cut to CARRY_TOLERANCE with holds (3 cm -> 5 mm), kept without.
    tolerance = StateDynamicsHead.CARRY_TOLERANCE
    np.testing.assert_allclose(imagine(True, slip=0.03), rigid + [tolerance, 0, 0], atol=1e-4)
    np.testing.assert_allclose(imagine(False, slip=0.03, draw=0.9), rigid + [0.03, 0, 0], atol=1e-4)
    # Not held: the left gripper opens in the frame by more than CARRY_RELEASE, or starts it open, or the
    # cube counts as on the table (CARRY_AIRBORNE above it): the draw decides, as without holds.
    opening = moved.clone()
    opening[6] += 2 * StateDynamicsHead.CARRY_RELEASE
    np.testing.assert_allclose(imagine(True, end=opening), cube, atol=1e-4)
    wide, wide_moved = home.clone(), moved.clone()
    wide[6] = wide_moved[6] = 0.95
    np.testing.assert_allclose(imagine(True, start=wide, end=wide_moved), cube, atol=1e-4)
    np.testing.assert_allclose(imagine(True, airborne=float(cube[2]) + 0.01), cube, atol=1e-4)


def test_imagined_objects_stay_above_the_table(clips):
    """An imagined object over the table ends no frame below its resting height (the gym-aloha cube: a
    0.04 m box on a table top at z = 0); one predicted to sink through it lands where it started, x-y too;
    off the table's edge it falls as predicted."""
    model = _model(clips, head=dict(still_mode=False))
    head, cfg = model.state_head, model.config
    fk, L, S, E = head.fk, cfg.head.latent_dim, cfg.state_dim, cfg.env_state_dim
    assert abs(fk.table_top) < 1e-6 and abs(fk.object_rest - 0.02) < 1e-9
    home = model.norm("state", torch.tensor([0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1] * 2))
    chunk = torch.zeros(1, cfg.chunk_dim)

    def imagine(start, change):  # one imagined frame of the free mode (the grippers are out of reach)
        pose = model.norm("env", torch.tensor([*start, 1.0, 0.0, 0.0, 0.0]))
        moved = model.norm("env", torch.tensor([*(np.add(start, change)), 1.0, 0.0, 0.0, 0.0])) - pose
        with torch.no_grad():
            head.dynamics.b2[:, L + S : L + S + E] = moved  # the free mode predicts this change
            latent = torch.cat([torch.zeros(1, L), home[None], pose[None]], -1)
            assert (head._grasp(latent[:, None])[3].norm(dim=-1) > head.CARRY_REACH).all()
            nxt = head.step(latent, chunk, draw=torch.tensor([0.1]))
            return model.unnorm("env", head.decode(nxt)["env_state"][0, 0])[:3].double().numpy()

    np.testing.assert_allclose(imagine([0.05, 0.5, 0.10], [0.01, 0.0, -0.03]), [0.06, 0.5, 0.07], atol=1e-5)
    # sinking 5 mm into the table (less than LANDING): stopped at its resting height, moving on in x-y
    np.testing.assert_allclose(imagine([0.05, 0.5, 0.03], [0.01, 0.0, -0.015]), [0.06, 0.5, 0.02], atol=1e-5)
    # thrown down through the table: it landed where it started, and stays there
    np.testing.assert_allclose(imagine([0.05, 0.5, 0.10], [0.2, 0.0, -0.5]), [0.05, 0.5, 0.02], atol=1e-5)
    edge = float(fk.table_hi[0]) + 0.05  # beyond the table's +x edge: nothing holds it up
    np.testing.assert_allclose(imagine([edge, 0.5, 0.10], [0.0, 0.0, -0.3]), [edge, 0.5, -0.2], atol=1e-5)


def test_falls_lands_an_object_nothing_can_hold(clips):
    """`head.falls`: a cube 3 cm up with both grippers out of reach ends the frame on the table at its x-y
    whatever the dynamics predict (here: it hovers); within reach of a gripper, or off the table's edge,
    the prediction stands; without the rule it hovers."""
    home = torch.tensor([0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1] * 2)

    def imagine(falls, start):  # the free mode predicts "stays where it is"
        model = _model(clips, head=dict(still_mode=False, falls=falls))
        head, cfg = model.state_head, model.config
        pose = model.norm("env", torch.tensor([*start, 1.0, 0.0, 0.0, 0.0], dtype=torch.float32))
        latent = torch.cat(
            [torch.zeros(1, cfg.head.latent_dim), model.norm("state", home)[None], pose[None]], -1
        )
        reach = head._grasp(latent[:, None])[3].norm(dim=-1).min().item()
        with torch.no_grad():
            nxt = head.step(latent, torch.zeros(1, cfg.chunk_dim), draw=torch.tensor([0.0]))
            return model.unnorm("env", head.decode(nxt)["env_state"][0, 0])[:3].double().numpy(), reach

    lands, reach = imagine(True, [0.05, 0.5, 0.05])
    assert reach > 0.08  # CARRY_REACH: no gripper can hold it
    np.testing.assert_allclose(lands, [0.05, 0.5, 0.02], atol=1e-5)
    np.testing.assert_allclose(imagine(False, [0.05, 0.5, 0.05])[0], [0.05, 0.5, 0.05], atol=1e-5)
    model = _model(clips)
    fk = model.state_head.fk
    near = fk(home[None])[0][0, 0].double().numpy() + [0.0, 0.0, -0.03]  # 3 cm under the left grasp point
    held, reach = imagine(True, near)
    assert reach < 0.08 and near[2] > 0.05
    np.testing.assert_allclose(held, near, atol=1e-5)
    edge = float(fk.table_hi[0]) + 0.05
    np.testing.assert_allclose(imagine(True, [edge, 0.5, 0.05])[0], [edge, 0.5, 0.05], atol=1e-5)


def _quaternion(rot: np.ndarray) -> torch.Tensor:
    """(w, x, y, z) of a rotation matrix, by MuJoCo."""
    import mujoco

    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, rot.reshape(-1))
    return torch.tensor(q, dtype=torch.float32)


def _contact_probe(model, seed: int | None):
    """Give every contact net of `model` random weights from `seed` (untrained, the grippers would not
    move; None: keep its weights); return
    grasp(state) -> the left gripper's grasp point and orientation (MuJoCo's kinematics), and
    contact(state, offset, z_seed) -> the left gripper's raw opening after one frame (M,) and its carry
    logit (M,), for a cube at `offset` (m) in its frame, turned relative to it, and a random latent."""
    import mujoco

    from r2s2r.robots.checker import PhysicsChecker
    from r2s2r.robots.spec import robot_spec

    head, cfg = model.state_head, model.config
    L = cfg.head.latent_dim
    gen = torch.Generator().manual_seed(seed or 0)
    nets = [head.grip_net, head.carry_net, head.rest_net, head.outcome_net]
    with torch.no_grad():
        for net in (nets + ([head.free_net] if cfg.head.pads else [])) if seed is not None else ():
            for p in net.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    checker = PhysicsChecker(robot_spec("aloha"))

    def grasp(state):
        checker.data.qpos[:] = checker.qpos(state.double().numpy()[None])[0]
        mujoco.mj_kinematics(checker.model, checker.data)
        body = checker.model.body("vx300s_left/gripper_link").id
        rot = checker.data.xmat[body].reshape(3, 3).copy()
        return checker.data.xpos[body] + rot @ [0.12, 0, 0], rot

    turn = np.array([[0.0, -1, 0], [1, 0, 0], [0, 0, 1]]) @ np.array(
        [[1, 0, 0], [0, 0.8, -0.6], [0, 0.6, 0.8]]
    )

    def contact(state, offset, z_seed):
        point, rot = grasp(state)
        pose = torch.cat([torch.tensor(point + rot @ offset, dtype=torch.float32), _quaternion(rot @ turn)])
        z = torch.randn(1, L, generator=torch.Generator().manual_seed(z_seed))
        latent = torch.cat([z, model.norm("state", state)[None], model.norm("env", pose)[None]], -1)
        latent = latent[:, None].expand(-1, cfg.head.ensemble, -1)
        chunk = torch.zeros(1, cfg.chunk_dim)
        with torch.no_grad():
            _, nxt, _, logits = model.state_head._step_parts(latent, chunk)
        opening = model.unnorm("state", nxt)[0, :, 6]  # (M,)
        return opening, logits[0, :, 2]  # the left gripper's carried mode

    return grasp, contact


HOME = (0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.6, 0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.1)


def test_contact_head_reads_only_the_gripper_cube_geometry(clips, tmp_path):
    """`head.contact`: a gripper's next opening and its odds of carrying the cube depend on where the cube
    sits in that gripper's frame, and not on where the arm is, on the learnt latent, or on what the
    general dynamics MLP predicts for the gripper joint; they survive a save and load."""
    model = _model(clips, head=dict(still_mode=True, contact=True))
    head, cfg = model.state_head, model.config
    L = cfg.head.latent_dim
    assert head.contact and head.modes == 4
    grasp, contact = _contact_probe(model, 3)
    home = torch.tensor(HOME)
    moved = home.clone()
    moved[0] += 0.4  # the left arm turned on its waist elsewhere over the table; another latent
    # (a turn about the vertical keeps the grasp point's height and the gripper's tilt, which it also reads)
    assert np.linalg.norm(grasp(moved)[0] - grasp(home)[0]) > 0.05
    assert np.abs(grasp(moved)[1] - grasp(home)[1]).max() > 0.3
    at_pads = np.array([0.005, 0.0, 0.002])
    a = contact(home, at_pads, 0)
    b = contact(moved, at_pads, 1)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, atol=1e-4, rtol=0)
    with torch.no_grad():  # the general MLP asks the left gripper to open wide: ignored
        head.dynamics.b2[:, L + 6] += 3.0
    torch.testing.assert_close(contact(home, at_pads, 0)[0], a[0], atol=0, rtol=0)
    beside = contact(home, np.array([0.005, 0.04, 0.002]), 0)  # 4 cm along the closing axis
    assert (beside[0] - a[0]).abs().max() > 1e-3 and (beside[1] - a[1]).abs().max() > 1e-3
    model.save_pretrained(tmp_path / "contact")
    loaded = WorldModel.from_pretrained(tmp_path / "contact")
    assert loaded.state_head.contact
    _, contact = _contact_probe(loaded, None)
    for x, y in zip(a, contact(home, at_pads, 0), strict=True):
        torch.testing.assert_close(x, y, atol=0, rtol=0)


def test_pads_leave_a_cube_outside_them_alone(clips, tmp_path):
    """`head.pads`: outside the box where the MJCF's fingers close on the cube a gripper closes as on nothing
    (the same motion wherever the cube is, whatever the geometry net says) and its carry logit drops by
    log 1e-4; between the pads the cube changes the motion. The box is the robot's, not a weight: a save and
    load brings back the MJCF's box, not an edited one."""
    from r2s2r.robots.kinematics import GraspKinematics
    from r2s2r.robots.spec import robot_spec

    model = _model(clips, head=dict(still_mode=True, contact=True, pads=True))
    head = model.state_head
    _, contact = _contact_probe(model, 5)
    home = torch.tensor(HOME)
    inside, beside = torch.tensor([0.005, 0.0, 0.002]), torch.tensor([0.005, 0.03, 0.002])
    # a cube 3 cm along the closing axis would sit in an open finger: outside; at the grasp point: inside
    assert head.between_pads(inside) > 0.99 and head.between_pads(beside) < 0.01
    above = np.array([0.0, 0.0, 0.09])  # 9 cm along the third axis: 4 cm past the pads' reach
    at_pads = contact(home, inside.numpy(), 0)
    off = [contact(home, o, 0) for o in (above, np.array([0.0, -0.05, 0.0]), np.array([0.1, 0.0, 0.0]))]
    for opening, _ in off[1:]:  # a free close: the same wherever the cube is outside the box
        torch.testing.assert_close(opening, off[0][0], atol=1e-4, rtol=0)
    assert (at_pads[0] - off[0][0]).abs().max() > 1e-2  # the cube between the pads changes it
    mjcf = GraspKinematics(robot_spec("aloha"))
    with torch.no_grad():
        head.fk.pad_centre.add_(torch.tensor(above, dtype=torch.float32))  # the box moved up to the cube
    assert (contact(home, above, 0)[0] - off[0][0]).abs().max() > 1e-2
    model.save_pretrained(tmp_path / "pads")
    loaded = WorldModel.from_pretrained(tmp_path / "pads").state_head
    torch.testing.assert_close(loaded.fk.pad_centre, mjcf.pad_centre, atol=0, rtol=0)
    torch.testing.assert_close(loaded.fk.pad_half, mjcf.pad_half, atol=0, rtol=0)
    with torch.no_grad():  # the box back; no geometry term in the motion, so the carry net reads the same
        head.fk.pad_centre.copy_(mjcf.pad_centre)  # input boxed or not and only the box's factor differs
        head.grip_net.w2.zero_()
        head.grip_net.b2.zero_()
        boxed = contact(home, above, 0)[1]
        head.fk.pad_half.fill_(1.0)  # a 1 m box: everything is between the pads
        unboxed = contact(home, above, 0)[1]
    torch.testing.assert_close(boxed, unboxed + math.log(1e-4), atol=1e-4, rtol=0)


def test_stops_hold_a_closing_gripper_at_the_cube_between_its_pads(clips):
    """`head.stops`, imagined steps: a gripper whose nets would close it through a cube between its pads
    stops where the pads meet the cube, 0.61 for a 4 cm cube square to the fingers (what the reference world
    reads while carrying it) and wider for a cube turned 45 degrees (half-width 2 cm * sqrt 2); a cube
    outside the pads, or a training step, leaves the nets' prediction alone."""
    with pytest.raises(ValueError, match="head.stops=True needs head.pads=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, stops=True))
    model = _model(clips, head=dict(still_mode=True, contact=True, pads=True, stops=True))
    head, cfg = model.state_head, model.config
    grasp, _ = _contact_probe(model, 5)
    with torch.no_grad():  # the nets close the gripper by 2 (through anything), the cube adding nothing
        for net, close in ((head.grip_net, 0.0), (head.free_net, -2.0)):
            net.w2.zero_()
            net.b2.fill_(close)
    state = torch.tensor(HOME)
    state[6] = 1.0  # the left gripper wide open
    point, rot = grasp(state)
    turn45 = np.array([[1.0, 0, 0], [0, 0.7071068, -0.7071068], [0, 0.7071068, 0.7071068]])

    def after(offset, turn, imagined):
        pose = torch.cat([torch.tensor(point + rot @ offset, dtype=torch.float32), _quaternion(rot @ turn)])
        z = torch.randn(1, cfg.head.latent_dim, generator=torch.Generator().manual_seed(0))
        latent = torch.cat([z, model.norm("state", state)[None], model.norm("env", pose)[None]], -1)
        latent = latent[:, None].expand(-1, cfg.head.ensemble, -1)
        with torch.no_grad():
            return head._contact_step(latent, torch.zeros(1, cfg.chunk_dim), imagined)[0][0, :, 0]  # left

    at_pads = np.array([0.03, 0.0, 0.0])
    square = after(at_pads, np.eye(3), True)
    np.testing.assert_allclose(square.numpy(), 0.61, atol=0.01)
    turned = after(at_pads, turn45, True)
    expected = float(head.fk.opening_at(torch.tensor(0.02 * math.sqrt(2.0))))
    np.testing.assert_allclose(turned.numpy(), expected, atol=5e-3)  # the box's soft faces: inside 0.999
    assert expected > 0.61 + 0.15
    for free in (after(at_pads, np.eye(3), False), after(np.array([0.0, 0.0, 0.09]), np.eye(3), True)):
        np.testing.assert_allclose(free.numpy(), -1.0, atol=1e-3)  # 1.0 - 2.0: the nets' own close


def _across_faces(fk, rot: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """In the frame of a gripper turned `rot`: the unit direction in its pads' faces' plane square to the
    world's vertical (across gravity), how far the faces reach along it from their centre (m), and that
    centre."""
    faces = fk.face_axes
    up = rot[2, faces]  # the world's vertical in the faces' plane
    across = np.zeros(3)
    across[faces] = np.array([up[1], -up[0]]) / np.linalg.norm(up)
    centre = np.zeros(3)
    centre[faces] = fk.face_centre.numpy()
    return across, float((fk.face_half.numpy() * np.abs(across[faces])).sum()), centre


def test_balance_cuts_the_carry_of_a_cube_held_off_centre_in_imagination(clips):
    """`head.balance`, imagined steps only: a gripper's carry logit drops by log sigmoid((margin - 3 mm) /
    0.5 mm) (floored at log 1e-4), the margin being how far the cube's centre lies inside its pads' faces
    across gravity: nothing for a cube centred between the pads, about log 1e-4 for one held 3 cm along the
    faces' horizontal direction. A training step reads the nets alone."""
    with pytest.raises(ValueError, match="head.balance=True needs head.pads=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, balance=True))
    model = _model(clips, head=dict(still_mode=True, contact=True, pads=True, balance=True))
    head, cfg = model.state_head, model.config
    grasp, _ = _contact_probe(model, 5)
    state = torch.tensor(HOME)
    state[6] = 1.0
    point, rot = grasp(state)
    across, reach, centre = _across_faces(head.fk, rot)
    assert np.linalg.norm(rot[2, head.fk.face_axes]) > 0.5  # its faces stand upright at home

    def carry(offset, imagined):
        pose = torch.cat([torch.tensor(point + rot @ offset, dtype=torch.float32), _quaternion(rot)])
        z = torch.randn(1, cfg.head.latent_dim, generator=torch.Generator().manual_seed(0))
        latent = torch.cat([z, model.norm("state", state)[None], model.norm("env", pose)[None]], -1)
        latent = latent[:, None].expand(-1, cfg.head.ensemble, -1)
        with torch.no_grad():
            return head._contact_step(latent, torch.zeros(1, cfg.chunk_dim), imagined)[1][0, :, 2]  # left

    for shift, expected in ((0.0, 0.0), (reach - 0.004, math.log(torch.sigmoid(torch.tensor(2.0)))),
                            (reach - 0.003, math.log(0.5)), (0.03 + reach, math.log(1e-4))):  # fmt: skip
        offset = centre + shift * across
        np.testing.assert_allclose((carry(offset, True) - carry(offset, False)).numpy(), expected, atol=2e-4)


def test_pad_holds_and_held_success_read_the_fingers(clips):
    """`head.pad_holds`: a closed gripper holds an airborne cube only where its centre lies between the
    fingers (the pads' box, but within 2.5 cm of the grasp point along the closing axis), and rigidly
    (a carried mode's own change of position is cut to nothing, 5 mm without the rule); `head.held_success`:
    an imagined frame's success logit drops by log 1e-4 unless such a hold exists clear of the table, and a
    training read keeps the net's logit."""
    with pytest.raises(ValueError, match="head.pad_holds=True needs head.holds=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, pads=True, pad_holds=True))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, pad_holds=True, held_success=True)
    model = _model(clips, head=rules)
    head, cfg = model.state_head, model.config
    fk, L = head.fk, cfg.head.latent_dim
    grasp, _ = _contact_probe(model, 5)
    state = torch.tensor(HOME)
    state[6] = 0.5  # the left gripper closed on a cube
    point, rot = grasp(state)
    closing = np.eye(3)[fk.closing_axis]
    along = np.eye(3)[fk.face_axes[1]]  # the faces' third axis

    def latent(offset, lift=0.0):
        position = point + rot @ offset + [0.0, 0.0, lift]
        pose = torch.cat([torch.tensor(position, dtype=torch.float32), _quaternion(rot)])
        z = torch.zeros(1, L)
        return torch.cat([z, model.norm("state", state)[None], model.norm("env", pose)[None]], -1)[:, None]

    centre = fk.pad_centre.numpy()
    off_centre = centre + 0.02 * closing  # 2 cm across the fingers: held, though no grasp starts there
    outside = centre + (float(fk.pad_half[fk.face_axes[1]]) + 0.01) * along  # 1 cm past the box
    gripped = head.gripped(torch.tensor(np.stack([centre, off_centre, outside]), dtype=torch.float32))
    assert gripped[0] > 0.99 and gripped[1] > 0.9 and gripped[2] < 0.01
    assert head.between_pads(torch.tensor(off_centre, dtype=torch.float32)) < 0.1
    assert (
        head.gripped(torch.tensor(centre + 0.035 * closing, dtype=torch.float32)) < 0.01
    )  # 3.5 cm: not held
    # the cube airborne (point is 0.2 m above the table at home)
    assert point[2] - fk.table_top > StateDynamicsHead.CARRY_AIRBORNE + 0.05
    S = cfg.state_dim
    for offset, held in ((centre, True), (off_centre, True), (outside, False)):
        lat = latent(offset).expand(-1, cfg.head.ensemble, -1)
        assert bool(head._holder(lat, lat[..., L : L + S])[0]) == held
        assert bool(head.held(lat).all()) == held
        with torch.no_grad():
            drop = head.decode(lat, imagined=True)["success_logit"] - head.decode(lat)["success_logit"]
        np.testing.assert_allclose(drop.numpy(), 0.0 if held else math.log(1e-4), atol=1e-5)
    top = fk.table_top
    fk.table_top = float((point + rot @ centre)[2]) - fk.object_rest  # a table up at the held cube
    assert not bool(head.held(latent(centre)).any())
    fk.table_top = top
    # rigid: a carried mode's own position change is cut to nothing; the free modes' kept
    moved = torch.randn(1, cfg.head.ensemble, head.modes, cfg.env_state_dim)
    cut = head._rigid_holds(moved)
    G = fk.num_grippers
    torch.testing.assert_close(cut[..., -G:, :3], torch.zeros_like(cut[..., -G:, :3]))
    torch.testing.assert_close(cut[..., :-G, :], moved[..., :-G, :])
    torch.testing.assert_close(cut[..., -G:, 3:], moved[..., -G:, 3:])
    loose = _model(clips, head={**rules, "pad_holds": False}).state_head._rigid_holds(moved)
    slip = (loose[..., -G:, :3] * model.env_std[:3]).norm(dim=-1)
    assert (slip > StateDynamicsHead.CARRY_TOLERANCE - 1e-6).any() and (slip < 0.005 + 1e-6).all()


def test_takes_holds_a_cube_a_closing_gripper_grasps_on_the_table(clips):
    """`head.takes`: a gripper that starts the frame open and ends it closed, with the cube between its pads
    and balanced there, holds the cube whatever the odds, resting on the table too; without the rule it
    does not (open at the start, the cube not in mid-air), nor with the cube 2 mm past the balance's reach
    (still between the pads), nor for a gripper that opens."""
    with pytest.raises(ValueError, match="head.takes=True needs head.pad_holds=True and head.balance=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, pads=True, holds=True, takes=True))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, pad_holds=True, balance=True)
    model = _model(clips, head={**rules, "takes": True})
    head, cfg = model.state_head, model.config
    fk, L = head.fk, cfg.head.latent_dim
    grasp, _ = _contact_probe(model, 5)
    start, end = torch.tensor(HOME), torch.tensor(HOME)
    start[6], end[6] = 0.95, 0.5  # the left gripper closes in the frame
    point, rot = grasp(start)
    across, reach, centre = _across_faces(fk, rot)
    fk.table_top = float((point + rot @ centre)[2]) - fk.object_rest  # the cube rests on a table there

    def holds(head, offset, before=start, after=end):
        pose = torch.cat([torch.tensor(point + rot @ offset, dtype=torch.float32), _quaternion(rot)])
        latent = torch.cat(
            [torch.zeros(1, L), model.norm("state", before)[None], model.norm("env", pose)[None]], -1
        )
        latent = latent[:, None].expand(-1, cfg.head.ensemble, -1)
        nxt = model.norm("state", after)[None, None].expand(-1, cfg.head.ensemble, -1)
        held, holder = head._holder(latent, nxt)
        return bool(held[0]) and int(holder[0]) == 0

    assert holds(head, centre)
    untaken = _model(clips, head=rules).state_head
    untaken.fk.table_top = fk.table_top
    assert not holds(untaken, centre)
    beyond = centre + (reach + 0.002) * across
    assert head.between_pads(torch.tensor(beyond, dtype=torch.float32)) > 0.5
    assert not holds(head, beyond)
    assert not holds(head, centre, before=end, after=start)  # it opens


def test_grip_servo_follows_the_commands_step_by_step_and_is_fitted(clips):
    """`head.grip_servo`: each control step closes the gap to the command, less the dead band, by the gain, at
    most the top speed. With gain 0.5, speed 0.05 and band 0.1: from 1.0 commanded to 0 the fingers move the
    top speed every step (0.5 * (o - 0.1) >= 0.05 down to o = 0.2), 0.5 in 10 steps; from 0.3 they reach
    0.25, 0.2, 0.15, 0.125 in four; a command within the band moves nothing. `fit_grip_servo` recovers the
    servo that made an episode's grippers move, from its frames alone; an imagined free gripper then ends
    the frame where the servo puts it, not where the nets would."""
    from r2s2r.training.head import fit_grip_servo

    with pytest.raises(ValueError, match="head.grip_servo=True needs head.pads=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, grip_servo=True))
    model = _model(clips, head=dict(still_mode=True, contact=True, pads=True, grip_servo=True))
    head, cfg = model.state_head, model.config
    assert head.servos and head.grip_servo.tolist() == [0.0, 0.0, 0.0]  # unfitted: nothing moves
    head.grip_servo.copy_(torch.tensor([0.5, 0.05, 0.1]))
    zeros = torch.zeros(10, 1)
    np.testing.assert_allclose(float(head.servo(torch.tensor([1.0]), zeros)), 0.5, atol=1e-6)
    np.testing.assert_allclose(float(head.servo(torch.tensor([0.3]), zeros[:4])), 0.125, atol=1e-6)
    assert float(head.servo(torch.tensor([0.3]), torch.full((10, 1), 0.35))) == pytest.approx(0.3)
    # an episode played by a known servo (gain 0.12, speed 0.04, band 0.06; on the grid), no object logged
    true = torch.tensor([0.12, 0.04, 0.06])
    head.grip_servo.copy_(true)
    gen = torch.Generator().manual_seed(0)
    K, T = cfg.frame_stride, 30
    commands = (torch.rand(T, 1, 2, generator=gen) > 0.5).float().expand(T, K, 2).clone()
    commands[::3] = torch.rand(10, K, 2, generator=gen)  # partial closes too
    grips = [torch.ones(2)]
    for t in range(T):
        grips.append(head.servo(grips[-1], commands[t]))
    state = torch.tensor(HOME).repeat(T + 1, 1)
    state[:, head.grippers] = torch.stack(grips)
    actions = torch.tensor(HOME).repeat(T, K, 1)
    actions[..., head.grippers] = commands
    head.grip_servo.zero_()
    figures = fit_grip_servo(model, [{"observation.state": state, "action": actions}])
    torch.testing.assert_close(head.grip_servo, true)
    assert figures["frames"] == 2 * T and figures["median"]["servo"] < 1e-6
    assert figures["median"]["last_command"] > 0.01
    # imagined: a free gripper (no cube near) ends the frame at the servo's opening, a training step not
    start = torch.tensor(HOME)
    start[6] = 1.0
    pose = torch.tensor([0.3, 0.9, 0.02, 1.0, 0.0, 0.0, 0.0])  # far from both grippers
    latent = torch.cat([torch.zeros(1, cfg.head.latent_dim), model.norm("state", start)[None]], -1)
    latent = torch.cat([latent, model.norm("env", pose)[None]], -1)[:, None]
    latent = latent.expand(-1, cfg.head.ensemble, -1)
    raw = torch.tensor(HOME).repeat(K, 1)
    raw[:, 6] = 0.0
    chunk = model.norm_chunks(raw)[None]
    with torch.no_grad():
        imagined = head._contact_step(latent, chunk, imagined=True)[0][0, :, 0]
        trained = head._contact_step(latent, chunk)[0][0, :, 0]
    expected = float(head.servo(torch.tensor([1.0]), torch.zeros(K, 1)))
    np.testing.assert_allclose(imagined.numpy(), expected, atol=1e-5)
    assert (trained - expected).abs().min() > 1e-3


def test_substeps_move_the_observations_between_frames_as_the_commands_do(clips):
    """`head.substeps`: between imagined frames, each control step's observation puts the arms at the targets
    so far (no tracking model: exactly there), moves each gripper one servo step (gain 0.5, speed 0.05, band
    0.1: from 1.0 toward 0, 0.05 a step) and stops it at 0.61, where its pads meet a 4 cm cube square between
    them (0.95, 0.90, ..., 0.65, then 0.61, not 0.60); a cube the last step left carried by the left gripper
    moves rigidly with it as its waist turns (its place and turn in the gripper's frame, by MuJoCo, kept),
    an uncarried one stays. In a WorldModelEnv the observations change every control step, and each frame
    ends exactly where it ends without substeps."""
    from r2s2r.model.state_head import quat_matrix
    from r2s2r.rollout.world_model_env import WorldModelEnv

    with pytest.raises(ValueError, match="head.substeps=True needs head.arm_targets=True and head.pads"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, pads=True, substeps=True))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, arm_targets=True, reads_cameras=False)
    model = _model(clips, head={**rules, "substeps": True})
    head, cfg = model.state_head, model.config
    assert head.follows and not head.servos and head.grip_servo.tolist() == [0.0, 0.0, 0.0]
    head.grip_servo.copy_(torch.tensor([0.5, 0.05, 0.1]))
    grasp, _ = _contact_probe(model, 5)
    start = torch.tensor(HOME)
    start[6] = 1.0
    point, rot = grasp(start)
    cube = torch.cat([torch.tensor(point + rot @ [0.03, 0.0, 0.0], dtype=torch.float32), _quaternion(rot)])
    arms = [i for i in range(14) if i not in (6, 13)]
    targets = start.repeat(1, 12, 1)
    targets[..., 6] = 0.0
    state, openings = start[None], []
    for k in range(1, 13):
        state, pose = head.between(start[None], cube[None], state, targets[:, :k])
        openings.append(float(state[0, 6]))
        torch.testing.assert_close(pose, cube[None])  # nothing carries it: it stays
    expected = [1.0 - 0.05 * k for k in range(1, 8)] + [0.61] * 5
    np.testing.assert_allclose(openings, expected, atol=0.01)
    assert openings[6] - openings[7] < 0.045 and openings[-1] == pytest.approx(openings[7])
    far = cube.clone()
    far[:3] += torch.tensor([0.0, 0.0, 0.2])  # 20 cm above: nothing stops the fingers
    state = start[None]
    for k in range(1, 13):
        state, _ = head.between(start[None], far[None], state, targets[:, :k])
    assert float(state[0, 6]) == pytest.approx(1.0 - 12 * 0.05, abs=1e-5)  # the top speed all the way
    # carried by the left gripper: the waist turns 0.3 rad over three steps, the cube with the hand
    head._carrier = torch.tensor([0])
    turned = start.repeat(1, 3, 1)
    turned[0, :, 0] += torch.tensor([0.1, 0.2, 0.3])
    state = start[None]
    for k in range(1, 4):
        state, pose = head.between(start[None], cube[None], state, turned[:, :k])
    torch.testing.assert_close(state[0, arms], turned[0, -1, arms])
    point2, rot2 = grasp(turned[0, -1])
    assert np.linalg.norm(point2 - point) > 0.05
    np.testing.assert_allclose(pose[0, :3].numpy(), point2 + rot2 @ [0.03, 0.0, 0.0], atol=1e-4)
    in_hand = rot2.T @ quat_matrix(pose[0, 3:7]).double().numpy()
    np.testing.assert_allclose(in_hand, np.eye(3), atol=1e-4)
    head._carrier = torch.tensor([-1])
    assert torch.equal(head.between(start[None], cube[None], start[None], turned)[1], cube[None])

    # in the env: observations move every control step; each frame ends as it does without substeps
    def play(follows):
        head.follows = follows
        env = WorldModelEnv(model, num_envs=1, render=False, seed=0, check_physics=False)
        env.reset({"observation.state": start[None], "observation.environment_state": cube[None]})
        seen = []
        for t in range(2 * cfg.frame_stride):
            action = start.clone()
            action[arms] += 0.01 * (t + 1)
            action[6] = 0.0
            obs, *_ = env.step(action[None])
            seen.append(obs["observation.state"][0].clone())
        return torch.stack(seen)

    moving, held = play(True), play(False)
    K = cfg.frame_stride
    for frame_end in (K - 1, 2 * K - 1):
        torch.testing.assert_close(moving[frame_end], held[frame_end], rtol=0, atol=0)
    assert (held[1 : K - 1] == held[0]).all()  # without substeps: the start, repeated
    steps = moving[1 : K - 1, arms] - moving[: K - 2, arms]
    np.testing.assert_allclose(steps.numpy(), 0.01, atol=1e-5)  # with them: one target's step each


def test_capture_and_squeeze_decide_whether_a_closing_gripper_takes_the_cube(clips):
    """`head.capture`: a gripper that starts the frame narrower than the cube (0.4 against 0.61 where its pads
    meet it square) does not take a cube between its pads (its fingers rest on it), one that starts open
    does. `head.squeeze`: a gripper commanded to 0.6, 0.01 past where its pads meet the cube, does not take
    it; commanded to 0.3 it does. The imagined carry logit drops by log sigmoid of each rule's margin over
    5e-3 (floored at log 1e-4): log sigmoid((0.61 - 0.6 - 0.04) / 0.005) for the light squeeze."""
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, pad_holds=True, balance=True)
    rules["takes"] = True
    plain = _model(clips, head=rules)
    model = _model(clips, head={**rules, "capture": True, "squeeze": True})
    head, cfg = model.state_head, model.config
    fk, L, K = head.fk, cfg.head.latent_dim, cfg.frame_stride
    grasp, _ = _contact_probe(model, 5)
    _contact_probe(plain, 5)  # the same weights
    start = torch.tensor(HOME)
    start[6] = 0.95
    point, rot = grasp(start)
    centre = np.zeros(3)
    centre[fk.face_axes] = fk.face_centre.numpy()
    fk.table_top = plain.state_head.fk.table_top = float((point + rot @ centre)[2]) - fk.object_rest
    pose = torch.cat([torch.tensor(point + rot @ centre, dtype=torch.float32), _quaternion(rot)])

    def outcome(head, opening, command):
        before, after = start.clone(), start.clone()
        before[6], after[6] = opening, min(opening, 0.61)  # closed on the cube, or as narrow
        latent = torch.cat(
            [torch.zeros(1, L), model.norm("state", before)[None], model.norm("env", pose)[None]], -1
        )
        latent = latent[:, None].expand(-1, cfg.head.ensemble, -1)
        nxt = model.norm("state", after)[None, None].expand(-1, cfg.head.ensemble, -1)
        raw = before.repeat(K, 1)
        raw[:, 6] = command
        chunk = model.norm_chunks(raw)[None]
        held, holder = head._holder(latent, nxt, chunk)
        with torch.no_grad():
            carry = head._contact_step(latent, chunk, imagined=True)[1][0, :, 2]
        return bool(held[0]) and int(holder[0]) == 0, carry

    at_start = torch.cat([torch.zeros(L), model.norm("state", start), model.norm("env", pose)])
    stop = float(head.stop_opening(at_start)[0])  # the left gripper
    assert stop == pytest.approx(0.61, abs=0.01)
    for opening, command, takes in ((0.95, 0.3, True), (0.4, 0.3, False), (0.95, 0.6, False)):
        assert outcome(head, opening, command)[0] == takes
        assert outcome(plain.state_head, opening, command)[0]  # without the rules: every one takes it
    drop = lambda *a: (outcome(head, *a)[1] - outcome(plain.state_head, *a)[1]).numpy()  # noqa: E731
    np.testing.assert_allclose(drop(0.95, 0.3), 0.0, atol=1e-3)
    expected = math.log(torch.sigmoid(torch.tensor((stop - 0.6 - head.SQUEEZE) / head.GRASP_SOFTNESS)))
    np.testing.assert_allclose(drop(0.95, 0.6), expected, atol=1e-3)
    np.testing.assert_allclose(drop(0.4, 0.3), math.log(1e-4), atol=1e-3)


def test_capture_plays_the_frame_step_by_step_and_held_cubes_turn_with_the_gripper(clips):
    """`head.capture` over a frame in which the left arm swings its pads onto a resting cube (the shoulder
    from -0.3 rad to home in the last of its 5 control steps): fingers kept open (0.75) capture it; fingers
    commanded shut from the first step have closed (0.05 a step, to 0.5) below the cube's width (0.61) by
    the time it comes between them, and do not. `head.turns`: a held cube keeps its orientation in the
    frame of a gripper that rolls 0.3 rad (and so turns in the world)."""
    from r2s2r.model.state_head import _matrix_quat, _quat_product, quat_matrix

    q = torch.nn.functional.normalize(torch.randn(64, 4, generator=torch.Generator().manual_seed(1)), dim=-1)
    torch.testing.assert_close(quat_matrix(_matrix_quat(quat_matrix(q))), quat_matrix(q))
    torch.testing.assert_close(
        quat_matrix(_quat_product(q[:32], q[32:])), quat_matrix(q[:32]) @ quat_matrix(q[32:])
    )
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, pad_holds=True, balance=True)
    more = dict(takes=True, capture=True, grip_servo=True, turns=True, arm_targets=True)
    model = _model(clips, head={**rules, **more})
    head, cfg = model.state_head, model.config
    fk, L, K = head.fk, cfg.head.latent_dim, cfg.frame_stride
    head.grip_servo.copy_(torch.tensor([0.15, 0.05, 0.06]))
    home = torch.tensor(HOME)
    home[6] = 0.75  # open wider than the cube (0.61)
    point, rot = (x[0] for x in fk(home))  # the left gripper (fk's first)
    centre = (point + rot @ fk.pad_centre).float()
    pose = torch.cat([centre, _matrix_quat(rot)])  # square to the fingers
    start = home.clone()
    start[1] -= 0.3
    share = torch.tensor([0.0] * (K - 1) + [1.0])  # it swings in the frame's last control step
    steps = start + (home - start) * share[:, None]  # (K,S) targets

    def rel(joints):
        p, r = (x[0] for x in fk(joints))
        return r.T @ (centre - p)

    assert K == 5 and head.gripped(rel(start)) < 0.5 and head.gripped(rel(home)) > 0.5  # it comes between
    latent = torch.cat(
        [torch.zeros(1, L), model.norm("state", start)[None], model.norm("env", pose)[None]], -1
    )
    latent = latent[:, None].expand(-1, cfg.head.ensemble, -1)
    for command, captures in ((1.0, True), (0.0, False)):
        raw = steps.clone()
        raw[:, 6] = command
        captured, meets = head.sweep(latent, model.norm_chunks(raw)[None])
        assert bool(captured[0, 0]) == captures and bool(meets[0, 0])
    # turns: the left wrist rolls 0.3 rad with the cube held at its pads in mid-air
    held = home.clone()
    held[6] = 0.6
    rolled = held.clone()
    rolled[5] += 0.3
    latent = torch.cat(
        [torch.zeros(1, L), model.norm("state", held)[None], model.norm("env", pose)[None]], -1
    )
    latent = latent[:, None].expand(-1, cfg.head.ensemble, -1)
    raw = rolled.repeat(K, 1)
    with torch.no_grad():
        after = model.unnorm("env", head.decode(head.step(latent, model.norm_chunks(raw)[None]))["env_state"])
    r1 = fk(model.unnorm("state", head.decode(head.step(latent, model.norm_chunks(raw)[None]))["state"]))[1]
    in_gripper = r1[0, 0, 0].T @ quat_matrix(after[0, 0, 3:7])
    torch.testing.assert_close(in_gripper, torch.eye(3), atol=2e-3, rtol=0)  # square to the fingers still
    assert (quat_matrix(after[0, 0, 3:7]) - rot.float()).abs().max() > 0.1  # it did turn in the world


def test_doubt_rises_at_the_balance_edge_and_stays_for_the_episode(clips):
    """`head.doubt` (with `head.balance`): a cube between the left fingers whose centre lies exactly
    BALANCE_MARGIN inside the pads' faces is on the rule's edge, and the uncertainty (`outcome_spread`, m)
    rises by DOUBT_SCALE over the same head without doubt; 5 mm further in, by DOUBT_SCALE * exp(-1); the
    doubt stays when the next frames are clear of the edge, and a new episode (`forget_outcomes`) drops it."""
    with pytest.raises(ValueError, match="head.doubt=True needs head.pads=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, doubt=True))
    rules = dict(still_mode=True, contact=True, pads=True, balance=True)
    plain, model = _model(clips, head=rules), _model(clips, head={**rules, "doubt": True})
    head, cfg = model.state_head, model.config
    fk, L = head.fk, cfg.head.latent_dim
    grasp, _ = _contact_probe(model, 5)
    _contact_probe(plain, 5)
    state = torch.tensor(HOME)
    state[6] = 0.95
    point, rot = grasp(state)
    across, reach, centre = _across_faces(fk, rot)
    chunk = model.norm_chunks(state.repeat(cfg.frame_stride, 1))[None]

    def latent(offset):
        pose = torch.cat([torch.tensor(point + rot @ offset, dtype=torch.float32), _quaternion(rot)])
        return torch.cat(
            [torch.zeros(1, L), model.norm("state", state)[None], model.norm("env", pose)[None]], -1
        )

    def rise(*offsets):
        for h in (head, plain.state_head):
            h.forget_outcomes()
            for offset in offsets:
                with torch.no_grad():
                    h.step(latent(offset), chunk)
        return float(head.outcome_spread(metres=True) - plain.state_head.outcome_spread(metres=True))

    edge = centre + (reach - StateDynamicsHead.BALANCE_MARGIN) * across  # 3 mm inside the faces
    inside = edge - 0.005 * across
    scale = StateDynamicsHead.DOUBT_SCALE
    assert rise(edge) == pytest.approx(scale, abs=1e-3 * scale)
    assert rise(inside) == pytest.approx(scale * math.exp(-1), rel=1e-2)
    assert rise(centre) < 1e-3 * scale  # 3 cm from the edge
    assert rise(edge, centre, centre) == pytest.approx(scale, abs=1e-3 * scale)  # it stays
    head.forget_outcomes()
    assert head.outcome_spread(metres=True) is None


def test_balance_margin_moves_the_balance_edge(clips):
    """`head.balance_margin`: the balance rule's edge (m inside the pads' faces across gravity). A cube
    between the left fingers with its centre 1 mm inside the faces is balanced to sigmoid((0.001 - edge) /
    softness): sigmoid(-4) at the default 3 mm, sigmoid(6) at -2 mm; one 3 mm outside them, sigmoid(-2) at
    -2 mm. Values outside [-2, 2] cm are refused."""
    with pytest.raises(ValueError, match="head.balance_margin=0.05"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, pads=True, balance_margin=0.05))
    assert WorldModelConfig.tiny().head.balance_margin == StateDynamicsHead.BALANCE_MARGIN
    rules = dict(still_mode=True, contact=True, pads=True, balance=True)
    soft = StateDynamicsHead.BALANCE_SOFTNESS
    got, want = {}, {}
    for edge in (0.003, -0.002):
        model = _model(clips, head={**rules, "balance_margin": edge})
        head, L = model.state_head, model.config.head.latent_dim
        grasp, _ = _contact_probe(model, 5)
        state = torch.tensor(HOME)
        state[6] = 0.95
        point, rot = grasp(state)
        across, reach, centre = _across_faces(head.fk, rot)
        for inside in (0.001, -0.003):
            offset = centre + (reach - inside) * across
            pose = torch.cat([torch.tensor(point + rot @ offset, dtype=torch.float32), _quaternion(rot)])
            latent = torch.cat(
                [torch.zeros(1, L), model.norm("state", state)[None], model.norm("env", pose)[None]], -1
            )
            got[edge, inside] = float(head.balanced(latent)[0, 0])
            want[edge, inside] = 1 / (1 + math.exp(-(inside - edge) / soft))
    assert got == pytest.approx(want, abs=2e-3)
    assert got[0.003, 0.001] < 0.5 < got[-0.002, 0.001]
    assert got[-0.002, -0.003] < 0.5


def test_squeeze_depth_moves_the_squeeze_edge(clips):
    """`head.squeeze_depth`: how far past where its pads meet the cube (`stop_opening`, about 0.61 for the
    left fingers held square) a gripper must be commanded to grasp it. Commanded to 0.53 (0.08 past), it
    can at the default 0.04 (sigmoid((0.08 - 0.04) / softness)) and cannot at 0.1 (sigmoid(-0.02 /
    softness)); commanded shut (0.0) it can at both. Values outside [0, 0.5] are refused."""
    with pytest.raises(ValueError, match="head.squeeze_depth=0.7"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, pads=True, squeeze_depth=0.7))
    assert WorldModelConfig.tiny().head.squeeze_depth == StateDynamicsHead.SQUEEZE
    rules = dict(still_mode=True, contact=True, pads=True, squeeze=True)
    soft = StateDynamicsHead.GRASP_SOFTNESS
    got, want = {}, {}
    for edge in (0.04, 0.1):
        model = _model(clips, head={**rules, "squeeze_depth": edge})
        head, cfg, L = model.state_head, model.config, model.config.head.latent_dim
        grasp, _ = _contact_probe(model, 5)
        state = torch.tensor(HOME)
        state[6] = 0.95
        point, rot = grasp(state)
        centre = head.fk.pad_centre.double().numpy()
        pose = torch.cat([torch.tensor(point + rot @ centre, dtype=torch.float32), _quaternion(rot)])
        latent = torch.cat(
            [torch.zeros(1, L), model.norm("state", state)[None], model.norm("env", pose)[None]], -1
        )[:, None]
        stop = float(head.stop_opening(latent)[0, 0, 0])
        assert stop == pytest.approx(0.61, abs=0.01)
        for command in (0.53, 0.0):
            target = state.clone()
            target[6] = command
            chunk = model.norm_chunks(target.repeat(cfg.frame_stride, 1))[None]
            with torch.no_grad():
                got[edge, command] = float(head.grasp_able(latent, chunk)[0, 0, 0])
            want[edge, command] = 1 / (1 + math.exp(-(stop - command - edge) / soft))
    assert got == pytest.approx(want, abs=2e-3)
    assert got[0.1, 0.53] < 0.5 < got[0.04, 0.53]
    assert got[0.1, 0.0] > 0.99


def test_closes_moves_fingers_round_the_cube_by_the_servo_and_stops_them_on_it(clips):
    """`head.closes`: left fingers open (0.95) round a cube centred between their pads, commanded shut,
    close at the servo's top speed, 0.05 a control step: to 0.95 - 0.05 K after a frame of K steps; from
    there, the next frame ends where the pads meet the cube (`stop_opening`), not past it. Commanded to
    where they are, they stay (0.95). With the cube 10 cm away the grasp nets decide, as without the rule.
    Refused without pads."""
    with pytest.raises(ValueError, match="head.closes=True needs head.pads=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, closes=True))
    rules = dict(still_mode=True, contact=True, pads=True)
    plain, model = _model(clips, head=rules), _model(clips, head={**rules, "closes": True})
    _contact_probe(plain, 5)
    grasp, _ = _contact_probe(model, 5)
    head, cfg, L = model.state_head, model.config, model.config.head.latent_dim
    with torch.no_grad():
        head.grip_servo.copy_(torch.tensor([0.15, 0.05, 0.06]))  # gain, top speed, dead band
    state = torch.tensor(HOME)
    point, rot = grasp(state)  # the left gripper's pose does not depend on its opening
    centre = head.fk.pad_centre.double().numpy()

    def after(h, offset, command, start=0.95):
        state[6] = start
        pose = torch.cat([torch.tensor(point + rot @ offset, dtype=torch.float32), _quaternion(rot)])
        latent = torch.cat(
            [torch.zeros(1, L), model.norm("state", state)[None], model.norm("env", pose)[None]], -1
        )[:, None].expand(-1, cfg.head.ensemble, -1)
        target = state.clone()
        target[6] = command
        chunk = model.norm_chunks(target.repeat(cfg.frame_stride, 1))[None]
        with torch.no_grad():
            return h._contact_step(latent, chunk, imagined=True)[0][0, :, 0], h.stop_opening(latent)[0, :, 0]

    K = cfg.frame_stride
    closing, stop = after(head, centre, 0.0)
    assert 0.5 < float(stop[0]) < 0.95 - 0.05 * K  # the 4 cm cube, held square: not reached in one frame
    torch.testing.assert_close(closing, torch.full_like(closing, 0.95 - 0.05 * K), atol=1e-5, rtol=0)
    shut, stop = after(head, centre, 0.0, start=0.95 - 0.05 * K)
    torch.testing.assert_close(shut, stop)
    held, _ = after(head, centre, 0.95)
    torch.testing.assert_close(held, torch.full_like(held, 0.95), atol=1e-4, rtol=0)
    far = centre + np.array([0.0, 0.0, 0.10])
    torch.testing.assert_close(after(head, far, 0.0)[0], after(plain.state_head, far, 0.0)[0])


def test_chance_takes_a_grasp_with_its_odds_drawn_once_per_gripper(clips):
    """`head.chance`: a gripper closing on a cube centred between its pads (far inside the balance edge) takes
    it where the grasp's odds beat its luck. With the squeeze's edge set at 0.1 and width 0.02, a command
    0.1 past where the pads meet the cube (stop - 0.1) has odds 1/2: luck 0.3 takes it, luck 0.7 does not;
    commanded 0.3 past, odds sigmoid(10) take it for luck 0.99; 0.02 past, sigmoid(-4) leave it for luck
    0.05. `take_odds` is that product by hand; without luck, odds over one half take. With `head.doubt`,
    odds of 1/2 are full doubt (DOUBT_SCALE more uncertainty), 4 p (1 - p) of it elsewhere."""
    with pytest.raises(ValueError, match="head.chance=True needs head.takes=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, pads=True, chance=True))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, pad_holds=True, balance=True)
    rules["takes"] = True
    model = _model(clips, head={**rules, "chance": True, "doubt": True})
    head, cfg = model.state_head, model.config
    assert head.chances
    torch.testing.assert_close(head.grasp_odds, torch.tensor(head.ODDS_UNFITTED))  # unfitted: the rules
    fk, L, K, M = head.fk, cfg.head.latent_dim, cfg.frame_stride, cfg.head.ensemble
    grasp, _ = _contact_probe(model, 5)
    start = torch.tensor(HOME)
    start[6] = 0.95
    point, rot = grasp(start)
    across, reach, centre = _across_faces(fk, rot)
    fk.table_top = float((point + rot @ centre)[2]) - fk.object_rest
    pose = torch.cat([torch.tensor(point + rot @ centre, dtype=torch.float32), _quaternion(rot)])
    before = model.norm("state", start)
    latent = torch.cat([torch.zeros(L), before, model.norm("env", pose)])[None, None].expand(-1, M, -1)
    stop = float(head.stop_opening(latent)[0, 0, 0])
    head.grasp_odds.copy_(torch.tensor([[0.003, 0.0005], [0.1, 0.02]]))

    def chunk(command):
        raw = start.repeat(K, 1)
        raw[:, 6] = command
        return model.norm_chunks(raw)[None]

    def takes(command, luck):
        after = start.clone()
        after[6] = 0.6
        nxt = model.norm("state", after)[None, None].expand(-1, M, -1)
        luck = None if luck is None else torch.tensor([[luck, 0.5]])
        held, holder = head._holder(latent, nxt, chunk(command), luck)
        return bool(held[0]) and int(holder[0]) == 0

    for depth, expected in (
        (0.1, 0.5),
        (0.3, math.exp(10) / (1 + math.exp(10))),
        (0.02, 1 / (1 + math.exp(4))),
    ):
        odds = float(head.take_odds(latent, chunk(stop - depth))[0, 0, 0])
        assert odds == pytest.approx(expected, rel=1e-3)
    assert takes(stop - 0.1, 0.3) and not takes(stop - 0.1, 0.7)
    assert takes(stop - 0.3, 0.99) and not takes(stop - 0.02, 0.05)
    assert takes(stop - 0.3, None) and not takes(stop - 0.02, None)
    scale = StateDynamicsHead.DOUBT_SCALE
    for depth, p in ((0.1, 0.5), (0.13, 1 / (1 + math.exp(-1.5)))):
        head.forget_outcomes()
        with torch.no_grad():
            head.step(latent, chunk(stop - depth))
        assert float(head._doubt[0]) == pytest.approx(4 * p * (1 - p), rel=1e-3)
    assert float(head.outcome_spread(metres=True)) >= scale * 4 * p * (1 - p) - 1e-6
    # head.odds_doubt: the same odds raise the doubt, and the rules alone decide (a light squeeze takes)
    with pytest.raises(ValueError, match="head.odds_doubt=True needs head.takes=True and head.doubt=True"):
        WorldModelConfig.tiny(head={**rules, "odds_doubt": True})
    model = _model(clips, head={**rules, "odds_doubt": True, "doubt": True})
    head = model.state_head
    _contact_probe(model, 5)
    head.fk.table_top = fk.table_top
    head.grasp_odds.copy_(torch.tensor([[0.003, 0.0005], [0.1, 0.02]]))
    assert head.odds and not head.chances
    assert takes(stop - 0.02, 0.99) and takes(stop - 0.1, 0.7)
    head.forget_outcomes()
    with torch.no_grad():
        head.step(latent, chunk(stop - 0.1))
    assert float(head._doubt[0]) == pytest.approx(1.0, rel=1e-3)


def test_fit_odds_recovers_the_edges_that_made_the_outcomes():
    """`fit_odds`: 20,000 grasps whose outcomes were drawn from known curves (balance edge 6 mm, width 2 mm;
    squeeze edge 0.08, width 0.03) and base rates 0.9 and 0.8 per gripper give those back within a tenth of
    a width; outcomes that ignore the room give flat curves (every grasp's odds within 0.05 of 1)."""
    from r2s2r.training.head import fit_odds

    gen = torch.Generator().manual_seed(0)
    n = 20_000
    room = torch.stack([torch.rand(n, generator=gen) * 0.03 - 0.005, torch.rand(n, generator=gen) * 0.4], -1)
    which = (torch.rand(n, generator=gen) > 0.5).long()
    edge, width, rate = torch.tensor([0.006, 0.08]), torch.tensor([0.002, 0.03]), torch.tensor([0.9, 0.8])
    p = rate[which] * torch.sigmoid((room - edge) / width).prod(-1)
    carried = torch.rand(n, generator=gen) < p
    unfitted = torch.tensor(StateDynamicsHead.ODDS_UNFITTED)
    fitted = fit_odds(room, carried, which, unfitted, 2)
    assert ((fitted[0].float() - edge).abs() < 0.1 * width).all(), fitted
    assert ((fitted[1].float() - width).abs() < 0.1 * width).all(), fitted
    assert ((fitted[2].float() - rate).abs() < 0.02).all(), fitted
    flat = fit_odds(room, torch.rand(n, generator=gen) < rate[which], which, unfitted, 2)
    odds = torch.sigmoid((room.double() - flat[0]) / flat[1]).prod(-1)
    assert odds.min() > 0.95


def test_still_mode_keeps_the_cube_exactly_and_wins_where_nothing_moved(clips):
    """The still pose mode returns the object pose unchanged whatever the dynamics predict, and training
    teaches its odds exactly where the object did not move; a pushed object teaches the free mode's. Modes:
    free, still, carried by left, carried by right."""
    L = WorldModelConfig.tiny().head.latent_dim

    def setup():
        model = _model(clips, head=dict(still_mode=True))
        head, cfg = model.state_head, model.config
        S, E = cfg.state_dim, cfg.env_state_dim
        pose = model.norm("env", torch.tensor([0.05, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0]))
        state = model.norm("state", torch.tensor([0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.9] * 2))
        latent = torch.cat([torch.zeros(1, L), state[None], pose[None]], -1)
        push = torch.zeros(E)
        push[0] = 0.005 / float(model.env_std[0])  # every moving mode predicts a 5 mm push along x
        with torch.no_grad():
            head.dynamics.b2[:, L + S : L + S + 4 * E] = push.repeat(4)
        return head, latent, torch.zeros(1, cfg.chunk_dim), pose, push

    head, latent, chunk, pose, push = setup()
    assert head.still and head.kinematic and head.modes == 4 and head.free_modes == 1
    with torch.no_grad():
        picked = {}
        # Untrained odds are even, and both grippers are out of reach of the cube: halves (free, still).
        for name, draw in (("free", 0.1), ("still", 0.7)):
            nxt = head.step(latent, chunk, draw=torch.tensor([draw]))
            picked[name] = head.decode(nxt)["env_state"][0, 0]
    torch.testing.assert_close(picked["still"], pose, rtol=0, atol=0)
    torch.testing.assert_close(picked["free"], pose + push)

    def odds(head):
        with torch.no_grad():
            return head._step_parts(latent[:, None].expand(-1, head.cfg.head.ensemble, -1), chunk)[3].softmax(
                -1
            )

    for truth, winner in ((pose, 1), (pose + push, 0)):  # nothing moved: still; pushed: free
        head, latent, chunk, _, _ = setup()
        before = odds(head)
        nxt, loss = head.step_supervised(latent, chunk, truth[None])
        with torch.no_grad():  # the winner continues the unroll: exactly the truth
            torch.testing.assert_close(
                head.decode(nxt)["env_state"][0], truth.expand(head.cfg.head.ensemble, -1)
            )
        loss.mean().backward()
        torch.optim.SGD(head.dynamics.parameters(), lr=0.1).step()
        gain = odds(head) - before  # (1,M,K)
        assert (gain[..., winner] > 0).all() and (gain.argmax(-1) == winner).all()


def test_outcome_spread_is_where_the_members_disagree_about_the_outcome(clips):
    """`outcome_spread`: after a step, the std over ensemble members of each member's own expected object
    position under its own odds. Free (a 5 mm push along x) or still, the grippers out of reach: the three
    members giving the push odds 1/2, 3/4, 1/4 expect pushes of 2.5, 3.75, 1.25 mm, std 1.25 mm, though the
    picked mode moves every member alike (their positions' spread after the step is 0)."""
    model = _model(clips, head=dict(still_mode=True))
    head, cfg = model.state_head, model.config
    L, S, E, K = cfg.head.latent_dim, cfg.state_dim, cfg.env_state_dim, head.modes
    pose = model.norm("env", torch.tensor([0.05, 0.5, 0.02, 1.0, 0.0, 0.0, 0.0]))
    state = model.norm("state", torch.tensor([0.0, -0.96, 1.16, 0.0, -0.3, 0.0, 0.9] * 2))
    latent = torch.cat([torch.zeros(1, L), state[None], pose[None]], -1)
    push = torch.zeros(E)
    push[0] = 0.005 / float(model.env_std[0])
    free_vs_still = torch.tensor([0.0, math.log(3.0), -math.log(3.0)])  # per member
    with torch.no_grad():
        head.dynamics.b2[:, L + S : L + S + K * E] = push.repeat(K)
        head.dynamics.b2[:, -K:] = 0.0
        head.dynamics.b2[:, -K] = free_vs_still
        assert head.outcome_spread() is None  # no step yet
        nxt = head.step(latent, torch.zeros(1, cfg.chunk_dim), draw=torch.tensor([0.1]))
        members = model.unnorm("env", head.decode(nxt)["env_state"])[0, :, :3]
    assert cfg.head.ensemble == 3
    np.testing.assert_allclose(float(head.outcome_spread(metres=True)[0]), 0.00125, rtol=1e-4)
    assert float(members.std(0).norm()) < 1e-6
    head.forget_outcomes()
    assert head.outcome_spread() is None


def test_relative_actions_read_zero_for_an_arm_holding_still(clips):
    """With `relative_actions` the denoiser reads each chunk's targets and their offsets from the proprio of
    the frame the chunk leads from, in units of RELATIVE_UNIT action std: targets equal to the proprio read
    exactly zero, a target 0.1 rad past it reads 0.1 / (RELATIVE_UNIT * std)."""
    from r2s2r.model.modeling_world_model import RELATIVE_UNIT

    model = _model(clips, relative_actions=True)
    B, K, stride, A = 2, model.config.context_frames, model.config.frame_stride, model.config.action_dim
    proprio = torch.randn(B, K, A) * 0.3
    targets = proprio[:, :, None].repeat(1, 1, stride, 1)  # every target where the joint already is
    targets[1, -1, :, 3] += 0.1  # second clip, last chunk: joint 3 heads 0.1 rad further
    read = model.denoiser_chunks(model.norm_chunks(targets), model.norm("state", proprio))
    assert read.shape == (B, K, 2 * stride * A)
    assert torch.allclose(read[..., : stride * A], model.norm_chunks(targets))  # the targets come first
    offsets = read[..., stride * A :].unflatten(-1, (stride, A))
    expected = torch.zeros_like(offsets)
    expected[1, -1, :, 3] = 0.1 / (RELATIVE_UNIT * model.action_std[3])
    assert torch.allclose(offsets, expected, rtol=1e-4, atol=1e-3)  # norm then unnorm: float32 rounding
    with pytest.raises(ValueError, match="relative_actions needs actions that are joint targets"):
        WorldModelConfig.tiny(relative_actions=True, action_dim=7)


def test_view_balance_weighs_each_view_by_its_running_change(clips):
    x0 = torch.ones(4, 2, 3, 32, 32)
    x0[:, 0] = 0.5  # the top view changes half as much: a quarter of the squared change
    flat = _model(clips, view_balance=0.0)
    torch.testing.assert_close(flat.view_weights(x0), torch.ones(2))
    model = _model(clips, view_balance=1.0)
    # the first batch sets the energies (0.25, 1): weights 1/0.25 and 1/1, scaled to average 1
    torch.testing.assert_close(model.view_weights(x0), torch.tensor([1.6, 0.4]))
    # the next batches move them by 1 %: (0.99 * 0.25 + 0.01 * 1, 1) = (0.2575, 1)
    torch.testing.assert_close(
        model.view_weights(torch.ones_like(x0)), torch.tensor([2 / 0.2575, 2.0]) / (1 / 0.2575 + 1)
    )
    model.eval()  # evaluation reads the weights and leaves them alone
    before = model.view_energy.clone()
    model.view_weights(torch.zeros_like(x0))
    torch.testing.assert_close(model.view_energy, before)
    half = _model(clips, view_balance=0.5)  # the square root: weights 2 and 1, scaled to average 1
    torch.testing.assert_close(half.view_weights(x0), torch.tensor([4 / 3, 2 / 3]))


def test_pushes_move_a_resting_cube_out_of_the_way_of_the_fingers(clips):
    """`head.pushes`: a resting cube 5 mm inside a finger's box (the MJCF finger's inner face 3.56 cm from the
    grasp point at state 1: 3.46 cm at the widest slide of 5.7 cm, 1 mm more at the travel's 5.8 cm; grown by
    the cube's 2 cm half-size), having come in from the side, goes back out the way it came, 5 mm along the
    closing axis; not while the gripper closes, not off the table, not where the finger came down on it. In
    a WorldModelEnv a left hand pointing down, open round the cube, slides 6 cm along its closing axis over
    one frame: its trailing finger meets the cube after 1.56 cm and carries it along, step by step (between
    frames) and at the frame's end (4.44 cm)."""
    from r2s2r.robots.ik import BimanualIK, frame_from_axes
    from r2s2r.rollout.world_model_env import WorldModelEnv

    with pytest.raises(ValueError, match="head.pushes=True needs head.substeps=True"):
        WorldModelConfig.tiny(head=dict(contact=True, pads=True, arm_targets=True, pushes=True))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, arm_targets=True, reads_cameras=False)
    model = _model(clips, head={**rules, "substeps": True, "pushes": True})
    head, cfg = model.state_head, model.config
    fk = head.fk
    head.grip_servo.copy_(torch.tensor([0.5, 0.05, 0.1]))
    lower, upper = fk.fingers_at(torch.tensor(1.0))
    assert float(lower[0, 1]) == pytest.approx(0.0356, abs=2e-4)  # the + finger's inner face
    assert float(upper[1, 1]) == pytest.approx(-0.0356, abs=2e-4)
    rest = float(fk.table_top + fk.object_rest)
    state = torch.tensor(HOME)[None].clone()
    state[0, [6, 13]] = 1.0
    point = torch.tensor([[[0.0, 0.5, rest], [0.3, 0.5, rest]]])
    level = torch.eye(3)[None, None].repeat(1, 2, 1, 1)  # the gripper's frame is the world's
    cube = torch.tensor([[0.0, 0.5 + 0.0356 - 0.02 + 0.005, rest]])
    frames = (point, level)

    def came_from(offset, opening=1.0):  # the grippers a step earlier: `offset` (m) away, opened so
        before = state.clone()
        before[0, [6, 13]] = opening
        return before, (point + torch.tensor(offset), level)

    side = came_from([0.0, 0.01, 0.0])  # the finger's face 1 cm farther: the cube lay outside it
    pushed = head.pushed(cube, state, frames, *side)
    torch.testing.assert_close(pushed, cube - torch.tensor([[0.0, 0.005, 0.0]]), atol=1e-4, rtol=0)  # 0.1 mm
    assert torch.equal(head.pushed(cube, state, frames, *came_from([0.0, 0.01, 0.0], 1.02)), cube)  # closing
    lifted = torch.tensor([[0.0, 0.0, 0.05]])
    assert torch.equal(head.pushed(cube + lifted, state, (point + lifted, level), *side), cube + lifted)
    # the same overlap, but the finger came down from 6 cm above: it presses the cube, it does not slide it
    assert torch.equal(head.pushed(cube, state, frames, *came_from([0.0, 0.0, 0.06])), cube)

    # in the env: the left hand pointing down, open round a resting cube, slides 6 cm along +y in one frame
    ik = BimanualIK()
    down = frame_from_axes(np.array([0.0, 0.0, -1.0]), np.array([0.0, 1.0, 0.0]))
    start_at = np.array([-0.1, 0.5, rest])
    q = np.array([HOME[:6], HOME[7:13]])
    path = []
    for k in range(cfg.frame_stride + 1):
        q = q.copy()
        q[0] = ik.solve(q, np.stack([start_at + [0.0, 0.06 * k / cfg.frame_stride, 0.0], ik.fk(q)[0][1]]),
                        np.stack([down, ik.fk(q)[1][1]]), iters=50)[0]  # fmt: skip
        joints = torch.tensor([*q[0], 1.0, *q[1], 1.0], dtype=torch.float32)
        path.append(joints)
    point0, _ = fk(path[0][None])
    assert float((point0[0, 0] - torch.tensor(start_at, dtype=torch.float32)).norm()) < 2e-3
    start_cube = torch.cat([point0[0, 0], torch.tensor([1.0, 0.0, 0.0, 0.0])])
    env = WorldModelEnv(model, num_envs=1, render=False, seed=0, check_physics=False)
    env.reset({"observation.state": path[0][None], "observation.environment_state": start_cube[None]})
    seen = []
    for k in range(1, cfg.frame_stride + 1):
        obs, *_ = env.step(path[k][None])
        seen.append(float(obs["observation.environment_state"][0, 1] - start_cube[1]))
    slid = [float(fk(p[None])[0][0, 0, 1] - point0[0, 0, 1]) for p in path[1:]]
    expected = [max(0.0, s - (0.0356 - 0.02)) for s in slid]
    np.testing.assert_allclose(seen, expected, atol=1.5e-3)
    assert seen[-1] == pytest.approx(0.06 - 0.0156, abs=3e-3)
    torch.testing.assert_close(
        obs["observation.environment_state"][0, [0, 2]], start_cube[[0, 2]], atol=2e-3, rtol=0
    )


def test_push_touch_keeps_pushing_a_cube_that_lay_just_inside_the_finger(clips):
    """`head.push_touch`: a resting cube 5 mm inside a finger's box (its lower face along y, grown by the
    cube's half-size, as in the test above) that already lay 2 mm inside it a step earlier (the finger then
    3 mm farther back) is pushed back out to the face, 5 mm along -y, where up to 3 mm inside still counts
    as at the face; at the default (1 mm) it counts as having been inside, and the finger passes through
    it. Out of range is refused."""
    with pytest.raises(ValueError, match="head.push_touch=0.03"):
        WorldModelConfig.tiny(head=dict(push_touch=0.03))
    assert WorldModelConfig.tiny().head.push_touch == StateDynamicsHead.PUSH_TOUCH
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, arm_targets=True, reads_cameras=False)
    state = torch.tensor(HOME)[None].clone()
    state[0, [6, 13]] = 1.0
    got = {}
    for touch in (0.001, 0.003):
        model = _model(clips, head={**rules, "substeps": True, "pushes": True, "push_touch": touch})
        fk = model.state_head.fk
        rest = float(fk.table_top + fk.object_rest)
        point = torch.tensor([[[0.0, 0.5, rest], [0.3, 0.5, rest]]])
        level = torch.eye(3)[None, None].repeat(1, 2, 1, 1)
        cube = torch.tensor([[0.0, 0.5 + 0.0356 - 0.02 + 0.005, rest]])
        earlier = (point + torch.tensor([0.0, 0.003, 0.0]), level)
        got[touch] = model.state_head.pushed(cube, state, (point, level), state, earlier) - cube
    assert torch.equal(got[0.001], torch.zeros(1, 3))
    torch.testing.assert_close(got[0.003], torch.tensor([[0.0, -0.005, 0.0]]), atol=1e-4, rtol=0)


def _carried_latent(model, state: torch.Tensor, pose: torch.Tensor) -> torch.Tensor:
    """A carried-state head's latent (latent_size,): a zero learnt part, the raw proprio `state` and object
    `pose`, normalized as the head carries them."""
    zeros = torch.zeros(model.config.head.latent_dim)
    return torch.cat([zeros, model.norm("state", state), model.norm("env", pose)])


def test_drops_let_a_released_cube_fall_and_a_closing_gripper_catch_it(clips):
    """`head.drops`: a cube held in mid-air by the right gripper (closed on it, square between its pads)
    stays with it while the command squeezes and falls freely from rest from the control step the command
    opens past the held opening less the servo's dead band (0.1 here): z - g/2 (n dt)^2 after n steps of
    fall (dt 0.02 s), straight down, and no lower than its resting height. A cube let go 5 mm above the
    grasp point of a left gripper open round it (0.75; its pads meet the cube at 0.61) falls into it: a left
    commanded shut catches it at the step its servo (0.05 a step) reaches where its pads meet the cube, and
    carries it from there; a left held open lets it fall through. The frame's end (`step`) puts it where
    the control steps do, whatever the hold rules would have said."""
    from r2s2r.model.state_head import quat_matrix

    with pytest.raises(ValueError, match="head.drops=True needs head.substeps=True and head.pad_holds=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, pads=True, drops=True))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, pad_holds=True, arm_targets=True)
    model = _model(clips, head={**rules, "reads_cameras": False, "substeps": True, "drops": True})
    head, cfg = model.state_head, model.config
    head.grip_servo.copy_(torch.tensor([0.5, 0.05, 0.1]))
    fk, g, dt = head.fk, 9.81, 0.02
    floor = float(fk.table_top + fk.object_rest)

    def square_cube(state, gripper, lift=0.0):  # a cube at the gripper's grasp point, square to it
        point, rot = fk(state[None])
        q = torch.cat(
            [
                point[0, gripper] + torch.tensor([0.0, 0.0, lift]),
                _quaternion(rot[0, gripper].double().numpy()),
            ]
        )
        return q, float(head.stop_at(rot, quat_matrix(q[3:7])[None])[0, gripper])

    start = torch.tensor(HOME)
    cube, stop = square_cube(start, 1)
    start[13] = stop  # the right closed on it
    start[6] = 1.0  # the left wide open, far away
    z0 = float(cube[2])
    assert z0 - 0.2 > floor + 0.015 and float(cube[2]) > floor + 0.05  # in mid-air, high enough to fall 20 cm
    targets = start.repeat(1, 10, 1)
    targets[0, :, 13] = 0.0
    targets[0, 3:, 13] = 1.0  # the command opens at step 3
    position, catcher, holder, released = head._drop_path(start[None], cube[None], targets)
    assert (int(holder), int(released), int(catcher)) == (1, 3, -1)
    np.testing.assert_allclose(
        position[0].numpy(), [*cube[:2].tolist(), z0 - g / 2 * (7 * dt) ** 2], atol=1e-5
    )
    head._carrier = torch.tensor([1])  # the last frame left it carried by the right
    state, seen = start[None], []
    for k in range(1, 11):
        state, pose = head.between(start[None], cube[None], state, targets[:, :k])
        seen.append(float(pose[0, 2]))
    expected = [z0 - g / 2 * (max(k - 3, 0) * dt) ** 2 for k in range(1, 11)]
    np.testing.assert_allclose(seen, expected, atol=1e-5)
    never = targets.clone()
    never[0, :, 13] = 0.0  # squeezed all along: carried, never dropped
    assert int(head._drop_path(start[None], cube[None], never)[3]) == 10
    np.testing.assert_allclose(
        head._drop_path(start[None], cube[None], never)[0][0].numpy(), cube[:3], atol=1e-5
    )

    # falling into the left gripper's open fingers, 5 mm above its grasp point
    start = torch.tensor(HOME)
    start[6] = 0.75  # open round the cube (its pads meet it at 0.61), not on it
    cube, stop = square_cube(start, 0, lift=0.005)
    shut = start.repeat(1, 10, 1)
    shut[0, :, 6] = 0.0
    position, catcher, holder, released = head._drop_path(start[None], cube[None], shut)
    m = int(np.ceil((0.75 - stop) / 0.05))  # the servo's step that reaches the pads: 3
    caught_at = float(cube[2]) - g / 2 * (m * dt) ** 2
    assert (int(holder), int(released), int(catcher), m) == (-1, 0, 0, 3)
    assert float(position[0, 2]) == pytest.approx(caught_at, abs=1e-5)
    kept_open = start.repeat(1, 10, 1)
    position, catcher, _, _ = head._drop_path(start[None], cube[None], kept_open)
    assert int(catcher) == -1
    assert float(position[0, 2]) == pytest.approx(max(floor, float(cube[2]) - g / 2 * 0.2**2), abs=1e-5)

    # the frame's end (the tiny model's frame: 5 control steps): caught at step 3 and carried by the left
    latent = _carried_latent(model, start, cube)[None]
    with torch.no_grad():
        nxt = head.step(latent, model.norm_chunks(shut[:, : cfg.frame_stride]), draw=torch.tensor([0.0]))
    end = model.unnorm("env", head.decode(nxt)["env_state"][0, 0])
    assert float(end[2]) == pytest.approx(caught_at, abs=1e-4) and int(head._carrier[0]) == 0


def test_rests_keep_squeezing_fingers_on_the_cube_at_the_frame_end_and_between(clips):
    """`head.rests`: a gripper whose fingers are on the cube (within 0.1 of the opening where its pads meet
    it, the cube between them) and that squeezes (commanded more than 0.04 inside that opening) ends the frame
    no wider than that opening plus REST_SLACK, whatever the grasp nets said; one that does not squeeze, one
    open wide round the cube and one with the cube out of its pads keep the nets' opening. Between frames,
    fingers resting 0.07 inside that opening stay there, where without the rule the servo closes them
    through the cube at 0.05 a step."""
    from r2s2r.model.state_head import quat_matrix

    with pytest.raises(ValueError, match="head.rests=True needs head.pad_holds=True"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, pads=True, rests=True))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, pad_holds=True, arm_targets=True)
    rules.update(reads_cameras=False, substeps=True)
    model = _model(clips, head={**rules, "rests": True})
    head, cfg = model.state_head, model.config
    fk = head.fk
    start = torch.tensor(HOME)
    point, rot = fk(start[None])
    cube = torch.cat([point[0, 1], _quaternion(rot[0, 1].double().numpy())])
    stop = float(head.stop_at(rot, quat_matrix(cube[3:7])[None])[0, 1])
    assert 0.5 < stop < 0.7  # the 4 cm cube, square between the right's pads

    def ends(opening, command, after, where=cube):
        state = start.clone()
        state[13] = opening
        latent = _carried_latent(model, state, where)[None, None]
        chunk = state.repeat(1, cfg.frame_stride, 1)
        chunk[0, :, 13] = command
        nets = torch.tensor([[[0.6, after]]])  # (B,M,G) what the grasp nets said
        opened = torch.tensor([[[0.6, opening]]])
        return float(head._rest_on(latent, model.norm_chunks(chunk), opened, nets)[0, 0, 1])

    slack = head.REST_SLACK
    assert ends(stop + 0.05, 0.0, stop + 0.1) == pytest.approx(stop + slack, abs=1e-5)
    assert ends(stop - 0.07, 0.0, stop + 0.1) == pytest.approx(stop + slack, abs=1e-5)
    assert ends(stop + 0.05, 0.0, stop - 0.05) == pytest.approx(stop - 0.05, abs=1e-5)  # narrower: kept
    assert ends(stop + 0.05, stop - 0.02, stop + 0.1) == pytest.approx(stop + 0.1, abs=1e-5)  # no squeeze
    assert ends(stop + 0.3, 0.0, stop + 0.35) == pytest.approx(stop + 0.35, abs=1e-5)  # open round it
    away = cube.clone()
    away[:3] += rot[0, 1, :, 0] * 0.06  # 6 cm along the approach: past the pads
    assert ends(stop + 0.05, 0.0, stop + 0.1, away) == pytest.approx(stop + 0.1, abs=1e-5)

    # between frames: a right resting 0.07 inside, commanded shut, the cube carried by it
    head.grip_servo.copy_(torch.tensor([0.5, 0.05, 0.01]))
    held = start.clone()
    held[13] = stop - 0.07
    targets = held.repeat(1, 5, 1)
    targets[0, :, 13] = 0.0
    seen = {}
    for rests in (True, False):
        head.cfg.head.rests = rests
        head._carrier, head._loose, head._frame_fk, head._path = torch.tensor([1]), None, None, None
        state, openings = held[None], []
        for k in range(1, 6):
            state, _ = head.between(held[None], cube[None], state, targets[:, :k])
            openings.append(float(state[0, 13]))
        seen[rests] = openings
    np.testing.assert_allclose(seen[True], [stop - 0.07] * 5, atol=1e-5)
    np.testing.assert_allclose(seen[False], [stop - 0.07 - 0.05 * k for k in range(1, 6)], atol=1e-5)


def test_success_touch_is_a_left_finger_touching_the_cube_clear_of_the_table(clips):
    """`head.success_touch`: imagined success is gym-aloha's own test on the imagined state, the cube clear
    of the table and touched by a finger of the named gripper: squeezed between the left's fingers in mid-air
    it is a success whatever the grasp nets say (+SURE logit); the same fingers wide open round it, the cube
    6 cm past the finger tips, the right's fingers on it instead, or the cube down at the table, are not."""
    from r2s2r.model.state_head import quat_matrix

    with pytest.raises(ValueError, match="head.success_touch >= 0 needs head.contact=True"):
        WorldModelConfig.tiny(head=dict(success_touch=0))
    with pytest.raises(ValueError, match="must be -1"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, success_touch=-2))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, arm_targets=True, reads_cameras=False)
    model = _model(clips, head={**rules, "success_touch": 0})
    head = model.state_head
    fk = head.fk
    start = torch.tensor(HOME)
    point, rot = fk(start[None])
    cube = torch.cat([point[0, 0], _quaternion(rot[0, 0].double().numpy())])
    stop = float(head.stop_at(rot, quat_matrix(cube[3:7])[None])[0, 0])
    floor = float(fk.table_top + fk.object_rest)
    assert float(cube[2]) > floor + 0.05  # the left's grasp point is in mid-air

    def verdict(left, right, where):
        state = start.clone()
        state[6], state[13] = left, right
        latent = _carried_latent(model, state, where)[None]
        logit = float(head.decode(latent, imagined=True)["success_logit"][0])
        assert logit == pytest.approx(head.SURE) or logit == pytest.approx(-head.SURE)
        return logit > 0

    assert verdict(stop - 0.02, 1.0, cube)  # squeezed by the left
    assert not verdict(1.0, 1.0, cube)  # open round it: no finger touches
    past = cube.clone()
    past[:3] += rot[0, 0, :, 0] * 0.06  # 6 cm beyond the grasp point along the approach
    assert not verdict(stop - 0.02, 1.0, past)
    low = cube.clone()
    low[2] = floor  # resting on the table
    assert not verdict(stop - 0.02, 1.0, low)
    model_right = _model(clips, head={**rules, "success_touch": 1})
    assert not model_right.state_head.touch_success(
        _carried_latent(model, start, cube)
    )  # the right's fingers are nowhere near the left's grasp point


def test_touch_outline_sees_a_cube_beside_the_tapered_fingertips_untouched(clips):
    """`head.touch_outline`: the cube in mid-air, square to the left gripper, 3.3 cm ahead of its grasp
    point and 3.4 cm across its fingers' width, the fingers squeezed: it lies within the box bounding each
    finger (+-3.05 cm wide) but beside the tapered tips (at most 1.25 cm wide each side where the cube
    reaches), so the boxes count a touch and the outline does not (the reference world: the left fingers
    close on nothing); between the fingertips both count it. Without success_touch it is refused."""
    with pytest.raises(ValueError, match="head.touch_outline=True needs head.success_touch"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, touch_outline=True))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, arm_targets=True, reads_cameras=False)
    start = torch.tensor(HOME)
    start[6] = 0.3  # the left's fingers closed past the cube's width (0.61)
    verdicts = {}
    for outline in (False, True):
        model = _model(clips, head={**rules, "success_touch": 0, "touch_outline": outline})
        point, rot = model.state_head.fk(start[None])
        square = _quaternion(rot[0, 0].double().numpy())
        for across in (0.034, 0.0):
            where = point[0, 0] + rot[0, 0, :, 0] * 0.033 + rot[0, 0, :, 2] * across
            cube = torch.cat([where, square])
            verdicts[outline, across] = bool(
                model.state_head.touch_success(_carried_latent(model, start, cube))
            )
    assert verdicts == {(False, 0.034): True, (False, 0.0): True, (True, 0.034): False, (True, 0.0): True}


def test_touch_finger_counts_only_the_finger_the_reference_world_names(clips):
    """`head.touch_finger`: gym-aloha's transfer-cube success names one finger geom of the left gripper
    (10_left_gripper_finger, the first in the MJCF's order). A cube in mid-air against the left gripper's
    other finger only, the gripper wide open, is a success for any finger and not for finger 0; against
    finger 0 only, it is one either way. Bad values are refused."""
    with pytest.raises(ValueError, match="head.touch_finger=0"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, touch_finger=0))
    with pytest.raises(ValueError, match="head.touch_finger=-2"):
        WorldModelConfig.tiny(head=dict(still_mode=True, contact=True, success_touch=0, touch_finger=-2))
    rules = dict(still_mode=True, contact=True, pads=True, holds=True, arm_targets=True, reads_cameras=False)
    start = torch.tensor(HOME)
    start[6] = 1.0  # the left wide open: its fingers' inner faces 3.5 cm either side of the grasp point
    verdicts = {}
    for finger in (-1, 0):
        model = _model(clips, head={**rules, "success_touch": 0, "touch_finger": finger})
        head = model.state_head
        assert head.fk.finger_names[0][0] == ("vx300s_left/10_left_gripper_finger",)
        point, rot = head.fk(start[None])
        for side in (-1.0, 1.0):  # toward finger 1 (it opens along -y), toward finger 0 (+y)
            where = point[0, 0] + rot[0, 0, :, 1] * side * 0.045  # 4.5 cm along the closing axis
            cube = torch.cat([where, _quaternion(rot[0, 0].double().numpy())])
            verdicts[finger, side] = bool(head.touch_success(_carried_latent(model, start, cube)))
    assert verdicts == {(-1, -1.0): True, (-1, 1.0): True, (0, -1.0): False, (0, 1.0): True}
