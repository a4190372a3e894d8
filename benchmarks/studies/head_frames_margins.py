"""Which pixels the appearance fit of `--frames=head` reads: its edge margins, against logs and raw frames.

`r2s2r.rollout.head_frames.fit_appearance` fits each part's colour in a view on its pixels FIT_MARGIN inside
its edges, and takes a part that a view shows fewer than MIN_PIXELS pixels of (EDGE_MARGIN inside) from its
fit over every view, on pixels EDGE_MARGIN inside. Three settings of the two margins:

- (1, 1): every part on the pixels one inside its edges (the first fit);
- (2, 2): every part two inside;
- (1, 2): the committed one.

Each is fitted on the coverage demonstrator's rendered set (seed 1200) and measured by (a) PSNR per view of
frames drawn from the logged states of the held-out set (seed 1201) against the logged frames, and (b) how
often the red-cube detector finds the cube, at three (threshold, blur) settings, in 20 raw top frames of the
reference world (rendered without a video codec, as a policy sees them) against frames drawn from the same
states. Needs the two sets of benchmarks/head_frames.py.
Writes benchmarks/results/archive/head_frames_margins.json.
    python benchmarks/studies/head_frames_margins.py      # about 3 minutes
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py, families, head_frames
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
import r2s2r.rollout.head_frames as hf  # noqa: E402
from head_frames import DETECTORS, SETS, raw_parity  # noqa: E402
from r2s2r.model.configuration_world_model import WorldModelConfig  # noqa: E402
from r2s2r.robots.spec import robot_spec  # noqa: E402
from r2s2r.scripts.fit_frames import logged_episodes  # noqa: E402

SETTINGS = {"(1, 1)": (1, 1), "(2, 2)": (2, 2), "(1, 2) committed": (1, 2)}


def main() -> None:
    config = WorldModelConfig.load("assets/world_model_small")
    geometry = hf.SceneGeometry(robot_spec("aloha"), tuple(config.cameras), 96, 128)
    fit = list(logged_episodes([SETS["fit"][0]], config))
    heldout = list(logged_episodes([SETS["heldout"][0]], config))
    committed = (hf.FIT_MARGIN, hf.EDGE_MARGIN)
    results, rows = {}, []
    for name, (fit_margin, edge_margin) in SETTINGS.items():
        hf.FIT_MARGIN, hf.EDGE_MARGIN = fit_margin, edge_margin
        frames, figures = hf.fit_appearance(geometry, fit, progress=False)
        psnr = np.zeros(len(config.cameras))
        for images, states, poses in heldout:
            drawn = frames(torch.from_numpy(states).float(), torch.from_numpy(poses).float()).numpy()
            psnr += [-10 * np.log10(((drawn[:, v] - images[:, v]) ** 2).mean()) for v in range(len(psnr))]
        psnr /= len(heldout)
        parity = raw_parity(frames, seed=0)
        results[name] = {"psnr_from_logged_state": psnr.tolist(), "raw_parity": parity, "fit": figures}
        rows.append([name, " / ".join(f"{x:.2f}" for x in psnr),
                     *(f"{parity[k]['raw']} / {parity[k]['drawn']}" for k in DETECTORS)])  # fmt: skip
    hf.FIT_MARGIN, hf.EDGE_MARGIN = committed
    print_table(
        "appearance fit by edge margins (fit, fit over every view)",
        ["margins", "PSNR top / left / right (dB)", *(f"cube found raw / drawn ({k})" for k in DETECTORS)],
        rows,
    )
    write_json(
        Path(__file__).resolve().parents[1] / "results" / "archive" / "head_frames_margins.json",
        {"machine": machine_info(), "sets": SETS, "settings": results},
    )


if __name__ == "__main__":
    main()
