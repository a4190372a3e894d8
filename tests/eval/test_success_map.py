"""The success map: isotonic fits computed by hand, the map's reading, its file, and r2s2r-rank using it."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from r2s2r.eval.rank import RankConfig, rank
from r2s2r.eval.success_map import FILE, SuccessMap, isotonic, load_success_map, mapped_rates


def test_isotonic_pools_adjacent_violators_by_hand():
    x, y = isotonic([0.1, 0.2, 0.3, 0.4], [0.2, 0.1, 0.5, 0.4], [1, 1, 1, 1])
    np.testing.assert_allclose(x, [0.15, 0.35])  # (0.1, 0.2) and (0.3, 0.4) each pooled
    np.testing.assert_allclose(y, [0.15, 0.45])
    x, y = isotonic([0.0, 1.0], [1.0, 0.0], [3, 1])  # weighted: 3 episodes at 1.0, 1 at 0.0
    np.testing.assert_allclose([x[0], y[0]], [0.25, 0.75])
    x, y = isotonic([0.5, 0.5, 0.2], [0.1, 0.3, 0.9], [1, 1, 1])  # equal x pooled first, then the violation
    np.testing.assert_allclose([x[0], y[0]], [0.4, 1.3 / 3])
    x, y = isotonic([0.3, 0.1, 0.2], [0.3, 0.1, 0.2], [1, 2, 1])  # already increasing: every point kept
    np.testing.assert_allclose(x, [0.1, 0.2, 0.3])
    np.testing.assert_allclose(y, [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="weights must be positive"):
        isotonic([0.1], [0.2], [0])
    with pytest.raises(ValueError, match="non-empty and equal in length"):
        isotonic([0.1, 0.2], [0.2], [1, 1])


def test_map_reads_linear_between_knots_flat_beyond_and_keeps_the_order():
    success_map = SuccessMap.fit([0.1, 0.2, 0.3, 0.4], [0.2, 0.1, 0.5, 0.4], [1, 1, 1, 1], "by hand")
    assert success_map.points == 4 and success_map.source == "by hand"
    assert success_map(0.25) == pytest.approx(0.15 + 0.5 * 0.30)
    assert success_map(0.0) == pytest.approx(0.15) and success_map(1.0) == pytest.approx(0.45)
    rates = [0.0, 0.12, 0.2, 0.33, 0.9]
    assert np.all(np.diff([success_map(r) for r in rates]) >= 0)
    entry = {"id": {"rate": 0.25, "trials": 10, "successes": 2}}
    assert mapped_rates(entry, success_map) == {
        "id": {"rate": pytest.approx(0.3), "trials": 10, "successes": 2}
    }


def test_the_file_round_trips_and_a_broken_one_is_refused_by_name(tmp_path):
    assert load_success_map(tmp_path) is None  # a model without a map
    saved = SuccessMap([0.0, 1.0], [0.2, 0.6], "by hand", 2)
    saved.save(tmp_path)
    assert load_success_map(tmp_path) == saved
    (tmp_path / FILE).write_text('{"imagined": [0.0, 1.0], "real": [0.6, 0.2], "source": "x", "points": 2}')
    with pytest.raises(ValueError, match=f"{tmp_path / FILE} is not a success map"):
        load_success_map(tmp_path)
    (tmp_path / FILE).write_text("{truncated")
    with pytest.raises(ValueError, match="is not a success map .*delete it or fit it again"):
        load_success_map(tmp_path)


def test_rank_reports_each_policy_through_the_models_map(recorded, tmp_path):
    from test_rank import MANIFEST, _checkpoint

    for name in ("reach_low", "reach_high"):
        shutil.copytree(recorded[0].root, tmp_path / "logs" / name)
    (tmp_path / "zoo.json").write_text(json.dumps({n: MANIFEST[n] for n in ("reach_low", "reach_high")}))
    ckpt = _checkpoint(recorded, tmp_path / "ckpt")
    SuccessMap([0.0, 1.0], [0.2, 0.6], "two families, by hand", 2).save(ckpt)  # mapped = 0.2 + 0.4 x
    payload = rank(
        RankConfig(checkpoint=ckpt, logs_dir=str(tmp_path / "logs"), policies=str(tmp_path / "zoo.json"),
                   output_dir=str(tmp_path / "out"), samples_per_start=2, max_steps=10, n_boot=200)
    )  # fmt: skip
    assert len(payload["policies"]) == 2 and payload["success_map"]["source"] == "two families, by hand"
    for p in payload["policies"]:
        for split, entry in p["imagined"].items():
            assert p["imagined_mapped"][split]["rate"] == pytest.approx(0.2 + 0.4 * entry["rate"])
    assert payload["success_map"]["metrics"]["all"]["n"] == 2
    page = (tmp_path / "out" / "report.html").read_text()
    assert 'id="success-map"' in page and "two families, by hand" in page
