"""r2s2r-record end to end, as a user runs it: flags in, a dataset and a summary out, errors in one line."""

from __future__ import annotations

import re

import pytest

from r2s2r.scripts.record import main

TINY = ["--episode_length=20", "--world.num_envs=2", "--world.image_height=32", "--world.image_width=32"]


def test_record_cli_writes_and_resumes(tmp_path, capsys):
    root = tmp_path / "cli"
    args = [f"--root={root}", "--num_episodes=2", "--world.cameras=[top,left_wrist]", *TINY]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{root}: 2 episodes (2 new" in out
    assert (
        "LeRobot v3.0 dataset" in out
        and "observation.images.left_wrist" in out
        and "40 frames at 50 Hz" in out
    )
    assert main([*args[:1], "--num_episodes=3", *args[2:]]) == 0
    assert f"{root}: 3 episodes (1 new" in capsys.readouterr().out


@pytest.mark.parametrize("flag, message", [
    ("--world.task=stack", "Unknown task 'stack'"),
    ("--distribution=far", "distribution='far' must be one of"),
    ("--policy.path=nowhere:make", "cannot import module 'nowhere'"),
    ("--policy.kwargs={oops", "--policy.kwargs is not valid YAML/JSON"),
    ("--world.cameras=[top,wrist]", r"Unknown camera\(s\) \['wrist'\]"),
])  # fmt: skip
def test_record_cli_errors_are_one_line(tmp_path, capsys, flag, message):
    assert main([f"--root={tmp_path / 'x'}", "--num_episodes=1", *TINY, flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("r2s2r-record: error: ")
    assert re.search(message, err[0])
    assert not (tmp_path / "x").exists()


def test_record_cli_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "Examples:" in out and "--policy.kwargs" in out and "re-running resumes" in out
