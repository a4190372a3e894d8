"""The DeepSpeed ZeRO-2 accelerate config trains and resumes (one CPU process; the same file runs on GPUs)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from r2s2r.model.modeling_world_model import WorldModel

ROOT = Path(__file__).parents[2]
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="deepspeed not installed"
)


def _launch(args: list[str]) -> subprocess.CompletedProcess:
    config = str(ROOT / "configs/accelerate_deepspeed_zero2.yaml")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", config]
    command += ["-m", "r2s2r.scripts.train", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_zero2_trains_and_resumes(recorded, tmp_path):
    args = ["--preset=tiny", "--steps=4", "--batch_size=4", "--save_every=2", "--num_workers=0",
            f"--data.root={recorded[0].root}", f"--output_dir={tmp_path / 'ds'}"]  # fmt: skip
    first = _launch([*args, "--stop_after=2"])
    assert first.returncode == 0, first.stderr[-2000:]
    second = _launch([*args, "--resume=true"])
    assert second.returncode == 0, second.stderr[-2000:]
    checkpoints = tmp_path / "ds" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["0000002", "0000004", "last"]
    assert (
        checkpoints / "0000004" / "training_state" / "deepspeed" / "latest"
    ).is_file()  # DeepSpeed's format
    model = WorldModel.from_pretrained(checkpoints / "last" / "pretrained_model")
    assert model.config.width == 32
