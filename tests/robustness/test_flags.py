"""Bad flags, for every command: an abbreviated or unknown flag, a value of the wrong type, a value that is
not YAML. One line that names the flag and the fix, exit status 2, nothing written. The entry point keeps
the traceback of anything that is not a user's mistake."""

from __future__ import annotations

import importlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.failures import one_error
from r2s2r.errors import DamagedFileError
from r2s2r.scripts import cli, record

SCRIPTS = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]


def _main(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("prog", sorted(SCRIPTS))
def test_every_command_refuses_an_unknown_flag_in_one_line(prog, capfd):
    # a name no real flag resembles: a close one earns a "did you mean" (--no_such_flag met --touch_finger)
    assert _main(SCRIPTS[prog])(["--xyzzy=1"]) == 2
    assert one_error(capfd, prog) == "--xyzzy: no such flag; flags are spelled out in full (see --help)."


def test_an_abbreviated_flag_is_refused_not_guessed(tmp_path, capfd):
    root = tmp_path / "demo"
    assert record.main([f"--root={root}", "--num_episode=2", "--episode_length=5"]) == 2
    assert one_error(capfd, "r2s2r-record") == (
        "--num_episode: no such flag; did you mean --num_episodes? flags are spelled out in full "
        "(see --help)."
    )
    assert not root.exists() and not root.with_name("demo.partial").exists()


@pytest.mark.parametrize("flag, message", [
    ("--num_episodes=two", "--num_episodes: couldn't parse 'two' into an int; give it a value of its type"),
    ("--world.image_height=1.5", "--world.image_height: couldn't parse '1.5' into an int; give it a value"),
    ("--world.num_envs=", "--world.num_envs: couldn't parse '' into an int; give it a value of its type"),
    ("--world.cameras=3", "--world.cameras: failed when parsing value='3' into field"),
    ("--policy.kwargs={skill: noisy", "--policy.kwargs is not valid YAML/JSON (expected ',' or '}', but got"),
    ("--num_episodes=0", "num_episodes=0 must be >= 1"),
])  # fmt: skip
def test_bad_values_name_their_flag(tmp_path, capfd, flag, message):
    root = tmp_path / "demo"
    assert record.main([f"--root={root}", flag]) == 2
    assert one_error(capfd, "r2s2r-record").startswith(message)
    assert not root.exists()


@dataclass
class _Job:
    steps: int = 3


def _raises(error):
    def job(cfg):
        raise error

    return job


@pytest.mark.parametrize("error", [KeyError("judge_success"), TypeError("bad operand"), ZeroDivisionError()])
def test_a_bug_keeps_its_traceback(error):
    with pytest.raises(type(error)):
        cli.run(_Job, _raises(error), "a job", [], prog="r2s2r-job")


def test_a_library_value_error_is_a_bug_and_ours_a_user_error(capfd):
    with pytest.raises(ValueError, match="invalid literal"):  # raised inside int(): not r2s2r's own check
        cli.run(_Job, lambda cfg: int("x"), "a job", [], prog="r2s2r-job")

    def ours(cfg):  # an r2s2r check (raised in r2s2r's code) reads as a user error
        from r2s2r.robots.spec import robot_spec

        robot_spec("ur5")

    assert cli.run(_Job, ours, "a job", [], prog="r2s2r-job") == 2
    assert one_error(capfd, "r2s2r-job").startswith("Unknown robot 'ur5'")


def test_user_errors_show_their_traceback_on_request(monkeypatch):
    job = _raises(DamagedFileError("x.json is not valid JSON; copy it again."))
    assert cli.run(_Job, job, "a job", [], prog="r2s2r-job") == 2
    monkeypatch.setenv("R2S2R_TRACEBACK", "1")
    with pytest.raises(DamagedFileError):
        cli.run(_Job, job, "a job", [], prog="r2s2r-job")


def test_an_error_from_a_worker_process_is_its_last_line():
    wrapped = (
        "Caught VideoFileError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
    )
    wrapped += '  File "x.py", line 1, in f\n'
    wrapped += "r2s2r.data.video.VideoFileError: video file a.mp4 is corrupt; re-record."
    assert cli.one_line(wrapped) == "video file a.mp4 is corrupt; re-record."
