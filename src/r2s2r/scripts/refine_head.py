"""r2s2r-refine-head: refine a trained world model's state-dynamics head and write a new world model.

Examples:
    r2s2r-refine-head --checkpoint=assets/world_model_small --data='[outputs/bench/data/train]' \\
        --heldout=outputs/bench/data/heldout --output_dir=outputs/world_model_refined
    r2s2r-refine-head --checkpoint=... --data='[DATA, outputs/rollouts/act]' --head.steps=6000

The state-dynamics head is the world model's fast path: r2s2r-eval/rank --render=false, r2s2r-search and
r2s2r-rl all imagine with it. Joint training fits it on short clips; this refines it for long imagined
episodes on whole recorded episodes (--data: the world model's own recordings, plus any policy rollouts
you want it to know), on --head.window-frame unrolls from any frame, each ensemble member on its own
bootstrap share. The cameras' trunk, the video model and the judge are untouched. About 10 minutes for
3,000 steps on 2 CPU cores.

Today's head (which --upgrade, on by default, gives a checkpoint made before it) starts each imagined
episode from the observed object pose (observation.environment_state) as well as the cameras, and carries
proprio and pose explicitly, stepping them by predicted changes: for a 4 cm cube, where it really is
decides the grasp, and a cube nobody touches stays put. Some refinement encodings hide the pose, so the
head still starts from the cameras alone when an observation has none.

It also relates the cube to the fingers (--kinematics, on by default): forward kinematics of the robot's
MJCF gives each gripper's grasp point and frame from the carried joint angles; the head reads where the
cube is in every gripper's frame, and besides its free pose change it predicts "carried rigidly by the
left / right gripper", picked by the predicted odds. A held cube then moves exactly with the fingers
instead of lagging behind them, and a 1 cm miss is visible as such. --kinematics=false: pose only.

--tracks_commands predicts the next proprio from the commands: ALOHA's joints are position-controlled,
so a frame ends near the chunk's last joint target, and the head learns only the difference (lag,
contact). The last target alone lands 0.6 cm from the next grasp point (the head's own guess: 1.2 cm),
but the head trained with it ranked the benchmark zoo worse, so it is off by default. Object poses are
scored by a Huber loss, so a cube that fell off the table (metres) does not outweigh every centimetre.

--arm_targets ends every imagined frame with the arm joints exactly at the chunk's last commanded target
(head.arm_targets; the grippers still learn theirs, as one shut on a cube stops at its width). The learnt
arm motion drifted 1.2-1.5 cm at the grasp point, as much as the grasp offsets that decide a lift; the
target is 0.3 cm from where the arm really ends. It adds no weights, so it can also be switched on for a
refined head by setting "arm_targets": true under "head" in its config.json.

--still_mode adds one more pose mode: "the cube stays exactly where it is", with its odds. Training picks
it wherever the cube did not move, so a cube nobody touches does not drift (the free change jittered it by
about a centimetre per imagined frame). --mode_grippers makes each pose mode after the first an outcome
with its own gripper openings ("carried", fingers stopped at the cube's width), where one shared opening
averaged "held" and "shut on air". Both are off by default: neither ranked the benchmark zoo better
(benchmarks/head.py).

--holds makes imagined holds hold (head.holds; imagined steps only, no weights, so it can also be switched
on in a refined head's config.json): a cube in mid-air within reach of a closed gripper that does not
open stays in that hand whatever the odds (the rule the training labels follow), and a carried cube moves
rigidly with its gripper, within 5 mm. With --still_mode it is what ranks the benchmark zoo best
(README: "Ranking checkpoints").

--pose_modes=2 gives the head two free alternative object-pose changes per step (say, pushed or left
behind) with their odds, instead of one change that averages them; each imagined
episode of WorldModelEnv follows one, drawn once by the odds. Training scores the alternative nearest
the truth (winner takes all).

With --heldout, prints the head's open-loop figures before and after on those episodes (never trained
on): object-position error at 1/3/6 s replaying the logged actions, and outcome agreement (the head
predicts success exactly when the episode succeeded). Writes <output_dir>/ (config.json,
model.safetensors: use it as any --checkpoint) and <output_dir>/refine.json.
"""

from __future__ import annotations

import sys

from r2s2r.scripts import cli
from r2s2r.training.head import RefineConfig, refine_checkpoint


def _row(name: str, f: dict) -> str:
    err = " / ".join(f"{100 * v:5.1f}" if v is not None else "  -  " for v in f["object_error_m"].values())
    return (
        f"{name:22s} {err:>24s} {100 * f['outcome_agreement']:9.0f}% "
        f"{100 * f['imagined_success']:9.0f}% {100 * f['real_success']:6.0f}%"
    )


def refine_main(cfg: RefineConfig) -> int:
    figures = refine_checkpoint(cfg)
    print(f"\nrefined on {figures['episodes']} episodes in {figures['refine_seconds']:.0f} s")
    rows = [(k, figures[k]) for k in ("before", "after", "after_cameras_only") if k in figures]
    if rows:
        header = ("head", "object error 1/3/6 s (cm)", "agreement", "imagined", "real")
        widths = ("22", ">24", ">10", ">10", ">7")
        print("\n" + " ".join(f"{h:{w}s}" for h, w in zip(header, widths, strict=True)))
        for name, f in rows:
            print(_row(name, f))
    print(f"\nworld model: {cfg.output_dir}  (use it with --checkpoint={cfg.output_dir})")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(RefineConfig, refine_main, __doc__, argv, prog="r2s2r-refine-head")


if __name__ == "__main__":
    sys.exit(main())
