"""Ranking statistics match values worked out by hand, treat ties as documented, and refuse bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from r2s2r.eval.ranking import (
    bootstrap_interval,
    calibration,
    compare,
    kendall,
    mmrv,
    pairwise_accuracy,
    pearson,
    spearman,
    wilson_interval,
)


def test_wilson_interval_of_8_out_of_10_matches_the_formula():
    # p = 0.8, n = 10, z^2 = 3.8416, z^2/n = 0.38416, so the denominator is 1.38416
    # center = (p + z^2/2n) / 1.38416 = 0.99208 / 1.38416 = 0.716738
    # half = z / 1.38416 * sqrt(p(1-p)/n + z^2/4n^2) = 1.96 / 1.38416 * sqrt(0.016 + 0.009604) = 0.226581
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.716738 - 0.226581, abs=2e-6)  # 0.490157
    assert hi == pytest.approx(0.716738 + 0.226581, abs=2e-6)  # 0.943319
    # the interval of 2/10 is that of 8/10 mirrored about 1/2
    assert wilson_interval(2, 10) == pytest.approx((1 - hi, 1 - lo), abs=1e-12)


def test_wilson_interval_at_the_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)  # no episodes: nothing known
    lo, hi = wilson_interval(0, 10)
    # at k = 0 the bounds are 0 and (z^2/n) / (1 + z^2/n) = 0.38416 / 1.38416
    assert lo == 0.0
    assert hi == pytest.approx(0.38416 / 1.38416, rel=1e-12)  # 0.277540
    assert wilson_interval(10, 10) == pytest.approx((1 - hi, 1.0), abs=1e-12)
    assert wilson_interval(10, 10)[1] == 1.0
    assert all(wilson_interval(n, n)[1] == 1.0 and wilson_interval(0, n)[0] == 0.0 for n in range(1, 200))
    # a wider z gives a wider interval
    lo99, hi99 = wilson_interval(8, 10, z=2.576)
    assert lo99 < 0.490157 and hi99 > 0.943319


def test_pearson_by_hand_and_constant_input_is_nan():
    # dx = (-.5, 0, .5), dy = (-.5, .5, 0): sum dx dy = .25, sum dx^2 = sum dy^2 = .5, r = .25 / .5
    assert pearson([0.0, 0.5, 1.0], [0.0, 1.0, 0.5]) == pytest.approx(0.5, abs=1e-12)
    assert pearson([0.1, 0.2, 0.3], [0.9, 0.7, 0.5]) == pytest.approx(-1.0, abs=1e-12)
    for f in (pearson, spearman, kendall):
        assert math.isnan(f([0.3, 0.3, 0.3], [0.1, 0.5, 0.9]))
        assert math.isnan(f([0.1, 0.5, 0.9], [0.4, 0.4, 0.4]))


def test_spearman_and_kendall_with_ties_by_hand():
    x = [0.1, 0.4, 0.4, 0.8]
    y = [0.3, 0.2, 0.6, 0.6]
    # average ranks: x -> (1, 2.5, 2.5, 4), y -> (2, 1, 3.5, 3.5), both with mean 2.5
    # dx = (-1.5, 0, 0, 1.5), dy = (-.5, -1.5, 1, 1): sum dx dy = .75 + 1.5 = 2.25,
    # sum dx^2 = 4.5, sum dy^2 = .25 + 2.25 + 1 + 1 = 4.5, rho = 2.25 / 4.5 = 0.5
    assert spearman(x, y) == pytest.approx(0.5, abs=1e-12)
    # pairs: (0,1) discordant, (0,2) (0,3) (1,3) concordant, (1,2) tied in x only, (2,3) tied in y only
    # tau-b = (C - D) / sqrt((C + D + Tx)(C + D + Ty)) = (3 - 1) / sqrt(5 * 5) = 0.4
    # (tau-a, which ignores ties, would give (3 - 1) / 6 = 0.333)
    assert kendall(x, y) == pytest.approx(0.4, abs=1e-12)


def test_correlations_agree_with_scipy_on_tied_rates():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(50):
        n = int(rng.integers(2, 10))
        x, y = rng.integers(0, 5, n) / 4, rng.integers(0, 5, n) / 4  # rates of 4 episodes: many ties
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
        assert kendall(x, y) == pytest.approx(stats.kendalltau(x, y, variant="b").statistic, abs=1e-12)
        checked += 1
    assert checked > 30


def test_mmrv_by_hand():
    real = [0.2, 0.5, 0.9]
    # same order in imagination, whatever the values: no violation
    assert mmrv(real, [0.1, 0.3, 0.95]) == 0.0
    # S = (.4, .3, .8) swaps policies 0 and 1: each is charged |.2 - .5| = .3, policy 2 nothing
    # MMRV = (.3 + .3 + 0) / 3 = 0.2
    assert mmrv(real, [0.4, 0.3, 0.8]) == pytest.approx(0.2, abs=1e-12)
    # fully reversed: policy 0 and 2 are charged .7, policy 1 max(.3, .4) = .4: (0.7 + 0.4 + 0.7) / 3
    assert mmrv(real, [0.9, 0.5, 0.2]) == pytest.approx(0.6, abs=1e-12)


def test_mmrv_ties_follow_the_strict_formula():
    # real tie: policies 0 and 1 misordered in imagination, but |R_0 - R_1| = 0 costs nothing
    assert mmrv([0.5, 0.5, 0.9], [0.2, 0.3, 0.8]) == 0.0
    # imagined tie S_0 = S_1 with R_0 < R_1, and policy 2 (best in reality) worst in imagination
    real, imagined = [0.1, 0.5, 0.6], [0.5, 0.5, 0.2]
    # i=0: j=1 tie (S_0<S_1)=F != (R_0<R_1)=T -> .4; j=2 (F) != (T) -> .5; max .5
    # i=1: j=0 (F) == (F); j=2 (S_1<S_2)=F != (R_1<R_2)=T -> .1; max .1
    # i=2: j=0 (T) != (F) -> .5; j=1 (T) != (F) -> .1; max .5
    # MMRV = (.5 + .1 + .5) / 3 = 11/30. SIMPLER's code, testing '>', charges the tie to policy 1
    # instead, whose max becomes .4: (.5 + .4 + .5) / 3 = 14/30
    assert mmrv(real, imagined) == pytest.approx(11 / 30, abs=1e-12)


def test_pairwise_accuracy_with_min_gap():
    real = [0.1, 0.2, 0.5, 0.9]
    imagined = [0.3, 0.2, 0.5, 0.5]
    # pairs (real gap): (0,1) .1 wrong; (0,2) .4 right; (0,3) .8 right; (1,2) .3 right; (1,3) .7 right;
    # (2,3) .4 wrong (imagined tie)
    assert pairwise_accuracy(real, imagined) == (pytest.approx(4 / 6), 6)
    assert pairwise_accuracy(real, imagined, min_gap=0.15) == (pytest.approx(4 / 5), 5)  # drops (0,1)
    assert pairwise_accuracy(real, imagined, min_gap=0.5) == (1.0, 2)  # (0,3) and (1,3) only
    value, pairs = pairwise_accuracy(real, imagined, min_gap=0.85)
    assert math.isnan(value) and pairs == 0
    # real ties are never counted, even with min_gap 0; a gap of 0.35 - 0.2 reaches 0.15 despite round-off
    assert pairwise_accuracy([0.4, 0.4, 0.2], [0.1, 0.9, 0.0]) == (1.0, 2)
    assert pairwise_accuracy([0.2, 0.35], [0.6, 0.5], min_gap=0.15) == (0.0, 1)


def test_calibration_recovers_an_exact_line():
    imagined = [0.1, 0.2, 0.3, 0.4]
    real = [2 * s + 0.1 for s in imagined]  # (.3, .5, .7, .9)
    out = calibration(real, imagined)
    assert out["slope"] == pytest.approx(2.0, abs=1e-12)
    assert out["intercept"] == pytest.approx(0.1, abs=1e-12)
    # |imagined - real| = (.2, .3, .4, .5): mean .35 = 35 points
    assert out["mae_points"] == pytest.approx(35.0, abs=1e-9)
    flat = calibration([0.2, 0.6], [0.5, 0.5])
    assert math.isnan(flat["slope"]) and math.isnan(flat["intercept"])
    assert flat["mae_points"] == pytest.approx(20.0)  # (30 + 10) / 2 points


REAL = [0.1, 0.3, 0.35, 0.6, 0.8, 0.9]
IMAGINED = [0.2, 0.25, 0.5, 0.45, 0.7, 0.95]


def test_bootstrap_interval_is_seeded_and_contains_the_estimate():
    for stat in (pearson, spearman, kendall):
        lo, hi = bootstrap_interval(stat, REAL, IMAGINED, n_boot=300, seed=3)
        assert -1 <= lo <= stat(REAL, IMAGINED) <= hi <= 1
        assert lo < hi
        assert bootstrap_interval(stat, REAL, IMAGINED, n_boot=300, seed=3) == (lo, hi)
    assert bootstrap_interval(pearson, REAL, IMAGINED, n_boot=300, seed=4) != bootstrap_interval(
        pearson, REAL, IMAGINED, n_boot=300, seed=3
    )
    # a narrower level gives a narrower interval from the same resamples
    lo50, hi50 = bootstrap_interval(pearson, REAL, IMAGINED, n_boot=300, level=0.5, seed=3)
    lo95, hi95 = bootstrap_interval(pearson, REAL, IMAGINED, n_boot=300, seed=3)
    assert lo95 < lo50 < hi50 < hi95
    # every resample of a constant vector has an undefined correlation
    nan_lo, nan_hi = bootstrap_interval(pearson, [0.5] * 4, [0.1, 0.2, 0.3, 0.4], n_boot=50)
    assert math.isnan(nan_lo) and math.isnan(nan_hi)


def test_compare_is_json_ready_and_names_the_gap():
    out = compare(REAL, IMAGINED, n_boot=200, seed=1)
    json.dumps(out, allow_nan=False)  # raises on nan or numpy types that json refuses
    assert out["n"] == 6
    assert set(out["pairwise_accuracy"]) == {"all", "gap_15"}
    # only (2,3) is misordered (.35 < .6 but .5 > .45); its real gap .25 counts at 0.15, not at 0.3
    assert out["pairwise_accuracy"]["all"] == {"value": pytest.approx(14 / 15), "pairs": 15}
    # real gaps under .15: (0.3, 0.35) and (0.8, 0.9)
    assert out["pairwise_accuracy"]["gap_15"] == {"value": pytest.approx(12 / 13), "pairs": 13}
    assert out["spearman"]["value"] == pytest.approx(spearman(REAL, IMAGINED))
    lo, hi = out["kendall"]["ci"]
    assert lo <= out["kendall"]["value"] <= hi
    # swapped policies 2 and 3 are each charged .25; the others nothing: MMRV = .5 / 6
    assert out["mmrv"] == pytest.approx(0.5 / 6, abs=1e-12)
    assert out["calibration"]["mae_points"] == pytest.approx(10.0)
    assert set(compare(REAL, IMAGINED, n_boot=10, gap=0.3)["pairwise_accuracy"]) == {"all", "gap_30"}
    flat = compare([0.2, 0.6, 0.9], [0.5, 0.5, 0.5], n_boot=10)
    assert flat["pearson"] == {"value": None, "ci": [None, None]}
    assert flat["calibration"]["slope"] is None
    assert flat["pairwise_accuracy"]["all"] == {"value": 0.0, "pairs": 3}  # every imagined tie is wrong
    json.dumps(flat, allow_nan=False)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="real has 3 values and imagined 2"):
        mmrv([0.1, 0.2, 0.3], [0.1, 0.2])
    with pytest.raises(ValueError, match="x has 2 values and y 3"):
        spearman([0.1, 0.2], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="NaN or inf at index 1"):
        pairwise_accuracy([0.1, 0.2], [0.3, float("nan")])
    with pytest.raises(ValueError, match="NaN"):
        kendall([0.1, float("nan")], [0.1, 0.2])
    with pytest.raises(ValueError, match="rate 1.2 outside"):
        calibration([0.1, 1.2], [0.1, 0.2])
    with pytest.raises(ValueError, match="rate 1.2 outside"):
        compare([0.1, 0.5], [1.2, 0.2])
    with pytest.raises(ValueError, match="at least 2"):
        pearson([0.5], [0.5])
    with pytest.raises(ValueError, match="at least 2"):
        compare([0.5], [0.5])
    with pytest.raises(ValueError, match="non-empty"):
        mmrv([], [])
    with pytest.raises(ValueError, match="successes <= trials"):
        wilson_interval(11, 10)
    with pytest.raises(ValueError, match="integer counts"):
        wilson_interval(8.5, 10)
    with pytest.raises(ValueError, match="level"):
        bootstrap_interval(pearson, REAL, IMAGINED, level=95)
    with pytest.raises(ValueError, match="min_gap"):
        pairwise_accuracy(REAL, IMAGINED, min_gap=15)
