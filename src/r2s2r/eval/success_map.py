"""A world model's success map: imagined success rates turned into the real rates they stood for.

A state head that holds marginal grasps and hand-overs imagines failing policies succeeding: its rates
come out in the right order more often than at the right level. Ranked on policy families it was never
tuned on, the pairs (imagined rate, real rate) show how; a monotone map fitted to them (isotonic
regression, pool-adjacent-violators, each rate weighted by its episodes) turns a new policy's imagined
rate into an estimate of its real one. Being monotone it leaves the order (Spearman) as it was, up to
ties, and changes the levels (calibration MAE and slope). It is only worth keeping if it lowers the error
on families that played no part in fitting it: `source` says which did.

`success_map.json` beside a model's weights holds it; `r2s2r-rank` then reports each policy's mapped
rate beside the imagined one (`imagined_mapped`) and the ranking statistics of the mapped rates.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from r2s2r.files import atomic_write_text

FILE = "success_map.json"


def isotonic(x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing least-squares fit of y on x (pool-adjacent-violators): (knots x, knots y), one
    knot per pooled block at its weighted mean x, ties in x pooled first."""
    x, y, weight = (np.asarray(v, dtype=float) for v in (x, y, weight))
    if not (len(x) == len(y) == len(weight)) or len(x) == 0:
        raise ValueError(
            f"isotonic: x, y and weight must be non-empty and equal in length ({len(x)}, {len(y)})."
        )
    if (weight <= 0).any() or not np.isfinite(np.concatenate([x, y, weight])).all():
        raise ValueError("isotonic: weights must be positive and every value finite.")
    order = np.argsort(x, kind="stable")
    blocks: list[list[float]] = []  # [sum w*x, sum w*y, sum w]
    last_x = None
    for i in order:
        item = [weight[i] * x[i], weight[i] * y[i], weight[i]]
        if last_x is not None and x[i] == last_x:  # equal x: one block from the start
            blocks[-1] = [a + b for a, b in zip(blocks[-1], item, strict=True)]
        else:
            blocks.append(item)
        last_x = x[i]
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] > blocks[-1][1] / blocks[-1][2]:
            tail = blocks.pop()
            blocks[-1] = [a + b for a, b in zip(blocks[-1], tail, strict=True)]
    knots = np.array(blocks)
    return knots[:, 0] / knots[:, 2], knots[:, 1] / knots[:, 2]


@dataclass
class SuccessMap:
    """Knots of a non-decreasing map imagined rate -> real rate, linear between knots, flat beyond."""

    imagined: list[float]
    real: list[float]
    source: str  # what it was fitted on: families, policies, the model's name
    points: int  # (policy, split) rates it was fitted on

    @classmethod
    def fit(cls, imagined, real, trials, source: str) -> SuccessMap:
        x, y = isotonic(imagined, real, trials)
        return cls([round(float(v), 6) for v in x], [round(float(v), 6) for v in y], source, len(imagined))

    def __call__(self, rate: float) -> float:
        return float(np.interp(rate, self.imagined, self.real))

    def save(self, model_dir: str | Path) -> Path:
        path = Path(model_dir) / FILE
        atomic_write_text(path, json.dumps(asdict(self), indent=1) + "\n")
        return path


def load_success_map(model_dir: str | Path) -> SuccessMap | None:
    """The model's success map, or None if it has none; a file that is not one is refused by name."""
    path = Path(model_dir) / FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        found = SuccessMap(**raw)
        ok = len(found.imagined) == len(found.real) >= 1 and all(np.diff(found.real) >= -1e-9)
    except (json.JSONDecodeError, TypeError, ValueError) as e:
        raise ValueError(f"{path} is not a success map ({e}); delete it or fit it again.") from None
    if not ok or any(np.diff(found.imagined) <= 0):
        raise ValueError(f"{path} is not a success map (knots not increasing); delete it or fit it again.")
    return found


def mapped_rates(rates: dict[str, dict], success_map: SuccessMap) -> dict[str, dict]:
    """A policy's per-split rates ({split: {rate, ...}}) with each rate put through the map."""
    return {split: {**entry, "rate": success_map(entry["rate"])} for split, entry in rates.items()}
