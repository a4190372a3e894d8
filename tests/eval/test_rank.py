"""Ranking checkpoints against hardware logs: CLI end to end, failures isolated, Ray equals one process."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from r2s2r.data.reader import ClipConfig, ClipDataset
from r2s2r.eval.imagined import results_digest
from r2s2r.eval.rank import RankConfig, choose_videos, rank
from r2s2r.model.configuration_world_model import WorldModelConfig
from r2s2r.model.modeling_world_model import WorldModel
from r2s2r.scripts.rank import main

REACH = "helpers.policies:make_reach"
MANIFEST = {
    "reach_low": {"path": REACH, "kwargs": {"target": -0.5}, "family": "reach"},
    "reach_high": {"path": REACH, "kwargs": {"target": 0.3}, "family": "reach"},
    "crashes": {"path": "helpers.policies:make_faulty", "kwargs": {"mode": "raise", "at_step": 2}},
    "unlabeled": {"path": REACH},
}


def _checkpoint(recorded, folder, cameras=("top", "left_wrist")):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig.tiny(cameras=cameras))
    for p in model.denoiser.patch_out.parameters():  # an untrained DiT predicts exactly zero: give it a voice
        torch.nn.init.normal_(p, std=0.05)
    model.set_stats(ClipDataset(ClipConfig(root=recorded[0].root, cameras=("top", "left_wrist"))).stats)
    return str(model.save_pretrained(folder))


@pytest.fixture(scope="module")
def setup(recorded, tmp_path_factory):
    """Four checkpoints' 'hardware logs' (copies of one recording), one of them without success labels."""
    root = tmp_path_factory.mktemp("rank")
    for name in MANIFEST:
        shutil.copytree(recorded[0].root, root / "logs" / name)
    info_path = root / "logs" / "unlabeled" / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    del info["features"]["next.success"]  # as hardware logs without success labels would be
    info_path.write_text(json.dumps(info))
    (root / "zoo.yaml").write_text(json.dumps(MANIFEST))  # JSON is YAML
    return root, _checkpoint(recorded, root / "ckpt")


def _flags(root, ckpt, out, *extra):
    return [
        f"--checkpoint={ckpt}", f"--logs_dir={root / 'logs'}", f"--policies={root / 'zoo.yaml'}",
        f"--output_dir={out}", "--samples_per_start=2", "--max_steps=10", "--n_boot=200", *extra,
    ]  # fmt: skip


def test_rank_cli_isolates_failures_and_writes_report(setup, capsys):
    root, ckpt = setup
    assert main(_flags(root, ckpt, root / "one")) == 1  # some checkpoints failed: exit code says so
    printed = capsys.readouterr().out
    payload = json.loads((root / "one" / "rank.json").read_text())
    assert sorted(p["name"] for p in payload["policies"]) == ["reach_high", "reach_low"]
    failed = {f["name"]: f["error"] for f in payload["failed"]}
    assert set(failed) == {"crashes", "unlabeled"}
    assert (
        "policy helpers.policies:make_faulty raised at step 2 of episodes ['0.0', '1.0', '0.1', '1.1']"
        in failed["crashes"]
    )
    assert "no success labels" in failed["unlabeled"] and "unlabeled" in failed["unlabeled"]
    assert "FAILED crashes" in printed and "reach_low" in printed
    for p in payload["policies"]:
        rows = [json.loads(x) for x in (root / "one" / "policies" / p["name"] / "episodes.jsonl").open()][1:]
        assert len(rows) == 4  # 2 logged starts x 2 samples
        assert p["imagined"]["all"]["successes"] == sum(r["success"] for r in rows)
        assert p["imagined_head"]["all"]["successes"] == sum(r["head_success"] for r in rows)
        assert p["imagined_head"]["id"]["trials"] == 2  # the head's verdict, split like the judge's
        assert p["imagined_judge"] is None  # only frames drawn from the head's state keep the judge's apart
        assert p["real"]["all"]["trials"] == 2 and p["real"]["id"]["trials"] == 1  # one start per split
        fractions = [e["imagined_success"] for e in p["episodes"]]
        assert fractions == [sum(r["success"] for r in rows if r["episode"] == ep) / 2 for ep in (0, 1)]
    assert payload["metrics"]["all"]["n"] == 2
    assert (root / "one" / "report.html").stat().st_size > 0


def test_ray_workers_give_the_single_process_results(setup):
    root, ckpt = setup
    common = dict(checkpoint=ckpt, logs_dir=str(root / "logs"), policies=str(root / "zoo.yaml"), n_boot=200)
    common.update(samples_per_start=2, max_steps=10, report=False)
    here = rank(RankConfig(output_dir=str(root / "here"), **common))
    fanned = rank(RankConfig(output_dir=str(root / "ray"), workers=2, **common))
    for p in here["policies"]:
        one, two = (root / d / "policies" / p["name"] / "episodes.jsonl" for d in ("here", "ray"))
        assert results_digest(one) == results_digest(two)
    assert here["policies"] == fanned["policies"] and here["metrics"] == fanned["metrics"]
    assert here["failed"] == fanned["failed"]  # a failing policy in a worker is reported the same way


def test_checkpoint_cameras_must_match_the_logs(setup, recorded, tmp_path):
    root, _ = setup
    ckpt = _checkpoint(recorded, tmp_path / "angle", cameras=("top", "angle"))
    payload = rank(
        RankConfig(checkpoint=ckpt, logs_dir=str(root / "logs"), policies=str(root / "zoo.yaml"),
                   output_dir=str(tmp_path / "out"), max_steps=10, report=False)
    )  # fmt: skip
    assert payload["policies"] == []
    errors = {f["name"]: f["error"] for f in payload["failed"]}
    assert "no camera ['angle']" in errors["reach_low"] and "reach_high" in errors


def test_video_choice_prefers_a_success_and_the_nearest_miss():
    real = [
        {"episode": 0, "success": False, "max_reward": 1.0},
        {"episode": 1, "success": False, "max_reward": 3.0},
        {"episode": 2, "success": True, "max_reward": 4.0},
        {"episode": 3, "success": False, "max_reward": 2.0},
    ]
    assert choose_videos(real, 2) == [(2, "real success"), (1, "near miss (real reward 3 of 4)")]
    assert choose_videos(real[:1], 2) == []  # reward 1 (touched only) is no near miss
