"""The camera-only ACT of benchmarks/zoo_act.py (`--cameras`): it is trained on the views and the joint state
only, its images are the recording's own frames, a resumed run refuses other views, and the generalization
benchmark renders for it exactly the views its checkpoint reads."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from safetensors.torch import load_file

from generalization import ACT_RUNS, VIDEO_FAMILIES, policy_views, second_run
from r2s2r.policies.policy import PolicyConfig, load_policy, to_policy_batch
from zoo_act import ChunkData, ZooConfig, image_stats, train_zoo

TINY = dict(heldout="", only_successful=False, dim_model=32, n_heads=2, dim_feedforward=64, chunk_size=5,
            n_action_steps=5, batch_size=2, device="cpu")  # fmt: skip


def test_camera_chunks_hold_the_recorded_frames_of_every_other_step_and_no_object_pose(recorded):
    cfg, _ = recorded
    zoo = ZooConfig(data=cfg.root, cameras=["top"], start_every=2, **TINY)
    data = ChunkData(cfg.root, zoo, only_successful=False)
    assert zoo.inputs == ("observation.state", "observation.images.top")
    # 2 episodes of 50 steps: frames 0, 2, ..., 48 of each start a batch
    assert data.frames.tolist() == list(range(0, 50, 2)) + list(range(50, 100, 2))
    assert data.images["observation.images.top"].shape == (50, 3, 48, 64)
    assert data.images["observation.images.top"].dtype == torch.uint8

    picked = torch.tensor([6, 58])  # episode 0 frame 6, episode 1 frame 8
    batch = data.batch(picked)
    assert set(batch) == {"observation.state", "observation.images.top", "action", "action_is_pad"}
    dataset = LeRobotDataset(zoo.repo_id, root=cfg.root)
    for row, index in enumerate(picked.tolist()):
        frame = dataset[index]
        image = batch["observation.images.top"][row]
        assert torch.allclose(image, frame["observation.images.top"], atol=0.6 / 255)  # uint8 rounding
        assert torch.equal(batch["observation.state"][row], frame["observation.state"])
    # a chunk that runs past episode 1's last frame (99) repeats its last action and is marked as padding
    tail = data.batch(torch.tensor([98]))
    assert tail["action_is_pad"][0].tolist() == [False, False, True, True, True]
    assert torch.equal(tail["action"][0, 4], tail["action"][0, 1])


@pytest.fixture(scope="module")
def camera_act(recorded, tmp_path_factory):
    """A camera-only ACT trained for 2 steps on the top view: (its run's config, its metrics)."""
    cfg, _ = recorded
    out = tmp_path_factory.mktemp("zoo") / "act_cam"
    zoo = ZooConfig(data=cfg.root, cameras=["top"], output_dir=str(out), steps=2, save_at=[1, 2], **TINY)
    return zoo, train_zoo(zoo)


def test_camera_act_reads_only_its_views_and_a_resumed_run_refuses_other_views(recorded, camera_act):
    cfg, _ = recorded
    zoo, metrics = camera_act
    out = Path(zoo.output_dir)
    assert [m["step"] for m in metrics] == [1, 2] and all(m["train_loss"] > 0 for m in metrics)

    # the images are normalized by the frames' own stats
    (saved,) = (out / "step_2").glob("policy_preprocessor_step_*_normalizer_processor.safetensors")
    own = image_stats(ChunkData(cfg.root, zoo, only_successful=False).images["observation.images.top"])
    normalizer = load_file(saved)
    for stat in ("mean", "std"):
        used = normalizer[f"observation.images.top.{stat}"].double()
        assert torch.allclose(used, torch.from_numpy(own[stat]))
    assert (own["std"] > 0.05).all()

    spec = {"path": str(out / "step_2"), "kwargs": {}, "family": "act_cam"}
    assert policy_views(spec) == ("top",)  # what its second real run renders
    policy = load_policy(PolicyConfig(path=spec["path"]))
    assert sorted(policy.config.input_features) == ["observation.images.top", "observation.state"]
    observation = {
        "observation.images.top": torch.randint(0, 256, (3, 48, 64, 3), dtype=torch.uint8).numpy(),
        "observation.state": torch.zeros(3, 14).numpy(),
    }
    assert policy.select_action(to_policy_batch(observation)).shape == (3, 14)
    with pytest.raises(KeyError, match=r"observation.images.top"):  # a log without its view
        policy.select_action(to_policy_batch({"observation.state": observation["observation.state"]}))

    other = ZooConfig(data=cfg.root, cameras=["top", "right_wrist"], output_dir=str(out), steps=3,
                      save_at=[1, 2, 3], **TINY)  # fmt: skip
    with pytest.raises(ValueError, match=r"cannot resume .*'cameras'"):
        train_zoo(other)


def test_a_camera_policys_second_real_run_renders_the_views_it_reads(camera_act, tmp_path):
    """The noise floor's run plays the policy with its views rendered (a policy given none would raise)."""
    zoo, _ = camera_act
    spec = {"path": str(Path(zoo.output_dir) / "step_2"), "kwargs": {}, "family": "act_cam"}
    rates = second_run({"act_cam_2": spec}, tmp_path, per_split=1, workers=0)
    assert {split: rates["act_cam_2"][split]["trials"] for split in ("id", "ood")} == {"id": 1, "ood": 1}
    assert (tmp_path / "second_run" / "act_cam_2.json").is_file()


def test_image_stats_are_the_frames_own_per_channel_mean_and_std():
    """Not the recording's stats (LeRobot writes an image std of about 0.001 here)."""
    frames = torch.zeros(3, 3, 2, 4, dtype=torch.uint8)
    frames[:, 0, :, :2] = 255  # red: half the pixels 1.0, half 0.0 -> mean 0.5, std 0.5
    frames[0, 1] = 51  # green: 0.2 in one frame of three, 0 in the others -> mean 0.2/3, std 0.2*sqrt(2)/3
    stats = image_stats(frames, chunk=2)  # in parts, as for a long recording
    assert stats["mean"].shape == (3, 1, 1)
    assert stats["mean"].ravel() == pytest.approx([0.5, 0.2 / 3, 0.0], abs=1e-9)
    assert stats["std"].ravel() == pytest.approx([0.5, 0.2 * 2**0.5 / 3, 0.0], abs=1e-9)


def test_camera_act_runs_are_video_families():
    assert {"act_cam", "act_cam_small"} <= set(VIDEO_FAMILIES) & set(ACT_RUNS)
    assert len(ACT_RUNS["act_cam"][1]) >= 4  # >= 4 checkpoints of one run, and a run on less data
