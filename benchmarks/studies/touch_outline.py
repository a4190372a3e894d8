"""The success test on real states: each finger as its bounding box, or as its faces' tapered outline.

gym-aloha's transfer-cube rewards success where a left finger touches the cube off the table;
`head.success_touch` asks the same of the state head's state, through `StateDynamicsHead.touches`. As
committed it draws each finger as the box bounding its MJCF geometry, but ALOHA's fingers taper from 61 mm
wide at the base to 10 mm at the tips, so a cube beside a fingertip lies inside the box.
`head.touch_outline` draws them, in the plane of the pads' faces, as the faces' convex hull
(`robots/kinematics.py: face_profile`). This study plays both tests on the real logs that
`benchmarks/generalization.py` recorded (`--logs`, one folder per family): per episode, whether the test
passes at some recorded frame with the cube clear of the table (its centre more than LANDING above its
resting height, the head's own cut), against the episode's recorded success. These are the real states,
so a disagreement is the test's own error, before any imagination.

Prints per policy and pooled agreement; writes benchmarks/results/archive/touch_outline.json.

Usage:
    python benchmarks/studies/touch_outline.py --logs outputs/bench/generalization_heldout/logs/pincer,...
"""

from __future__ import annotations

import argparse
import dataclasses
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

ASSET = "assets/world_model_coverage"
LEFT = 0  # the gripper whose touch gym-aloha's transfer-cube test asks for


def passes(head: StateDynamicsHead, states: torch.Tensor, env: torch.Tensor) -> bool:
    """Whether the head's touch test passes at some frame of one episode (states (T,S), env (T,E))."""
    point, rot = head.fk(states)
    rel = (rot.transpose(-1, -2) @ (env[:, None, :3] - point)[..., None])[..., 0]
    touched = head.touches(rel, rot, quat_matrix(env[:, 3:7]), states[:, head.grippers])[:, LEFT]
    clear = env[:, 2] > head.fk.table_top + head.fk.object_rest + head.LANDING
    return bool((touched & clear).any())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", required=True, help="family log folders, comma-separated")
    parser.add_argument("--out", default="benchmarks/results/archive/touch_outline.json")
    args = parser.parse_args()
    cfg = WorldModel.from_pretrained(ASSET).config
    heads = {  # the test needs no weights: a head built from the asset's config, the outline off and on
        name: StateDynamicsHead(
            dataclasses.replace(cfg, head=dataclasses.replace(cfg.head, touch_outline=on))
        )
        for name, on in (("boxes", False), ("outline", True))
    }
    counts: dict[str, list[int]] = {}  # policy -> episodes, then agreements per test
    for root in args.logs.split(","):
        for path in sorted(glob.glob(f"{root}/*/data/*/*.parquet")):
            tally = counts.setdefault(Path(path).parents[2].name, [0] * (1 + len(heads)))
            for _, e in pd.read_parquet(path).groupby("episode_index"):
                states = torch.tensor(np.stack(e["observation.state"].values)).float()
                env = torch.tensor(np.stack(e["observation.environment_state"].values)).float()
                real = bool(e["next.success"].max())
                tally[0] += 1
                for i, head in enumerate(heads.values()):
                    tally[1 + i] += passes(head, states, env) == real
    if not counts:
        raise SystemExit(f"no logs under {args.logs}: record them with benchmarks/generalization.py.")
    rows = [[p, t[0], *(round(100 * a / t[0]) for a in t[1:])] for p, t in counts.items()]
    pooled = np.sum(list(counts.values()), axis=0)
    rows.append(["pooled", int(pooled[0]), *(round(100 * a / pooled[0], 1) for a in pooled[1:])])
    print_table("the touch test on real states: episodes whose verdict matches the recorded success (%)",
                ["policy", "episodes", *heads], rows)  # fmt: skip
    write_json(args.out, {
        "machine": machine_info(), "logs": args.logs.split(","), "asset": ASSET,
        "agreement_percent": {"columns": ["policy", "episodes", *heads], "rows": rows},
    })  # fmt: skip


if __name__ == "__main__":
    main()
