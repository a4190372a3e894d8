"""How well the reference world's success test, read off the imagined state, matches the recorded success.

gym-aloha's transfer-cube rewards success where a left finger touches the cube and the cube does not touch
the table. `head.success_touch` asks the same of the state head's state: the cube clear of the table (its
centre more than `StateDynamicsHead.LANDING` above its resting height) and overlapping the box of a finger
of the left gripper (`StateDynamicsHead.touches`: the MJCF's finger geometry, grown by a margin). This study
plays that test on the coverage recordings' own states (every STRIDE-th frame) and counts how often it
agrees with the recorded `next.success`, for several margins; `StateDynamicsHead.TOUCH_MARGIN` is the one
that agrees best. Beside it, the test `head.held_success` gates success with (the left holding the cube:
closed below HOLD_CLOSED with the cube between its fingers, clear of the table).

gym-aloha's test names one finger geom of the left gripper (`10_left_gripper_finger`), not any finger:
`head.touch_finger` counts only it. The study plays both on the coverage frames, and, per episode, on the
real logs of every held-out family that `benchmarks/generalization.py` has recorded (`--logs`): how often
"the test passes at some recorded frame" agrees with the episode's recorded success, and the mean gap
between the rates per policy (points). These are the real states, so the gap is the test's own error,
before any imagination.

Prints the table; writes benchmarks/results/archive/touch_success.json.

Usage:
    python benchmarks/studies/touch_success.py        # ~2 minutes; needs coverage.sh's part0, part1, part4;
        # the tests are the committed assets/world_model_coverage head's own methods
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
from r2s2r.model.state_head import StateDynamicsHead, quat_matrix  # noqa: E402
from r2s2r.robots.kinematics import GraspKinematics  # noqa: E402

STRIDE = 10  # control steps per model frame
LEFT = 0  # the left gripper's index among the grasp frames
NAMED = 0  # the finger gym-aloha's transfer-cube test names (10_left_gripper_finger; `finger_names`)
ASSET = "assets/world_model_coverage"
MARGINS = (-0.01, -0.005, -0.002, 0.0, 0.002, 0.005, 0.01)  # m


def frames(roots: list[str], fk: GraspKinematics) -> dict[str, torch.Tensor]:
    """Every STRIDE-th recorded frame: the cube in each gripper's frame, the grippers' orientations and
    openings, the cube's axes and height, and the recorded success."""
    columns = [
        "episode_index", "frame_index", "observation.state", "observation.environment_state", "next.success",
    ]  # fmt: skip
    parts = []
    for root in roots:
        for file in sorted(glob.glob(f"{root}/data/*/*.parquet")):
            table = pd.read_parquet(file, columns=columns)
            parts.append(table[table.frame_index % STRIDE == 0])
    table = pd.concat(parts)
    state = torch.tensor(np.stack(table["observation.state"].values)).float()
    pose = torch.tensor(np.stack(table["observation.environment_state"].values)).float()
    point, rot = fk(state)
    rel = (rot.transpose(-1, -2) @ (pose[:, None, :3] - point)[..., None])[..., 0]
    return {
        "rel": rel, "rot": rot, "faces": quat_matrix(pose[:, 3:7]), "opening": state[:, [6, 13]],
        "z": pose[:, 2], "success": torch.tensor(table["next.success"].values.astype(bool)),
        "episode": table["episode_index"].values,
    }  # fmt: skip


def scores(test: torch.Tensor, truth: torch.Tensor) -> dict:
    """Agreement, precision and recall of a boolean test against the recorded success."""
    hits = int((test & truth).sum())
    return {
        "agreement": round(float((test == truth).float().mean()), 4),
        "precision": round(hits / max(int(test.sum()), 1), 4),
        "recall": round(hits / max(int(truth.sum()), 1), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default="outputs/coverage/part0,outputs/coverage/part1,outputs/coverage/part4"
    )
    parser.add_argument(
        "--out", default=str(Path(__file__).parents[1] / "results/archive/touch_success.json")
    )
    parser.add_argument(
        "--logs",
        default="outputs/bench/generalization_*/logs/*/*",
        help="glob of real-log roots, one per policy",
    )
    args = parser.parse_args()
    head = WorldModel.from_pretrained(ASSET).state_head  # the committed head's own tests
    fk = head.fk
    f = frames(args.data.split(","), fk)
    clear = f["z"] > fk.table_top + fk.object_rest + head.LANDING
    rows = {}
    for margin in MARGINS:
        head.TOUCH_MARGIN = margin
        touched = head.touches(f["rel"], f["rot"], f["faces"], f["opening"])[:, LEFT]
        rows[f"touch {1000 * margin:+g} mm"] = scores(touched & clear, f["success"])
    held = (head.gripped(f["rel"])[:, LEFT] > 0.5) & (f["opening"][:, LEFT] < head.HOLD_CLOSED) & clear
    rows["left holds it (head.held_success's gate)"] = scores(held, f["success"])
    head.TOUCH_MARGIN = StateDynamicsHead.TOUCH_MARGIN
    named = head.touches(f["rel"], f["rot"], f["faces"], f["opening"], NAMED)[:, LEFT]
    rows["touch, the named finger only (head.touch_finger)"] = scores(named & clear, f["success"])
    print_table(
        f"the reference world's success test on {len(f['z'])} recorded frames ({int(f['success'].sum())}"
        " successful) against the recorded success",
        ["test", "agreement", "precision", "recall"],
        [[k, f"{100 * v['agreement']:.2f} %", f"{100 * v['precision']:.1f} %", f"{100 * v['recall']:.1f} %"]
         for k, v in rows.items()],
    )  # fmt: skip
    best = max(MARGINS, key=lambda m: rows[f"touch {1000 * m:+g} mm"]["agreement"])
    print(
        f"best margin {1000 * best:+g} mm; StateDynamicsHead.TOUCH_MARGIN = {StateDynamicsHead.TOUCH_MARGIN}"
    )
    families = per_family(head, sorted(glob.glob(args.logs)))
    write_json(Path(args.out), {
        "machine": machine_info(), "data": args.data.split(","), "frames": len(f["z"]),
        "successful": int(f["success"].sum()), "tests": rows, "best_margin_m": best,
        "touch_margin_m": StateDynamicsHead.TOUCH_MARGIN, "named_finger": NAMED, "logs": args.logs,
        "families": families,
    })  # fmt: skip


def per_episode(test: torch.Tensor, episode: np.ndarray) -> np.ndarray:
    """(E,) whether a per-frame boolean `test` (N,) passes at some frame of each episode (`episode`: (N,))."""
    return pd.Series(test.numpy()).groupby(episode).any().to_numpy()


def per_family(head: StateDynamicsHead, roots: list[str]) -> dict:
    """Per family of real logs (`roots`, one per policy): episodes, and for any finger and the named one
    the share of episodes whose verdict agrees with the recorded success and the mean per-policy gap."""
    fk, found = head.fk, {}
    for root in roots:
        f = frames([root], fk)
        clear = f["z"] > fk.table_top + fk.object_rest + head.LANDING
        truth = per_episode(f["success"], f["episode"])
        family = found.setdefault(Path(root).parent.name, {"episodes": 0, "any": [], "named": []})
        family["episodes"] += len(truth)
        for name, finger in (("any", -1), ("named", NAMED)):
            test = head.touches(f["rel"], f["rot"], f["faces"], f["opening"], finger)[:, LEFT] & clear
            verdict = per_episode(test, f["episode"])
            gap = 100 * abs(verdict.mean() - truth.mean())
            family[name].append((int((verdict == truth).sum()), float(gap)))
    out = {}
    for name, fam in sorted(found.items()):
        out[name] = {"episodes": fam["episodes"], "policies": len(fam["any"])}
        for test in ("any", "named"):
            agree = sum(a for a, _ in fam[test]) / fam["episodes"]
            gap = float(np.mean([g for _, g in fam[test]]))
            out[name][test] = {"agreement": round(agree, 4), "gap_points": round(gap, 1)}
    print_table(
        "the success test on the real logs' states, per family: episodes whose verdict agrees with the"
        " recorded success / mean gap of the per-policy rate (points)",
        ["family", "policies", "episodes", "any finger", "the named finger"],
        [
            [name, v["policies"], v["episodes"]]
            + [f"{100 * v[t]['agreement']:.1f} % / {v[t]['gap_points']:.1f}" for t in ("any", "named")]
            for name, v in out.items()
        ],
    )
    return out


if __name__ == "__main__":
    main()
