"""ACT's own alternatives: how much its CVAE latent and its temporal ensembling change what it does.

The action search proposes the base policy's own samples where it is stochastic. LeRobot's ACT is a CVAE
that acts at the latent prior's mean; `ACTLatentAdapter.reseed` draws the latent from the prior instead.
This measures, for one ACT checkpoint:

1. the spread of its chunks over latent draws (std over 16 draws, mean over joints and steps, in rad) at
   recorded states, beside the search's perturbation std (0.02 rad);
2. reference-world success acting at the zero latent, with latents drawn by `--seeds` seeds, and the best
   of those per episode;
3. the same checkpoint with LeRobot's temporal ensembling (a chunk queried every step, overlapping chunks
   averaged with weights exp(-0.01 i), as in the ACT paper): a change of the policy, not a search.

Writes benchmarks/results/archive/act_latent.json. Usage:
    python benchmarks/studies/act_latent.py              # step_3000 of benchmarks/zoo_act.py, ~10 min
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402
from lerobot.policies.act.modeling_act import ACTTemporalEnsembler  # noqa: E402

from r2s2r.data.recorder import RecordConfig, evaluate  # noqa: E402
from r2s2r.policies.policy import ACTLatentAdapter, PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import WorldConfig  # noqa: E402


class DrawnLatents(ACTLatentAdapter):
    """ACT acting on latents drawn from its prior from the first step of every episode (seeded)."""

    def __init__(self, path: str, seed: int):
        super().__init__(path)
        self.seed = seed

    def reset(self) -> None:
        super().reset()
        self.reseed(self.seed)
        self._skip_first = False  # nothing to skip at an episode's start


def make_drawn(path: str, seed: int) -> DrawnLatents:
    return DrawnLatents(path, seed)


def make_zero(path: str) -> ACTLatentAdapter:
    return ACTLatentAdapter(path)


def make_ensembled(path: str, coeff: float = 0.01) -> ACTLatentAdapter:
    policy = ACTLatentAdapter(path)
    policy.policy.config.temporal_ensemble_coeff, policy.policy.config.n_action_steps = coeff, 1
    policy.policy.temporal_ensembler = ACTTemporalEnsembler(coeff, policy.policy.config.chunk_size)
    return policy


def chunk_spread(path: str, data: str, frames: int = 8, draws: int = 16) -> float:
    """Mean std (rad) of ACT's first chunk over `draws` latent draws, at `frames` recorded states."""
    table = LeRobotDataset("local/aloha_transfer_cube", root=data).hf_dataset.with_format("torch")
    policy, spreads = ACTLatentAdapter(path), []
    for index in np.linspace(0, len(table) - 1, frames).astype(int).tolist():
        row = table[index]
        batch = {
            k: row[k][None].repeat(draws, 1) for k in ("observation.state", "observation.environment_state")
        }
        policy.reset()
        policy.reseed(index)
        policy._skip_first = False
        chunk = torch.stack([policy.select_action(batch) for _ in range(policy.config.chunk_size)], dim=1)
        spreads.append(chunk.std(0).mean().item())
    return float(np.mean(spreads))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", default="outputs/bench/zoo/act/step_3000")
    parser.add_argument("--data", default="outputs/bench/data/heldout", help="recording the states come from")
    parser.add_argument("--seeds", type=int, default=4, help="latent seeds played in the reference world")
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--seed", type=int, default=2, help="initial poses: the search's tuning episodes")
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parents[1] / "results" / "archive" / "act_latent.json")
    )
    args = parser.parse_args()
    if not Path(args.checkpoint, "config.json").is_file():
        sys.exit(f"act_latent.py: error: no ACT checkpoint at {args.checkpoint}; run benchmarks/zoo_act.py.")

    def play(factory: str, **kwargs) -> np.ndarray:
        cfg = RecordConfig(
            num_episodes=args.episodes, seed=args.seed, workers=0,
            world=WorldConfig(num_envs=10, cameras=()),
            policy=PolicyConfig(path=f"act_latent:{factory}", kwargs={"path": args.checkpoint, **kwargs}),
        )  # fmt: skip
        labels = sorted(evaluate(cfg), key=lambda label: label["episode_index"])
        return np.array([label["success"] for label in labels], dtype=bool)

    spread = chunk_spread(args.checkpoint, args.data)
    zero = play("make_zero")
    drawn = np.stack([play("make_drawn", seed=s) for s in range(args.seeds)])
    ensembled = play("make_ensembled")
    figures = {
        "chunk_spread_rad": spread, "zero_latent": float(zero.mean()),
        "drawn_per_seed": drawn.mean(1).tolist(), "drawn_mean": float(drawn.mean()),
        "best_of_drawn": float(drawn.any(0).mean()),
        "temporal_ensembling": float(ensembled.mean()),
    }  # fmt: skip
    rows = [
        ["chunk spread over 16 latent draws (rad)", f"{spread:.4f}"],
        ["success, zero latent (LeRobot's ACT)", f"{100 * zero.mean():.0f} %"],
        [f"success, drawn latents ({args.seeds} seeds)", f"{100 * drawn.mean():.0f} % (per seed: "
         + ", ".join(f"{100 * r:.0f}" for r in drawn.mean(1)) + ")"],
        [f"success, best of the {args.seeds} draws per episode", f"{100 * drawn.any(0).mean():.0f} %"],
        ["success, temporal ensembling 0.01", f"{100 * ensembled.mean():.0f} %"],
    ]  # fmt: skip
    print_table(f"ACT {args.checkpoint} ({args.episodes} episodes, seed {args.seed})", ["", ""], rows)
    write_json(Path(args.out), {"machine": machine_info(), "args": vars(args), "figures": figures})


if __name__ == "__main__":
    main()
