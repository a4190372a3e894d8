"""The recorder writes real LeRobot v3 datasets that hold exactly what the reference world produced."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from conftest import EPISODE_LENGTH, tiny_record_config
from r2s2r.data.commit import COMMIT_FILE
from r2s2r.data.recorder import evaluate, record, summary_text
from r2s2r.policies.episodes import initial_pose, play_batch
from r2s2r.policies.policy import load_policy
from r2s2r.robots.aloha import AlohaWorld, in_id_box


def _columns(root):
    ds = LeRobotDataset("local/test", root=root)
    table = ds.hf_dataset.with_format("numpy")[:]
    return ds, table


def test_lerobot_reloads_what_was_recorded(recorded):
    cfg, summary = recorded
    ds, table = _columns(cfg.root)
    assert ds.num_episodes == 2 and ds.num_frames == 2 * EPISODE_LENGTH
    assert ds.meta.video_keys == [f"observation.images.{c}" for c in cfg.world.cameras]
    assert ds.meta.robot_type == "aloha" and ds.fps == 50
    assert table["observation.state"].dtype == np.float32 and table["observation.state"].shape == (100, 14)
    assert table["action"].shape == (100, 14) and table["observation.environment_state"].shape == (100, 7)
    assert table["next.success"].dtype == bool
    # next.done marks exactly the last frame of each episode
    done = table["next.done"].reshape(-1)
    assert done.sum() == 2 and done[EPISODE_LENGTH - 1] and done[-1]
    item = ds[EPISODE_LENGTH + 3]  # LeRobot's own decoding path
    assert item["observation.images.top"].shape == (3, 48, 64)
    assert item["episode_index"].item() == 1 and item["frame_index"].item() == 3

    # Re-simulating the same episodes in memory gives exactly the recorded proprio and actions (the
    # recording is faithful and a fixed seed reproduces the episode), and pixels up to video compression.
    poses = np.stack([initial_pose(cfg.world, cfg.distribution, cfg.seed, i)[0] for i in range(2)])
    with AlohaWorld(cfg.world) as world:
        frames = play_batch(world, load_policy(cfg.policy), poses, EPISODE_LENGTH, "demo")["frames"]
    state = np.stack([f["observation.state"] for ep in frames for f in ep])
    action = np.stack([f["action"] for ep in frames for f in ep])
    np.testing.assert_array_equal(table["observation.state"], state)
    np.testing.assert_array_equal(table["action"], action)
    rendered = frames[1][3]["observation.images.top"].astype(np.float32) / 255.0  # (H,W,3)
    decoded = item["observation.images.top"].permute(1, 2, 0).numpy()
    assert np.abs(rendered - decoded).mean() < 0.03  # h264 at crf 30: a few grey levels on average


def test_episode_labels_and_distributions(recorded):
    cfg, summary = recorded
    sidecar = json.loads((summary.root / COMMIT_FILE).read_text())
    assert [e["distribution"] for e in sidecar["episodes"]] == ["id", "ood"]  # mixed alternates
    first = np.stack([np.array(e["initial_object_pose"]) for e in sidecar["episodes"]])
    assert in_id_box("transfer_cube", first[0, :2]) and not in_id_box("transfer_cube", first[1, :2])
    _, table = _columns(cfg.root)
    # The cube rests where the episode put it: frame 0's environment state is the sampled pose (z settles).
    np.testing.assert_allclose(table["observation.environment_state"][0, :2], first[0, :2], atol=1e-3)
    assert summary.num_episodes == 2 and summary.new_episodes == 2


def test_same_seed_same_episode_other_seed_differs(tmp_path, recorded):
    cfg, _ = recorded
    again = record(tiny_record_config(tmp_path / "again"))
    other = record(tiny_record_config(tmp_path / "other", seed=8))
    _, a = _columns(cfg.root)
    _, b = _columns(again.root)
    _, c = _columns(other.root)
    np.testing.assert_array_equal(a["action"], b["action"])
    np.testing.assert_array_equal(a["observation.environment_state"], b["observation.environment_state"])
    assert not np.array_equal(a["observation.environment_state"][0], c["observation.environment_state"][0])


def test_resume_adds_only_missing_episodes(tmp_path):
    root = tmp_path / "grow"
    first = record(tiny_record_config(root, num_episodes=2, policy_path="helpers.policies:make_reach"))
    _, before = _columns(root)
    again = record(tiny_record_config(root, num_episodes=2, policy_path="helpers.policies:make_reach"))
    assert again.new_episodes == 0  # nothing missing: nothing recorded
    grown = record(tiny_record_config(root, num_episodes=3, policy_path="helpers.policies:make_reach"))
    assert (first.new_episodes, grown.new_episodes, grown.num_episodes) == (2, 1, 3)
    ds, after = _columns(root)
    assert ds.num_episodes == 3
    assert np.array_equal(np.unique(after["index"]), np.arange(3 * EPISODE_LENGTH))  # no duplicates
    np.testing.assert_array_equal(after["action"][: 2 * EPISODE_LENGTH], before["action"])
    # Episode 2 recorded later equals episode 2 recorded in one go.
    fresh = record(
        tiny_record_config(tmp_path / "onego", num_episodes=3, policy_path="helpers.policies:make_reach")
    )
    _, onego = _columns(fresh.root)
    np.testing.assert_array_equal(onego["action"], after["action"])


def test_appending_batches_reads_no_recorded_frames(tmp_path, monkeypatch):
    """Each batch reopens the dataset to append to it; that must neither load the frames already written
    nor leave copies of its tables in the `datasets` cache, or a long recording costs time and disk
    quadratic in its length. Reading the dataset does fill the cache."""
    import datasets

    cache = tmp_path / "hf_cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    root = tmp_path / "long"
    summary = record(
        tiny_record_config(root, num_episodes=6, num_envs=2, policy_path="helpers.policies:make_reach")
    )
    assert summary.num_episodes == 6  # three batches, the second and third appended to the first
    assert not list(cache.rglob("*.arrow"))
    ds, table = _columns(root)
    assert ds.num_episodes == 6 and np.array_equal(np.unique(table["index"]), np.arange(6 * EPISODE_LENGTH))
    assert list(cache.rglob("*.arrow"))  # the check above could fail: a reader does fill the cache


def test_resume_with_tuple_policy_kwargs_continues(tmp_path):
    """Policy kwargs given as tuples are recorded as JSON lists; resuming with the same tuples is the same
    setting, not a changed one (a family's FAMILY_SETTINGS may hold tuples)."""
    root = tmp_path / "ds"
    kwargs = {"joints": (8, 9)}
    record(
        tiny_record_config(
            root, num_episodes=2, policy_path="helpers.policies:make_reach", policy_kwargs=kwargs
        )
    )
    summary = record(
        tiny_record_config(
            root, num_episodes=4, policy_path="helpers.policies:make_reach", policy_kwargs=kwargs
        )
    )
    assert summary.num_episodes == 4
    with pytest.raises(ValueError, match=r"cannot resume .*policy_kwargs: recorded \{'joints': \[8, 9\]\}"):
        record(
            tiny_record_config(
                root,
                num_episodes=6,
                policy_path="helpers.policies:make_reach",
                policy_kwargs={"joints": (8,)},
            )
        )


def test_resume_with_other_settings_is_refused(tmp_path):
    root = tmp_path / "ds"
    record(tiny_record_config(root, num_episodes=2, policy_path="helpers.policies:make_reach"))
    with pytest.raises(ValueError, match="cannot resume .*episode_length: recorded 50, now 40"):
        record(
            tiny_record_config(
                root, num_episodes=4, episode_length=40, policy_path="helpers.policies:make_reach"
            )
        )


SEED = 11  # episodes 2-3 hold a cube 0.21 m further right than episodes 0-1


@pytest.mark.parametrize("mode, message", [
    ("raise", "raised at step 5: RuntimeError: the policy's server went away"),
    ("nan", r"returned NaN/inf actions for episode\(s\) {bad}"),
    ("shape", r"returned an action of shape \(2, 7\), expected \(2, 14\)"),
])  # fmt: skip
def test_failing_policy_leaves_dataset_at_last_complete_batch(tmp_path, mode, message):
    root = tmp_path / "ds"
    cfg = tiny_record_config(root, seed=SEED)
    x = [initial_pose(cfg.world, cfg.distribution, cfg.seed, i)[0][0] for i in range(4)]
    assert max(x[2:]) > max(x[:2]), "SEED must put the right-most cube in the second batch"
    kwargs = {"mode": mode, "x_above": (max(x[:2]) + max(x[2:])) / 2}  # only the second batch misbehaves
    make = dict(policy_path="helpers.policies:make_faulty", policy_kwargs=kwargs, seed=SEED)
    assert record(tiny_record_config(root, num_episodes=2, **make)).num_episodes == 2
    _, before = _columns(root)
    bad = [i for i in (2, 3) if x[i] > kwargs["x_above"]]
    with pytest.raises(RuntimeError, match=message.replace("{bad}", re.escape(str(bad)))):
        record(tiny_record_config(root, num_episodes=4, **make))
    ds, after = _columns(root)
    assert ds.num_episodes == 2 and len(after["index"]) == 2 * EPISODE_LENGTH
    np.testing.assert_array_equal(after["action"], before["action"])
    assert not (root / "images").exists()  # no half-written frames left behind


def test_physics_fault_ends_only_its_episode_as_a_failure(tmp_path):
    """A world that goes unstable under one episode is stopped there; the batch and the dataset go on."""
    root = tmp_path / "ds"
    cfg = tiny_record_config(root, seed=SEED)
    x = [initial_pose(cfg.world, cfg.distribution, cfg.seed, i)[0][0] for i in range(4)]
    kwargs = {"mode": "unstable", "at_step": 5, "x_above": (max(x[:2]) + max(x[2:])) / 2}
    make = dict(policy_path="helpers.policies:make_faulty", policy_kwargs=kwargs, seed=SEED)
    summary = record(tiny_record_config(root, num_episodes=4, **make))
    assert summary.num_episodes == 4
    stopped = {e["episode_index"]: e.get("physics_stopped_at") for e in summary.episodes}
    bad = [i for i in range(4) if x[i] > kwargs["x_above"]]
    assert bad and stopped == {i: (5 if i in bad else None) for i in range(4)}
    assert not any(summary.episodes[i]["success"] for i in bad)
    assert summary_text(summary).endswith(
        f"; {len(bad)} stopped by a physics fault, labelled physics_stopped_at (episodes "
        f"{', '.join(map(str, bad))})"
    )
    ds, table = _columns(root)
    assert ds.num_episodes == 4 and len(table["index"]) == 4 * EPISODE_LENGTH
    for i in bad:  # held where the fault found it: the observed state stops changing after step 5
        state = table["observation.state"][table["episode_index"] == i]
        np.testing.assert_array_equal(state[7:], np.broadcast_to(state[6], state[7:].shape))
        assert np.abs(np.diff(state[:6], axis=0)).max() > 0  # it moved before


def test_killed_write_is_rolled_back_on_resume(tmp_path):
    """What a process killed while writing a batch leaves behind is removed before recording goes on."""
    root = tmp_path / "ds"
    make = dict(policy_path="helpers.policies:make_reach")
    record(tiny_record_config(root, num_episodes=2, **make))
    # Leftovers of a killed second batch: new chunk files, a PNG frame buffer, metadata that counts them.
    (root / "data/chunk-000/file-007.parquet").write_bytes(b"PAR1 half a footer")
    video = root / "videos/observation.images.top/chunk-000/file-007.mp4"
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42")
    (root / "images/observation.images.top/episode-000002").mkdir(parents=True)
    (root / "images/observation.images.top/episode-000002/frame-000000.png").write_bytes(b"png")
    info = json.loads((root / "meta/info.json").read_text())
    info["total_episodes"], info["total_frames"] = 3, 150
    (root / "meta/info.json").write_text(json.dumps(info))
    summary = record(tiny_record_config(root, num_episodes=3, **make))
    assert summary.new_episodes == 1
    ds, table = _columns(root)
    assert ds.num_episodes == 3 and len(table["index"]) == 3 * EPISODE_LENGTH
    assert not video.exists() and not list(root.glob("images/**/*.png"))
    assert torch.is_tensor(ds[3 * EPISODE_LENGTH - 1]["observation.images.top"])  # last frame decodes


def test_first_batch_failure_creates_no_dataset(tmp_path):
    root = tmp_path / "never"
    with pytest.raises(RuntimeError, match="none of them was written"):
        record(
            tiny_record_config(
                root, policy_path="helpers.policies:make_faulty", policy_kwargs={"mode": "raise"}
            )
        )
    assert not root.exists() and not (tmp_path / "never.partial").exists()


def test_existing_foreign_folder_is_refused(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not an r2s2r recording"):
        record(tiny_record_config(tmp_path / "mine", policy_path="helpers.policies:make_reach"))
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_evaluate_plays_the_recorded_episodes_without_writing(recorded, tmp_path):
    cfg, summary = recorded
    labels = evaluate(tiny_record_config(tmp_path / "unused"))
    assert labels == summary.episodes  # same episodes, same outcomes, same first-success steps
    assert not (tmp_path / "unused").exists()


def test_worker_processes_record_the_same_dataset(recorded, tmp_path):
    cfg, _ = recorded
    parallel = record(tiny_record_config(tmp_path / "parallel", num_envs=1, workers=2))
    _, a = _columns(cfg.root)
    _, b = _columns(parallel.root)
    np.testing.assert_array_equal(a["action"], b["action"])  # batches of 1 in 2 processes == 1 batch of 2
    np.testing.assert_array_equal(a["observation.state"], b["observation.state"])
    assert [e["success"] for e in parallel.episodes] == [e["success"] for e in recorded[1].episodes]


def test_worker_errors_reach_the_caller(tmp_path):
    make = dict(policy_path="helpers.policies:make_faulty", policy_kwargs={"mode": "shape"}, workers=2)
    with pytest.raises(RuntimeError, match=r"episodes 0..1 failed: policy .* returned an action of shape"):
        record(tiny_record_config(tmp_path / "bad", **make))
    assert not (tmp_path / "bad").exists()
