"""Frames drawn from the head's state (`frames=head`): the cube where the state says, at the logs' size."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from families.common import CUBE_HALF
from families.vision import PinholeCamera, detect_red
from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate
from r2s2r.eval.imagined import ImaginedEvalConfig, evaluate_imagined, read_results
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.policies.policy import PolicyConfig
from r2s2r.robots.spec import robot_spec
from r2s2r.rollout.head_frames import (
    APPEARANCE_FILE,
    MIN_PIXELS,
    HeadFrames,
    SceneGeometry,
    fit_appearance,
    interior,
)
from r2s2r.rollout.world_model_env import WorldModelEnv
from r2s2r.scripts import fit_frames

CAMERAS = ("top", "left_wrist")  # the tiny preset's views


def _episodes(root: str, cameras=CAMERAS, stride: int = 5):
    clip = ClipConfig(root=root, cameras=list(cameras), context_frames=1, future_frames=1)
    match_frame_rate(clip, stride)
    ds = ClipDataset(clip)
    out = []
    for ep in ds.episodes:
        e = ds.episode(ep)
        images = torch.stack([e[k] for k in ds.camera_keys], 1).numpy()
        out.append((images, e["observation.state"].numpy(), e["observation.environment_state"].numpy()))
    return out


@pytest.fixture(scope="module")
def logged(recorded):
    """The fixture's two 50-step episodes (48x64, three views), a frame every 5 control steps."""
    return _episodes(recorded[0].root, ("top", "left_wrist", "right_wrist"))


@pytest.fixture(scope="module")
def fitted(logged):
    geometry = SceneGeometry(robot_spec("aloha"), ("top", "left_wrist", "right_wrist"), 48, 64)
    return fit_appearance(geometry, logged, progress=False)


def test_drawn_frames_look_like_the_logged_frames_of_the_same_state(logged, fitted):
    frames, figures = fitted
    assert figures["frames"] == sum(len(e[0]) for e in logged) == 20
    mean = np.concatenate([e[0] for e in logged]).mean(0)  # each view's average logged frame
    for images, states, poses in logged:
        drawn = frames(torch.from_numpy(states), torch.from_numpy(poses)).numpy()
        assert drawn.shape == images.shape and drawn.min() >= 0 and drawn.max() <= 1
        # the same frames drawn from the episode's states in reverse order: another moment's arms
        other = frames(torch.from_numpy(states[::-1].copy()), torch.from_numpy(poses[::-1].copy())).numpy()
        right = ((drawn - images) ** 2).mean((1, 2, 3, 4))
        wrong = ((other - images) ** 2).mean((1, 2, 3, 4))
        assert (right < wrong).all()  # every frame shows its own moment best
        assert right.mean() < ((mean - images) ** 2).mean()  # and beats the average logged frame


def test_the_fit_recovers_an_appearance_it_drew(logged, fitted):
    """Frames drawn with a known appearance, fitted again without the ridge: every part that showed at least
    MIN_PIXELS interior pixels in a view is drawn there in the known colours, and the plate comes back
    wherever the static scene was seen."""
    geometry = fitted[0].geometry
    rng = np.random.default_rng(0)
    coef = np.zeros_like(fitted[0].coef)
    coef[..., 0, :] = rng.uniform(0.3, 0.7, coef[..., 0, :].shape)
    coef[..., 1:, :] = rng.uniform(-0.15, 0.15, coef[..., 1:, :].shape)  # colours stay inside [0,1]
    truth = HeadFrames(geometry, coef, rng.uniform(0, 1, fitted[0].plate.shape), fitted[0].plate_seen)
    drawn = [(truth(torch.from_numpy(s), torch.from_numpy(p)).numpy(), s, p) for _, s, p in logged]
    again, _ = fit_appearance(geometry, drawn, ridge=0.0, progress=False)
    np.testing.assert_allclose(again.plate[again.plate_seen], truth.plate[again.plate_seen], atol=1e-6)
    rendered = [geometry.render(q) for _, s, p in logged for q in geometry.qpos(s, p)]
    counts = np.zeros(coef.shape[:2])  # interior pixels per (view, part), as the fit counts them
    for ids, _ in rendered:
        inside = interior(ids)
        for v in range(len(ids)):
            counts[v] += np.bincount(ids[v][inside[v]], minlength=counts.shape[1])
    assert (counts >= MIN_PIXELS).sum() >= 10 and (counts[(counts > 0)] < MIN_PIXELS).any()
    checked = 0
    for ids, normals in rendered:
        keep = interior(ids) & (counts[np.arange(len(ids))[:, None, None], ids] >= MIN_PIXELS)
        error = np.abs(again.draw(ids, normals) - truth.draw(ids, normals))[keep]
        assert error.max() < 1e-5
        checked += keep.sum()
    assert checked > 10_000


@pytest.fixture(scope="module")
def top_logs(tmp_path_factory):
    """One 60-step episode of the top view at the logs' usual 96x128, where the cube is a few pixels."""
    from conftest import tiny_record_config
    from r2s2r.data.recorder import record

    cfg = tiny_record_config(
        tmp_path_factory.mktemp("top") / "logs", num_episodes=1, num_envs=1, episode_length=60
    )
    cfg.world.cameras, cfg.world.image_height, cfg.world.image_width = ("top",), 96, 128
    record(cfg)
    return _episodes(cfg.root, ("top",), stride=10)


def test_imagined_frames_put_the_cube_where_the_head_says(top_logs):
    """The camera family's detector on frames drawn at known cube poses, back-projected through the top
    camera: within 1 cm of each pose, on and off the logged table area, turned or not."""
    geometry = SceneGeometry(robot_spec("aloha"), ("top",), 96, 128)
    frames, _ = fit_appearance(geometry, top_logs, progress=False)
    camera = PinholeCamera("top", 96, 128)
    state = torch.from_numpy(top_logs[0][1][:1]).repeat(5, 1)  # the arms at their start
    yaw = np.deg2rad(30)
    poses = torch.tensor(
        [
            [0.0, 0.5, CUBE_HALF, 1, 0, 0, 0],
            [0.1, 0.45, CUBE_HALF, 1, 0, 0, 0],
            [-0.08, 0.62, CUBE_HALF, 1, 0, 0, 0],
            [0.15, 0.6, CUBE_HALF, np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)],
            [0.05, 0.4, 0.15, 1, 0, 0, 0],  # lifted 15 cm
        ],
        dtype=torch.float64,
    )
    images = frames(state, poses).numpy()[:, 0]
    for image, pose in zip(images, poses.numpy(), strict=True):
        found = detect_red(image)
        assert found is not None
        seen = camera.to_plane(found[0], found[1], pose[2])
        assert np.linalg.norm(seen[:2] - pose[:2]) < 0.01, (pose, seen)
    # and the cube moves in the image when the pose does: no cube drawn at a fixed place
    assert not np.allclose(images[0], images[1])


@pytest.fixture(scope="module")
def tiny_dir(recorded, tmp_path_factory):
    """An untrained tiny world model (top + left wrist, object poses) saved with an appearance fitted on
    the fixture's logs by r2s2r-fit-frames."""
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(env_state_dim=7))
    directory = tmp_path_factory.mktemp("tiny") / "model"
    model.save_pretrained(directory)
    assert fit_frames.main([f"--checkpoint={directory}", f"--data=[{recorded[0].root}]"]) == 0
    return directory


def test_fit_frames_writes_the_appearance_beside_the_model(tiny_dir, capsys):
    assert (tiny_dir / APPEARANCE_FILE).is_file()
    figures = json.loads((tiny_dir / "appearance.json").read_text())
    assert figures["frames"] > 0 and 0 < figures["mae"] < 0.1
    assert fit_frames.main([f"--checkpoint={tiny_dir}"]) == 2
    assert "data is empty" in capsys.readouterr().err


def test_the_env_shows_the_heads_state_at_the_logs_size(tiny_dir, logged):
    model = WorldModel.from_pretrained(tiny_dir)
    frames = HeadFrames.from_pretrained(tiny_dir, robot_spec("aloha"))
    images, states, poses = logged[0]
    start = {
        "observation.images.top": torch.from_numpy(images[:1, 0]).float(),
        "observation.images.left_wrist": torch.from_numpy(images[:1, 1]).float(),
        "observation.state": torch.from_numpy(states[:1]).float(),
        "observation.environment_state": torch.from_numpy(poses[:1]).float(),
    }
    env = WorldModelEnv(model, 1, head_frames=frames)
    obs = env.reset(start)
    assert torch.equal(obs["observation.images.top"], start["observation.images.top"])  # the logged frame
    for _ in range(model.config.frame_stride):
        obs, reward, _, info = env.step(start["observation.state"])
    assert info["imagined"] and obs["observation.images.top"].shape == (1, 3, 48, 64)
    drawn = frames(env.state, env.env_state)
    assert torch.equal(obs["observation.images.top"], drawn[:, 0])
    assert torch.equal(obs["observation.images.left_wrist"], drawn[:, 1])
    assert torch.equal(info["success"], info["head_success"]) and "judge_success" in info
    spread = model.state_head.disagreement(model.state_head.decode(env.latent))
    disagree = (info["judge_success"] != info["head_success"]).float()
    torch.testing.assert_close(info["uncertainty"], spread + disagree)

    with pytest.raises(ValueError, match="render=True"):
        WorldModelEnv(model, 1, render=False, head_frames=frames)
    small = {k: v[..., ::2, ::2] if k.startswith("observation.images") else v for k, v in start.items()}
    with pytest.raises(ValueError, match="r2s2r-fit-frames"):
        WorldModelEnv(model, 1, head_frames=frames).reset(small)


def test_eval_with_head_frames_keeps_both_verdicts(tiny_dir, recorded, tmp_path):
    out = tmp_path / "episodes.jsonl"
    cfg = ImaginedEvalConfig(
        checkpoint=str(tiny_dir), policy=PolicyConfig(path="r2s2r.robots.demonstrators:make_demonstrator"),
        starts=(recorded[0].root,), max_steps=20, frames="head", output=str(out),
    )  # fmt: skip
    evaluate_imagined(cfg)
    rows = read_results(out)
    assert len(rows) == 2
    assert all(r["success"] == r["head_success"] and "judge_success" in r for r in rows)
    header = json.loads(out.read_text().splitlines()[0])["header"]
    assert header["frames"] == "head"  # resuming with video frames would be refused
    assert header["appearance"] == cfg.fingerprint()["appearance"]  # and so would another appearance
    from r2s2r.eval.rank import _head_rates

    judged = _head_rates(rows, "judge_success")  # what r2s2r-rank reports as imagined_judge
    assert judged["all"]["successes"] == sum(r["judge_success"] for r in rows)
    assert judged["all"]["trials"] == 2
    with pytest.raises(ValueError, match="frames"):
        ImaginedEvalConfig(frames="sketch")
    with pytest.raises(ValueError, match="render=true"):
        ImaginedEvalConfig(frames="head", render=False)


def test_missing_or_damaged_appearance_is_one_clear_error(tiny_dir, tmp_path):
    from r2s2r.errors import DamagedFileError

    with pytest.raises(FileNotFoundError, match="r2s2r-fit-frames"):
        HeadFrames.from_pretrained(tmp_path, robot_spec("aloha"))
    (tmp_path / APPEARANCE_FILE).write_bytes((tiny_dir / APPEARANCE_FILE).read_bytes()[:100])
    with pytest.raises(DamagedFileError, match="r2s2r-fit-frames"):
        HeadFrames.from_pretrained(tmp_path, robot_spec("aloha"))


def test_object_poses_are_read_from_the_top_camera(top_logs):
    """Logs without object poses: `locate` finds the cube in the first frame's fixed camera, within 1 cm of
    where the logs put it once it rests on the table, and within 5 mm on frames drawn at known poses."""
    geometry = SceneGeometry(robot_spec("aloha"), ("top",), 96, 128)
    frames, _ = fit_appearance(geometry, top_logs, progress=False)
    images, states, poses = top_logs[0]
    resting = poses[:, 2] < CUBE_HALF + 0.005
    assert resting.sum() >= 3
    found = frames.locate(torch.from_numpy(images[resting]), torch.from_numpy(states[resting])).numpy()
    assert found.shape == (resting.sum(), 7)
    assert (np.linalg.norm(found[:, :2] - poses[resting, :2], axis=1) < 0.01).all()
    np.testing.assert_allclose(found[:, 2], CUBE_HALF)  # on the table, its orientation not read
    known = torch.tensor([[0.12, 0.45, CUBE_HALF, 1, 0, 0, 0], [-0.06, 0.58, CUBE_HALF, 1, 0, 0, 0]])
    arms = torch.from_numpy(states[:2])
    drawn = frames(arms, known)
    located = frames.locate(drawn, arms)
    assert (torch.linalg.norm(located[:, :2] - known[:, :2], dim=1) < 0.005).all()
    with pytest.raises(ValueError, match="observation.environment_state"):  # an empty table shows no cube
        frames.locate(frames(arms, torch.tensor([[0, 0, -10.0, 1, 0, 0, 0]] * 2)), arms)


def test_a_head_without_cameras_starts_from_poses_read_by_the_frames():
    from r2s2r.errors import ModelMismatchError
    from r2s2r.eval.imagined import check_start

    config = WorldModelConfig.tiny(env_state_dim=7)
    config.head.reads_cameras = False
    with pytest.raises(ModelMismatchError, match="--frames=head"):
        check_start(config, "blind", object_poses=False)
    check_start(config, "blind", object_poses=False, frames="head")  # the poses come from the cameras


def test_loading_the_frames_again_reuses_one_geometry(tiny_dir):
    """A Ray worker loads the frames once per policy: one GL context per scene and size, not one per load."""
    first = HeadFrames.from_pretrained(tiny_dir, robot_spec("aloha"))
    again = HeadFrames.from_pretrained(tiny_dir, robot_spec("aloha"))
    assert again.geometry is first.geometry and again is not first
