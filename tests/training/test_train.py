"""train(): the tiny preset on real clips; checkpoints, exact resume, refused mismatches."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.training.train import TrainConfig, train


def _cfg(recorded, out, **overrides):
    settings = dict(steps=6, batch_size=4, save_every=3, log_every=2, num_workers=0, warmup_steps=2)
    cfg = TrainConfig(output_dir=str(out), preset="tiny", **{**settings, **overrides})
    cfg.data.root = recorded[0].root
    return cfg


def test_tiny_run_writes_loadable_checkpoints(recorded, tmp_path):
    final = train(_cfg(recorded, tmp_path / "run"))
    checkpoints = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["0000003", "0000006", "last"]
    assert final == (checkpoints / "0000006" / "pretrained_model").resolve()
    model = WorldModel.from_pretrained(final)
    assert model.config.cameras == ("top", "left_wrist") and model.config.width == 32  # tiny preset
    assert torch.count_nonzero(model.action_std - 1) > 0  # the data's stats travel with the weights


def test_resume_is_exact(recorded, tmp_path):
    straight = train(_cfg(recorded, tmp_path / "straight"))
    first = train(_cfg(recorded, tmp_path / "split", stop_after=3))
    assert first.parent.name == "0000003"
    resumed = train(_cfg(recorded, tmp_path / "split", resume=True))
    assert resumed.parent.name == "0000006"
    a = load_file(straight.parent / "training_state" / "model.safetensors")
    b = load_file(resumed.parent / "training_state" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)  # same batches, same noise, same optimizer moments
    ema_a = load_file(straight / "model.safetensors")
    ema_b = load_file(resumed / "model.safetensors")
    assert all(torch.equal(ema_a[k], ema_b[k]) for k in ema_a)


def test_existing_run_needs_resume_and_resume_needs_a_run(recorded, tmp_path):
    train(_cfg(recorded, tmp_path / "run", steps=2, save_every=2))
    with pytest.raises(ValueError, match="already holds a run; pass --resume"):
        train(_cfg(recorded, tmp_path / "run", steps=2))
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        train(_cfg(recorded, tmp_path / "empty", resume=True))


def test_resume_with_another_model_is_refused(recorded, tmp_path):
    train(_cfg(recorded, tmp_path / "run", steps=2, save_every=2))
    cfg = _cfg(recorded, tmp_path / "run", steps=4, resume=True)
    cfg.model.width, cfg.model.heads = 64, 2
    with pytest.raises(ValueError, match=r"cannot resume .* \(--model.width: checkpoint 32, now 64\)"):
        train(cfg)


def test_frame_rate_must_match_the_model(recorded, tmp_path):
    cfg = _cfg(recorded, tmp_path / "run")
    cfg.data.frame_rate = 25
    with pytest.raises(ValueError, match="set --data.frame_rate=10"):
        train(cfg)


def test_presets_and_overrides():
    assert TrainConfig(preset="tiny").model.width == 32
    cfg = TrainConfig(preset="tiny", model=TrainConfig().model.__class__(depth=3))
    assert (cfg.model.width, cfg.model.depth) == (32, 3)  # a flag given with a preset overrides it
    with pytest.raises(ValueError, match="preset='huge' must be one of"):
        TrainConfig(preset="huge")


def test_part_grad_norms_split_the_total(recorded):
    """Each part's norm covers its own parameters: together they make the total; zero weight gives 0."""
    from r2s2r.data.reader import ClipConfig, ClipDataset
    from r2s2r.model.configuration_world_model import WorldModelConfig
    from r2s2r.training.train import part_grad_norms

    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(judge_loss_weight=0.0))
    data = ClipDataset(ClipConfig(root=recorded[0].root, cameras=model.config.cameras, future_frames=2))
    batch = torch.utils.data.default_collate([data[0], data[len(data) - 1]])
    loss, _ = model(batch)
    loss.backward()
    norms = part_grad_norms(model)
    total = torch.linalg.vector_norm(
        torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None])
    )
    parts = torch.tensor(
        [norms["grad_norm_denoiser"], norms["grad_norm_state_head"], norms["grad_norm_judge"]]
    )
    assert torch.linalg.vector_norm(parts) == pytest.approx(float(total), rel=1e-5)
    assert norms["grad_norm_judge"] == 0.0
    assert norms["grad_norm_denoiser"] > 0 and norms["grad_norm_state_head"] > 0


def test_frame_rate_follows_the_model_by_default(recorded, tmp_path):
    """Left at 0, the clips' rate is the model's: 50 Hz control / frame_stride 10 = 5 Hz, a chunk of 10."""
    cfg = _cfg(recorded, tmp_path / "run", steps=1, save_every=1)
    cfg.model.frame_stride = 10
    assert cfg.data.frame_rate == 0
    model = WorldModel.from_pretrained(train(cfg))
    assert cfg.data.frame_rate == 5 and model.config.chunk_dim == 10 * 14
    assert cfg.data.future_frames == 3  # the training default


def test_cli_flags_for_the_data_keep_the_model_rate(recorded, tmp_path):
    """draccus rebuilds a nested config from its class defaults when one of its flags is given: those
    defaults must still mean "the model's rate" and "3 future frames", not a fixed 10 Hz."""
    import draccus

    cfg = draccus.parse(TrainConfig, args=[f"--data.root={recorded[0].root}", "--model.frame_stride=10"])
    assert (cfg.data.frame_rate, cfg.data.future_frames) == (0, 0)
