"""Open-loop replay of logged actions: per-view scores beside copy-last-frame, videos, CLI."""

from __future__ import annotations

import json

import av
import pytest
import torch

from r2s2r.data.reader import ClipConfig, ClipDataset, match_frame_rate
from r2s2r.eval.metrics import psnr
from r2s2r.eval.openloop import OpenLoopConfig, evaluate_openloop
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.scripts.eval_openloop import main


@pytest.fixture(scope="module")
def checkpoint(recorded, tmp_path_factory):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny())
    model.set_stats(ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"))).stats)
    return model.save_pretrained(tmp_path_factory.mktemp("ckpt") / "tiny")


def test_openloop_scores_and_videos(recorded, checkpoint, tmp_path):
    cfg = OpenLoopConfig(
        checkpoint=str(checkpoint), horizons=(0.2, 0.8), videos=1, output_dir=str(tmp_path / "ol")
    )
    cfg.data.root = recorded[0].root
    payload = evaluate_openloop(cfg)
    assert [e["episode"] for e in payload["episodes"]] == [0, 1]
    assert [e["split"] for e in payload["episodes"]] == ["id", "ood"]  # from the recorder's labels
    summary = payload["summary"]
    assert set(summary) == {"id", "ood", "all"} and summary["all"]["episodes"] == 2
    assert set(summary["all"]["model"]) == {"top", "left_wrist"} and set(summary["all"]["model"]["top"]) == {
        "0.2s",
        "0.8s",
    }
    # the copy-last-frame baseline is the first real frame held: check one value by hand
    episode = ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top",))).episode(1)
    first, later = torch.nn.functional.interpolate(
        episode["observation.images.top"][[0, 8]], size=(32, 32), mode="area"
    )
    assert payload["episodes"][1]["copy_last"]["top"][8]["psnr"] == pytest.approx(
        float(psnr(first, later)), rel=1e-5
    )
    ood = payload["episodes"][1]
    assert ood["object_error_m"][2] >= 0 and isinstance(ood["agree"], bool)
    # outcome agreement is the fraction of episodes whose imagined verdict equals the logged one
    agree = [e["agree"] for e in payload["episodes"]]
    assert summary["all"]["outcome_agreement"] == pytest.approx(sum(agree) / 2)
    head_agree = [e["head_agree"] for e in payload["episodes"]]  # the state head's verdict, scored alike
    assert summary["all"]["head_outcome_agreement"] == pytest.approx(sum(head_agree) / 2)
    videos = sorted((tmp_path / "ol" / "videos").iterdir())
    assert [v.name for v in videos] == ["episode_000000.mp4"]
    with av.open(str(videos[0])) as container:
        assert sum(1 for _ in container.decode(video=0)) == 10  # 50 steps at 10 Hz
    assert json.loads((tmp_path / "ol" / "results.json").read_text())["summary"]["all"]["episodes"] == 2


def test_openloop_cli(recorded, checkpoint, tmp_path, capsys):
    args = [f"--checkpoint={checkpoint}", f"--data.root={recorded[0].root}", "--horizons=[0.4]", "--videos=0",
            f"--output_dir={tmp_path / 'cli'}"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "[id] 1 episodes" in out and "copy-last" in out and "outcome agreement" in out
    assert main([*args[:1], f"--data.root={recorded[0].root}", "--data.frame_rate=25"]) == 2
    assert "set --data.frame_rate=10" in capsys.readouterr().err


def test_openloop_starts_from_the_logged_object_pose(recorded, checkpoint):
    """Where the recording has the object pose, the imagined episode starts from it, as `r2s2r-eval` does:
    the head's imagined poses are those of an env reset with it, and not those of one reset without it."""
    from r2s2r.rollout.replay import imagine_episodes
    from r2s2r.rollout.world_model_env import WorldModelEnv

    model = WorldModel.from_pretrained(checkpoint)
    clips = ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"), context_frames=1)
    match_frame_rate(clips, model.config.frame_stride)
    ds = ClipDataset(clips)
    episodes = [{**ds.episode(ep), "action": ds.episode(ep)["action"][:6]} for ep in (0, 1)]  # 6 frames
    imagined = imagine_episodes(model, episodes, sampling_steps=1)

    def replay(with_pose: bool) -> torch.Tensor:
        env = WorldModelEnv(model, num_envs=2, sampling_steps=1)
        keys = [*model.config.camera_keys, "observation.state"]
        keys += ["observation.environment_state"] if with_pose else []
        env.reset({k: torch.stack([e[k][0] for e in episodes]) for k in keys}, seed=0)
        poses = []
        for t in range(episodes[0]["action"].shape[0]):
            env.step(torch.stack([e["action"][t] for e in episodes]))
            poses.append(env.env_state)
        return torch.stack(poses, dim=1)  # (B,T,E)

    logged, blind = replay(True), replay(False)
    for b in range(2):
        torch.testing.assert_close(imagined[b]["env_state"], logged[b])
    assert (blind - logged).abs().max() > 1e-3
