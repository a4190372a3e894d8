"""r2s2r-rl: train a policy by RL inside a trained world model, then check it in the reference world.

Examples:
    r2s2r-rl --data=outputs/bench/data/train --init=residual --base.kwargs='{skill: sloppy}' \\
        --head_steps=3000 --rounds=20 --eval_episodes=100 --output_dir=outputs/rl/sloppy
    r2s2r-rl --data=outputs/bench/data/train --init=scratch --num_envs=1024 --rounds=50
    r2s2r-rl --init=bc --data=outputs/bench/data/train     # start from a behaviour-cloned actor
    r2s2r-rl --init=outputs/rl/sloppy/policy --output_dir=outputs/rl/more   # go on from an exported policy

The policy learns only from imagined episodes: PPO (stable-baselines3) on the world model's
state-dynamics head, thousands of episodes in parallel from the episode starts of --data (the recordings
the world model was trained on), rewarded by the head's staged reward and success, minus penalties for
ensemble disagreement and physics-checker violations; an episode whose disagreement passes the data's
99th percentile (--support_quantile) ends there. --init picks the starting actor: from scratch,
behaviour-cloned on --data, a residual correction of a base policy (--base.path, --base.kwargs: any
policy acting on proprio and object pose; fine-tuning it), or an exported policy directory.

--observation=latent (default) deploys on what a real robot has: proprio and the cube pose the world
model reads from the cameras; --observation=state reads the pose from observation.environment_state, and
is the only choice in a world model whose state head reads no cameras (r2s2r-refine-head --cameras=false;
it trains from state-only recordings). --floor_quantile=0.9 leaves the disagreement the head shows on the
logged replays uncharged; --reward.uncertainty_weight=0 drops the charge (the support's end stays).

--head_steps=3000 first refines the world model's state-dynamics head on --data for long rollouts (about
10 minutes on 2 CPU cores; the refined model is saved in the run and travels with the exported policy).

After every round: a resumable checkpoint, a progress row (imagined return and success, episodes that left
the support, frames with physics violations) in progress.jsonl, and the policy exported to
<output_dir>/policy, runnable anywhere a policy is (--policy.path=<output_dir>/policy). Every --eval_every
rounds and after the last, the policy plays --eval_episodes reference-world episodes on held-out initial
poses (--eval_seed), used only for this report, and --verify_episodes imagined episodes are re-played in
the full world model (video model, judge, checker): when the head says success and the judge does not,
the policy is likely exploiting the head. Re-run with the same flags to resume; raise --rounds to train
further.
"""

from __future__ import annotations

import sys

from r2s2r.rl.train import RLConfig, train_rl
from r2s2r.scripts import cli
from r2s2r.scripts.eval import format_rates


def format_verified(round_: int, v: dict) -> str:
    """The video re-check's line: what the judge and the head saw, or why the check was skipped."""
    if "skipped" in v:
        return f"full world model re-check skipped: {v['skipped']}"
    return (
        f"full world model, round {round_}: judge sees success in {100 * v['judge_success']:.0f} % of "
        f"{v['episodes']} imagined episodes, the head in {100 * v['head_success']:.0f} % "
        f"(agreement {100 * v['agreement']:.0f} %)"
    )


def rl_main(cfg: RLConfig) -> int:
    summary = train_rl(cfg)
    rows = summary["progress"]
    header = ("round", "imagined return", "imagined success", "left support", "reference")
    print("\n" + " ".join(f"{h:>{w}}" for h, w in zip(header, (5, 16, 17, 13, 10), strict=True)))
    for row in rows:
        imagined = row.get("imagined") or row.get("training") or {}
        reference = row.get("reference", {}).get("all")
        ref = f"{100 * reference['rate']:9.1f}%" if reference else f"{'-':>10}"
        print(
            f"{row['round']:>5} {imagined.get('return', float('nan')):16.2f} "
            f"{100 * imagined.get('success', 0):16.1f}% {100 * imagined.get('left_support', 0):12.1f}% {ref}"
        )
    verified = [r for r in rows if "verified" in r]
    if verified:
        print("\n" + format_verified(verified[-1]["round"], verified[-1]["verified"]))
    last = next((r for r in reversed(rows) if "reference" in r), None)
    if last:
        print(f"\nreference-world success after round {last['round']}:\n{format_rates(last['reference'])}")
    print(f"\npolicy: {summary['policy']}  (run it with --policy.path={summary['policy']})")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(RLConfig, rl_main, __doc__, argv, prog="r2s2r-rl")


if __name__ == "__main__":
    sys.exit(main())
