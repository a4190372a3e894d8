"""Resuming: `r2s2r-train --resume=true` refuses what defines the run and names every change (`--steps` may
grow) and names a damaged training-state file with the way back; a recording or an evaluation refuses its
own changed settings. Nothing is written by a refusal."""

from __future__ import annotations

import json
import shutil

import pytest

from helpers.failures import RECORD_FLAGS, one_error, tiny_checkpoint, truncate
from r2s2r.scripts import eval as eval_cli
from r2s2r.scripts import record, train


def _train_flags(recorded, out, *extra):
    return [
        "--preset=tiny", f"--data.root={recorded[0].root}", f"--output_dir={out}", "--steps=4",
        "--batch_size=4", "--save_every=2", "--log_every=2", "--num_workers=0", "--warmup_steps=1", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def stopped_run(recorded, tmp_path_factory):
    """A tiny training run stopped after its first checkpoint (step 2 of 4), and a second dataset."""
    out = tmp_path_factory.mktemp("train") / "run"
    assert train.main(_train_flags(recorded, out, "--stop_after=2")) == 0
    other = tmp_path_factory.mktemp("other") / "data"
    shutil.copytree(recorded[0].root, other)
    return out, other


def _copy(run, tmp_path):
    shutil.copytree(run, tmp_path / "run", symlinks=True)
    return tmp_path / "run"


@pytest.mark.parametrize("flags, change", [
    (["--lr=1e-3"], "--lr: checkpoint 0.0003, now 0.001"),
    (["--batch_size=2"], "--batch_size: checkpoint 4, now 2"),
    (["--seed=1"], "--seed: checkpoint 0, now 1"),
    (["--grad_accum=2"], "--grad_accum: checkpoint 1, now 2"),
    (["--model.width=64", "--model.heads=2"], "--model.width: checkpoint 32, now 64"),
    (["--preset=small"], "--preset: checkpoint 'tiny', now 'small'; --model.cameras: checkpoint"),
    (["--lr=1e-3", "--seed=1"], "--lr: checkpoint 0.0003, now 0.001; --seed: checkpoint 0, now 1"),
])  # fmt: skip
def test_train_refuses_a_changed_run(recorded, stopped_run, tmp_path, capfd, flags, change):
    out = _copy(stopped_run[0], tmp_path)
    assert train.main(_train_flags(recorded, out, "--resume=true", *flags)) == 2
    error = one_error(capfd, "r2s2r-train")
    assert error.startswith(f"cannot resume {out} with other settings (")
    assert change in error
    assert error.endswith(
        "resume with the flags it was started with (--steps may grow), or train into a new --output_dir."
    )
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["0000002", "last"]


def test_train_refuses_another_dataset(recorded, stopped_run, tmp_path, capfd):
    out = _copy(stopped_run[0], tmp_path)
    flags = _train_flags(recorded, out, "--resume=true", f"--data.root={stopped_run[1]}")
    assert train.main(flags) == 2
    assert f"--data.root: checkpoint '{recorded[0].root}', now '{stopped_run[1]}'" in one_error(
        capfd, "r2s2r-train"
    )


def test_train_steps_may_grow_but_not_shrink_below_the_checkpoint(recorded, stopped_run, tmp_path, capfd):
    out = _copy(stopped_run[0], tmp_path)
    assert train.main(_train_flags(recorded, out, "--resume=true", "--steps=1")) == 2
    assert one_error(capfd, "r2s2r-train") == (
        "--steps=1 is below the 2 steps checkpoint 0000002 has taken; pass --steps >= 2 to resume it."
    )
    assert train.main(_train_flags(recorded, out, "--resume=true", "--steps=6")) == 0  # train further
    assert (out / "checkpoints" / "last").resolve().name == "0000006"
    state = json.loads((out / "checkpoints" / "0000006" / "training_state" / "state.json").read_text())
    assert state["step"] == 6 and state["run"]["lr"] == 3e-4


def test_a_checkpoint_without_run_settings_still_resumes(recorded, stopped_run, tmp_path, capfd):
    """Checkpoints written before runs kept their settings: the model config is all that can be checked."""
    out = _copy(stopped_run[0], tmp_path)
    path = out / "checkpoints" / "0000002" / "training_state" / "state.json"
    state = json.loads(path.read_text())
    del state["run"]
    path.write_text(json.dumps(state))
    assert train.main(_train_flags(recorded, out, "--resume=true", "--seed=1")) == 0
    assert "does not record its run's settings; they are not checked on resume" in capfd.readouterr().err


def test_record_refuses_changed_settings(recorded, tmp_path, capfd):
    root = tmp_path / "demo"
    shutil.copytree(recorded[0].root, root)
    assert record.main([f"--root={root}", "--num_episodes=4", *RECORD_FLAGS, "--seed=8"]) == 2
    assert one_error(capfd, "r2s2r-record") == (
        f"cannot resume {root} with different settings (seed: recorded 7, now 8); use the same ones or a "
        "new --root."
    )
    assert json.loads((root / "r2s2r_recording.json").read_text())["episodes"][-1]["episode_index"] == 1


def test_eval_refuses_changed_settings(recorded, tmp_path, capfd):
    checkpoint = tiny_checkpoint(recorded[0].root, tmp_path / "ckpt")
    out = tmp_path / "eval" / "episodes.jsonl"
    flags = [
        f"--checkpoint={checkpoint}",
        f"--starts=[{recorded[0].root}]",
        "--max_steps=5",
        f"--output={out}",
    ]
    assert eval_cli.main(flags) == 0
    before = out.read_text()
    assert eval_cli.main([*flags, "--samples_per_start=2"]) == 2
    assert one_error(capfd, "r2s2r-eval") == (
        f"{out} holds results of other settings (differs in ['samples_per_start']); use another --output or "
        "delete it."
    )
    assert out.read_text() == before


@pytest.mark.parametrize("name", [
    "model.safetensors", "optimizer.safetensors", "ema.safetensors", "rng.safetensors", "state.json",
])  # fmt: skip
def test_damaged_training_state_on_resume(recorded, stopped_run, tmp_path, capfd, name):
    out = tmp_path / "run"
    shutil.copytree(stopped_run[0], out, symlinks=True)
    path = out / "checkpoints" / "0000002" / "training_state" / name
    truncate(path, 0.5)
    assert train.main(_train_flags(recorded, out, "--resume=true")) == 2
    error = one_error(capfd, "r2s2r-train")
    assert error.startswith(f"{path.resolve()} is ")
    assert (
        f"point {(out / 'checkpoints' / 'last').resolve().parent / 'last'} at an earlier checkpoint" in error
    )
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["0000002", "last"]  # nothing new
