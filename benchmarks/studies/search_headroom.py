"""What the action search has to choose from around each base policy, measured in the reference world.

The search (benchmarks/search.py) can only pick among its candidates: the base's own plans and Gaussian
offsets on them (std `arm_noise` rad on arm joint targets, `gripper_noise` on grippers, held over a model
frame). This plays those offsets *blind*, with no model choosing them (`PerturbedPolicy`), on the same
reference-world episodes, once per seed, and reports per base policy:

- **base**: success alone;
- **blind**: mean success with random offsets: how far the typical candidate falls below the base plan;
- **best of K**: episodes that succeed with the base or with at least one of K seeds: the success a chooser
  that knew each whole episode's outcome in advance would reach with K tries (a rough ceiling on what
  choosing among such offsets can give, not a bound: the search chooses per decision, not per episode);
- **rescued / spoiled**: base failures some seed turns into a success; base successes that most seeds fail.

A policy that closes its own loop (the scripted demonstrators re-plan from what they see) absorbs the
offsets and leaves the search room to choose; a policy that plays 0.5 s chunks open-loop and never saw its
own drift (ACT, behaviour-cloned) is spoiled by them, so most of what the search proposes is worse than
what it would have done. Results per (base, noise, seed) are cached in `--output_dir`, so a killed run
resumes. Writes benchmarks/results/archive/search_headroom.json.

Usage:
    python benchmarks/studies/search_headroom.py              # 3 bases x 8 seeds x 60 episodes, ~30 min
    python benchmarks/studies/search_headroom.py --bases act_step_3000 --noise 0.02,0.05 0.005,0.0125 \
        --seeds 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py and search.py
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402
from search import BASES  # noqa: E402

# isort: split
from r2s2r.data.commit import atomic_write_text  # noqa: E402
from r2s2r.data.recorder import RecordConfig, evaluate  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import WorldConfig  # noqa: E402


def successes(policy: PolicyConfig, args, cache: Path) -> np.ndarray:
    """(episodes,) bool: reference-world success of `policy` on the benchmark's episodes (cached)."""
    if cache.is_file():
        return np.array(json.loads(cache.read_text()), dtype=bool)
    cfg = RecordConfig(
        num_episodes=args.episodes, seed=args.seed, workers=args.workers, policy=policy,
        world=WorldConfig(num_envs=args.num_envs, cameras=()),
    )  # fmt: skip
    labels = sorted(evaluate(cfg), key=lambda label: label["episode_index"])
    result = [bool(label["success"]) for label in labels]
    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cache, json.dumps(result))
    return np.array(result, dtype=bool)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bases", nargs="+", default=list(BASES), choices=list(BASES))
    parser.add_argument(
        "--noise", nargs="+", default=["0.02,0.05"], metavar="ARM,GRIPPER",
        help="offset stds to try: arm joints (rad), grippers (0..1); the search's defaults first",
    )  # fmt: skip
    parser.add_argument("--seeds", type=int, default=8, help="blind seeds K per base and noise")
    parser.add_argument("--every", type=int, default=10, help="control steps an offset is held (a frame)")
    parser.add_argument("--episodes", type=int, default=60, help="episodes, ID/OOD alternating")
    parser.add_argument("--seed", type=int, default=2, help="initial poses: the search's tuning episodes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--num_envs", type=int, default=10)
    parser.add_argument("--output_dir", default="outputs/bench/search_headroom")
    parser.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parents[1] / "results" / "archive" / "search_headroom.json"),
    )
    args = parser.parse_args()
    noises = [tuple(float(x) for x in n.split(",")) for n in args.noise]
    if any(len(n) != 2 or min(n) < 0 for n in noises):
        sys.exit(f"search_headroom.py: error: --noise {args.noise} must be ARM,GRIPPER pairs of stds >= 0.")

    out, results, rows = Path(args.output_dir), {}, []
    tag = f"seed{args.seed}_{args.episodes}ep_every{args.every}"
    for name in args.bases:
        path, kwargs = BASES[name]
        if not path.startswith("r2s2r.") and not Path(path).is_dir():
            sys.exit(f"search_headroom.py: error: no ACT checkpoint at {path}; run benchmarks/zoo_act.py.")
        base_cfg = {"path": path, "kwargs": kwargs}
        base = successes(PolicyConfig(**base_cfg), args, out / name / tag / "base.json")
        results[name] = {"base": base.tolist(), "noise": {}}
        for arm, grip in noises:
            runs = np.stack(
                [
                    successes(
                        PolicyConfig(
                            path="r2s2r.rollout.search:make_perturbed_policy",
                            kwargs={
                                "base": base_cfg,
                                "arm_noise": arm,
                                "gripper_noise": grip,
                                "every": args.every,
                                "seed": s,
                            },
                        ),
                        args,
                        out / name / tag / f"arm{arm}_grip{grip}_seed{s}.json",
                    )
                    for s in range(args.seeds)
                ]
            )  # fmt: skip  (K,episodes)
            best = base | runs.any(0)
            figures = {
                "base": float(base.mean()), "blind_mean": float(runs.mean()),
                "blind_per_seed": runs.mean(1).tolist(), "best_of_k": float(best.mean()),
                "best_of_k_by_k": [float((base | runs[:k].any(0)).mean()) for k in range(1, args.seeds + 1)],
                "rescued": int((~base & runs.any(0)).sum()),
                "spoiled": int((base & (runs.mean(0) < 0.5)).sum()),
                "per_episode": runs.astype(int).tolist(),
            }  # fmt: skip
            results[name]["noise"][f"{arm},{grip}"] = figures
            rows.append([
                name, f"{arm} / {grip}", f"{100 * base.mean():.0f}", f"{100 * runs.mean():.0f}",
                f"{100 * runs.mean(1).min():.0f}-{100 * runs.mean(1).max():.0f}", f"{100 * best.mean():.0f}",
                f"{figures['rescued']} / {int((~base).sum())}", f"{figures['spoiled']} / {int(base.sum())}",
            ])  # fmt: skip
    header = ["base", "arm / gripper std", "base %", "blind %", "blind range %", f"best of {args.seeds} %",
              "failures rescued", "successes spoiled"]  # fmt: skip
    print_table(
        f"Blind search offsets in the reference world ({args.episodes} episodes, seed {args.seed}, "
        f"{args.seeds} seeds)", header, rows,
    )  # fmt: skip
    write_json(Path(args.out), {"machine": machine_info(), "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
