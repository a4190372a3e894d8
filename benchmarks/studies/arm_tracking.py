"""Which form of `head.arm_tracking`: where the imagined arm ends each frame, against the logged arm.

A real arm lags its position targets; `head.arm_targets` puts the imagined arm at the frame's last target.
This fits four ways of doing better on the coverage data (the same robust least squares as
`r2s2r.training.head.fit_arm_tracking`) and measures, on logged episodes, how far the gripper (forward
kinematics of the joints) lands from the logged one when each is rolled over whole episodes, fed its own
previous joints as imagination would:

- `last_target`: the arms at the frame's last target (`head.arm_targets`);
- `all_joints`: each joint from all arm joints' lag behind their targets, the targets' moves over the
  frame's last control step and over the frame, their sine and cosine, and 1;
- `per_joint`: the same features, each joint its own only;
- `commands`: each joint from its own target's two moves and 1, not where the arm is (`head.arm_tracking`).

The logs: the design set's families (`generalization.py`'s waypoint, jointspace and act_b logs) and the
held-out coverage episodes. Writes benchmarks/results/archive/arm_tracking.json. Usage:
    python benchmarks/studies/arm_tracking.py        # about 2 minutes; needs coverage.sh's data and the
                                                     # design set's logs (generalization.py)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.robots.kinematics import GraspKinematics  # noqa: E402
from r2s2r.robots.spec import robot_spec  # noqa: E402

SPEC = robot_spec("aloha")
ARMS = [i for i in range(SPEC.state_dim) if i not in SPEC.gripper_indices]
STRIDE = 10  # control steps per model frame (the small model's frame_stride)
FORMS = ("last_target", "all_joints", "per_joint", "commands")


def episodes(files: list[Path]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(frames (T,S) every STRIDE steps, the commands between them (T-1,STRIDE,S)) of each episode."""
    columns = ["episode_index", "observation.state", "action"]
    table = pd.concat([pd.read_parquet(f, columns=columns) for f in files])
    out = []
    for _, rows in table.groupby("episode_index"):
        state = np.stack(rows["observation.state"].values).astype(np.float64)
        action = np.stack(rows["action"].values).astype(np.float64)
        n = (len(state) - 1) // STRIDE
        out.append((state[: n * STRIDE + 1 : STRIDE], action[: n * STRIDE].reshape(n, STRIDE, -1)))
    return out


def features(form: str, now: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """now (N,A), targets (N,K,A) -> (N,A,F) what `form` reads for each joint."""
    last = targets[:, -1]
    moves = [last - targets[:, -2], last - targets[:, 0]]
    if form == "commands":
        return np.stack([*moves, np.ones_like(last)], -1)
    own = np.stack([now - last, *moves, np.sin(last), np.cos(last), np.ones_like(last)], -1)
    if form == "per_joint":
        return own
    every = np.concatenate([own[..., :-1].transpose(0, 2, 1).reshape(len(now), -1), own[:, :1, -1]], -1)
    return np.repeat(every[:, None], now.shape[1], 1)


def fit(form: str, data, scale: float = 0.01, rounds: int = 8) -> np.ndarray:
    """(A,F) weights: each joint's end of frame less its last target, robust least squares."""
    now = np.concatenate([s[:-1][:, ARMS] for s, _ in data])
    end = np.concatenate([s[1:][:, ARMS] for s, _ in data])
    targets = np.concatenate([a[:, :, ARMS] for _, a in data])
    X, Y = features(form, now, targets), end - targets[:, -1]
    W = np.zeros(X.shape[1:])
    for _ in range(rounds):
        residual = Y - (X * W).sum(-1)
        for j in range(Y.shape[1]):
            weight = np.minimum(1.0, scale / np.maximum(np.abs(residual[:, j]), 1e-9))
            Xw = X[:, j] * weight[:, None]
            W[j] = np.linalg.solve(Xw.T @ X[:, j] + 1e-3 * np.eye(X.shape[-1]), Xw.T @ Y[:, j])
    return W


def rolled(form: str, W: np.ndarray | None, state: np.ndarray, action: np.ndarray) -> np.ndarray:
    """The episode's frames with the arm joints as `form` imagines them, each frame from the last."""
    out, now = [state[0]], state[0][ARMS]
    for t in range(len(action)):
        targets = action[t][:, ARMS]
        now = targets[-1].copy()
        if form != "last_target":
            now = now + (features(form, out[-1][None, ARMS], targets[None])[0] * W).sum(-1)
        frame = state[t + 1].copy()
        frame[ARMS] = now
        out.append(frame)
    return np.array(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--coverage", default="outputs/coverage", help="coverage.sh's datasets")
    parser.add_argument(
        "--logs", default="outputs/bench/generalization/logs", help="generalization.py's logs"
    )
    parser.add_argument("--files", type=int, default=12, help="parquet files per coverage part to fit on")
    parser.add_argument("--per_set", type=int, default=150, help="episodes per set of logs measured")
    parser.add_argument("--out", default=str(Path(__file__).parents[1] / "results/archive/arm_tracking.json"))
    args = parser.parse_args()
    coverage = Path(args.coverage)
    train = episodes(
        [f for k in range(5) for f in sorted(coverage.glob(f"part{k}/data/*/*.parquet"))[: args.files]]
    )
    weights = {form: fit(form, train) for form in FORMS[1:]}
    fk = GraspKinematics(SPEC)
    sets = {
        fam: sorted(Path(args.logs).glob(f"{fam}/*/data/*/*.parquet"))
        for fam in ("waypoint", "jointspace", "act_b")
    }
    sets["coverage_heldout"] = sorted(coverage.glob("heldout/data/*/*.parquet"))
    figures, rows = {}, []
    for name, files in sets.items():
        logged = episodes(files)
        logged = logged[:: max(1, len(logged) // args.per_set)]
        figures[name] = {"episodes": len(logged)}
        for form in FORMS:
            errors = []
            for state, action in logged:
                with torch.no_grad():
                    imagined = fk(
                        torch.tensor(rolled(form, weights.get(form), state, action), dtype=torch.float32)
                    )[0]
                    real = fk(torch.tensor(state, dtype=torch.float32))[0]
                errors.append(100 * (imagined - real).norm(dim=-1).flatten().numpy())
            e = np.concatenate(errors)
            figures[name][form] = {
                "median_cm": np.median(e),
                "mean_cm": e.mean(),
                "p95_cm": np.percentile(e, 95),
            }
        rows.append([name] + [" / ".join(f"{v:.2f}" for v in figures[name][form].values()) for form in FORMS])
    print_table("gripper position error, whole episodes rolled (median / mean / 95th percentile, cm)",
                ["logs", *FORMS], rows)  # fmt: skip
    write_json(Path(args.out), {"machine": machine_info(), "settings": vars(args), "figures": figures})


if __name__ == "__main__":
    main()
