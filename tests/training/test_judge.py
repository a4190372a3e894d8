"""Fitting the judge to imagined frames: only the judge changes, and it reads the imagined frames better."""

from __future__ import annotations

import json

import pytest
import torch

from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.scripts.refit_judge import main
from r2s2r.training.judge import JudgeConfig, _from_bytes, judge_loss, refit_judge, replay_frames


@pytest.fixture(scope="module")
def checkpoint(recorded, tmp_path_factory):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(sampling_steps=1))
    for p in model.denoiser.patch_out.parameters():  # an untrained DiT predicts exactly zero: give it a voice
        torch.nn.init.normal_(p, std=0.05)
    model.set_stats(ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"))).stats)
    return model.save_pretrained(tmp_path_factory.mktemp("ckpt") / "tiny")


def test_refit_changes_only_the_judge_and_fits_the_imagined_frames(recorded, checkpoint, tmp_path):
    cfg = JudgeConfig(
        checkpoint=str(checkpoint), data=[recorded[0].root], output_dir=str(tmp_path / "judged"), steps=60,
        batch_size=32, lr=1e-3,
    )  # fmt: skip
    before_model = WorldModel.from_pretrained(checkpoint)
    pool = replay_frames(before_model, recorded[0].root, cfg)
    # every frame after the first of both episodes, real and imagined alike, each with its logged labels
    episodes = ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top",), frame_rate=10))
    frames = sum(len(episodes.episode(ep)["next.reward"]) for ep in episodes.episodes)
    assert pool["real"].shape == pool["imagined"].shape == (frames, 2, 3, 32, 32)
    assert pool["real"].dtype == torch.uint8 and len(pool["reward"]) == len(pool["success"]) == frames
    assert not torch.equal(pool["real"], pool["imagined"])  # imagined frames are not the real ones

    figures = refit_judge(cfg)
    after_model = WorldModel.from_pretrained(tmp_path / "judged")
    before, after = before_model.state_dict(), after_model.state_dict()
    changed = sorted({k.split(".")[0] for k in before if not torch.equal(before[k], after[k])})
    assert changed == ["judge"]
    with torch.no_grad():
        losses = [
            judge_loss(m, _from_bytes(pool["imagined"]), pool["reward"], pool["success"])[0].item()
            for m in (before_model, after_model)
        ]
    assert losses[1] < 0.8 * losses[0]
    saved = json.loads((tmp_path / "judged" / "judge.json").read_text())
    assert saved["frames"] == frames == figures["frames"]
    assert saved["after"]["imagined"]["reward_accuracy"] >= saved["before"]["imagined"]["reward_accuracy"]


def test_refit_judge_cli_refuses_bad_input(checkpoint, tmp_path, capsys):
    assert main([f"--checkpoint={checkpoint}", f"--output_dir={tmp_path / 'x'}"]) == 2
    assert "data is empty" in capsys.readouterr().err
    assert main([f"--checkpoint={checkpoint}", "--data=[somewhere]", "--steps=0"]) == 2
    assert "steps=0 must be >= 1" in capsys.readouterr().err
