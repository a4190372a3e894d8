"""Where the left fingers first close on the cube, and whether the episode succeeds: head.pad_overlap's edge.

The state head counts the cube as between a gripper's pads (so that the gripper can carry and hold it)
where it overlaps the pads' faces by `head.pad_overlap` (5 mm of the 4 cm cube as committed): its centre may
lie up to 15 mm outside the faces. This study reads real logs that `benchmarks/generalization.py` recorded
(`--logs`: the spent `pincer` and `joust` by default) and finds, in each episode, the left gripper's first
close on the cube: the first frame with its opening under CLOSED and the cube where closing fingers meet it
(`StateDynamicsHead.meets`). There it measures how far the cube's centre lies inside the pads' faces along
each axis of the faces' plane (negative: outside), and tables the episodes' recorded success by the smaller
of the two. A logistic fit of success on that margin gives the margin where success crosses one half.

These are the real states, before any imagination: what the reference world does with such grasps.

Prints the tables; writes benchmarks/results/archive/left_takes.json.

Usage:
    python benchmarks/studies/left_takes.py      # ~1 minute, after the gate runs of pincer and joust
"""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.model.modeling_world_model import WorldModel  # noqa: E402

LEFT, LEFT_GRIP = 0, 6  # the left gripper's index among the grasp frames, and its opening in the state
CLOSED = 0.66  # raw opening: under it the left fingers are on the cube (its width held square: 0.61)
ASSET = "assets/world_model_coverage"
LOGS = ("outputs/bench/generalization_heldout/logs/pincer", "outputs/bench/generalization_joust/logs/joust")
BINS_MM = (-30, -16, -12, -8, -4, 0, 4, 30)


def first_close(head, states: torch.Tensor, env: torch.Tensor) -> dict | None:
    """The left's first close on the cube in one episode (states (T,S), env (T,7)): the cube's centre inside
    the pads' faces along each face axis (m, negative outside), or None where it never closes on it."""
    fk = head.fk
    point, rot = fk(states)
    rel = (rot.transpose(-1, -2) @ (env[:, None, :3] - point)[..., None])[..., 0]  # (T,G,3)
    on = (head.meets(rel)[:, LEFT] > 0.5) & (states[:, LEFT_GRIP] < CLOSED)
    if not bool(on.any()):
        return None
    t = int(on.nonzero()[0])
    inside = fk.face_half.double() - (rel[t, LEFT, fk.face_axes].double() - fk.face_centre.double()).abs()
    return {"frame": t, "inside_m": [float(v) for v in inside], "margin_m": float(inside.min())}


def closes(head, roots: list[str]) -> pd.DataFrame:
    """One row per episode with a left close on the cube: policy, margins, recorded success."""
    rows = []
    for root in roots:
        for path in sorted(glob.glob(f"{root}/*/data/*/*.parquet")):
            policy = Path(path).parents[2].name
            for episode, e in pd.read_parquet(path).groupby("episode_index"):
                states = torch.tensor(np.stack(e["observation.state"].values)).float()
                env = torch.tensor(np.stack(e["observation.environment_state"].values)).float()
                found = first_close(head, states, env)
                if found is not None:
                    rows.append({"policy": policy, "episode": int(episode), **found,
                                 "success": bool(e["next.success"].max())})  # fmt: skip
    if not rows:
        raise SystemExit(
            f"no left close on the cube in {roots}: record them with benchmarks/generalization.py."
        )
    return pd.DataFrame(rows)


def half_point(margin_mm: np.ndarray, success: np.ndarray) -> tuple[float, float]:
    """Logistic fit of success on the margin (mm, clipped to +-30): the margin where it crosses one half,
    and the slope per mm."""
    x = torch.tensor(np.clip(margin_mm, -30, 30)).double()
    y = torch.tensor(success).double()
    a = torch.tensor([0.3, 0.0], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([a], max_iter=200, line_search_fn="strong_wolfe")

    def loss():
        opt.zero_grad()
        value = torch.nn.functional.binary_cross_entropy_with_logits(a[0] * (x - a[1]), y)
        value.backward()
        return value

    opt.step(loss)
    return float(a[1].detach()), float(a[0].detach())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", default=",".join(LOGS), help="family log folders, comma-separated")
    parser.add_argument("--out", default="benchmarks/results/archive/left_takes.json")
    args = parser.parse_args()
    head = WorldModel.from_pretrained(ASSET).state_head
    table = closes(head, args.logs.split(","))
    mm = table["margin_m"].to_numpy() * 1000
    bins = pd.cut(mm, BINS_MM)
    by_bin = table.groupby(bins, observed=True)["success"].agg(["count", "mean"])
    rows = [[str(b), int(r["count"]), round(100 * r["mean"])] for b, r in by_bin.iterrows()]
    print_table("left's first close on the cube: success by the centre's margin inside the faces (mm)",
                ["margin (mm)", "episodes", "success (%)"], rows)  # fmt: skip
    per = table.groupby("policy").agg(episodes=("success", "size"), margin=("margin_m", "median"),
                                      success=("success", "mean"))  # fmt: skip
    policy_rows = [
        [p, int(r.episodes), round(1000 * r.margin, 1), round(100 * r.success)] for p, r in per.iterrows()
    ]
    print_table("per policy", ["policy", "episodes", "median margin (mm)", "success (%)"], policy_rows)
    half, slope = half_point(mm, table["success"].to_numpy().astype(float))
    print(
        f"\nlogistic fit: success crosses one half at a margin of {half:.1f} mm (negative: outside the faces;"
    )
    print(f"slope {slope:.2f} / mm)")
    write_json(args.out, {
        "machine": machine_info(), "logs": args.logs.split(","), "asset": ASSET, "closed_below": CLOSED,
        "episodes": len(table), "bins_mm": rows, "policies": policy_rows,
        "half_point_mm": half, "slope_per_mm": slope,
    })  # fmt: skip


if __name__ == "__main__":
    main()
