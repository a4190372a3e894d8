"""The shared CLI runner: progress logs reach the user, bad flags give one line."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from r2s2r.scripts import cli


@dataclass
class _Job:
    steps: int = 3


def test_info_logs_are_shown_and_library_noise_is_not(capsys):
    def job(cfg: _Job) -> int:
        logging.getLogger("r2s2r.training.train").info("step %d: loss=1.0", cfg.steps)
        logging.getLogger("absl").info("noise from a library")
        return 0

    assert cli.run(_Job, job, "a job", ["--steps=7"], prog="r2s2r-job") == 0
    err = capsys.readouterr().err
    assert "step 7: loss=1.0" in err
    assert "noise from a library" not in err


def test_bad_flag_value_is_one_line(capsys):
    assert cli.run(_Job, lambda cfg: 0, "a job", ["--steps=many"], prog="r2s2r-job") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("r2s2r-job: error:")
