"""Where a grasp takes the cube: the coverage data's grasps by the cube's place between the fingers.

Two rules of the state head rest on these figures, read off the coverage recordings:

- `head.balance`: an imagined grasp lifts the cube only where the cube's centre lies at least
  `StateDynamicsHead.BALANCE_MARGIN` inside the pads' faces across gravity (`GraspKinematics.balance_margin`).
  Table 1: every episode's first close of the right gripper on the cube resting within 8 cm of its grasp
  point (the gripper open above 0.8, below 0.75 two frames later), the margin two frames after the close
  began, and whether the cube was lifted 7 cm with that gripper near it within the next 25 frames (2 s).
  Only grasps centred across the closing axis (within 8 mm) with the faces upright (the vertical's share in
  their plane above 0.9) are tabled, so that the margin is what differs.
- `head.pad_holds` / `head.held_success`: a closed gripper holds the cube only with its centre within
  `StateDynamicsHead.HOLD_ACROSS` of the grasp point across the fingers. Table 2: every episode's first
  close of the left gripper on the cube in mid-air (8 cm up) within 8 cm of its grasp point, the cube's
  offset across the left fingers two frames after the close began (its offset along the faces' third axis
  under 1 cm), and whether the episode then succeeded.

- A slipping carry: table 4, every frame where a gripper holds the cube 5 cm or more above the table (the
  cube within REACH of its grasp point and HOLD_ACROSS across its fingers, this frame and the next): how
  far the cube slides down along the fingers by the next frame (its move in the gripper's frame along the
  world's down within the faces' plane), by how far past the pads' meeting the gripper, closed below
  CLOSING, is commanded.

- `head.rests`: a squeezing gripper ends each imagined frame no wider than `StateDynamicsHead.REST_SLACK`
  past where its pads meet the cube. Table 5: every frame where a gripper holds the cube 5 cm or more above
  the table (as in table 4), commanded more than `StateDynamicsHead.SQUEEZE` inside where its pads meet the
  cube, its opening steady (moved less than STEADY since the frame before): how far its opening lies past
  that meeting (negative: inside), by gripper.

Prints the tables; writes benchmarks/results/archive/grasp_margins.json.

Usage:
    python benchmarks/studies/grasp_margins.py        # ~1 minute; needs coverage.sh's part0, part1, part4
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
from r2s2r.model.state_head import StateDynamicsHead, quat_matrix  # noqa: E402
from r2s2r.robots.kinematics import GraspKinematics  # noqa: E402
from r2s2r.robots.spec import robot_spec  # noqa: E402

STRIDE = 10  # control steps per model frame
LEFT, RIGHT = 0, 1  # the grippers' indices among the grasp frames
OPEN, CLOSING, RESTING, AIRBORNE, REACH, LIFTED, WINDOW = 0.8, 0.75, 0.035, 0.08, 0.08, 0.07, 25
CARRIED, HOLD_ACROSS, SLIPPING = 0.05, StateDynamicsHead.HOLD_ACROSS, 0.002  # m (table 4)
STEADY = 0.02  # raw opening a frame (table 5)
MARGIN_BINS = [-0.1, -0.01, -0.005, 0.0, 0.003, 0.006, 0.01, 0.02, 0.1]
ACROSS_BINS = [0.0, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.08]
DEPTH_BINS = [-1.0, -0.05, 0.0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 1.0]  # raw opening


def episodes(roots: list[str], fk: GraspKinematics):
    """Per episode at the model's frame rate: gripper openings (T,G), the cube's position (T,3), its place in
    each gripper's frame (T,G,3), each gripper's orientation (T,G,3,3), each gripper's squeeze depth (T,G),
    whether it succeeded (T,) and where each gripper's pads meet the cube (T,G, raw opening)."""
    columns = ["episode_index", "frame_index", "observation.state", "observation.environment_state", "action"]
    for root in roots:
        for file in sorted(glob.glob(f"{root}/data/*/*.parquet")):
            table = pd.read_parquet(file, columns=[*columns, "next.success"])
            table = table[table.frame_index % STRIDE == 0]
            for _, frames in table.groupby("episode_index"):
                state = torch.tensor(np.stack(frames["observation.state"].values))
                pose = np.stack(frames["observation.environment_state"].values)
                cube = pose[:, :3]
                point, rot = fk(state)
                rel = (rot.transpose(-1, -2) @ (torch.tensor(cube)[:, None] - point)[..., None])[..., 0]
                openings = state[:, [6, 13]].numpy()
                faces = quat_matrix(torch.tensor(pose[:, 3:7]).float())  # the cube's axes (T,3,3)
                across = (faces.transpose(-1, -2)[:, None] @ rot[..., :, 1:2])[..., 0].abs().sum(-1)
                stop = fk.opening_at(fk.object_rest * across).numpy()
                depth = stop - np.stack(frames["action"].values)[:, [6, 13]]
                # depth: how far past the pads' meeting the cube each gripper is commanded (T,G)
                yield openings, cube, rel, rot, depth, frames["next.success"].values.astype(bool), stop


def first_close(opening: np.ndarray, rel: np.ndarray, where: np.ndarray) -> int | None:
    """The first frame where a gripper open above OPEN is below CLOSING two frames later, the cube within
    REACH of its grasp point and `where` true; None if there is none."""
    closes = (opening[:-4] >= OPEN) & (opening[2:-2] < CLOSING) & where[:-4]
    closes &= np.linalg.norm(rel[:-4], axis=-1) < REACH
    return int(np.argmax(closes)) if closes.any() else None


def grasps(roots: list[str], fk: GraspKinematics) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Table 1's right-hand grasps (margin, offset across the fingers, uprightness, lifted) and table 2's
    left-hand closes in mid-air (offsets across the fingers and along the third axis, success)."""
    lifts, takes = [], []
    for openings, cube, rel, rot, depth, success, _ in episodes(roots, fk):
        margin = fk.balance_margin(rel, rot)[:, RIGHT].numpy()
        upright = rot[:, RIGHT, 2, fk.face_axes].norm(dim=-1).numpy()
        rel = rel.numpy()
        k = first_close(openings[:, RIGHT], rel[:, RIGHT], cube[:, 2] < RESTING)
        if k is not None:
            after = slice(k, k + WINDOW)
            near = np.linalg.norm(rel[after, RIGHT], axis=-1) < REACH
            lifted = bool(((cube[after, 2] > LIFTED) & near).any())
            across = abs(rel[k + 2, RIGHT, fk.closing_axis])
            lifts.append((margin[k + 2], across, upright[k + 2], depth[k + 3, RIGHT], lifted))
        k = first_close(openings[:, LEFT], rel[:, LEFT], cube[:, 2] > AIRBORNE)
        if k is not None:
            offset = np.abs(rel[k + 2, LEFT])
            takes.append((offset[fk.closing_axis], offset[fk.face_axes[1]], bool(success[k:].any())))
    return (
        pd.DataFrame(lifts, columns=["margin", "across", "upright", "depth", "lifted"]),
        pd.DataFrame(takes, columns=["across", "third", "success"]),
    )


def carries(roots: list[str], fk: GraspKinematics) -> pd.DataFrame:
    """Table 4's held frames: each gripper's squeeze depth and how far (m) the cube slid down its fingers by
    the next frame."""
    rows = []
    for openings, cube, rel, rot, depth, _, _ in episodes(roots, fk):
        down = -rot[..., 2, :].numpy()  # the world's down in each gripper's frame (T,G,3)
        down[..., fk.closing_axis] = 0.0  # within the faces' plane
        rel = rel.numpy()
        held = (np.linalg.norm(rel, axis=-1) < REACH) & (np.abs(rel[..., fk.closing_axis]) < HOLD_ACROSS)
        held &= (cube[:, 2] > RESTING + CARRIED)[:, None] & (openings < CLOSING)
        for t, g in zip(*np.nonzero(held[:-1] & held[1:]), strict=True):
            norm = np.linalg.norm(down[t, g])
            if norm > 0.2:  # the faces not lying flat
                rows.append((depth[t, g], float((rel[t + 1, g] - rel[t, g]) @ down[t, g] / norm)))
    return pd.DataFrame(rows, columns=["depth", "slip"])


def resting(roots: list[str], fk: GraspKinematics) -> pd.DataFrame:
    """Table 5's frames: a gripper holding the cube 5 cm or more above the table (as table 4), commanded
    more than head.squeeze's depth inside where its pads meet the cube, its opening steady since the frame
    before; which gripper and how far (raw opening) its opening lies past that meeting."""
    rows = []
    for openings, cube, rel, _, depth, _, stop in episodes(roots, fk):
        rel = rel.numpy()
        held = (np.linalg.norm(rel, axis=-1) < REACH) & (np.abs(rel[..., fk.closing_axis]) < HOLD_ACROSS)
        held &= (cube[:, 2] > RESTING + CARRIED)[:, None] & (depth > StateDynamicsHead.SQUEEZE)
        held[1:] &= np.abs(np.diff(openings, axis=0)) < STEADY
        held[0] = False
        for t, g in zip(*np.nonzero(held), strict=True):
            rows.append((("left", "right")[g], openings[t, g] - stop[t, g]))
    return pd.DataFrame(rows, columns=["gripper", "gap"])


def rests(frames: pd.DataFrame) -> dict:
    """Table 5, printed: per gripper, percentiles of how far a squeezing gripper's opening lies past where
    its pads meet the cube."""
    cuts = [5, 25, 50, 75, 95]
    out = {
        g: {"frames": len(d), **{f"p{c}": round(float(np.percentile(d.gap, c)), 4) for c in cuts}}
        for g, d in frames.groupby("gripper")
    }
    print_table(
        f"5. steady frames of a gripper squeezing the cube 5 cm or more above the table ({len(frames)}): its"
        " opening past where its pads meet the cube (raw opening; negative: inside)",
        ["gripper", "frames", *[f"{c}th pct" for c in cuts]],
        [[g, r["frames"], *[f"{r[f'p{c}']:+.3f}" for c in cuts]] for g, r in out.items()],
    )
    return {"rest_slack": StateDynamicsHead.REST_SLACK, "steady": STEADY, "grippers": out}


def binned(values: pd.Series, outcome: pd.Series, bins: list[float]) -> list[dict]:
    groups = outcome.groupby(pd.cut(values, bins), observed=True).agg(["mean", "count"])
    return [
        {
            "mm": f"{1000 * b.left:g} .. {1000 * b.right:g}",
            "n": int(r["count"]),
            "rate": round(float(r["mean"]), 3),
        }
        for b, r in groups.iterrows()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default="outputs/coverage/part0,outputs/coverage/part1,outputs/coverage/part4"
    )
    parser.add_argument(
        "--out", default=str(Path(__file__).parents[1] / "results/archive/grasp_margins.json")
    )
    args = parser.parse_args()
    fk = GraspKinematics(robot_spec("aloha"))
    lifts, takes = grasps(args.data.split(","), fk)
    lifts_chosen = lifts[(lifts.across < 0.008) & (lifts.upright > 0.9)]
    table1 = binned(lifts_chosen.margin, lifts_chosen.lifted, MARGIN_BINS)
    takes_chosen = takes[takes.third < 0.01]
    table2 = binned(takes_chosen.across, takes_chosen.success, ACROSS_BINS)
    squeezed = lifts[(lifts.margin > 0.006) & (lifts.across < 0.008)]
    table3 = binned(squeezed.depth, squeezed.lifted, DEPTH_BINS)
    for title, rows, what in (
        (f"1. right-hand grasps of the resting cube, centred across the fingers ({len(lifts_chosen)} of"
         f" {len(lifts)}): lift rate by the cube centre's margin inside the pads' faces across gravity",
         table1, "lifted"),
        (f"2. left-hand closes on the cube in mid-air ({len(takes_chosen)} of {len(takes)}): success by the"
         " cube centre's offset across the left fingers", table2, "succeeded"),
        (f"3. right-hand grasps of the resting cube, balanced and centred ({len(squeezed)} of {len(lifts)}):"
         " lift rate by how far past the pads' meeting the cube the gripper is commanded (x1000, raw"
         " opening)", table3, "lifted"),
    ):  # fmt: skip
        print_table(
            title, ["mm", "episodes", what], [[r["mm"], r["n"], f"{100 * r['rate']:.0f} %"] for r in rows]
        )
    below = lifts_chosen[lifts_chosen.margin < StateDynamicsHead.BALANCE_MARGIN]
    margin_mm = 1000 * StateDynamicsHead.BALANCE_MARGIN
    print(f"below head.balance's margin ({margin_mm:g} mm): {int(below.lifted.sum())} of {len(below)} lifted")
    balance = {
        "margin_m": StateDynamicsHead.BALANCE_MARGIN, "grasps": len(lifts), "tabled": len(lifts_chosen),
        "bins": table1, "below_margin": {"grasps": len(below), "lifted": int(below.lifted.sum())},
    }  # fmt: skip
    across = {
        "across_m": StateDynamicsHead.HOLD_ACROSS, "closes": len(takes), "tabled": len(takes_chosen),
        "bins": table2,
    }  # fmt: skip
    light = squeezed[squeezed.depth < StateDynamicsHead.SQUEEZE]
    print(f"below head.squeeze's depth ({StateDynamicsHead.SQUEEZE:g}): {int(light.lifted.sum())} of"
          f" {len(light)} lifted")  # fmt: skip
    squeeze = {
        "depth": StateDynamicsHead.SQUEEZE, "tabled": len(squeezed), "bins": table3,
        "below_depth": {"grasps": len(light), "lifted": int(light.lifted.sum())},
    }  # fmt: skip
    write_json(Path(args.out), {
        "machine": machine_info(), "data": args.data.split(","), "balance": balance, "hold_across": across,
        "squeeze": squeeze, "slip": slipping(carries(args.data.split(","), fk)),
        "rest": rests(resting(args.data.split(","), fk)),
    })  # fmt: skip


def slipping(held: pd.DataFrame) -> dict:
    """Table 4, printed: held frames by squeeze depth, the cube's slide down the fingers per frame."""
    rows = []
    for bin_, group in held.groupby(pd.cut(held.depth, DEPTH_BINS), observed=True):
        slip = group.slip.to_numpy()
        rows.append({
            "depth": f"{1000 * bin_.left:g} .. {1000 * bin_.right:g}", "frames": len(slip),
            "median_cm": round(100 * float(np.median(slip)), 3),
            "p90_cm": round(100 * float(np.percentile(slip, 90)), 3),
            "slipping": round(float(np.mean(slip > SLIPPING)), 3),
        })  # fmt: skip
    print_table(
        f"4. frames with the cube held 5 cm or more above the table ({len(held)}): its slide down the fingers"
        " per frame, by how far past the pads' meeting the gripper is commanded (x1000, raw opening)",
        ["depth", "frames", "median (cm)", "90th pct (cm)", f"> {1000 * SLIPPING:g} mm"],
        [
            [r["depth"], r["frames"], r["median_cm"], r["p90_cm"], f"{100 * r['slipping']:.0f} %"]
            for r in rows
        ],
    )
    return {"carried_m": CARRIED, "slipping_m": SLIPPING, "frames": len(held), "bins": rows}


if __name__ == "__main__":
    main()
