"""Held-out evaluation: a family whose policy recorded any of a model's data is caught, and the per-family
and pooled statistics are those computed by hand."""

from __future__ import annotations

import json

import pytest

from helpers.recordings import DEMONSTRATOR, blind_model, record_state_only
from r2s2r.data.provenance import generated_by, read_provenance
from r2s2r.eval.generalization import family_metrics, held_out_violations
from r2s2r.training.head import HeadTrainConfig, RefineConfig, refine_checkpoint


def test_a_family_whose_logs_trained_the_head_is_not_held_out(tmp_path):
    """Refining a head on a recording writes its provenance; the recording's policy is then refused as a
    held-out family, while another family passes."""
    data = record_state_only(tmp_path / "data", seed=3)
    model, _ = blind_model(data)
    start = model.save_pretrained(tmp_path / "start")
    assert held_out_violations(start, {"demo": {"path": DEMONSTRATOR}}) == [
        f"{start} has no provenance.json: which policies made its training data is unknown"
    ]
    refine_checkpoint(RefineConfig(
        checkpoint=str(start), data=[data], output_dir=str(tmp_path / "refined"), cameras=False,
        head=HeadTrainConfig(steps=2, batch_size=4, window=3),
    ))  # fmt: skip
    refined = tmp_path / "refined"
    entries = read_provenance(refined)
    assert entries == [{
        "root": data, "policy_path": DEMONSTRATOR, "policy_kwargs": {}, "episodes": 2, "stage": "refine_head",
    }]  # fmt: skip
    zoo = {
        "demo_sloppy": {"path": DEMONSTRATOR, "kwargs": {"skill": "sloppy"}, "family": "scripted"},
        "waypoint_nominal": {"path": "families.waypoint:make_policy", "kwargs": {}, "family": "waypoint"},
    }
    lines = held_out_violations(refined, zoo)
    assert len(lines) == 1 and lines[0].startswith("demo_sloppy (family scripted,") and data in lines[0]
    assert held_out_violations(refined, {"w": zoo["waypoint_nominal"]}) == []


def test_checkpoints_of_one_run_are_one_family(tmp_path):
    run = tmp_path / "zoo" / "act"
    for step in ("step_500", "step_3000"):
        (run / step).mkdir(parents=True)
    (tmp_path / "zoo" / "act_b" / "step_500").mkdir(parents=True)
    entries = [{"root": "r", "policy_path": str(run / "step_500"), "stage": "refine_head"}]
    assert generated_by(entries, str(run / "step_3000")) == entries  # a later checkpoint of the same run
    assert generated_by(entries, str(tmp_path / "zoo" / "act_b" / "step_500")) == []  # another run
    assert generated_by(entries, "r2s2r.robots.demonstrators:make_demonstrator") == []


def _rates(all_, id_, ood):
    return {s: {"rate": r} for s, r in (("all", all_), ("id", id_), ("ood", ood))}


def test_family_and_pooled_statistics_by_hand():
    """Pooled real (0.1, 0.5, 0.9, 0.3) vs imagined (0.2, 0.4, 0.8, 0.6): ranks (1,3,4,2) vs (1,2,4,3),
    Spearman 1 - 6 * 2 / (4 * 15) = 0.8, MAE (10 + 10 + 10 + 30) / 4 = 15 points. Each two-policy family
    keeps its order (Spearman 1); a family of one has no statistics."""
    real, imagined = (0.1, 0.5, 0.9, 0.3), (0.2, 0.4, 0.8, 0.6)
    policies = [
        {"name": f"p{i}", "family": fam, "real": _rates(r, r, r), "imagined": _rates(m, m, m)}
        for i, (fam, r, m) in enumerate(zip(("a", "a", "b", "b"), real, imagined, strict=True))
    ]
    policies.append({"name": "lone", "family": "c", "real": _rates(1, 1, 1), "imagined": _rates(0, 0, 0)})
    floor = {p["name"]: p["real"] for p in policies}  # a second real run that agrees exactly
    result = family_metrics(policies[:4] + [policies[4]], floor, n_boot=50)
    pooled = result["pooled"]["metrics"]["id"]
    assert pooled["n"] == 5  # the lone policy counts in the pool
    result = family_metrics(policies[:4], floor, n_boot=50)
    pooled = result["pooled"]
    assert pooled["metrics"]["id"]["spearman"]["value"] == pytest.approx(0.8)
    assert pooled["metrics"]["ood"]["calibration"]["mae_points"] == pytest.approx(15.0)
    assert pooled["noise_floor"]["id"]["spearman"]["value"] == pytest.approx(1.0)
    assert pooled["noise_floor"]["id"]["calibration"]["mae_points"] == pytest.approx(0.0)
    assert set(result["families"]) == {"a", "b"}
    assert result["families"]["b"]["metrics"]["all"]["spearman"]["value"] == pytest.approx(1.0)
    assert result["families"]["a"]["metrics"]["all"]["calibration"]["mae_points"] == pytest.approx(10.0)
    assert "c" not in family_metrics(policies, None, n_boot=50)["families"]
    json.dumps(result)  # JSON-ready


def test_uncertainty_against_error_by_hand(tmp_path):
    """A head whose dynamics predict no change keeps every member's cube where it started: spread 0, and
    the error of each frame is how far the real cube has moved from its start."""
    import numpy as np
    import torch

    from r2s2r.eval.generalization import uncertainty_vs_error

    data = record_state_only(tmp_path / "data", seed=4)
    model, episodes = blind_model(data)
    with torch.no_grad():
        model.state_head.dynamics.w2.zero_()
        model.state_head.dynamics.b2.zero_()
    result = uncertainty_vs_error(model, episodes, bins=2)
    moved = [
        (ep["observation.environment_state"][1:, :3] - ep["observation.environment_state"][:1, :3]).norm(
            dim=-1
        )
        for ep in episodes
    ]
    assert result["frames"] == sum(len(m) for m in moved)
    assert sum(b["frames"] for b in result["bins"]) == result["frames"]
    assert all(b["spread_m"] == pytest.approx(0.0, abs=1e-6) for b in result["bins"])
    mean_error = sum(b["error_m"] * b["frames"] for b in result["bins"]) / result["frames"]
    assert mean_error == pytest.approx(float(torch.cat(moved).mean()), rel=1e-4)
    assert max(float(torch.cat(moved).max()), mean_error) > 0.0 and np.isnan(result["spearman"])
