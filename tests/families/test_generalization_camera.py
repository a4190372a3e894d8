"""The generalization benchmark's camera-only family: its logs are rendered in every view the model imagines,
its second real run renders only what each policy reads, and it is never pooled with the state-path
families."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from generalization import KEPT_OUT_OF, held_out_zoo, logged_views, model_label, policy_views
from r2s2r.robots.aloha import ALOHA_CAMERAS

ROOT = Path(__file__).resolve().parents[2]


def test_camera_family_is_every_setting_of_the_camera_controller_with_its_views():
    zoo = held_out_zoo(("camera",))
    assert len(zoo) == 10 and {s["family"] for s in zoo.values()} == {"camera"}
    shifted = {"calib_dx": 0.035, "servo_lag": 0}
    assert zoo["camera_camera_shifted_servo"] == {
        "path": "families.camera:make_policy",
        "kwargs": shifted,
        "family": "camera",
    }
    assert logged_views("camera") == ALOHA_CAMERAS and logged_views("waypoint") == ()
    assert policy_views(zoo["camera_nominal"]) == ("top",)
    assert policy_views(zoo["camera_camera_shifted_servo"]) == ("top", "right_wrist")  # servos in the wrist
    assert policy_views(zoo["camera_jittery_detector_retry"]) == ("top", "right_wrist")  # checks the grasp
    assert policy_views(held_out_zoo(("waypoint",))["waypoint_nominal"]) == ()
    assert "video" in KEPT_OUT_OF["camera"]["path"]


def test_camera_family_mixed_with_a_state_family_is_refused_in_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, "benchmarks/generalization.py", "--families", "waypoint,camera",
         "--output_dir", str(tmp_path / "out"), "--out", str(tmp_path / "g.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "--families: camera ranks on the video path and is reported alone; run it by itself"
        " (--families camera)."
    ]
    assert not (tmp_path / "out").exists() and not (tmp_path / "g.json").exists()


def test_model_labels_mark_drawn_frames_and_need_no_frames_flag():
    """response_curves.py shares the ranking helpers with arguments that have no --frames."""
    from argparse import Namespace

    assert model_label("outputs/coverage/head_tracking", Namespace()) == "head_tracking"
    assert model_label("assets/world_model_small", Namespace(frames="video")) == "world_model_small"
    assert (
        model_label("assets/world_model_small", Namespace(frames="head")) == "world_model_small+head_frames"
    )
