"""The clip reader cuts LeRobot datasets into multi-view training samples, and refuses bad data clearly."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from conftest import EPISODE_LENGTH, tiny_record_config
from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate
from r2s2r.data.recorder import record


def _table(root):
    return LeRobotDataset("local/test", root=root).hf_dataset.with_format("numpy")[:]


def test_clip_layout_and_values(recorded):
    cfg, _ = recorded
    ds = ClipDataset(ClipConfig(root=cfg.root, context_frames=2, future_frames=1, frame_rate=10))
    assert ds.stride == 5
    assert len(ds) == 2 * (EPISODE_LENGTH - 2 * 5)  # every start whose last frame is inside the episode
    assert ds.locate(0) == (0, 0) and ds.locate(EPISODE_LENGTH - 10) == (1, 0)
    idx = EPISODE_LENGTH - 10 + 7  # episode 1, clip starting at frame 7: frames 7, 12, 17
    sample = ds[idx]
    for cam in ("top", "left_wrist", "right_wrist"):
        assert sample[f"observation.images.{cam}"].shape == (3, 3, 48, 64)
        assert sample[f"observation.images.{cam}"].dtype == torch.float32
    assert sample["action"].shape == (2, 5, 14) and sample["observation.state"].shape == (3, 14)
    assert sample["frame_index"].tolist() == [7, 12, 17] and sample["episode_index"].item() == 1

    table = _table(cfg.root)
    rows = EPISODE_LENGTH + np.array([7, 12, 17])
    np.testing.assert_array_equal(sample["observation.state"].numpy(), table["observation.state"][rows])
    np.testing.assert_array_equal(
        sample["observation.environment_state"].numpy(), table["observation.environment_state"][rows]
    )
    # chunk t holds the 5 actions taken between frame t and frame t+1
    np.testing.assert_array_equal(
        sample["action"][1].numpy(), table["action"][EPISODE_LENGTH + 12 : EPISODE_LENGTH + 17]
    )
    # labels of transition t are those of the state reached at frame t+1 (LeRobot's next.* at row t+1 - 1)
    np.testing.assert_array_equal(
        sample["next.reward"].numpy(), table["next.reward"].reshape(-1)[rows[1:] - 1]
    )

    # pixels: the same frames LeRobot's own decoder returns
    lerobot = LeRobotDataset("local/test", root=cfg.root)
    for j, row in enumerate(rows):
        reference = lerobot[int(row)]["observation.images.left_wrist"]
        assert (sample["observation.images.left_wrist"][j] - reference).abs().max() <= 1 / 255 + 1e-6


def test_longer_clips_and_episode_subset(recorded):
    cfg, _ = recorded
    ds = ClipDataset(
        ClipConfig(root=cfg.root, context_frames=3, future_frames=2, frame_rate=25, episodes=(1,))
    )
    assert ds.episodes == [1] and ds.stride == 2 and len(ds) == EPISODE_LENGTH - 4 * 2
    sample = ds[0]
    assert sample["action"].shape == (4, 2, 14) and sample["frame_index"].tolist() == [0, 2, 4, 6, 8]
    assert sample["observation.images.top"].shape == (5, 3, 48, 64)


def test_stats_match_the_data(recorded):
    cfg, _ = recorded
    ds = ClipDataset(ClipConfig(root=cfg.root, cameras=("top",)))
    table = _table(cfg.root)
    np.testing.assert_allclose(
        ds.stats["action"]["mean"].numpy(), table["action"].mean(0), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        ds.stats["observation.state"]["max"].numpy(), table["observation.state"].max(0)
    )
    assert ds.stats["observation.images.top"]["mean"].shape == (3, 1, 1)
    assert list(ds.camera_keys) == ["observation.images.top"]


@pytest.mark.parametrize("decoder", ["decord", "lerobot"])
def test_forked_dataloader_workers_decode_the_same_frames(recorded, decoder):
    """Decoders opened before the fork must not be reused in workers (lerobot#2488), for either backend."""
    cfg, _ = recorded
    ds = ClipDataset(ClipConfig(root=cfg.root, cameras=("top", "right_wrist"), decoder=decoder))
    indices = list(range(0, len(ds), 3))
    direct = [ds[i]["observation.images.right_wrist"] for i in indices]  # decoders now open in the parent
    loader = torch.utils.data.DataLoader(torch.utils.data.Subset(ds, indices), batch_size=4, num_workers=2)
    got = torch.cat([b["observation.images.right_wrist"] for b in loader])  # both workers read at once
    assert got.shape == (len(indices), 3, 3, 48, 64)
    torch.testing.assert_close(got, torch.stack(direct))


def test_frame_rate_must_divide_control_rate(recorded):
    with pytest.raises(ValueError, match=r"frame_rate=7 Hz does not divide the dataset's 50 Hz"):
        ClipDataset(ClipConfig(root=recorded[0].root, frame_rate=7))


def test_clips_longer_than_episodes_are_refused(recorded):
    with pytest.raises(ValueError, match="no episode .* is long enough"):
        ClipDataset(ClipConfig(root=recorded[0].root, context_frames=8, future_frames=4, frame_rate=10))


def test_missing_camera(recorded):
    with pytest.raises(
        ValueError, match=r"has no camera \['front_close'\] \(it has: top, left_wrist, right_wrist\)"
    ):
        ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "front_close")))


def test_missing_dataset(tmp_path):
    with pytest.raises(FileNotFoundError, match="no LeRobot dataset at"):
        ClipDataset(ClipConfig(root=str(tmp_path / "nothing")))


def test_unknown_robot(recorded):
    with pytest.raises(ValueError, match=r"Unknown robot 'ur5'. Known robots: aloha"):
        ClipDataset(ClipConfig(root=recorded[0].root, robot="ur5"))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "delete"])
def test_corrupt_or_truncated_video(recorded, tmp_path, damage):
    root = tmp_path / "copy"
    shutil.copytree(recorded[0].root, root)
    video = root / "videos/observation.images.left_wrist/chunk-000/file-000.mp4"
    data = video.read_bytes()
    if damage == "truncate":
        video.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        video.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, len(data), dtype=np.uint8)))
    else:
        video.unlink()
    expected = "is missing" if damage == "delete" else "is corrupt or truncated"
    with pytest.raises(ValueError, match=f"video file .*left_wrist.*file-000.mp4 {expected}"):
        ClipDataset(ClipConfig(root=root))
    ClipDataset(ClipConfig(root=root, cameras=("top",)))  # the other cameras still read


def test_av1_dataset_falls_back_to_lerobot_decoder(tmp_path, caplog):
    """LeRobot's default codec (AV1) is what most published datasets use; decord cannot read it."""
    cfg = tiny_record_config(tmp_path / "av1", vcodec="libsvtav1", policy_path="helpers.policies:make_reach")
    cfg.world.cameras = ("top",)
    record(cfg)
    with caplog.at_level(logging.WARNING):
        ds = ClipDataset(ClipConfig(root=cfg.root, decoder="decord"))
    assert "decord cannot read" in caplog.text and "falling back to LeRobot's decoder" in caplog.text
    reference = LeRobotDataset("local/test", root=cfg.root)[5]["observation.images.top"]
    assert (ds[5]["observation.images.top"][0] - reference).abs().max() <= 1 / 255 + 1e-6
    assert (
        ClipDataset(ClipConfig(root=cfg.root))[5]["observation.images.top"][0] - reference
    ).abs().max() <= 1e-6


def test_decoders_agree_on_h264(recorded):
    cfg, _ = recorded
    a = ClipDataset(ClipConfig(root=cfg.root, decoder="decord"))[33]
    b = ClipDataset(ClipConfig(root=cfg.root, decoder="lerobot"))[33]
    for key in ("observation.images.top", "observation.images.left_wrist", "observation.images.right_wrist"):
        assert (a[key] - b[key]).abs().max() <= 1 / 255 + 1e-6


def _tabular_dataset(root, action_dim=14, nan_at=None):
    """A LeRobot dataset with proprio and actions only, written by LeRobot's own writer."""
    features = {
        "observation.state": {"dtype": "float32", "shape": (14,), "names": None},
        "action": {"dtype": "float32", "shape": (action_dim,), "names": None},
    }
    ds = LeRobotDataset.create("local/tab", fps=50, features=features, root=root, use_videos=False)
    for ep in range(2):
        for t in range(30):
            action = np.full(action_dim, 0.1 * t, dtype=np.float32)
            if nan_at == (ep, t):
                action[2] = np.nan
            ds.add_frame({"observation.state": np.zeros(14, np.float32), "action": action, "task": "x"})
        ds.save_episode()
    ds.finalize()
    return root


def test_action_dimension_mismatch(tmp_path):
    root = _tabular_dataset(tmp_path / "seven", action_dim=7)
    with pytest.raises(ValueError, match=r"has 7-D 'action' but robot 'aloha' has 14"):
        ClipDataset(ClipConfig(root=root))


def test_nan_actions_name_the_episode_and_frame(tmp_path):
    root = _tabular_dataset(tmp_path / "nan", nan_at=(1, 12))
    with pytest.raises(ValueError, match=r"episode 1 frame 12 of .* has NaN/inf in 'action'"):
        ClipDataset(ClipConfig(root=root))


def test_whole_episode_as_one_clip(recorded):
    cfg, _ = recorded
    ds = ClipDataset(ClipConfig(root=cfg.root, cameras=("top",)))
    assert ds.episode_length(1) == EPISODE_LENGTH
    episode = ds.episode(1)
    assert episode["frame_index"].tolist() == list(range(0, EPISODE_LENGTH, 5))  # 0, 5, ..., 45
    assert episode["observation.images.top"].shape == (10, 3, 48, 64)
    assert episode["action"].shape == (9, 5, 14)
    table = _table(cfg.root)
    np.testing.assert_array_equal(episode["action"].reshape(-1, 14).numpy(), table["action"][50:95])
    np.testing.assert_array_equal(episode["observation.state"][-1].numpy(), table["observation.state"][95])
    with pytest.raises(ValueError, match="episode 7 is not among"):
        ds.episode(7)


def test_frame_rate_left_at_zero_is_the_models_or_10_hz(recorded):
    direct = ClipDataset(ClipConfig(root=recorded[0].root))
    assert (direct.stride, direct.cfg.clip_length) == (5, 3)  # read directly: 10 Hz, 2 context + 1 future
    cfg = ClipConfig(root=recorded[0].root)
    match_frame_rate(cfg, frame_stride=5)
    assert cfg.frame_rate == 10  # 50 Hz / 5
    with pytest.raises(ValueError, match="frame_stride=7 control steps does not divide the dataset's 50 Hz"):
        match_frame_rate(ClipConfig(root=recorded[0].root, frame_rate=0), frame_stride=7)
