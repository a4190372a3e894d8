"""r2s2r-fit-value: fit a base policy's value (odds of eventual success from a state) for the action search.

Examples:
    r2s2r-record --root=outputs/rollouts/act_3000 --policy.path=outputs/zoo/act/step_3000 \\
        --num_episodes=128 --world.cameras='[]'
    r2s2r-fit-value --data='[outputs/rollouts/act_3000]' --output_dir=outputs/value/act_3000
    r2s2r-search --base.path=outputs/zoo/act/step_3000 --search.value=outputs/value/act_3000 ...

The search imagines each candidate a short horizon ahead (0.4 s by default); over so short a horizon the
staged reward cannot tell a reach that will miss the cube from one that will close on it. The value reads
where a candidate leaves the robot (proprio, object pose, the object in each gripper's frame, time left)
and says how often the base policy, going on from such a state, ended the episode in success: an ensemble
of small MLPs (--members), each fitted on its own bootstrap of the episodes. Fit it on the base policy's
own episodes (state-only recordings suffice: the value reads no images); they need success labels and the
object pose. --heldout episodes are kept out of fitting to report how well it predicts (ROC AUC over their
states, and its Brier score against always guessing the success rate). About a minute on 2 CPU cores.
Writes <output_dir>/config.json, model.safetensors and fit.json.
"""

from __future__ import annotations

import sys

from r2s2r.scripts import cli
from r2s2r.training.value import ValueConfig, fit_value


def fit_main(cfg: ValueConfig) -> int:
    _, report = fit_value(cfg)
    rate = 100 * report["success_rate"]
    print(f"fitted on {report['episodes']} episodes ({report['states']} states), success {rate:.0f} %")
    if "heldout" in report:
        h = report["heldout"]
        print(
            f"held-out {h['episodes']} episodes: AUC {h['auc']:.3f}, Brier {h['brier']:.3f} "
            f"(a constant guess: {h['brier_constant']:.3f})"
        )
    print(f"value: {cfg.output_dir}  (use it with the search's value={cfg.output_dir})")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(ValueConfig, fit_main, __doc__, argv, prog="r2s2r-fit-value")


if __name__ == "__main__":
    sys.exit(main())
