"""WorldModelEnv: batched imagined episodes with LeRobot keys, deterministic for a seed."""

from __future__ import annotations

import pytest
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.robots.checker import VIOLATIONS
from r2s2r.rollout.world_model_env import WorldModelEnv


@pytest.fixture(scope="module")
def start(recorded):
    """First observations of the two recorded episodes, as a policy would get them (B,3,H,W) in [0,1]."""
    ds = LeRobotDataset("local/test", root=recorded[0].root)
    items = [ds[0], ds[50]]
    keys = ["observation.images.top", "observation.images.left_wrist", "observation.state"]
    return {k: torch.stack([it[k] for it in items]) for k in keys}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(env_state_dim=0))
    for p in model.denoiser.patch_out.parameters():  # an untrained DiT predicts exactly zero: give it a voice
        torch.nn.init.normal_(p, std=0.05)
    return model


def _rollout(model, start, seed, chunks=3):
    env = WorldModelEnv(model, num_envs=2, seed=seed)
    frames = [env.reset(start)["observation.images.top"]]
    flags = []
    for t in range(chunks * 5):
        obs, reward, done, info = env.step(start["observation.state"] + 0.01 * t)
        flags.append(info["imagined"])
        frames.append(obs["observation.images.top"])
    return torch.stack(frames), flags, obs, info


def test_shapes_ranges_and_frame_rate(model, start):
    frames, flags, obs, info = _rollout(model, start, seed=0)
    assert frames.shape == (16, 2, 3, 48, 64)  # the logs' resolution, not the model's 32x32
    assert obs["observation.state"].shape == (2, 14) and "observation.environment_state" not in obs
    assert frames.min() >= 0 and frames.max() <= 1
    assert flags == [False, False, False, False, True] * 3  # 10 Hz frames over 50 Hz control
    # between imagined frames the observation holds still
    assert torch.equal(frames[1], frames[0]) and torch.equal(frames[4], frames[0])
    assert not torch.equal(frames[5], frames[4])
    assert info["uncertainty"].shape == (2,) and (info["uncertainty"] > 0).all()
    assert info["success"].dtype == torch.bool and info["head_reward"].shape == (2,)


def test_same_seed_same_rollout(model, start):
    a, _, obs_a, _ = _rollout(model, start, seed=1)
    b, _, obs_b, _ = _rollout(model, start, seed=1)
    c, _, _, _ = _rollout(model, start, seed=2)
    assert torch.equal(a, b) and torch.equal(obs_a["observation.state"], obs_b["observation.state"])
    assert not torch.equal(a[-1], c[-1])


def test_chunk_equals_single_steps(model, start):
    chunk = start["observation.state"][:, None] + 0.02 * torch.arange(5.0)[None, :, None]  # (B,5,14)
    one = WorldModelEnv(model, num_envs=2, seed=4)
    one.reset(start)
    for t in range(5):
        obs_single, *_ = one.step(chunk[:, t])
    two = WorldModelEnv(model, num_envs=2, seed=4)
    two.reset(start)
    obs_chunk, _, _, info = two.step(chunk)
    assert info["imagined"]
    for key in obs_single:
        assert torch.equal(obs_single[key], obs_chunk[key]), key


def test_bad_input(model, start):
    env = WorldModelEnv(model, num_envs=2)
    with pytest.raises(ValueError, match=r"observation.state has shape \(3, 14\), expected \(2, 14\)"):
        env.reset({**start, "observation.state": torch.zeros(3, 14)})
    with pytest.raises(KeyError, match="lacks \\['observation.images.left_wrist'\\]"):
        env.reset({k: v for k, v in start.items() if k != "observation.images.left_wrist"})
    env.reset(start)
    with pytest.raises(ValueError, match=r"actions have shape \(2, 7\)"):
        env.step(torch.zeros(2, 7))
    with pytest.raises(ValueError, match="NaN"):
        env.step(torch.full((2, 14), float("nan")))


def test_physics_flags_on_imagined_frames(model, start):
    """A commanded waist beyond +-pi is flagged on the frame it conditions, counted once per frame."""
    env = WorldModelEnv(model, num_envs=2, seed=0)
    env.reset(start)
    col = VIOLATIONS.index("joint_position")
    chunk = start["observation.state"][:, None].repeat(1, 5, 1)  # (B,5,14) hold still ...
    chunk[0, 2, 0] = 3.5  # ... except env 0's left waist target at one control step
    _, _, _, info = env.step(chunk)
    assert info["violations"].shape == (2, len(VIOLATIONS)) and info["violations"].dtype == torch.bool
    assert bool(info["violations"][0, col])
    counts = env.violation_counts
    assert counts[0, col] == 1 and counts[1, col] == int(info["violations"][1, col])
    off = WorldModelEnv(model, num_envs=2, seed=0, check_physics=False)
    off.reset(start)
    assert not off.step(chunk)[3]["violations"].any()


def test_the_imagined_frame_draws_the_cube_where_the_head_puts_it(recorded, start):
    """A model that sketches objects samples each frame with the cube's box at the last frame's pose (here the
    observed one) and at the pose the state head predicts for the new frame; another pose gives another
    frame. Re-sampling by hand with the same noise and those poses reproduces the env's frame exactly."""
    from r2s2r.rollout.sampler import FrameSampler

    ds = LeRobotDataset("local/test", root=recorded[0].root)
    poses_now = torch.stack([ds[i]["observation.environment_state"] for i in (0, 50)])  # as `start`'s
    first = {**start, "observation.environment_state": poses_now}
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(sampling_steps=1, object_sketch=True))
    assert model.config.sketched_objects == 1
    with torch.no_grad():
        model.denoiser.patch_out.weight.normal_(0, 0.05)
        model.denoiser.sketch_in["aloha"].weight.normal_(0, 0.2)
    env = WorldModelEnv(model, num_envs=2, seed=5)
    env.reset(first)
    torch.testing.assert_close(env.pose, poses_now)
    context, states, chunks = env.context.clone(), env.context_states.clone(), env.chunks.clone()
    noise = env.generator.get_state()  # where the env's noise for the next frame starts
    generator = torch.Generator()
    generator.set_state(noise)
    chunk = start["observation.state"][:, None].repeat(1, 5, 1)
    env.step(chunk)
    head_pose = env.env_state
    assert torch.equal(env.pose, head_pose)
    chunks = torch.cat([chunks[:, 1:], model.norm_chunks(chunk)[:, None]], dim=1)
    sampler = FrameSampler(model)
    poses = torch.stack([poses_now, head_pose], dim=1)
    again = sampler.sample(context, chunks, states, generator=generator, poses=poses)
    torch.testing.assert_close(again, env.context[:, -1], rtol=0, atol=1e-6)
    elsewhere = poses.clone()
    elsewhere[..., 1] += 0.1
    generator.set_state(noise)
    other = sampler.sample(context, chunks, states, generator=generator, poses=elsewhere)
    assert (other - again).abs().max() > 1e-3
