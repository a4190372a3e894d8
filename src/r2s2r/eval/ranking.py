"""How well success rates imagined in the world model rank policy checkpoints the way hardware does.

Each policy (checkpoint) has a success rate measured on the robot ("real", R) and one measured by rolling
it out in the learned simulator ("imagined", S), both in [0, 1] and given in the same policy order. A world
model is useful for model selection when S orders policies as R does, so besides correlations this module
has the ranking metrics of SIMPLER (Li et al. 2024, arXiv:2405.05941): the Mean Maximum Rank Violation and
the fraction of policy pairs ordered correctly, plus a linear calibration of R on S. With a handful of
policies every number is noisy, so `compare` attaches percentile bootstrap intervals over policies, and
`wilson_interval` gives the binomial uncertainty of a single measured rate.

All functions are pure and deterministic (the bootstrap takes a seed). Statistics that are undefined for
the input (a correlation of a constant vector, an accuracy over no pairs) return nan; `compare` turns nan
into None so its result is JSON-ready.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

import numpy as np

# Rate differences within this of `min_gap` count as reaching it, so that e.g. 0.35 - 0.2 passes 0.15.
GAP_TOLERANCE = 1e-9


def _as_values(values: Sequence[float] | np.ndarray, name: str, where: str, rates: bool) -> np.ndarray:
    """Return `values` as a 1-D float64 array, or raise ValueError naming `where` and `name`."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            f"{where}: {name} has shape {arr.shape}; pass a non-empty 1-D sequence, one per policy."
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{where}: {name} contains NaN or inf at index {int(np.argmin(np.isfinite(arr)))}.")
    if rates and ((arr < 0).any() or (arr > 1).any()):
        bad = arr[(arr < 0) | (arr > 1)][0]
        raise ValueError(f"{where}: {name} has rate {bad:g} outside [0, 1]; pass success fractions, not %.")
    return arr


def _as_pair(
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    where: str,
    names: tuple[str, str] = ("x", "y"),
    rates: bool = False,
    min_n: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate two paired per-policy vectors: same length, finite, at least `min_n`, rates in [0, 1]."""
    a = _as_values(x, names[0], where, rates)
    b = _as_values(y, names[1], where, rates)
    if a.size != b.size:
        raise ValueError(
            f"{where}: {names[0]} has {a.size} values and {names[1]} {b.size}; pass one per policy."
        )
    if a.size < min_n:
        raise ValueError(f"{where}: got {a.size} policies; it needs at least {min_n}.")
    return a, b


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a success rate measured as `successes` out of `trials` episodes.

    Unlike the normal (Wald) interval it stays inside [0, 1] and is not degenerate at 0/n or n/n, which
    are common with a few dozen hardware episodes.

    Args:
        successes: number of successful episodes, 0 <= successes <= trials.
        trials: number of episodes. With 0 trials nothing is known and the interval is (0.0, 1.0).
        z: standard-normal quantile of the two-sided level (1.96 for 95%).

    Returns:
        (lo, hi) bounds on the success rate.
    """
    try:
        k, n = operator.index(successes), operator.index(trials)
    except TypeError:
        raise ValueError(f"wilson_interval: got {successes!r}/{trials!r}; pass integer counts.") from None
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"wilson_interval: got {k}/{n}; need 0 <= successes <= trials.")
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"wilson_interval: z={z} must be positive, e.g. 1.96 for a 95% interval.")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # At 0/n the lower bound is exactly 0 and at n/n the upper exactly 1; float round-off misses both.
    lo = 0.0 if k == 0 else max(0.0, center - half)
    hi = 1.0 if k == n else min(1.0, center + half)
    return lo, hi


def _is_constant(a: np.ndarray) -> bool:
    return bool((a == a[0]).all())


# The three correlations are written out rather than taken from scipy.stats: scipy's per-call overhead
# (~0.5 ms) dominates the thousands of bootstrap resamples of a few policies, while each formula is two
# lines of numpy. The tests check them against scipy.stats.pearsonr / spearmanr / kendalltau.


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    da, db = a - a.mean(), b - b.mean()
    r = (da * db).sum() / math.sqrt((da * da).sum() * (db * db).sum())
    return float(np.clip(r, -1.0, 1.0))


def _average_ranks(a: np.ndarray) -> np.ndarray:
    """1-based ranks of `a`, tied values sharing the mean of the ranks they span."""
    below = (a[None, :] < a[:, None]).sum(axis=1)  # (N,) values strictly smaller than a_i
    equal = (a[None, :] == a[:, None]).sum(axis=1)  # (N,) values equal to a_i, itself included
    return below + (equal + 1) / 2


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Pearson correlation of paired per-policy values (any finite reals, at least 2).

    Returns:
        The correlation in [-1, 1], or nan when x or y is constant (the correlation is undefined).
    """
    a, b = _as_pair(x, y, "pearson", min_n=2)
    if _is_constant(a) or _is_constant(b):
        return math.nan
    return _pearson(a, b)


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation: Pearson correlation of the ranks, tied values getting their average rank.

    Returns:
        The correlation in [-1, 1], or nan when x or y is constant.
    """
    a, b = _as_pair(x, y, "spearman", min_n=2)
    if _is_constant(a) or _is_constant(b):
        return math.nan
    return _pearson(_average_ranks(a), _average_ranks(b))


def kendall(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Kendall tau-b: (concordant - discordant) / sqrt((n0 - ties_x) * (n0 - ties_y)) over the n0 pairs.

    Tau-b corrects tau for ties, which are frequent among success rates measured over few episodes: a pair
    tied in x only counts in the x factor of the denominator, one tied in both counts nowhere.

    Returns:
        The correlation in [-1, 1], or nan when x or y is constant.
    """
    a, b = _as_pair(x, y, "kendall", min_n=2)
    if _is_constant(a) or _is_constant(b):
        return math.nan
    sa = np.sign(a[:, None] - a[None, :])  # (N, N) order of each pair in x; 0 for a tie
    sb = np.sign(b[:, None] - b[None, :])  # (N, N)
    # every pair appears twice, as (i, j) and (j, i), in numerator and denominator alike
    tau = (sa * sb).sum() / math.sqrt(np.abs(sa).sum() * np.abs(sb).sum())
    return float(np.clip(tau, -1.0, 1.0))


def bootstrap_interval(
    stat: Callable[[np.ndarray, np.ndarray], float],
    x: Sequence[float] | np.ndarray,
    y: Sequence[float] | np.ndarray,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of `stat(x, y)`, resampling policies (the (x_i, y_i) pairs).

    The policies are the unit of replication: which checkpoints were evaluated is the main source of
    variation of a ranking statistic. Resamples where `stat` is nan (e.g. a correlation of a resample that
    drew a single distinct policy) are left out.

    Args:
        stat: function of two paired 1-D arrays returning a float, e.g. `spearman`.
        x: per-policy values, e.g. real success rates.
        y: paired per-policy values, e.g. imagined success rates.
        n_boot: number of resamples.
        level: coverage of the interval, in (0, 1).
        seed: seed of the resampling; the same seed gives the same interval.

    Returns:
        (lo, hi), or (nan, nan) when every resample gave nan.
    """
    a, b = _as_pair(x, y, "bootstrap_interval")
    if n_boot < 1:
        raise ValueError(f"bootstrap_interval: n_boot={n_boot} must be at least 1, e.g. 2000.")
    if not 0 < level < 1:
        raise ValueError(f"bootstrap_interval: level={level} must be in (0, 1), e.g. 0.95.")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(n_boot, a.size))  # (n_boot, N) policy indices
    values = np.array([stat(a[i], b[i]) for i in idx], dtype=np.float64)  # (n_boot,)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return math.nan, math.nan
    alpha = (1 - level) / 2
    lo, hi = np.quantile(values, [alpha, 1 - alpha])
    return float(lo), float(hi)


def mmrv(real: Sequence[float] | np.ndarray, imagined: Sequence[float] | np.ndarray) -> float:
    """Mean Maximum Rank Violation of imagined success rates against real ones (lower is better, 0 perfect).

    From SIMPLER (Li et al. 2024, "Evaluating Real-World Robot Manipulation Policies in Simulation",
    arXiv:2405.05941), with R the real and S the simulated (here imagined) rates of N policies:

        MMRV = (1/N) * sum_i max_j |R_i - R_j| * 1[(S_i < S_j) != (R_i < R_j)]

    Each policy is charged the largest real gap to a policy it is misordered with, so an inversion between
    policies whose real rates are far apart costs more than one between near-equals. It is in [0, 1].

    Ties follow the formula literally (strict <). A real tie costs nothing (|R_i - R_j| = 0). An imagined
    tie S_i = S_j between policies with R_i < R_j is a violation, charged to i, the one with the lower real
    rate. SIMPLER's released code (simpler_env/utils/metrics.py) tests `>` instead, charging such a pair to
    j; the two agree whenever no imagined rates tie, and may differ otherwise.

    Args:
        real: (N,) real success rates in [0, 1].
        imagined: (N,) imagined success rates of the same policies, same order.

    Returns:
        The MMRV, in [0, 1].
    """
    R, S = _as_pair(real, imagined, "mmrv", names=("real", "imagined"), rates=True)
    r_less = R[:, None] < R[None, :]  # (N, N) [i, j] = R_i < R_j
    s_less = S[:, None] < S[None, :]  # (N, N)
    gap = np.abs(R[:, None] - R[None, :])  # (N, N)
    violation = np.where(s_less != r_less, gap, 0.0)  # (N, N)
    return float(violation.max(axis=1).mean())


def pairwise_accuracy(
    real: Sequence[float] | np.ndarray, imagined: Sequence[float] | np.ndarray, min_gap: float = 0.0
) -> tuple[float, int]:
    """Fraction of policy pairs that the imagined rates order the same way as the real ones.

    Only pairs i < j with R_i != R_j and |R_i - R_j| >= min_gap count (to within 1e-9), so that e.g.
    `min_gap=0.15` asks only about differences large enough to be real rather than episode noise. An
    imagined tie (S_i = S_j) of a counted pair is wrong: the model failed to tell the two policies apart.

    Args:
        real: (N,) real success rates in [0, 1].
        imagined: (N,) imagined success rates of the same policies, same order.
        min_gap: smallest real difference for a pair to count, in [0, 1].

    Returns:
        (accuracy, pairs): the fraction ordered correctly (nan if no pair counts) and the number of pairs.
    """
    R, S = _as_pair(real, imagined, "pairwise_accuracy", names=("real", "imagined"), rates=True)
    if not 0 <= min_gap <= 1:
        raise ValueError(f"pairwise_accuracy: min_gap={min_gap} must be in [0, 1], e.g. 0.15.")
    i, j = np.triu_indices(R.size, k=1)  # each unordered pair once
    dr, ds = R[i] - R[j], S[i] - S[j]
    counted = (dr != 0) & (np.abs(dr) >= min_gap - GAP_TOLERANCE)
    pairs = int(counted.sum())
    if pairs == 0:
        return math.nan, 0
    correct = np.sign(ds[counted]) == np.sign(dr[counted])
    return float(correct.mean()), pairs


def calibration(real: Sequence[float] | np.ndarray, imagined: Sequence[float] | np.ndarray) -> dict:
    """Linear calibration of real rates on imagined ones, and their mean absolute error.

    Regresses real on imagined (real ~= slope * imagined + intercept, least squares), the direction in
    which one predicts hardware success from an imagined rate; a calibrated model has slope 1, intercept 0.

    Args:
        real: (N,) real success rates in [0, 1].
        imagined: (N,) imagined success rates of the same policies, same order.

    Returns:
        {"slope", "intercept", "mae_points"}: slope and intercept are nan when the imagined rates are all
        equal; mae_points is mean |imagined - real| in percentage points (0..100).
    """
    R, S = _as_pair(real, imagined, "calibration", names=("real", "imagined"), rates=True)
    mae_points = float(100 * np.abs(S - R).mean())
    if _is_constant(S):
        return {"slope": math.nan, "intercept": math.nan, "mae_points": mae_points}
    ds = S - S.mean()
    slope = float((ds * (R - R.mean())).sum() / (ds * ds).sum())
    intercept = float(R.mean() - slope * S.mean())
    return {"slope": slope, "intercept": intercept, "mae_points": mae_points}


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def compare(
    real_rates: Sequence[float] | np.ndarray,
    imagined_rates: Sequence[float] | np.ndarray,
    n_boot: int = 2000,
    seed: int = 0,
    gap: float = 0.15,
) -> dict:
    """Every statistic comparing imagined with real success rates of N >= 2 policies, JSON-ready.

    Args:
        real_rates: (N,) real success rates in [0, 1].
        imagined_rates: (N,) imagined success rates of the same policies, same order.
        n_boot: bootstrap resamples for the correlations' 95% intervals.
        seed: seed of the bootstrap.
        gap: `min_gap` of the second pairwise accuracy; its key is "gap_<percentage points>", e.g. "gap_15".

    Returns:
        {"n", "pearson": {"value", "ci": [lo, hi]}, "spearman": ..., "kendall": ..., "mmrv",
        "pairwise_accuracy": {"all": {"value", "pairs"}, "gap_15": {...}},
        "calibration": {"slope", "intercept", "mae_points"}}, with None wherever a value is undefined.
    """
    R, S = _as_pair(real_rates, imagined_rates, "compare", names=("real", "imagined"), rates=True, min_n=2)
    if not 0 <= gap <= 1:
        raise ValueError(f"compare: gap={gap} must be in [0, 1], e.g. 0.15.")
    out: dict = {"n": int(R.size)}
    for name, stat in (("pearson", pearson), ("spearman", spearman), ("kendall", kendall)):
        lo, hi = bootstrap_interval(stat, R, S, n_boot=n_boot, seed=seed)
        out[name] = {"value": _none_if_nan(stat(R, S)), "ci": [_none_if_nan(lo), _none_if_nan(hi)]}
    out["mmrv"] = mmrv(R, S)
    accuracy = {}
    for key, min_gap in (("all", 0.0), (f"gap_{round(gap * 100, 6):g}", gap)):
        value, pairs = pairwise_accuracy(R, S, min_gap=min_gap)
        accuracy[key] = {"value": _none_if_nan(value), "pairs": pairs}
    out["pairwise_accuracy"] = accuracy
    out["calibration"] = {k: _none_if_nan(v) for k, v in calibration(R, S).items()}
    return out
