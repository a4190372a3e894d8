"""r2s2r-rank's printed table: on the video path the state head's verdict stands beside the judge's."""

from __future__ import annotations

from r2s2r.scripts.rank import format_rank


def _rates(all_, id_=None, ood=None):
    return {s: {"rate": r} for s, r in (("all", all_), ("id", id_), ("ood", ood)) if r is not None}


def _payload(render: bool, frames: str = "video") -> dict:
    policies = [
        {"name": "low", "family": "f", "real": _rates(0.2, 0.2, 0.2), "imagined": _rates(0.9, 1.0, 0.8),
         "imagined_head": _rates(0.25, 0.5, 0.0), "imagined_judge": _rates(0.1, 0.2, 0.0)},
        {"name": "high", "family": "f", "real": _rates(1.0, 1.0, 1.0), "imagined": _rates(0.5, 0.5, 0.5),
         "imagined_head": None},  # rows written before the head's verdict was kept
    ]  # fmt: skip
    return {"settings": {"render": render, "frames": frames}, "policies": policies, "metrics": {},
            "object_poses": "used", "failed": []}  # fmt: skip


def test_video_path_table_has_the_heads_verdict_and_the_fast_path_none():
    video = format_rank(_payload(True)).splitlines()
    assert video[0].split() == ["policy", "family", "real", "imag", "head", "ID", "r/i", "OOD", "r/i"]
    assert video[1].split()[:5] == ["high", "f", "100.0", "50.0", "-"]  # sorted by real success
    assert video[2].split()[:5] == ["low", "f", "20.0", "90.0", "25.0"]
    fast = format_rank(_payload(False)).splitlines()
    assert "head" not in fast[0] and fast[2].split()[:4] == ["low", "f", "20.0", "90.0"]
    assert fast[2].split()[4] == "20.0/100.0"  # ID real / imagined follows at once


def test_drawn_frames_table_has_the_judges_cross_check():
    drawn = format_rank(_payload(True, frames="head")).splitlines()
    assert drawn[0].split()[:5] == ["policy", "family", "real", "imag", "judge"]
    assert drawn[2].split()[:5] == ["low", "f", "20.0", "90.0", "10.0"]  # the judge's, not the head's 25.0
    assert drawn[1].split()[4] == "-"
