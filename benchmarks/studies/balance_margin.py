"""Where a grasp lifts the cube: the coverage data's grasps by the cube's place between the fingers.

`head.balance` lets an imagined grasp lift the cube only where the cube's centre lies at least
`StateDynamicsHead.BALANCE_MARGIN` inside the pads' faces across gravity (`GraspKinematics.balance_margin`).
This reads that margin off the coverage recordings: every episode's first close of the right gripper on the
cube resting within 8 cm of its grasp point (the gripper open above 0.8, below 0.75 two frames later),
the cube's place in the gripper's frame two frames after the close began, and whether the cube was lifted
7 cm with that gripper near it within the next 25 frames (2 s). Only grasps centred across the closing axis
(within 8 mm) and with the faces upright (the vertical's share in their plane above 0.9) are tabled, so the
margin is what differs. Prints the lift rate by margin; writes benchmarks/results/archive/balance_margin.json.

Usage:
    python benchmarks/studies/balance_margin.py       # ~1 minute; needs coverage.sh's part0, part1, part4
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
from r2s2r.model.state_head import StateDynamicsHead  # noqa: E402
from r2s2r.robots.kinematics import GraspKinematics  # noqa: E402
from r2s2r.robots.spec import robot_spec  # noqa: E402

STRIDE = 10  # control steps per model frame
RIGHT = 1  # the right gripper's index among the grasp frames
OPEN, CLOSING, RESTING, REACH, LIFTED, WINDOW = 0.8, 0.75, 0.035, 0.08, 0.07, 25
BINS = [-0.1, -0.01, -0.005, 0.0, 0.003, 0.006, 0.01, 0.02, 0.1]


def grasps(roots: list[str], fk: GraspKinematics) -> pd.DataFrame:
    """One row per episode with a close on the resting cube: its margin, offset across the closing axis,
    the faces' uprightness, and whether the cube was lifted."""
    rows = []
    columns = ["episode_index", "frame_index", "observation.state", "observation.environment_state"]
    for root in roots:
        for file in sorted(glob.glob(f"{root}/data/*/*.parquet")):
            table = pd.read_parquet(file, columns=columns)
            table = table[table.frame_index % STRIDE == 0]
            for episode, frames in table.groupby("episode_index"):
                state = torch.tensor(np.stack(frames["observation.state"].values))
                cube = np.stack(frames["observation.environment_state"].values)[:, :3]
                point, rot = fk(state)
                rel = (rot.transpose(-1, -2) @ (torch.tensor(cube)[:, None] - point)[..., None])[..., 0]
                margin = fk.balance_margin(rel, rot)[:, RIGHT].numpy()
                upright = rot[:, RIGHT, 2, fk.face_axes].norm(dim=-1).numpy()
                rel, opening = rel[:, RIGHT].numpy(), state[:, 13].numpy()
                closes = (opening[:-4] >= OPEN) & (opening[2:-2] < CLOSING) & (cube[:-4, 2] < RESTING)
                closes &= np.linalg.norm(rel[:-4], axis=-1) < REACH
                if not closes.any():
                    continue
                k = int(np.argmax(closes))  # the first
                after = slice(k, k + WINDOW)
                lifted = bool(
                    ((cube[after, 2] > LIFTED) & (np.linalg.norm(rel[after], axis=-1) < REACH)).any()
                )
                across = abs(rel[k + 2, fk.closing_axis])
                rows.append((root, episode, margin[k + 2], across, upright[k + 2], lifted))
    return pd.DataFrame(rows, columns=["root", "episode", "margin", "across", "upright", "lifted"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default="outputs/coverage/part0,outputs/coverage/part1,outputs/coverage/part4"
    )
    parser.add_argument(
        "--out", default=str(Path(__file__).parents[1] / "results/archive/balance_margin.json")
    )
    args = parser.parse_args()
    fk = GraspKinematics(robot_spec("aloha"))
    table = grasps(args.data.split(","), fk)
    chosen = table[(table.across < 0.008) & (table.upright > 0.9)]
    binned = chosen.groupby(pd.cut(chosen.margin, BINS), observed=True).lifted.agg(["mean", "count"])
    rows = [
        {"margin_mm": f"{1000 * b.left:g} .. {1000 * b.right:g}", "grasps": int(r["count"]),
         "lifted": round(float(r["mean"]), 3)}
        for b, r in binned.iterrows()
    ]  # fmt: skip
    print_table(
        f"coverage grasps centred across the closing axis ({len(chosen)} of {len(table)}): lift rate by"
        " the cube centre's margin inside the pads' faces across gravity",
        ["margin (mm)", "grasps", "lifted"],
        [[r["margin_mm"], r["grasps"], f"{100 * r['lifted']:.0f} %"] for r in rows],
    )
    below = chosen[chosen.margin < StateDynamicsHead.BALANCE_MARGIN]
    margin_mm = 1000 * StateDynamicsHead.BALANCE_MARGIN
    print(f"below head.balance's margin ({margin_mm:g} mm): {int(below.lifted.sum())} of {len(below)} lifted")
    write_json(Path(args.out), {
        "machine": machine_info(), "data": args.data.split(","), "grasps": len(table), "tabled": len(chosen),
        "balance_margin_m": StateDynamicsHead.BALANCE_MARGIN, "bins": rows,
        "below_margin": {"grasps": len(below), "lifted": int(below.lifted.sum())},
    })  # fmt: skip


if __name__ == "__main__":
    main()
