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
A killed run resumes: re-run the same command and it continues from <output_dir>.partial/ (saved every
--head.save_every steps) to the same weights; other settings are refused.

The current head (which --upgrade, on by default, gives a checkpoint made before it) starts each imagined
episode from the observed object pose (observation.environment_state) as well as the cameras, and carries
proprio and pose explicitly, stepping them by predicted changes, so a cube nobody touches stays put. Some
refinement encodings hide the pose, so the head still starts from the cameras alone when an observation
has none. Object poses are scored by a Huber loss, so a cube that fell off the table (metres) does not
outweigh every centimetre.

--kinematics (on by default) relates the cube to the fingers: forward kinematics of the robot's MJCF gives
each gripper's grasp point and frame from the carried joint angles; the head reads where the cube is in
every gripper's frame and, besides its free pose change, predicts "carried rigidly by the left / right
gripper", picked by the predicted odds. --kinematics=false: pose only.

--arm_targets ends every imagined frame with the arm joints exactly at the chunk's last commanded target
(head.arm_targets; the grippers still learn theirs). It adds no weights, so it can also be switched on
for a refined head by setting "arm_targets": true under "head" in its config.json.

--arm_tracking (turns on --arm_targets; head.arm_tracking) ends them instead where a tracking model fitted to
--data puts them: each joint behind its last target by a linear map of how that target moved over the
frame's last control step and over the whole frame, plus an offset, fitted by least squares robust to frames
where the table or the object stopped an arm. A real arm lags a moving target; an imagined grasp then
closes where the real one would, not a centimetre nearer the object. The fit takes seconds and is saved
with the head; its errors (radians, target alone vs tracked) go into refine.json.

--head.steps=0 trains nothing: it switches the rules above (--arm_targets, --arm_tracking, --holds, --falls,
--stops, --balance, --pad_holds, --takes, --held_success, --grip_servo, --capture, --squeeze, --turns,
--doubt, --chance, --odds_doubt, --substeps, --pushes, --drops, --rests, --closes, --success_touch,
--touch_finger, --touch_outline, --balance_margin, --squeeze_depth, --pad_overlap, --push_touch) on a
refined head, fits the tracking model, the grippers' servo and the grasp odds, and writes the world model.
Other flags must then match the checkpoint's head (they would rebuild it, untrained); that is refused.

--still_mode adds a pose mode "the cube stays exactly where it is", with its odds; training picks it
wherever the cube did not move.

--holds makes imagined holds hold (head.holds; imagined steps only, no weights, so it can also be switched
on in a refined head's config.json): a cube in mid-air within reach of a closed gripper that does not
open stays in that hand whatever the odds (the rule the training labels follow), and a carried cube moves
rigidly with its gripper, within 5 mm.

--contact makes every contact outcome a function of the gripper-cube geometry alone (head.contact; needs
--kinematics and --still_mode): how far each gripper closes this frame (it stops on a cube between its
pads), the odds that it carries the cube, the odds that the cube stays or moves freely, and the staged
reward and success read only the cube's position in each gripper's frame, the gripper's opening and
command, the cube's height above the table, how square the fingers stand to its faces, and the gripper's
own height over the table and tilt (fingers can close on the table too); one network serves both
grippers. Not the arms' joints, not the latent: what a grasp does then does not depend on which
controller brought the gripper there.

--pads (with --contact; head.pads) lets the cube act on a gripper only between its pads: a box in the
gripper's frame read from the MJCF's fingers (the cube fits between the open inner faces and overlaps
them by --pad_overlap metres, 5 mm by default; not learnt). Elsewhere the gripper closes as it would on
nothing and cannot carry the cube, whatever direction it came from; a grasp 5 cm off the cube then
closes empty instead of on the cube, as in the reference world.

--falls lands an imagined cube that no gripper can hold (head.falls; imagined steps only, no weights, so
it can also be switched on in a refined head's config.json): one over the table, more than 1.5 cm above its
resting height, with every grasp point farther than 8 cm, ends the frame on the table at its x-y. The
reference world spawns the cube 3 cm up; without it the imagined cube could hover there.

--stops (with --pads; head.stops; imagined steps only, no weights, switchable in config.json) stops a
gripper closing on the cube between its pads where the pads meet it: the cube's half-width across the
closing axis turned into the gripper's opening by the fingers' travel (0.61 for the 4 cm cube held
square, what the reference world reads), whatever the grasp net predicts.

--balance (with --pads; head.balance; imagined steps only, no weights, switchable in config.json): a
gripper starts to carry the cube only where the cube's centre lies over its pads' faces across gravity
(along the faces' horizontal direction, within the MJCF's faces). Held beside that, the cube's weight
turns it about the pads and it slips out as it is lifted: in the reference world a top-down grasp 2.5 cm
along the fingers' width lifts the cube, one 3 cm along it does not. --balance_margin (m, default 0.003)
is how far inside the faces the centre must lie; negative: that far outside them still carries.

--pad_holds (with --pads and --holds; the same kind of rule): a closed gripper holds the cube in mid-air
only where the cube lies between its pads, and rigidly: without it a held cube could slip up to 5 mm a
frame, which added up over a slow hand-over to a cube 5 cm down the fingers.

--takes (with --pad_holds and --balance; the same kind of rule): a gripper that closes on the cube between
its pads, balanced there, holds it from that frame on, on the table too. The learnt odds alone could leave
the cube behind when a fast grasp closes and lifts within one frame.

--held_success (with --pads; the same kind of rule): imagined success only while a closed gripper holds
the cube between its pads, clear of the table. The head's success net reads the geometry of both hands
and can report success for a cube that nothing holds (one falling from a hand-over that missed).

--grip_servo (with --pads; head.grip_servo; imagined steps only): each gripper follows its commands through
the frame, control step by control step, as a servo fitted to --data: each step closes the gap to the
command, less a dead band, by a gain, at most a top speed (the grid point with the least error on the
frames where no object was near that gripper). The grasp nets read only the frame's last command: they
closed a free gripper by 0.1 of its range per frame where the reference world closes it by 0.5. The fit
and its error (servo, last command, no motion) go into refine.json.

--capture (with --pads; imagined steps only, no weights, switchable in config.json): each frame's control
steps are played one by one (the arms at each step's target, the fingers as the servo moves them, the cube
where it starts), and a gripper takes or carries the cube only if it is open wider than the cube (less
0.05 of its range) at the step where the cube first comes between its fingers; where the cube is there
from the frame's start, only if it starts the frame no narrower than the cube less 0.15. Fingers that
closed too early rest on the cube; they do not come round it. A gripper that captures the cube stops
on it.

--squeeze (with --pads; the same kind of rule): a gripper takes or carries the cube only if its last
command lies at least 0.04 of its range past the opening where its pads meet the cube. In the coverage
data, 2 % of grasps commanded less than that lifted the cube (benchmarks/studies/grasp_margins.py).
--squeeze_depth (default 0.04) moves that edge: 21-41 % of the grasps commanded 0.04-0.1 past lifted it,
74-89 % of those further.

--turns (with --pad_holds; the same kind of rule): a held cube turns rigidly with its gripper. Without it
the cube's turn came from the free modes' prediction, and over a slow carry it drifted until the other
hand's fingers met it askew.

--doubt (with --pads; no weights, switchable in config.json): the uncertainty an imagined episode reports
rises where one of its grasps came near the edge of a grasp rule that is on (the balance margin, the
squeeze depth, the capture, the hold across the fingers), as a Gaussian of the distance to that edge, and
stays up for the rest of the episode. The rules decide with certainty where the data says either outcome
can happen.

--chance (with --takes; fitted, switchable only through this command): a grasp takes and holds the cube
with odds fitted to --data instead of by the balance rule's hard edge. The odds are a product of one
logistic curve per factor: the cube's centre inside the pads' faces across gravity, and how far past the
pads' meeting the gripper is commanded. Each curve's edge and width are
fitted by maximum likelihood on every first close of a gripper on the cube between its pads in --data,
labelled by whether that gripper then carried the cube off the table with the other hand clear
(`fit_grasp_odds`; refine.json gives the fit and its calibration). Each imagined episode draws once per
gripper, so a grasp near an edge holds in some episodes and not in others, as on the robot; with --doubt,
even odds raise the uncertainty too.

--odds_doubt (with --takes and --doubt; fitted as for --chance): the same fitted odds raise the uncertainty
where a grasp's odds are near even, while the rules still decide every grasp (no draw): the rules' rankings
with the odds' uncertainty.

--substeps (with --arm_targets and --pads; fits the grippers' servo as --grip_servo does, switchable in
config.json once fitted): the observations a policy reads between imagined frames follow its commands one
control step at a time: the arms where the tracking model puts them on the frame's targets so far, the
grippers by the fitted servo, stopped where their pads meet a cube between them, and a carried cube with
its hand. Without it the frame's start repeats until the next frame, and a controller that watches its
fingers stop on the cube (a grasp by feel) sees them stalled at once. Each frame still ends where the head
puts it.

--pushes (with --substeps; no weights): a finger that moves into a cube resting on the table from the
side, and is not closing on it, pushes it back out the way it came, along the table, control step by
control step (each finger the box round its geometry in the MJCF, the cube its half-size round its
centre); one that comes down on it from above does not slide it. The frame ends with the cube where the
fingers left it. Without it a cube no gripper holds moves only as the free modes predict, and a
hand that sweeps through it on its way back leaves it where it lay. --push_touch (default 0.001 m) is how
far inside a finger the cube may have lain a step earlier and still count as pushed by it: each frame
starts the fingers from its predicted end, a few millimetres off where the last control step left them.

--drops (with --substeps and --pad_holds; no weights): a cube in mid-air stays with a gripper only while
its fingers are on it (within 0.1 of the opening where its pads meet it) and squeeze (commanded tighter
than that opening by more than the servo's dead band); from the control step its command opens past that,
the cube falls freely, straight down, until the table stops it or another gripper's closing fingers reach
it round it (a catch: carried from that step). Between frames and at the frame's end alike. Without it a
cube let go next to open fingers hangs where it was let go, and a closing hand takes it there.

--closes (with --pads; no weights): a gripper open round the cube between its pads closes through the
frame as the fitted servo follows its commands (the grippers' servo, fitted with the head) and stops where
its pads meet the cube, in place of the grasp nets. On the held-out families' logs the nets closed a gentle
command in three frames where the real fingers took one (benchmarks/studies/divergence.py).

--rests (with --pad_holds; no weights): fingers on a cube between them (within 0.1 of the opening where
their pads meet it) that squeeze it end each frame resting on it, no wider than that opening plus 0.02
(the recordings' right hand squeezing the cube in mid-air: 95 % within 0.014); between frames they close
no further. Without it the grasp nets could leave a held gripper 0.1 wider than the cube, where the hold
and drop rules no longer counted its fingers on it, and between frames a held gripper's opening closed
through the cube and sprang back at each frame's end, so a policy waiting for its fingers to stop never
saw them stop.

--success_touch=0 (with --contact; no weights): imagined success is the reference world's own test on the
imagined state: the cube clear of the table and touched by a finger (the box of its MJCF geometry) of
gripper 0 (ALOHA: the left; gym-aloha's transfer-cube rewards a left finger touching the cube off the
table), in place of the grasp nets' success and --held_success. On the coverage recordings' own states
the test agrees with the recorded success on 99.3 % of frames (benchmarks/studies/touch_success.py).
Without it a left that touches the cube while the right still holds it, which the reference world counts
as a success, is not one in imagination. -1 (the default) turns it off. --touch_finger=0 counts only
that finger of the gripper (its index in the MJCF's order; ALOHA: 0 is 10_left_gripper_finger, the one
finger gym-aloha's test names; -1, the default: any finger). --touch_outline (with --success_touch) draws
the fingers in the plane of their pads' faces as the faces' convex hull in the MJCF, not as the box
bounding each finger: ALOHA's fingers taper from 61 mm wide at the base to 10 mm at the tips, and a cube
held 3 cm to the side of a fingertip does not touch it.

--pose_modes=2 gives the head two free alternative object-pose changes per step (say, pushed or left
behind) with their odds; each imagined episode of WorldModelEnv follows one, drawn once by the odds.
Training scores the alternative nearest the truth (winner takes all).

--cameras=false gives a head over proprio and the object pose only (no camera trunk), which refines on
state-only recordings (r2s2r-record --world.cameras='[]').

What each of these did to the ranking is in docs/benchmarks.md.

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
    if cfg.head.steps:
        print(f"\nrefined on {figures['episodes']} episodes in {figures['refine_seconds']:.0f} s")
    else:
        print(f"\nno training (--head.steps=0); read {figures['episodes']} episodes")
    if "arm_tracking" in figures:
        f = figures["arm_tracking"]
        print(
            f"arm tracking fitted on {f['frames']} frames: arm-joint error median / 99th percentile "
            f"{f['median_rad']['last_target']:.4f} / {f['p99_rad']['last_target']:.4f} rad at the last "
            f"target, {f['median_rad']['tracked']:.4f} / {f['p99_rad']['tracked']:.4f} rad tracked"
        )
    if "grip_servo" in figures:
        f = figures["grip_servo"]
        gain, speed, band = f["gain_speed_band"]
        print(
            f"grippers' servo fitted on {f['frames']} free frames: gain {gain:g}, top speed {speed:g}, dead "
            f"band {band:g} per control step; opening error 99th percentile {f['p99']['servo']:.3f} "
            f"(the last command {f['p99']['last_command']:.3f}, no motion {f['p99']['no_motion']:.3f})"
        )
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
