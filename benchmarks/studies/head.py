"""Upgraded state-dynamics heads vs the one the world model was trained with: open loop and ranking.

The state head is the fast path of ranking (`r2s2r-rank --render=false`), search and RL. This study
upgrades the committed small world model's head (`upgrade_head`: it reads the observed object pose and
carries proprio and pose explicitly; the `pose head` rows without, the `kinematic head` rows with
`head.kinematics`, which relates the cube to each gripper's grasp frame and can carry it rigidly with
one) and refines it
(`r2s2r-refine-head`, 3,000 steps) on

  - `own`: the world model's own training recordings (scripted demonstrators at mixed skill), and
  - `own, 2 pose modes`: the same, with a pose head that predicts two alternative object-pose changes
    per step (`head.pose_modes=2`) and follows one per imagined episode, drawn by their predicted odds;
  - `own+act`: those plus rollouts of four ACT checkpoints of the zoo's training run that are NOT in the
    ranked zoo (steps 500, 4000, 5000, 6500; `--rollouts` episodes each, new seeds): what a team has from
    earlier hardware evaluations of the same policy family;
  - `own+near-misses`: the own recordings plus `--near_misses` episodes of the `fumbling` demonstrator,
    which aims centimetres off and closes on air (the weak ACT checkpoints' failure; no policy of the zoo);
  - `still mode`: the kinematic head with one more pose mode, "the cube stays exactly where it is"
    (`head.still_mode`), on `own+near-misses`;

then, for the committed model, the head refined by `benchmarks/rl.py` (old head, `--head_steps`) and the
new heads:
  1. open loop on the 32 held-out recordings: object error at 1/3/6 s, outcome agreement;
  2. `r2s2r-rank` on the state-head path against the hardware logs of `benchmarks/rank.py` (which must have
     been run: its logs are reused, never trained on), the same statistics as the ranking benchmark;
  3. the hardware logs replayed open loop (`--replay` episodes per checkpoint): does the head, given the
     logged actions, predict the logged outcome? (outcome agreement per family, scripted and ACT).

Usage:
    python benchmarks/studies/head.py  # about 35 minutes on 2 CPU cores (recording 64 episodes: 13)
The figures in docs/benchmarks.md ("Studies") were made from the committed model as it was before its head
was replaced by the `new head, own` model made here; to start from it again:
    mkdir -p outputs/bench/head/committed_before && for f in config.json model.safetensors; do
      git show 49770d8:assets/world_model_small/$f > outputs/bench/head/committed_before/$f; done
    python benchmarks/studies/head.py --checkpoint outputs/bench/head/committed_before
(the `2 pose modes` model of the last run was refined from benchmarks/train_small.py's checkpoint, the
same weights in float32). From the current asset the head is already upgraded and is only refined further.
Every stage resumes: recordings continue, refined models and rankings already written are reused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common.py
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402

# isort: split
from r2s2r.data.recorder import RecordConfig, record  # noqa: E402
from r2s2r.eval.rank import RankConfig, rank  # noqa: E402
from r2s2r.model.modeling_world_model import WorldModel  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import WorldConfig  # noqa: E402
from r2s2r.training.head import (  # noqa: E402
    HeadTrainConfig,
    RefineConfig,
    head_openloop,
    read_episodes,
    refine_checkpoint,
)

UNRANKED_ACT = (500, 4000, 5000, 6500)  # ACT checkpoints of the zoo's run that rank.py does not rank


def record_rollouts(args) -> list[str]:
    roots = []
    for step in UNRANKED_ACT:
        root = Path(args.root) / "rollouts" / f"act_step_{step}"
        cfg = RecordConfig(
            root=str(root), num_episodes=args.rollouts, distribution="mixed", seed=5000 + step, workers=2,
            world=WorldConfig(num_envs=4),
            policy=PolicyConfig(path=str(Path(args.act_dir) / f"step_{step}")),
        )  # fmt: skip
        summary = record(cfg)
        print(f"rollouts act_step_{step}: {summary.successes}/{summary.num_episodes} succeeded", flush=True)
        roots.append(str(root))
    return roots


def record_near_misses(args) -> str:
    """Scripted episodes that aim centimetres off (skill `fumbling`): grippers closing on air beside, above or
    short of the cube, the near-misses the world model's own recordings hold few of."""
    root = Path(args.root) / "near_misses"
    cfg = RecordConfig(
        root=str(root), num_episodes=args.near_misses, distribution="mixed", seed=777, workers=2,
        world=WorldConfig(num_envs=4), policy=PolicyConfig(kwargs={"skill": "fumbling"}),
    )  # fmt: skip
    summary = record(cfg)
    print(f"near-misses (fumbling): {summary.successes}/{summary.num_episodes} succeeded", flush=True)
    return str(root)


def replayed(args, name: str, checkpoint: str) -> dict:
    """Open loop on the hardware logs themselves: each logged episode's actions replayed by the head from its
    first frame (`--replay` episodes per checkpoint); does it predict the outcome the log shows? This
    separates the head's physics (does a gripper closing 6 cm from the cube carry it?) from the policy's
    reaction to imagined observations in closed loop."""
    out = Path(args.root) / "head" / "replay" / f"{name}.json"
    if out.is_file():
        return json.loads(out.read_text())
    model = WorldModel.from_pretrained(checkpoint).eval()
    result = {}
    for policy in sorted(p.name for p in (Path(args.rank_dir) / "logs").iterdir() if p.is_dir()):
        episodes = read_episodes(str(Path(args.rank_dir) / "logs" / policy), model, args.replay)
        result[policy] = head_openloop(model, episodes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return result


def family_agreement(replay: dict, act: bool) -> float:
    rows = [r for policy, r in replay.items() if policy.startswith("act") == act]
    return sum(r["outcome_agreement"] * r["episodes"] for r in rows) / sum(r["episodes"] for r in rows)


def refined(
    args,
    name: str,
    data: list[str],
    pose_modes: int = 0,
    kinematics: bool = True,
    still: bool = False,
) -> tuple[str, dict]:
    out = Path(args.root) / "head" / name
    if not (out / "refine.json").is_file():
        cfg = RefineConfig(
            checkpoint=args.checkpoint, data=data, heldout=args.heldout, output_dir=str(out),
            pose_modes=pose_modes, kinematics=kinematics, still_mode=still,
            head=HeadTrainConfig(steps=args.steps),
        )  # fmt: skip
        refine_checkpoint(cfg)
    return str(out), json.loads((out / "refine.json").read_text())


def ranked(args, name: str, checkpoint: str) -> dict:
    out = Path(args.root) / "head" / "rank" / name
    if not (out / "rank.json").is_file():
        rank(
            RankConfig(
                checkpoint=checkpoint, logs_dir=str(Path(args.rank_dir) / "logs"),
                policies=str(Path(args.rank_dir) / "zoo.json"), samples_per_start=args.samples, render=False,
                batch_size=20, workers=2, output_dir=str(out), videos=0,
            )
        )  # fmt: skip
    payload = json.loads((out / "rank.json").read_text())
    return {
        "metrics": payload["metrics"],
        "policies": {p["name"]: {"real": p["real"], "imagined": p["imagined"]} for p in payload["policies"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", default="assets/world_model_small", help="the world model to upgrade")
    parser.add_argument("--old_refined", default="outputs/bench/rl/world_model", help="benchmarks/rl.py's")
    parser.add_argument("--data", default="outputs/bench/data/train", help="the world model's recordings")
    parser.add_argument("--heldout", default="outputs/bench/data/heldout")
    parser.add_argument("--act_dir", default="outputs/bench/zoo/act")
    parser.add_argument("--rank_dir", default="outputs/bench/rank", help="benchmarks/rank.py's output")
    parser.add_argument("--rollouts", type=int, default=16, help="episodes per unranked ACT checkpoint")
    parser.add_argument("--near_misses", type=int, default=96, help="episodes of the fumbling demonstrator")
    parser.add_argument("--replay", type=int, default=20, help="logged episodes per checkpoint to replay")
    parser.add_argument("--steps", type=int, default=3000, help="refinement steps")
    parser.add_argument("--samples", type=int, default=4, help="imagined episodes per logged start")
    parser.add_argument("--root", default="outputs/bench")
    args = parser.parse_args()
    if not (Path(args.rank_dir) / "zoo.json").is_file():
        raise SystemExit(f"no {args.rank_dir}/zoo.json: run benchmarks/rank.py first (its logs are reused).")

    start = time.perf_counter()
    rollouts = record_rollouts(args)
    near_misses = record_near_misses(args)
    record_s = time.perf_counter() - start
    models = {"committed": (args.checkpoint, None)}
    if (Path(args.old_refined) / "model.safetensors").is_file():
        models["old head, refined"] = (args.old_refined, None)
    for name, data in (("own", [args.data]), ("own+act", [args.data, *rollouts])):
        models[f"pose head, {name}"] = refined(args, name.replace("+", "_"), data, kinematics=False)
    models["pose head, own, 2 pose modes"] = refined(
        args, "own_modes2", [args.data], pose_modes=2, kinematics=False
    )
    models["kinematic head, own"] = refined(args, "own_kinematic", [args.data])
    models["kinematic head, own+act"] = refined(args, "own_act_kinematic", [args.data, *rollouts])
    own_near = [args.data, near_misses]
    near = "own+near-misses"
    models[f"kinematic + still mode, {near}"] = refined(args, "own_near_still", own_near, still=True)

    results = {}
    for name, (checkpoint, figures) in models.items():
        key = name.replace(", ", "_").replace(" ", "_").replace("+", "_")
        if figures is None:  # a model this script did not refine: measure it the same way
            model = WorldModel.from_pretrained(checkpoint)
            figures = {"after": head_openloop(model, read_episodes(args.heldout, model))}
        results[name] = {
            "checkpoint": checkpoint,
            "openloop": figures["after"],
            "openloop_cameras_only": figures.get("after_cameras_only"),
            "refine_seconds": figures.get("refine_seconds"),
            "rank": ranked(args, key, checkpoint),
            "replay": replayed(args, key, checkpoint),
        }

    rows = []
    for name, r in results.items():
        err = " / ".join(f"{100 * v:.1f}" for v in r["openloop"]["object_error_m"].values())
        m = r["rank"]["metrics"]
        rows.append([
            name, err, f"{100 * r['openloop']['outcome_agreement']:.0f}",
            *(f"{m[s]['spearman']['value']:.2f}" if m[s]["spearman"]["value"] is not None else "n/a"
              for s in ("all", "id", "ood")),
            f"{100 * m['all']['pairwise_accuracy']['all']['value']:.0f}",
            f"{m['all']['calibration']['mae_points']:.0f}",
            *(f"{100 * family_agreement(r['replay'], act):.0f}" for act in (False, True)),
        ])  # fmt: skip
    print_table(
        "state head: open loop on held-out recordings, and ranking the zoo on the state-head path",
        ["head", "object error 1/3/6 s (cm)", "agreement %", "Spearman all", "ID", "OOD", "pairwise %",
         "MAE pts", "replay agr. scripted %", "ACT %"],
        rows,
    )  # fmt: skip
    names = list(results)
    policy_rows = []
    for policy, entry in results[names[0]]["rank"]["policies"].items():
        real = entry["real"]["all"]["rate"]
        policy_rows.append([
            policy, f"{100 * real:.0f}",
            *(f"{100 * results[n]['rank']['policies'][policy]['imagined']['all']['rate']:.0f}"
              for n in names),
        ])  # fmt: skip
    policy_rows.sort(key=lambda r: -float(r[1]))
    title = "success (%): real vs imagined on the state-head path"
    print_table(title, ["policy", "real", *names], policy_rows)
    write_json(
        Path(__file__).resolve().parents[1] / "results" / "archive" / "head.json",
        {
            "machine": machine_info(),
            "settings": vars(args),
            "record_rollouts_s": record_s,
            "results": results,
        },  # fmt: skip
    )


if __name__ == "__main__":
    main()
