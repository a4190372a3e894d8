"""Recording PushT as ALOHA is recorded: `r2s2r-record --world.task=pusht` with the scripted pusher writes a
LeRobot v3 dataset at gym-pusht's 10 Hz that the clip reader reads with robot=pusht, whose episodes start at
the poses PushT's own sampler draws, that resumes with only the missing episodes, and that refuses a camera
PushT lacks in one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from helpers.failures import one_error
from r2s2r.data.commit import COMMIT_FILE
from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.data.recorder import RecordConfig
from r2s2r.robots import pusht
from r2s2r.robots.aloha import AlohaWorld, WorldConfig
from r2s2r.robots.pusht import PushTWorld
from r2s2r.robots.spec import pusht_spec, robot_spec
from r2s2r.robots.worlds import make_world, world_spec
from r2s2r.scripts import record

SEED, LENGTH = 5, 40
FLAGS = [
    "--world.task=pusht", "--policy.path=r2s2r.robots.pusht:make_pusher", f"--episode_length={LENGTH}",
    "--world.image_height=48", "--world.image_width=64", "--world.num_envs=2", "--distribution=mixed",
    f"--seed={SEED}",
]  # fmt: skip


@pytest.fixture(scope="module")
def pusht_root(tmp_path_factory):
    """Two pusher episodes (one ID, one OOD) recorded by the command line; tests must not modify them."""
    root = tmp_path_factory.mktemp("pusht") / "ds"
    assert record.main([f"--root={root}", "--num_episodes=2", *FLAGS]) == 0
    return root


def _table(root) -> dict[str, np.ndarray]:
    return LeRobotDataset("local/test", root=root).hf_dataset.with_format("numpy")[:]


def _sampled_pose(episode: int) -> np.ndarray:
    """Episode `episode`'s initial block pose, drawn here as the episode set defines it: ID and OOD alternate,
    from SeedSequence([seed, episode]), in PushT's 40-unit ring; angle wrapped as the world reports it."""
    rng = np.random.default_rng(np.random.SeedSequence([SEED, episode]))
    x, y, angle = pusht.sample_object_poses("id" if episode % 2 == 0 else "ood", rng, 1, 40.0)[0]
    return np.array([x, y, angle % (2 * np.pi)])


def test_pusht_settings_read_alohas_defaults_as_its_own():
    cfg = RecordConfig(world=WorldConfig(task="pusht"))
    assert cfg.world.cameras == ("top",) and cfg.world.ood_margin == 40.0 and cfg.episode_length == 300
    assert cfg.world.object_pose_dim == 3
    given = RecordConfig(world=WorldConfig(task="pusht", cameras=(), ood_margin=20.0), episode_length=40)
    assert given.world.cameras == () and given.world.ood_margin == 20.0 and given.episode_length == 40
    aloha = RecordConfig()
    assert aloha.world.cameras == ("top", "left_wrist", "right_wrist") and aloha.episode_length == 400
    assert robot_spec("pusht") == world_spec(cfg.world) == pusht_spec()
    with make_world(WorldConfig(task="pusht", num_envs=1)) as world:
        assert isinstance(world, PushTWorld)
    with pytest.raises(ValueError, match="not an ALOHA task"):
        AlohaWorld.spec_for(cfg.world)


def test_dataset_holds_pusht_features_at_10_hz(pusht_root):
    ds = LeRobotDataset("local/test", root=pusht_root)
    assert ds.meta.robot_type == "pusht" and ds.fps == 10
    assert ds.num_episodes == 2 and ds.num_frames == 2 * LENGTH
    assert ds.meta.video_keys == ["observation.images.top"]
    assert tuple(ds.meta.features["observation.images.top"]["shape"]) == (48, 64, 3)
    assert ds.meta.features["observation.environment_state"]["names"] == ["block_x", "block_y", "block_angle"]
    assert list(ds.meta.tasks.index) == ["Push the T-shaped block onto the T-shaped goal."]
    table = ds.hf_dataset.with_format("numpy")[:]
    assert table["observation.state"].shape == table["action"].shape == (2 * LENGTH, 2)
    assert table["observation.environment_state"].shape == (2 * LENGTH, 3)
    assert table["next.reward"].size == table["next.success"].size == 2 * LENGTH
    assert table["next.success"].dtype == bool
    reward = table["next.reward"].reshape(-1)
    assert ((reward >= 0) & (reward <= 1)).all() and reward.max() > 0  # coverage / 0.95, clipped


def test_clip_reader_reads_pusht_clips(pusht_root):
    clips = ClipDataset(ClipConfig(root=str(pusht_root), robot="pusht"))
    assert clips.stride == 1 and len(clips) == 2 * (LENGTH - 2)  # 3-frame clips at 10 Hz
    clip = clips[len(clips) - 1]
    frames = clip["observation.images.top"]
    assert frames.shape == (3, 3, 48, 64) and frames.min() >= 0 and frames.max() <= 1
    assert frames.std() > 0.05  # a drawn scene, not a blank frame
    assert clip["action"].shape == (2, 1, 2) and clip["observation.environment_state"].shape == (3, 3)
    with pytest.raises(ValueError, match="2-D 'action' but robot 'aloha' has 14"):
        ClipDataset(ClipConfig(root=str(pusht_root), robot="aloha"))


def test_episodes_start_at_pushts_sampled_poses(pusht_root):
    table = _table(pusht_root)
    first = table["observation.environment_state"][table["frame_index"] == 0]  # (2,3), episodes 0 and 1
    expected = np.stack([_sampled_pose(0), _sampled_pose(1)])
    np.testing.assert_allclose(first, expected, atol=1e-3)
    assert pusht.in_id_box(expected[0]) and not pusht.in_id_box(expected[1])
    committed = json.loads((pusht_root / COMMIT_FILE).read_text())
    assert [e["distribution"] for e in committed["episodes"]] == ["id", "ood"]
    assert committed["config"]["cameras"] == ["top"] and committed["config"]["ood_margin"] == 40.0


def test_resume_adds_only_missing_episodes_with_workers(pusht_root, tmp_path, capfd):
    root = tmp_path / "ds"
    shutil.copytree(pusht_root, root)
    before = _table(root)
    assert record.main([f"--root={root}", "--num_episodes=3", "--workers=1", *FLAGS]) == 0
    out, err = capfd.readouterr()
    assert f"{root}: 3 episodes (1 new" in out and "3/3" in err  # the summary and the progress bar
    after = _table(root)
    kept = after["episode_index"] < 2
    for key in ("observation.state", "action", "observation.environment_state"):
        np.testing.assert_array_equal(after[key][kept], before[key])
    new_first = after["observation.environment_state"][
        (after["episode_index"] == 2) & (after["frame_index"] == 0)
    ]
    np.testing.assert_allclose(new_first[0], _sampled_pose(2), atol=1e-3)
    assert record.main([f"--root={root}", "--num_episodes=3", *FLAGS]) == 0
    assert f"{root}: 3 episodes (0 new" in capfd.readouterr().out


def test_a_camera_pusht_lacks_is_refused_in_one_line(tmp_path, capfd):
    root = tmp_path / "ds"
    assert record.main([f"--root={root}", "--world.cameras=[left_wrist]", *FLAGS]) == 2
    assert one_error(capfd, "r2s2r-record") == (
        "--world.cameras=[left_wrist]: pusht has no camera left_wrist, only top; pass --world.cameras=[top] "
        "or leave the flag out."
    )
    assert not root.exists() and not root.with_name("ds.partial").exists()
