"""Ranking on policy families that generated no training data and informed no design decision.

The zoo of `benchmarks/rank.py` comes from the same demonstrators and the same ACT run as the state head's
data, and the head's options were chosen by their effect on it: a number measured there does not say what
a user will see on their own policies. This benchmark ranks families kept out of the training data:

  - `waypoint`: a Cartesian waypoint controller with its own inverse kinematics and grasp (top-down, each
    hand holding one half of the cube), written apart from the demonstrators (benchmarks/families/);
  - `jointspace`: a joint-space keyframe controller, angled grasp, diagonal hand-over (the same);
  - `act_b`: LeRobot ACT checkpoints along a run on 200 episodes of the `noisy` demonstrator (another
    seed, width and chunk than the zoo's run); its rollouts are in no dataset;
  - `act_c`: an ACT run on 40 episodes of the `hesitant` demonstrator (less data).
  - `pincer`: a servo controller that grasps the cube from the side and hands it over elsewhere, written by
    another engineer after the contact head (`head.contact`) and its rules were fixed (benchmarks/families/);
  - `relay`: a controller with its own grasp and hand-over geometry, written by another engineer after the
    grasp rules (`head.balance`, `head.pad_holds`, `head.held_success`) were fixed (benchmarks/families/);
  - `retry`: a joint-filtered setpoint controller that checks its grasp from the cube pose and tries again,
    written by another engineer after the servo, capture, squeeze and turn rules were built, apart from the
    model (benchmarks/families/);
  - `rate`: a resolved-rate controller (joint velocities from the Jacobian toward each phase's target),
    written by another engineer while the grasp odds (`head.chance`) were built, apart from the model
    (benchmarks/families/);
  - `stall`: joint-space splines through IK via-points, grasps by feel (the fingers close until they
    stall, the stalled opening says whether the cube is held), written by another engineer after
    `head.chance`, apart from the model (benchmarks/families/); it informed `head.substeps`;
  - `overlap`: both arms at once on minimum-jerk trajectories, the left catching the cube from the still
    moving right hand, written by another engineer after `head.chance`, apart from the model
    (benchmarks/families/);
  - `table`: a table relay, no mid-air hand-over: the right sets the cube down at the table centre and
    backs away, the left picks it up from the table, written by another engineer after `head.substeps`,
    apart from the model (benchmarks/families/);
  - `nudge`: push, then grasp: the right pushes the cube along the table to its centre with closed
    fingers, re-reads it, grasps it from above and hands it over in mid-air to the left, which slides in
    level and pinches its top and bottom faces, written by another engineer after `head_substeps` was
    ranked on `table`, apart from the model (benchmarks/families/);
  - `catch`: the right lets go of the cube above the left's open fingers and the left closes as it
    falls: a hand-over by a short drop, written by another engineer after `assets/world_model_coverage` was
    committed, apart from the model (benchmarks/families/);
  - `pivot`: IK at 10 Hz under a 50 Hz joint spring-damper, a top-down grasp and the cube handed over
    tipped 45 degrees to a left that takes it diagonally from above, written by another engineer after
    `head.drops` was built, apart from the model (benchmarks/families/);
  - `swivel`: a Cartesian loop that corrects toward a minimum-jerk reference from the measured joints, the
    cube turned about the vertical in the right hand, a level left pinching its top and bottom faces,
    written by another engineer after the third version of `head.drops`, apart from the model
    (benchmarks/families/);
  - `field`: an artificial potential field descended through the Jacobian transpose every step (no IK,
    no trajectory), the right's wrist turned a quarter turn, a left that comes up from below at 30 degrees
    and pinches the free faces, its fingers crossing the right's; the right opens once the cube slips in
    its hand, written by another engineer after `head.rests` was built and the rule for keeping it set,
    apart from the model (benchmarks/families/);
  - `joust`: finite-state machines of guarded moves, each arm re-planning a joint-space quintic from the
    cube and its measured joints every 8 steps; the right turns the cube a quarter turn up to a level hold
    pointing at the left's shoulder, the left slides in nose to nose on the same axis and pinches the top
    and bottom faces, written by another engineer after `head.success_touch` was built and the rule for
    keeping it set, apart from the model (benchmarks/families/);
  - `teleop`: a simulated human teleoperator: overlapping minimum-jerk sub-movements aimed at what it saw
    a reaction delay ago, tremor, a lagging leader-to-follower mapping, closes by feel; and `shoot`: a
    sampling-based planner (the cross-entropy method over joint-space via-points scored by forward
    kinematics, no IK). Both written by other engineers after the rule for keeping head.turns,
    head.rests and head.success_touch together was set, apart from the model (benchmarks/families/);
  - `mimic`, `kalman`, `tree`, `tuned`, `dmp` (dynamic movement primitives fitted to its own teacher),
    `rrt` (RRT-Connect in joint space), `lqr` (iLQR on a fitted servo lag), `miscal` (a controller that
    plans on a miscalibrated robot), `solo` (the left alone picks the cube, the right only pushes it within
    reach), `knn` (nearest-neighbour retrieval of its own teacher's demonstrations), `twohand` (both hands
    lift the cube together, then the right lets go), `promp` (probabilistic movement primitives
    conditioned on the cube), `gmr` (Gaussian mixture regression with joint feedback) and `whip`
    (time-optimal, acceleration-limited moves that can fling the cube), `probe` (a coarse cube reading and
    a tactile search: grasps judged by feel and retried at offsets) and `slide` (the right drags the cube
    along the table, the left picks it up there): each written by another engineer
    apart from the model; the rule for the candidate it judged was set before any model ran on it (its
    `kept_out_of`);
  - `act_cam`: LeRobot ACT checkpoints along one run that reads the top view and the joint state only
    (as ACT's own simulated transfer-cube policies; no cube pose), trained from scratch on 120 rendered
    episodes of the nominal demonstrator; `act_cam_small`: a run on 30 others. Rendered logs, ranked on
    the video path like `camera`; their rollouts are in no dataset;
  - `camera`: camera-only controllers (they find the cube in the top image, some servo and check the grasp
    in the right wrist image, none reads its pose): rendered logs (three 96x128 views), ranked on the video
    path, and again with the logs' object poses ignored (`--object_poses=false`, as for hardware logs
    without them). It is reported alone: `--families camera`; `--frames head` draws the imagined frames
    from the state head's state instead of sampling them.
The ACT runs clone demonstrations, but none of their own rollouts is in any model's data. The first four
families were looked at when the contact head and its pads were designed (the design set, declared in
the JSON's `kept_out_of`); `pincer`, `relay`, `retry`, `rate`, `stall`, `overlap`, `table`, `nudge` and
`catch` were not: heads are chosen on the design set (from `head_odds` on, on every family already ranked,
pooled), and the chosen one is ranked on the newest family once, which is its held-out figure (what each
family informed all the same is in `kept_out_of`).

Stages (each resumes):
  1. the families' "hardware logs": `--per_split` ID + `--per_split` OOD state-only episodes per policy;
  2. the noise floor: a second reference-world run of every policy (new seeds), the same statistics
     (`--no_floor` skips it);
  3. for each `--world_models` entry: `held_out_violations` against its provenance.json (refused unless
     `--allow_seen`), then `r2s2r-rank` on the state-head path (`camera`: the video path, with and without
     the logged object poses, each ranked by the judge's verdict and by the state head's on the same
     imagined episodes), `--samples` imagined episodes per start;
  4. per family and pooled, ID and OOD: Spearman, Pearson, Kendall, MMRV, pairwise accuracy, calibration
     slope and MAE, each beside the real-vs-real floor;
  5. the logs' actions replayed by the state head (open loop): per family, object error and outcome
     agreement; and does the head know where it is wrong: object-position error against the ensemble's
     spread (`uncertainty_vs_error`); benchmarks/results/generalization.json.

`--families scripted` ranks the tuning set instead (rank.py's demonstrator presets): the family the head's
options are chosen on, reported as such and never as held out.

Prerequisites: the ACT runs (`bash benchmarks/held_out_act.sh`; the camera-only ones
`bash benchmarks/camera_act.sh`).
Usage:
    python benchmarks/generalization.py --world_models assets/world_model_blind,outputs/coverage/head
    M=outputs/coverage; python benchmarks/generalization.py --families pincer,relay --per_split 25 \
        --samples 1 --output_dir outputs/bench/generalization_heldout \
        --world_models assets/world_model_blind,$M/head_tracking,$M/head_held,$M/head_takes \
        --out benchmarks/results/generalization_heldout.json        # the fresh families
    M=outputs/coverage; python benchmarks/generalization.py --families retry --per_split 25 --samples 1 \
        --output_dir outputs/bench/generalization_retry \
        --world_models assets/world_model_blind,$M/head_takes,$M/head_servo \
        --out benchmarks/results/generalization_retry.json          # the sixth family
    M=outputs/coverage; python benchmarks/generalization.py --families rate --per_split 25 --samples 1 \
        --output_dir outputs/bench/generalization_rate \
        --world_models assets/world_model_blind,$M/head_takes,$M/head_chance \
        --out benchmarks/results/generalization_rate.json           # the seventh family
    M=outputs/coverage; python benchmarks/generalization.py --families stall --per_split 25 --samples 1 \
        --output_dir outputs/bench/generalization_stall \
        --world_models assets/world_model_blind,$M/head_odds,$M/head_substeps \
        --out benchmarks/results/generalization_stall.json          # the eighth, head_odds ranked once
    M=outputs/coverage; python benchmarks/generalization.py --families overlap --per_split 25 --samples 1 \
        --output_dir outputs/bench/generalization_overlap \
        --world_models assets/world_model_blind,$M/head_odds,$M/head_substeps \
        --out benchmarks/results/generalization_overlap.json        # the ninth, each head ranked once
    M=outputs/coverage; python benchmarks/generalization.py --families table --per_split 25 --samples 1 \
        --output_dir outputs/bench/generalization_table \
        --world_models assets/world_model_blind,$M/head_odds,$M/head_substeps \
        --out benchmarks/results/generalization_table.json          # the tenth, each head ranked once
    M=outputs/coverage; python benchmarks/generalization.py --families nudge --per_split 25 --samples 1 \
        --output_dir outputs/bench/generalization_nudge \
        --world_models assets/world_model_blind,$M/head_substeps,$M/head_pushes \
        --out benchmarks/results/generalization_nudge.json          # the eleventh, each head ranked once
    python benchmarks/generalization.py --families camera --per_split 5 --no_floor --samples 1 \
        --world_models assets/world_model_small --out benchmarks/results/generalization_camera.json
        # the video path; rendering the logs takes ~12 s an episode on one core
    python benchmarks/generalization.py --families camera --per_split 5 --no_floor --samples 1 --frames head \
        --world_models assets/world_model_small --out benchmarks/results/generalization_camera_head.json
        # frames drawn from the state head's state (--frames=head): the poses-ignored run reads each start's
        # cube from its first frame, so a head without cameras ranks it too; with the grasp rules'
        # coverage head: --world_models outputs/coverage/head_takes --out .../generalization_camera_takes.json
    python benchmarks/generalization.py --families act_cam,act_cam_small --per_split 10 --samples 1 \
        --workers 2 --output_dir outputs/bench/generalization_act_cam \
        --world_models assets/world_model_small --out benchmarks/results/generalization_act_cam.json
        # learned camera-only policies (bash benchmarks/camera_act.sh first) on the video path;
        # with --frames head --world_models outputs/coverage/head_pushes (its appearance copied from
        # assets/world_model_small) --out benchmarks/results/generalization_act_cam_head.json
    bash benchmarks/coverage.sh chosen    # assets/world_model_coverage: head_pushes, committed
    python benchmarks/generalization.py --families nudge --per_split 25 --samples 1 \
        --output_dir outputs/bench/generalization_nudge \
        --world_models assets/world_model_blind,assets/world_model_coverage \
        --out benchmarks/results/generalization_coverage_nudge.json  # the rebuilt head against the one ranked
    python benchmarks/generalization.py --families camera --per_split 5 --no_floor --samples 1 --frames head \
        --world_models assets/world_model_small,assets/world_model_coverage \
        --out benchmarks/results/generalization_coverage_camera.json  # the committed head's drawn frames
    for f in retry rate pincer,relay stall overlap table; do n=${f/pincer,relay/heldout}
      python benchmarks/generalization.py --families $f --per_split 25 --samples 1 --no_floor \
        --output_dir outputs/bench/generalization_$n \
        --world_models assets/world_model_blind,assets/world_model_coverage \
        --out benchmarks/results/archive/coverage_asset_$n.json; done   # the committed head, re-ranked
    python benchmarks/generalization.py --families catch --per_split 25 --samples 1 --workers 2 \
        --output_dir outputs/bench/generalization_catch \
        --world_models assets/world_model_blind,assets/world_model_coverage \
        --out benchmarks/results/generalization_catch.json          # the twelfth, each model ranked once
    python benchmarks/generalization.py --families pivot --per_split 25 --samples 1 --workers 1 \
        --output_dir outputs/bench/generalization_pivot \
        --world_models assets/world_model_blind,assets/world_model_coverage,outputs/drops/world_model_drops \
        --out benchmarks/results/generalization_pivot.json    # the thirteenth (--families swivel: the
        # fourteenth, generalization_swivel.json); world_model_drops: the coverage head with head.drops
    python benchmarks/generalization.py --families field --per_split 25 --samples 1 --workers 1 \
        --output_dir outputs/bench/generalization_field \
        --world_models assets/world_model_coverage,outputs/square/wm_rests,outputs/square/wm_turns,... \
        --out benchmarks/results/generalization_field.json    # the fifteenth (--families joust: the
        # sixteenth, generalization_joust.json, with outputs/touch/world_model_touch: head.success_touch)
    python benchmarks/generalization.py --families teleop --per_split 25 --samples 1 --workers 2 \
        --output_dir outputs/bench/generalization_teleop \
        --world_models assets/world_model_coverage,outputs/combo/wm_combo,assets/world_model_blind \
        --out benchmarks/results/generalization_teleop.json   # the seventeenth (--families shoot: the
        # eighteenth, generalization_shoot.json); wm_combo: head.turns, head.rests, head.success_touch,
        # kept on the two pooled (studies/pooled.py, archive/pooled_combo.json)
    python benchmarks/generalization.py --families mimic --per_split 25 --samples 1 --workers 1 \
        --output_dir outputs/bench/generalization_mimic \
        --world_models assets/world_model_coverage,outputs/chance/wm_chance,assets/world_model_blind \
        --out benchmarks/results/generalization_mimic.json    # the nineteenth (--families kalman: the
        # twentieth, generalization_kalman.json); wm_chance: the committed head with head.chance, not kept
        # on the two pooled (archive/pooled_chance.json)
    python benchmarks/generalization.py --families tree --per_split 25 --samples 1 --workers 1 \
        --output_dir outputs/bench/generalization_tree \
        --world_models assets/world_model_coverage,outputs/finger/wm_finger,assets/world_model_blind \
        --out benchmarks/results/generalization_tree.json     # the twenty-first (--families tuned: the
        # twenty-second, generalization_tuned.json); wm_finger: the committed head with head.touch_finger
    python benchmarks/generalization.py --families dmp --per_split 25 --samples 1 --workers 1 \
        --output_dir outputs/bench/generalization_dmp \
        --world_models assets/world_model_coverage,outputs/balance/wm_balance,assets/world_model_blind \
        --out benchmarks/results/generalization_dmp.json      # the twenty-third (--families rrt: the
        # twenty-fourth, generalization_rrt.json); wm_balance: the committed head, head.balance_margin -2 mm
    python benchmarks/generalization.py --families lqr --per_split 25 --samples 1 --workers 2 \
        --output_dir outputs/bench/generalization_lqr \
        --world_models assets/world_model_coverage,outputs/squeeze/wm_squeeze10,assets/world_model_blind \
        --out benchmarks/results/generalization_lqr.json      # the twenty-fifth (--families miscal: the
        # twenty-sixth, generalization_miscal.json); wm_squeeze10: the committed head with head.closes,
        # head.squeeze and head.squeeze_depth = 0.1
    python benchmarks/generalization.py --families solo --per_split 25 --samples 1 --workers 2 \
        --output_dir outputs/bench/generalization_solo \
        --world_models assets/world_model_coverage,outputs/overlap/wm_overlap,assets/world_model_blind \
        --out benchmarks/results/generalization_solo.json     # the twenty-seventh (--families knn: the
        # twenty-eighth, generalization_knn.json); wm_overlap: the committed head, head.pad_overlap 10 mm
    python benchmarks/generalization.py --families twohand --per_split 25 --samples 1 --workers 2 \
        --output_dir outputs/bench/generalization_twohand \
        --world_models assets/world_model_coverage,outputs/touch/wm_capture \
        --out benchmarks/results/generalization_twohand.json  # the twenty-ninth (--families promp: the
        # thirtieth, generalization_promp.json); wm_capture: the committed head, head.push_touch 3 mm,
        # head.grip_servo and head.capture
    python benchmarks/generalization.py --families gmr --per_split 25 --samples 1 --workers 2 \
        --output_dir outputs/bench/generalization_gmr \
        --world_models assets/world_model_coverage,outputs/taper/wm_taper,outputs/taper/wm_touch \
        --out benchmarks/results/generalization_gmr.json      # the thirty-first (--families whip: the
        # thirty-second, generalization_whip.json); wm_taper: the committed head, head.touch_outline
    python benchmarks/generalization.py --families probe --per_split 25 --samples 1 --workers 2 \
        --output_dir outputs/bench/generalization_probe \
        --world_models assets/world_model_coverage,outputs/overlap2/wm_fingertips \
        --out benchmarks/results/generalization_probe.json    # the thirty-third; wm_fingertips: the
        # committed head, head.pad_overlap 2 mm, head.touch_outline
    python benchmarks/generalization.py --families scripted --world_models ... --out /tmp/tuning.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import r2s2r.robots.aloha  # noqa: E402, F401  (torch + triton before MuJoCo's GL)
from common import machine_info, print_table, write_json  # noqa: E402
from rank import DEMONSTRATOR, SCRIPTED  # noqa: E402

# isort: split
from r2s2r.data.recorder import RecordConfig, evaluate, record  # noqa: E402
from r2s2r.eval.generalization import family_metrics, held_out_violations, uncertainty_vs_error  # noqa: E402
from r2s2r.eval.rank import RankConfig, rank, success_rates  # noqa: E402
from r2s2r.eval.success_map import load_success_map  # noqa: E402
from r2s2r.model.modeling_world_model import WorldModel  # noqa: E402
from r2s2r.policies.policy import PolicyConfig  # noqa: E402
from r2s2r.robots.aloha import ALOHA_CAMERAS, WorldConfig  # noqa: E402
from r2s2r.training.head import head_openloop, read_episodes  # noqa: E402

SCRIPTED_FAMILIES = (
    "waypoint", "jointspace", "pincer", "relay", "retry", "rate", "stall", "overlap", "table", "nudge",
    "catch", "pivot", "swivel", "field", "joust", "teleop", "shoot", "mimic", "kalman", "tree", "tuned",
    "dmp", "rrt", "lqr", "miscal", "solo", "knn", "twohand", "promp", "gmr", "whip", "probe", "slide",
    "camera",
)  # fmt: skip
# camera-only policies: rendered logs, ranked on the video path
VIDEO_FAMILIES = ("camera", "act_cam", "act_cam_small")
ACT_RUNS = {
    "act_b": ("outputs/bench/zoo/act_b", (500, 1500, 3000, 6000)),
    "act_c": ("outputs/bench/zoo/act_c", (1000, 3000)),
    "act_cam": ("outputs/bench/zoo/act_cam", (500, 1000, 2000, 4000, 6000)),
    "act_cam_small": ("outputs/bench/zoo/act_cam_small", (1000, 3000)),
}
KEPT_OUT = {
    "training_data": "checked against provenance.json",
    "design_decisions": "declared: none (the coverage heads' rules were chosen on the tuning set; after the"
    " figures the logs were replayed open loop for the diagnosis in docs/benchmarks.md, and nothing changed)",
}
CLONES = "clones the {} demonstrator, whose family made training data; its own rollouts never did"
VIDEO_PATH = "video: the model imagines every view and the policies see only the imagined frames"
# The contact head (head.contact) was designed after waypoint_nominal's logs were replayed by head_rules
# frame by frame, and its hold rules were chosen on these four families and the tuning set together.
INFORMED_CONTACT = (
    "informed head.contact and head.pads: the contact head's design came from replaying waypoint_nominal's"
    " logs with head_rules (the gripper closed through the cube, the wrong hand took it at the hand-over),"
    " the pads' from replaying waypoint_grasp_miss with the contact head (fingers blocked by a cube 5 cm"
    " off); the pads' box overlap (5 mm) and the stop rule (head.stops) from replaying waypoint_grasp_miss"
    " (a cube at the pads' rim carried) and jointspace_nominal (the left fingers closing through the cube"
    " at the hand-over) with the contact and pads heads; the arms' tracking model (head.arm_tracking: per"
    " joint, from the commands only) from its end-effector error on the waypoint, jointspace and act_b logs,"
    " one step and rolled over whole episodes, after two other forms ranked worse here; the choice between"
    " heads was made on it; the grasp rules (head.balance, head.pad_holds, head.held_success, in head_held)"
    " were designed on waypoint's response curves (response_curves.py) and the coverage data, and compared"
    " here; the grippers' servo (head.grip_servo), the capture within the frame (head.capture) and held"
    " cubes turning with their gripper (head.turns) were designed on waypoint's response curves' logs"
    " replayed open loop (the early close, a slow and a wide hand-over) and the coverage data, and"
    " head_servo was compared with head_takes here. A figure on it is not held out for those heads"
)
DESIGN = {**KEPT_OUT, "design_decisions": INFORMED_CONTACT, "before": KEPT_OUT["design_decisions"]}
KEPT_OUT_OF = {
    "waypoint": DESIGN,
    "jointspace": DESIGN,
    "act_b": {**DESIGN, "note": CLONES.format("noisy")},
    "act_c": {**DESIGN, "note": CLONES.format("hesitant")},
    "pincer": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written by another engineer after head.contact and its rules were fixed,"
        " apart from the model, the demonstrators and the other families; head.pads came later, but no model"
        " had been run on this family then (only its real success rates were known). The first pads head"
        " (a learnt box) failed here and on the design set alike; its box, read from its weights, had left"
        " the fingers, and was replaced by one from the MJCF (no pincer log was looked at). The heads after"
        " it (contact, pads with the MJCF box, stops, approach coverage, arm tracking) were compared on the"
        " design set only; each of its successive choices is ranked here once, and no pincer figure fed a"
        " decision (the grasp rules included: head_held and head_takes, designed on waypoint's response"
        " curves, the design set's logs and the coverage data, each ranked here once, head_held before"
        " head_takes was chosen on the design set, not on this family; head_servo, designed on the design"
        " set's logs and the coverage data, likewise ranked here once). head.chance was looked for because"
        " the heads imagined marginal policies here, in relay, retry and the design set at 90-100 % where"
        " real rates were 30-60 %; its odds were fitted on the coverage data only",
    },
    "relay": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after head.balance,"
        " head.pad_holds and head.held_success were fixed, apart from the model, its results and the other"
        " families' analyses (told not to read them), its settings tuned on real success only; no world"
        " model had been run on it before each head below was ranked here once. head.takes was added (on"
        " the design set's figures) while the first three heads were being ranked here, before any of"
        " their figures on this family was read. In the next round its relay_weak_squeeze figure (a squeeze"
        " to 0.57, real 12 %, imagined 92 %) pointed at squeeze depth: head.squeeze's threshold was read off"
        " the coverage data (studies/grasp_margins.py, table 3), but the rule was looked for because of this"
        " family; no relay log was replayed. head.chance (grasp odds fitted on the coverage data only) was"
        " looked for because the heads imagined marginal policies here, in pincer, retry and the design set"
        " at 90-100 % where real rates were 30-60 %; its squeeze factor is that depth's",
    },
    "retry": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after head.grip_servo,"
        " head.capture, head.squeeze and head.turns were built, apart from the model, its results, the"
        " analyses and the coverage demonstrator (told not to read them), its settings tuned on real success"
        " only; head_servo was chosen on the design set before any world model was run on it, and each head"
        " is ranked here once. head.chance (grasp odds fitted on the coverage data only) was looked for"
        " because the heads imagined marginal policies here, in pincer, relay and the design set at 90-100 %"
        " where real rates were 30-60 %",
    },
    "rate": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer while head.chance (the grasp"
        " odds) was built, apart from the model, its results, the analyses and the coverage demonstrator"
        " (told not to read them), its settings tuned on real success only; head_chance was chosen on the"
        " design set before any world model was run on it, and each head is ranked here once",
    },
    "stall": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after head.chance was built"
        " and judged, apart from the model, its results, the analyses and the coverage demonstrator (told"
        " not to read them), its settings tuned on real success only; the head ranked here was chosen on"
        " the other families pooled before any world model was run on it. Its head_odds figures (every"
        " policy imagined at 0 %) led to head.substeps, read from the code, not from its logs: head_substeps'"
        " figures here are not held out",
    },
    "overlap": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after head.chance and"
        " head.odds_doubt were built and judged, apart from the model, its results, the analyses and the"
        " coverage demonstrator (told not to read them), its settings tuned on real success only; the blind"
        " asset, head_odds and head_substeps were each ranked on it once, after head_substeps had been chosen"
        " on the other families pooled (studies/pooled.py); nothing was changed after",
    },
    "table": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after head.substeps was built,"
        " apart from the model, its results, the analyses and the coverage demonstrator (told not to read"
        " them), its settings tuned on real success only; the blind asset, head_odds and head_substeps"
        " (chosen on the other families pooled, then ranked on overlap) were each ranked on it once; nothing"
        " was changed after. Then one of its logs (swept_blind), replayed open loop, showed a cube the"
        " retreating hand sweeps along the table left in place in imagination, which informed head.pushes:"
        " head_pushes is not held out on it",
    },
    "nudge": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after head_substeps was"
        " ranked on table, apart from the model, its results, the analyses and the coverage demonstrator"
        " (told not to read them), its settings tuned on real success only; its real logs and the blind"
        " asset's ranking were made first, then head_substeps and head_pushes (chosen between on every"
        " other family pooled) were each ranked on it once; nothing was changed after. The committed"
        " assets/world_model_coverage (head_pushes rebuilt by coverage.sh chosen) was ranked on it once more,"
        " to check the rebuild against those figures",
    },
    "catch": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after"
        " assets/world_model_coverage was committed, apart from the model, its results and analyses (told"
        " not to read them), its settings tuned on real success only; its real logs and the blind asset's"
        " ranking were made first; a success map for the coverage asset was then fitted on the other"
        " families and checked family-out (studies/success_map.py: it raised the error, so it was not"
        " kept), and assets/world_model_coverage, as committed, was ranked on it once; nothing was changed"
        " after",
    },
    "pivot": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after head.drops was built"
        " (on catch and nudge logs), apart from the model, its results and analyses (told not to read them),"
        " its settings tuned on real success only; the rule for keeping head.drops was set before it was"
        " run; its real logs, the second real run and the blind asset's ranking were made first, then"
        " assets/world_model_coverage (as committed) and the same head with head.drops were each ranked on"
        " it once; by that rule head.drops was not kept. A third version of head.drops (observations"
        " between frames show every falling cube; built on a catch log, not on pivot) was ranked on it"
        " after that verdict, so its pivot figure is not a held-out test of it. head.success_touch was"
        " ranked on it as one of the families it was looked at on: not held out for that rule either",
    },
    "swivel": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after the third version of"
        " head.drops was built and the rule for keeping it set, apart from the model, its results, analyses"
        " and commit log (told not to read them), its settings tuned on real success only; its real logs,"
        " the second real run and the blind asset's ranking were made first, then assets/world_model_coverage"
        " (as committed) and the same head with head.drops were each ranked on it once; nothing was changed"
        " after. A crash of its face choice in the second real run (no face left for a cube tipped past"
        " every face's 60-degree cone) was fixed before any model was ranked on it. It then informed"
        " head.rests and the choice to try head.turns (its nominal's imagined hand-over replayed closed"
        " loop): its figures for heads with either rule are not held out",
    },
    "field": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after head.rests was built"
        " (on swivel) and the rule for keeping it and head.turns set, apart from the model, its results,"
        " analyses and commit log (told not to read them), its settings tuned on real success only; its"
        " real logs and the second real run were made first, then assets/world_model_coverage (as"
        " committed), the same head with head.turns and head.rests, with head.turns alone, and the blind"
        " asset were each ranked on it once; nothing was changed after. It then informed head.success_touch"
        " (a left that touches the cube the right still holds is a real success): its figures for heads"
        " with that rule are not held out",
    },
    "joust": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer after head.success_touch was"
        " built (on field) and the rule for keeping it set, apart from the model, its results, analyses and"
        " commit log (told not to read them), its settings tuned on real success only; its real logs and"
        " the second real run were made first, then assets/world_model_coverage (as committed) and the same"
        " head with head.success_touch were each ranked on it once; nothing was changed after",
    },
    "teleop": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with shoot, by a third) after"
        " head.turns, head.rests and head.success_touch were built and the rule for keeping the three"
        " together was set (judged on teleop and shoot pooled), apart from the model, its results, analyses"
        " and commit log (told not to read them), its settings tuned on real success only; its real logs and"
        " the second real run were made first, then assets/world_model_coverage (as committed then), the"
        " same head with the three rules and the blind asset were each ranked on it once; nothing was"
        " changed after. By that rule the three were kept, and are assets/world_model_coverage's config"
        " since: its figures here are the ones that decided it; after that verdict, head.chance on the"
        " committed head was ranked on it once as the gate before families 19 and 20"
        " (outputs/chance/decision_rule.txt)",
    },
    "shoot": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: the same as teleop (written at the same time by another engineer);"
        " head.success_touch alone was also ranked on it once (archive/touch_shoot.json), after its real"
        " logs and before the verdict was read; after that verdict, head.chance on the committed head was"
        " ranked on it once as the gate before families 19 and 20 (outputs/chance/decision_rule.txt); after"
        " that, head.touch_finger likewise, the gate before families 21 and 22",
    },
    "mimic": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with kalman, by a third) after"
        " head.chance on the committed head was chosen as the candidate and the rule for keeping it set"
        " (judged on mimic and kalman pooled), apart from the model, its results, analyses and commit log"
        " (told not to read them); its expert, demonstrations and checkpoints are its own, its settings"
        " tuned on real success only; its real logs and the second real run were made first, then"
        " assets/world_model_coverage (as committed), the same head with head.chance and the blind asset"
        " were each ranked on it once; nothing was changed after. After that verdict its real logs' states"
        " informed head.touch_finger (the success test played on them, with kalman's)",
    },
    "kalman": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: the same as mimic (written at the same time by another engineer). After"
        " that verdict its real logs' states informed head.touch_finger (the success test played on them,"
        " with mimic's), and the committed head with head.touch_finger was ranked on it once as the gate"
        " before families 21 and 22 (outputs/finger/decision_rule.txt)",
    },
    "tree": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with tuned, by a third) before"
        " head.touch_finger was thought of, apart from the model, its results, analyses and commit log (told"
        " not to read them), its settings tuned on real success only; the rule for keeping head.touch_finger"
        " (judged on tree and tuned pooled) was set before any model ran on it; its real logs and the"
        " second real run were made first, then assets/world_model_coverage (as committed), the same head"
        " with head.touch_finger and the blind asset were each ranked on it once; nothing was changed after",
    },
    "tuned": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: the same as tree (written at the same time by another engineer)",
    },
    "dmp": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with rrt, by a third) before"
        " head.balance_margin was thought of, apart from the model, its results, analyses and commit log"
        " (told not to read them), its settings tuned on real success only; the rule for keeping"
        " head.balance_margin (judged on dmp and rrt pooled, outputs/balance/decision_rule.txt) was set"
        " before any model ran on it; its real logs and the second real run were made first, then"
        " assets/world_model_coverage (as committed), the same head with head.balance_margin = -2 mm and the"
        " blind asset were each ranked on it once; nothing was changed after",
    },
    "rrt": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: the same as dmp (written at the same time by another engineer)",
    },
    "lqr": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with miscal, by a third) after"
        " head.balance_margin's verdict and before head.closes was thought of, apart from the model, its"
        " results, analyses and commit log (told not to read them), its settings tuned on real success only;"
        " the rule for keeping head.closes (judged on lqr and miscal pooled,"
        " outputs/closes/decision_rule.txt) was set before any model ran on it; head.closes failed its gate"
        " on spent families, so it was never ranked here; a run of the committed asset on it was stopped"
        " before any result was read. The rule for the squeeze candidates (head.closes with head.squeeze,"
        " outputs/squeeze/decision_rule.txt) was set before any model ran on it; the one that passed its"
        " gate (head.squeeze_depth = 0.1) was ranked here once, beside assets/world_model_coverage (as"
        " committed) and the blind asset, after its real logs and the second real run were made; nothing"
        " was changed after",
    },
    "miscal": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: the same as lqr (written at the same time by another engineer)",
    },
    "solo": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with knn, by a third) after"
        " the rule for the squeeze candidates was set (outputs/squeeze/decision_rule.txt), apart from the"
        " model, its results, analyses and commit log (told not to read them), its settings tuned on real"
        " success only; the rule for keeping head.pad_overlap = 10 mm (judged on solo and knn pooled,"
        " outputs/overlap/decision_rule.txt, from the spent pincer and joust logs) was set before any model"
        " ran on it; its real logs and the second real run were made first, then assets/world_model_coverage"
        " (as committed), the same head with head.pad_overlap = 10 mm and the blind asset were each ranked on"
        " it once; nothing was changed after",
    },
    "knn": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: the same as solo (written at the same time by another engineer); its"
        " demonstrations are its own teacher's, in no model's data",
    },
    "twohand": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with promp, by a third) after"
        " head.pad_overlap's verdict, apart from the model, its results, analyses and commit log (told not"
        " to read them), its settings tuned on real success only; the rule for keeping wm_capture"
        " (head.push_touch = 3 mm, head.grip_servo, head.capture; outputs/touch/decision_rule.txt, from the"
        " spent solo logs, gated on pincer and joust) was set before any model ran on it; its real logs and"
        " the second real run were made first, then assets/world_model_coverage and wm_capture were each"
        " ranked on it once; nothing was changed after",
    },
    "promp": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: the same as twohand (written at the same time by another engineer, judged"
        " with it); its demonstrations are its own teacher's, in no model's data",
    },
    "gmr": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with whip, by a third), set to"
        " work before head.push_touch was thought of, apart from the model, its results, analyses and commit"
        " log (told not to read them), its settings tuned on real success only; its demonstrations are its"
        " own teacher's, in no model's data; the rule for keeping wm_taper (head.touch_outline;"
        " outputs/taper/decision_rule.txt, from the spent twohand and pincer logs, gated on pincer and joust)"
        " was set before any model ran on it; its real logs and the second real run were made first, then"
        " assets/world_model_coverage, wm_taper and wm_touch were each ranked on it once; nothing was"
        " changed after",
    },
    "whip": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: the same as gmr (written at the same time by another engineer, judged"
        " with it)",
    },
    "probe": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with slide, by a third), set"
        " to work before head.touch_outline was thought of, apart from the model, its results, analyses and"
        " commit log (told not to read them), its settings tuned on real success only; the rule for keeping"
        " wm_fingertips (head.pad_overlap 2 mm with head.touch_outline; docs/benchmarks.md, from spent logs,"
        " gated on pincer and joust) was set before any model ran on it; its real logs and the second real"
        " run were made first, then assets/world_model_coverage and wm_fingertips were each ranked on it"
        " once; nothing was changed after",
    },
    "slide": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: written in one sitting by another engineer (with probe, by a third), set"
        " to work before head.touch_outline was thought of, apart from the model, its results, analyses and"
        " commit log (told not to read them), its settings tuned on real success only; the rule for keeping"
        " wm_fingertips was set before any model ran on it, and its verdict was then narrowed to probe for"
        " time; no model has been ranked on it yet",
    },
    "act_cam": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: trained (benchmarks/camera_act.sh) after head_pushes was chosen and the"
        " nudge family ranked; its settings (top view, width, chunk, batch) were fixed before any checkpoint"
        " was played. A first pair of runs, normalized by LeRobot's recorded image stats, was played (0 %)"
        " and discarded when those stats were found wrong; the steps were set to 6,000 then, before any"
        " world model had been run on either. Each model is ranked on it once and nothing was changed after",
        "note": CLONES.format("nominal"),
        "path": VIDEO_PATH,
    },
    "act_cam_small": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none: the same as act_cam, a run on 30 episodes",
        "note": CLONES.format("nominal"),
        "path": VIDEO_PATH,
    },
    "camera": {
        "training_data": "checked against provenance.json",
        "design_decisions": "none compared on it: written apart from the model and the demonstrators; one"
        " earlier video-path run of assets/world_model_small on 14 such policies (issue #38: open-loop"
        " policies imagined at 92-100 %, a grasp 3-9 cm off lifted by the state head) was known when the"
        " contact head and its pads were designed, but none of its logs was replayed and no head or rule was"
        " chosen on it. In this benchmark assets/world_model_small was ranked first and head_tracking (chosen"
        " on the design set before) after it, each once; nothing was changed in between. --frames head"
        " (frames drawn from the head's state) was built on the coverage demonstrator's recordings only"
        " (benchmarks/head_frames.py, seeds 1200 and 1201) and ranked on this family once per model"
        " (archive/generalization_camera_head_first_fit.json); its blurred settings never found the drawn"
        " cube there, so the appearance fit's edge margins were changed (checked on the design recordings"
        " and raw reference-world frames, studies/head_frames_margins.py) and the family ranked once more:"
        " that one decision was informed by this family. Its camera_shifted (a grasp 3 cm off, real 0 %,"
        " imagined 100 %) pointed at the grasp-x axis of waypoint's response curves, where the grasp rules"
        " (head_takes) were then designed, on the design set and coverage data; head_takes was ranked here"
        " once. assets/world_model_coverage (head_pushes, chosen on the state-path families pooled, none of"
        " its rules read off this family) was ranked here once with drawn frames, after it was committed",
        "path": VIDEO_PATH,
    },
}


# Families whose real logs (the first 10 episodes of each policy) benchmarks/studies/divergence.py read, after
# their verdicts, before head.balance_margin was put on trial (outputs/balance/decision_rule.txt).
BALANCE_SPENT = (
    "catch", "field", "pincer", "relay", "joust", "kalman", "mimic", "nudge", "overlap", "pivot", "rate",
    "retry", "shoot", "stall", "swivel", "table", "teleop", "tree", "tuned",
)  # fmt: skip
BALANCE_LATER = (
    "after its verdict, its real logs informed head.balance_margin and head.closes"
    " (benchmarks/studies/divergence.py: where the committed head's open loop first parts from them, why"
    " its missed right lifts were missed, and the right hand's first closes by balance margin), and pincer"
    " and joust were the gate of both, and of head.closes with head.squeeze at two values of"
    " head.squeeze_depth (joust's light squeezes, read after the first gate, showed its 0.04 edge too low);"
    " pincer's and joust's logs set head.pad_overlap's candidate (outputs/overlap/left_study.py: the left's"
    " first closes by how far the cube's centre lies outside the pads' faces) and were its gate"
)


def kept_out_of(family: str) -> dict | str:
    """What a family was kept out of (KEPT_OUT_OF), with what its logs informed later."""
    kept = KEPT_OUT_OF.get(family, "nothing: the tuning set")
    return {**kept, "later": BALANCE_LATER} if family in BALANCE_SPENT and isinstance(kept, dict) else kept


def held_out_zoo(families: tuple[str, ...]) -> dict[str, dict]:
    """name -> {path, kwargs, family}: every named setting of the scripted families, every ACT checkpoint;
    `scripted` is the tuning set instead (rank.py's demonstrator presets), never a held-out family."""
    zoo = {}
    for family in families:
        if family == "scripted":
            zoo |= {
                f"scripted_{n}": {"path": DEMONSTRATOR, "kwargs": kw, "family": family}
                for n, kw in SCRIPTED.items()
            }
        elif family in SCRIPTED_FAMILIES:
            settings = importlib.import_module(f"families.{family}").FAMILY_SETTINGS
            for name, kwargs in settings.items():
                zoo[f"{family}_{name}"] = {
                    "path": f"families.{family}:make_policy",
                    "kwargs": kwargs,
                    "family": family,
                }
        else:
            folder, steps = ACT_RUNS[family]
            for step in steps:
                ckpt = Path(folder) / f"step_{step}"
                if not (ckpt / "config.json").is_file():
                    script = "camera_act.sh" if family in VIDEO_FAMILIES else "held_out_act.sh"
                    raise SystemExit(f"no {ckpt}: train it first (bash benchmarks/{script}).")
                zoo[f"{family}_{step}"] = {"path": str(ckpt.resolve()), "kwargs": {}, "family": family}
    return zoo


def seed_of(name: str, run: int) -> int:
    """A policy's episode seed in real run `run` (1: the logs, 2: the noise floor's run), from its name only,
    so logs recorded for one selection of families resume for another."""
    return 10_000 * run + zlib.crc32(name.encode()) % 10_000


def logged_views(family: str) -> tuple[str, ...]:
    """The views a family's logs record: every view for the video path (its starts are the logged frames),
    none for the state path."""
    return ALOHA_CAMERAS if family in VIDEO_FAMILIES else ()


def policy_views(spec: dict) -> tuple[str, ...]:
    """The views a policy reads, the only ones its second real run renders."""
    if spec["family"] not in VIDEO_FAMILIES:
        return ()
    if spec["family"] in ACT_RUNS:  # a LeRobot checkpoint: the image features of its config
        features = json.loads((Path(spec["path"]) / "config.json").read_text())["input_features"]
        prefix = "observation.images."
        return tuple(k.removeprefix(prefix) for k in features if k.startswith(prefix))
    module, factory = spec["path"].split(":")
    return tuple(getattr(importlib.import_module(module), factory)(**spec["kwargs"]).knobs.cameras)


def record_logs(zoo: dict, out: Path, per_split: int, workers: int) -> None:
    """Each policy's logs: per_split ID + per_split OOD episodes (seed `seed_of(name, 1)`), state-only or,
    for a video family, with every view rendered."""
    for name, spec in zoo.items():
        summary = record(RecordConfig(
            root=str(out / "logs" / spec["family"] / name), num_episodes=2 * per_split, distribution="mixed",
            seed=seed_of(name, 1), workers=workers,
            world=WorldConfig(num_envs=10, cameras=logged_views(spec["family"])),
            policy=PolicyConfig(path=spec["path"], kwargs=spec["kwargs"]),
        ))  # fmt: skip
        print(f"logs {name}: {summary.successes}/{summary.num_episodes} succeeded", flush=True)


def second_run(zoo: dict, out: Path, per_split: int, workers: int) -> dict[str, dict]:
    """Real rates per split of an independent run of every policy (seed `seed_of(name, 2)`), each cached in
    out/second_run/<name>.json with the spec and episode count it was made with."""
    rates = {}
    for name, spec in zoo.items():
        path = out / "second_run" / f"{name}.json"
        cached = json.loads(path.read_text()) if path.is_file() else {}
        if cached.get("spec") == spec and cached.get("per_split") == per_split:
            rates[name] = cached["rates"]
            continue
        views = policy_views(spec)
        labels = evaluate(RecordConfig(
            num_episodes=2 * per_split, distribution="mixed", seed=seed_of(name, 2), workers=workers,
            world=WorldConfig(num_envs=10, cameras=views),
            policy=PolicyConfig(path=spec["path"], kwargs=spec["kwargs"]),
        ), render=bool(views))  # fmt: skip
        rows = [{"split": e["distribution"], "real_success": e["success"]} for e in labels]
        rates[name] = success_rates(rows, "real_success")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"spec": spec, "per_split": per_split, "rates": rates[name]}))
    return rates


def frames_of(args) -> str:
    """`--frames`; "video" for the scripts that share these helpers without the flag (response_curves.py)."""
    return getattr(args, "frames", "video")


def model_label(model_dir: str, args) -> str:
    """A model's name in the tables, the JSON and the rank caches: with `--frames head`, marked as such."""
    return Path(model_dir).name + ("+head_frames" if frames_of(args) == "head" else "")


def ranked_families(
    zoo: dict, out: Path, model_dir: str, args, object_poses: bool = True
) -> tuple[list[dict], list[dict]]:
    """`r2s2r-rank` of each family's logs (out/logs/<family>/) in one model; its ranked policies and its
    failures, all families together. A video family is imagined with every view rendered (the policies
    see the imagined frames), and with `object_poses` off its starts ignore the logged object poses.
    Imagined results stay per model and policy, so a later run with other families reuses them."""
    label, ranked, failed = model_label(model_dir, args), [], []
    for family in sorted({spec["family"] for spec in zoo.values()}):
        members = {n: spec for n, spec in zoo.items() if spec["family"] == family}
        manifest = out / "zoo" / f"{family}.json"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps(members, indent=1))
        video = family in VIDEO_FAMILIES
        payload = rank(RankConfig(
            checkpoint=model_dir, logs_dir=str(out / "logs" / family), policies=str(manifest),
            samples_per_start=args.samples, render=video, batch_size=16 if video else 100,
            workers=args.workers, videos=2 if video else 0, seed=args.seed, object_poses=object_poses,
            frames=frames_of(args) if video else "video",
            output_dir=str(out / "rank" / label / (family if object_poses else f"{family}_noposes")),
        ))  # fmt: skip
        ranked += payload["policies"]
        failed += payload["failed"]
    return ranked, failed


def open_loop_by_family(model: WorldModel, zoo: dict, logged: dict[str, list[dict]]) -> dict[str, dict]:
    """Per family, `head_openloop` on its logs: the logged actions replayed from the first frame (object
    error at 1 / 3 / 6 s, outcome agreement), which separates a head that does not know what the actions
    do from a policy that reacts to a wrong imagined state."""
    families = sorted({spec["family"] for spec in zoo.values()})
    return {
        family: head_openloop(
            model, [ep for n, eps in logged.items() if zoo[n]["family"] == family for ep in eps]
        )
        for family in families
    }


def open_loop_rows(open_loop: dict[str, dict]) -> list[list[str]]:
    return [
        [
            family,
            " / ".join(f"{100 * e:.1f}" for e in r["object_error_m"].values()),
            f"{100 * r['outcome_agreement']:.0f} %",
            f"{100 * r['imagined_success']:.0f} / {100 * r['real_success']:.0f} %",
        ]
        for family, r in open_loop.items()
    ]


def _pair(policy: dict, split: str) -> str:
    return f"{100 * policy['real'][split]['rate']:.0f} / {100 * policy['imagined'][split]['rate']:.0f}"


def _v(m: dict | None, get) -> str:
    try:
        value = get(m)
    except (KeyError, TypeError):
        return "n/a"
    return "n/a" if value is None else f"{value:.2f}"


GETTERS = {
    "Spearman": lambda m: m["spearman"]["value"], "Pearson": lambda m: m["pearson"]["value"],
    "MMRV": lambda m: m["mmrv"], "pairwise": lambda m: m["pairwise_accuracy"]["all"]["value"],
    "MAE": lambda m: m["calibration"]["mae_points"], "slope": lambda m: m["calibration"]["slope"],
}  # fmt: skip


def metric_rows(result: dict) -> list[list]:
    """Rows of group x split: each statistic, the noise floor's in brackets."""
    rows = []
    groups = {"pooled": result["pooled"], **result["families"]}
    for group, r in groups.items():
        for split in ("id", "ood"):
            m, f = r["metrics"].get(split), (r["noise_floor"] or {}).get(split)
            rows.append([group, split, *(f"{_v(m, g)} ({_v(f, g)})" for g in GETTERS.values())])
    return rows


def policy_rows(ranked: list[dict]) -> list[dict]:
    """Per policy: real and imagined rates, and the state head's verdict where it was kept."""
    keys = ("name", "family", "real", "imagined", "imagined_head", "imagined_mapped")
    return [{k: p[k] for k in keys if k in p} for p in ranked]


def mapped_metrics(ranked: list[dict], floor: dict | None, model_dir: str, label: str) -> dict | None:
    """With the model's success map (r2s2r.eval.success_map): the statistics of the mapped rates, printed,
    and what the map was fitted on; None without one."""
    success_map = load_success_map(model_dir)
    if success_map is None or not all("imagined_mapped" in p for p in ranked):
        return None
    as_imagined = [{**p, "imagined": p["imagined_mapped"]} for p in ranked]
    result = family_metrics(as_imagined, floor)
    rows = [[p["name"], p["family"], *(_pair(p, s) for s in ("all", "id", "ood"))] for p in as_imagined]
    print_table(f"{label}: real / mapped success (%)", ["policy", "family", "all", "ID", "OOD"], rows)
    print_table(f"{label}: the mapped rates' ranking", ["group", "split", *GETTERS], metric_rows(result))
    return {"source": success_map.source, **result}


def head_verdict(
    ranked: list[dict], floor: dict | None, label: str, key: str = "imagined_head"
) -> dict | None:
    """On the video path the judge reads success from the imagined frames; the same statistics with the
    state head's verdict on the same episodes instead (the dynamics'), printed. With frames drawn from the
    head's state (`--frames head`) success is the head's, and `key="imagined_judge"` ranks by the judge
    reading those frames instead (its cross-check). None where a policy's rows do not keep that verdict."""
    if not ranked or not all(p.get(key) for p in ranked):
        return None
    result = family_metrics([{**p, "imagined": p[key]} for p in ranked], floor)
    names = ("judge", "state head") if key == "imagined_head" else ("state head", "judge")
    rows = [
        [p["name"], *(f"{100 * p['real'][s]['rate']:.0f} / {100 * p['imagined'][s]['rate']:.0f} / "
                      f"{100 * p[key][s]['rate']:.0f}" for s in ("all", "id", "ood"))]
        for p in ranked
    ]  # fmt: skip
    print_table(f"{label}: real / {' / '.join(names)} success (%)", ["policy", "all", "ID", "OOD"], rows)
    print_table(
        f"{label}: ranking by the {names[1]}'s verdict", ["group", "split", *GETTERS], metric_rows(result)
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--world_models", default="assets/world_model_blind", help="comma-separated model dirs"
    )
    parser.add_argument("--families", default="waypoint,jointspace,act_b,act_c")
    parser.add_argument("--per_split", type=int, default=50, help="logged ID (and OOD) episodes per policy")
    parser.add_argument("--samples", type=int, default=4, help="imagined episodes per logged start")
    parser.add_argument("--output_dir", default="outputs/bench/generalization")
    parser.add_argument(
        "--workers", type=int, default=0, help="recording processes and Ray workers (0: here)"
    )
    parser.add_argument("--seed", type=int, default=0, help="imagination noise")
    parser.add_argument(
        "--no_floor", action="store_true",
        help="skip the second real run (the noise floor's statistics are then n/a): half the physics",
    )  # fmt: skip
    parser.add_argument(
        "--allow_seen", action="store_true", help="rank even where a family made training data"
    )
    parser.add_argument(
        "--uncertainty_episodes", type=int, default=10, help="logged episodes per policy replayed"
    )
    parser.add_argument(
        "--frames", choices=("video", "head"), default="video",
        help="video families: imagined frames sampled by the video model, or drawn from the state head's"
        " state (needs <model>/appearance.safetensors: r2s2r-fit-frames)",
    )  # fmt: skip
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "generalization.json"))
    args = parser.parse_args()
    families = tuple(args.families.split(","))
    video = [f for f in families if f in VIDEO_FAMILIES]
    if video and len(video) < len(families):
        raise SystemExit(
            f"--families: {', '.join(video)} ranks on the video path and is reported alone; run it by itself"
            f" (--families {','.join(video)})."
        )
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    zoo = held_out_zoo(families)
    (out / "zoo.json").write_text(json.dumps(zoo, indent=1))
    start = time.perf_counter()
    record_logs(zoo, out, args.per_split, args.workers)
    floor = None if args.no_floor else second_run(zoo, out, args.per_split, args.workers)
    real_s = time.perf_counter() - start

    models = {}
    held_out = {n: spec for n, spec in zoo.items() if spec["family"] != "scripted"}
    zoo_families = {spec["family"] for spec in zoo.values()}
    for model_dir in args.world_models.split(","):
        seen = held_out_violations(model_dir, held_out)
        if seen and not args.allow_seen:
            raise SystemExit("not held out:\n  " + "\n  ".join(seen) + "\n(--allow_seen ranks them anyway)")
        label = model_label(model_dir, args)
        # the other verdict on the same episodes: the head's beside the judge's, or the judge's cross-check
        verdict = "imagined_judge" if args.frames == "head" else "imagined_head"
        other = "success_from_judge" if args.frames == "head" else "success_from_head"
        tic = time.perf_counter()
        ranked, failed = ranked_families(zoo, out, model_dir, args)
        seconds = time.perf_counter() - tic
        result = family_metrics(ranked, floor)
        mapped = mapped_metrics(ranked, floor, model_dir, label)
        rows = [[p["name"], p["family"], *(_pair(p, s) for s in ("all", "id", "ood"))] for p in ranked]
        print_table(f"{label}: real / imagined success (%)", ["policy", "family", "all", "ID", "OOD"], rows)
        print_table(
            f"{label}: {'tuning-set' if 'scripted' in zoo_families else 'held-out'} ranking"
            " (in brackets: a second real run, the noise floor)",
            ["group", "split", *GETTERS], metric_rows(result),
        )  # fmt: skip
        episodes = sum(p["imagined"]["all"]["trials"] for p in ranked)
        model = WorldModel.from_pretrained(model_dir)
        logged = {
            name: read_episodes(str(out / "logs" / spec["family"] / name), model, args.uncertainty_episodes)
            for name, spec in zoo.items()
        }
        calibration = uncertainty_vs_error(model, [ep for eps in logged.values() for ep in eps])
        open_loop = open_loop_by_family(model, zoo, logged)
        print_table(
            f"{label}: the logs' actions replayed by the state head (open loop)",
            ["family", "object error 1 / 3 / 6 s (cm)", "outcome agreement", "imagined / real success"],
            open_loop_rows(open_loop),
        )
        print(f"{label}: object-position error by ensemble spread (quintiles): " + ", ".join(
            f"{100 * b['spread_m']:.1f} cm -> {100 * b['error_m']:.1f} cm" for b in calibration["bins"]
        ) + f"; Spearman {calibration['spearman']:.2f}")  # fmt: skip
        without_poses = None
        if video and not model.config.head.reads_cameras and args.frames != "head":
            without_poses = {
                "skipped": "its state head reads no cameras: it cannot start without object poses"
            }
        elif video:  # the same logs as hardware without object poses would give them
            ranked_np, failed_np = ranked_families(zoo, out, model_dir, args, object_poses=False)
            if not ranked_np:
                raise SystemExit(
                    f"{label}: no policy ranked with the object poses ignored: {failed_np[0]['error']}"
                )
            without_poses = {
                **family_metrics(ranked_np, floor), "failed": failed_np, "policies": policy_rows(ranked_np),
                other: head_verdict(ranked_np, floor, f"{label}, object poses ignored", verdict),
            }  # fmt: skip
            print_table(
                f"{label}: the same logs, their object poses ignored (starts from cameras and proprio)",
                ["group", "split", *GETTERS], metric_rows(without_poses),
            )  # fmt: skip
        models[label] = {
            "checkpoint": model_dir, "not_held_out": seen, "seconds": seconds, "success_map": mapped,
            "path": "video" if video else "state", "without_object_poses": without_poses,
            "imagined_episodes": episodes, "failed": failed, **result,
            "uncertainty_vs_error": calibration, "open_loop": open_loop,
            other: head_verdict(ranked, floor, label, verdict) if video else None,
            "policies": policy_rows(ranked),
        }  # fmt: skip
    write_json(Path(args.out), {
        "machine": machine_info(), "settings": vars(args), "real_runs_s": real_s, "zoo": zoo,
        "kept_out_of": {f: kept_out_of(f) for f in args.families.split(",")},
        "tuning_set": "benchmarks/rank.py --state_only's zoo (scripted demonstrator presets, ACT run A)",
        "models": models,
        "targets": {"spearman": 0.9, "calibration_mae_points": 10, "calibration_slope": [0.8, 1.2]},
    })  # fmt: skip


if __name__ == "__main__":
    main()
