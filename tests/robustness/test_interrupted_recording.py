"""Recordings killed mid-batch (kill -9 in a child process). Until `r2s2r-record` is re-run, every reader
says so in one line with the command that rolls it back, and r2s2r-rank lists that log as FAILED and ranks
the others; the re-run rolls it back and finishes it."""

from __future__ import annotations

import json
import shutil

import pytest

from helpers.failures import RECORD_FLAGS as FLAGS
from helpers.failures import kill_recording_mid_batch, leftovers, one_error, tiny_checkpoint
from r2s2r.data.commit import InterruptedRecordingError
from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.scripts import eval as eval_cli
from r2s2r.scripts import eval_openloop, rank, record


@pytest.fixture(scope="module")
def killed(recorded, tmp_path_factory):
    """`recorded` (2 episodes, one batch), then a run to 4 episodes killed after the first episode of its
    second batch was saved: a batch half on disk."""
    root = tmp_path_factory.mktemp("killed") / "demo"
    shutil.copytree(recorded[0].root, root)
    kill_recording_mid_batch(root, ["--num_episodes=4", *FLAGS], after_episodes=1)
    return root


@pytest.fixture(scope="module")
def checkpoint(recorded, tmp_path_factory):
    return tiny_checkpoint(recorded[0].root, tmp_path_factory.mktemp("ckpt") / "tiny")


def _copy(root, tmp_path, name="demo"):
    shutil.copytree(root, tmp_path / name)
    return tmp_path / name


def _says_roll_back(error: str, root) -> None:
    assert error.startswith(f"dataset {root} holds an interrupted recording (")
    assert error.endswith(
        f"re-run r2s2r-record --root={root} with the flags that recorded it to roll it back."
    )


def test_the_kill_left_a_batch_lerobot_cannot_read(killed):
    """The premise: without the check, LeRobot's own loader fails on what the kill left."""
    from lerobot.datasets.utils import load_nested_dataset

    with pytest.raises(Exception) as failure:
        load_nested_dataset(killed / "data")
    assert not isinstance(failure.value, InterruptedRecordingError)


def test_readers_refuse_it_in_one_line(killed, checkpoint, tmp_path, capfd):
    with pytest.raises(InterruptedRecordingError, match="holds an interrupted recording"):
        ClipDataset(ClipConfig(root=str(killed)))
    out = tmp_path / "eval" / "episodes.jsonl"
    flags = [f"--checkpoint={checkpoint}", f"--starts=[{killed}]", "--max_steps=5", f"--output={out}"]
    assert eval_cli.main(flags) == 2
    _says_roll_back(one_error(capfd, "r2s2r-eval"), killed)
    flags = [f"--checkpoint={checkpoint}", f"--data.root={killed}", f"--output_dir={tmp_path / 'ol'}"]
    assert eval_openloop.main(flags) == 2
    _says_roll_back(one_error(capfd, "r2s2r-eval-openloop"), killed)
    assert not out.exists() and not (tmp_path / "ol").exists()


def test_rank_lists_it_as_failed_and_ranks_the_rest(recorded, killed, checkpoint, tmp_path, capfd):
    logs = tmp_path / "logs"
    for name in ("nominal", "again"):  # recorder sidecars name the demonstrator as their policy
        shutil.copytree(recorded[0].root, logs / name)
    shutil.copytree(killed, logs / "killed")
    partial = tmp_path / "first" / "demo"  # a recording killed in its very first batch
    kill_recording_mid_batch(partial, ["--num_episodes=2", *FLAGS], after_episodes=1)
    shutil.copytree(partial.with_name("demo.partial"), logs / "first.partial")
    flags = [
        f"--checkpoint={checkpoint}", f"--logs_dir={logs}", f"--output_dir={tmp_path / 'rank'}",
        "--max_steps=5", "--n_boot=50", "--report=false", "--render=false",
    ]  # fmt: skip
    assert rank.main(flags) == 1
    out = capfd.readouterr().out
    payload = json.loads((tmp_path / "rank" / "rank.json").read_text())
    assert sorted(p["name"] for p in payload["policies"]) == ["again", "nominal"]
    failed = {f["name"]: f["error"] for f in payload["failed"]}
    assert set(failed) == {"killed", "first"}
    _says_roll_back(failed["killed"], logs / "killed")
    assert failed["first"].startswith(f"the recording {logs / 'first'} was interrupted in its first batch")
    assert f"re-run r2s2r-record --root={logs / 'first'}" in failed["first"]
    assert f"FAILED killed: {failed['killed']}" in out


def test_rerunning_the_recorder_rolls_it_back_and_finishes(recorded, killed, tmp_path, capfd):
    root = _copy(killed, tmp_path)
    assert record.main([f"--root={root}", "--num_episodes=4", *FLAGS]) == 0
    assert "4 episodes (2 new" in capfd.readouterr().out
    assert leftovers(tmp_path) == []
    dataset = ClipDataset(ClipConfig(root=str(root)))
    assert dataset.episodes == [0, 1, 2, 3]
