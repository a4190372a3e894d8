#!/bin/bash
# A state head that learns contact outcomes from coverage data: 20,000 state-only episodes of the coverage
# demonstrator (robots/perturbations.py: grasp, orientation, timing, partial-close, drop, hand-over, speed,
# noise, pause, re-grasp, push and exploration perturbations, each episode labelled), then the head of
# assets/world_model_small refined on them without cameras: head_plain (no hand-written rule), head_targets
# (arm targets only), head_rules (still mode, holds, arm targets), head_contact (head.contact, below),
# head_pads (head.contact with head.pads) and head_approach (pads and stops, on 5,000 episodes more with
# wider grasp approaches, seed 1004; head_approach_nostops: the same weights, the stop rule off;
# head_tracking: those weights with the arms' tracking fitted, head.arm_tracking; head_held: those with the
# grasp rules head.balance, head.pad_holds and head.held_success).
# Besides the base model's own 160 training episodes nothing else enters their data: no zoo policy, no
# held-out family.
#   - recording: four datasets of 5,000 (seeds 1000-1003), two at a time, ~0.25 s of physics an episode;
#     plus 200 held-out coverage episodes (seed 1100) for the refinement's before/after figures;
#   - refinement: --head.steps steps each (HEAD_STEPS, default 6,000; 4,000 with `chosen`), both heads at
#     once, about 35 minutes on 2 cores.
# The rules are chosen on the tuning set (generalization.py --families scripted), and the heads are
# reported on the held-out families (benchmarks/generalization.py, benchmarks/response_curves.py).
# Usage: bash benchmarks/coverage.sh          every head above (hours; re-running resumes every recording and
#                                              skips finished heads)
#        bash benchmarks/coverage.sh chosen   only the recordings and the heads the chosen one, head_pushes, is
#                                              built from (about 1.5 hours on 2 cores), then assets/world_model_coverage
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 MUJOCO_GL=${MUJOCO_GL:-egl} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # one torch thread: 2 spin-wait on a shared 2-core machine
BIN=${BIN:-.venv/bin}
D=outputs/coverage
COVERAGE="r2s2r.robots.perturbations:make_coverage_demonstrator"
CHOSEN=${1:-}
case "$CHOSEN" in ""|chosen) ;; *) echo "coverage.sh: error: unknown argument '$CHOSEN' (none, or 'chosen')" >&2; exit 2;; esac
# head_approach, which every head after it starts from, was refined for 4,000 steps (HEAD_STEPS=4000): the
# chosen head's line takes that by default
STEPS=${HEAD_STEPS:-$([ "$CHOSEN" = chosen ] && echo 4000 || echo 6000)}
WORKERS=1
record() {  # record <root> <episodes> <seed> [more coverage ranges, e.g. "kinds: [approach]"]
  # (episode i is a function of the seed and i alone: the worker count changes no dataset)
  $BIN/r2s2r-record --root=$1 --num_episodes=$2 --distribution=mixed --seed=$3 --workers=$WORKERS \
    --world.cameras='[]' --world.num_envs=25 --policy.path=$COVERAGE --policy.kwargs="{seed: $3${4:+, $4}}"
}
(record $D/part0 5000 1000 && record $D/part2 5000 1002) &
(record $D/part1 5000 1001 && record $D/part3 5000 1003) &
wait
WORKERS=2
record $D/heldout 200 1100
# Wider grasp approaches: 5,000 episodes of the `approach` kind (grasp yaw, pitch from level to straight
# down, roll of the fingers) and grasp offsets, alone or together; for head_approach and the heads after it.
record $D/part4 5000 1004 "kinds: [approach, grasp], clean: 0.0, single: 0.5, rate: 0.7"
DATA="[$D/part0,$D/part1,$D/part2,$D/part3]"
refine() {  # refine <name> [flags]
  local out=$D/head_$1
  shift
  [ -f $out/refine.json ] && return
  $BIN/r2s2r-refine-head --checkpoint=assets/world_model_small --cameras=false --data="$DATA" \
    --heldout=$D/heldout --head.steps=$STEPS --head.seed=0 --output_dir=$out "$@"
}
arm_targets() {  # the arms end each imagined frame at their commanded target: a rule without weights,
  # switched on after refining, as benchmarks/state_only.sh does for the committed head; `falls` as well
  # where a second argument says so (an imagined object that nothing can hold lands)
  $BIN/python -c 'import sys; from r2s2r.model.configuration_world_model import WorldModelConfig as C
c = C.load(sys.argv[1]); c.head.arm_targets = True; c.head.falls = len(sys.argv) > 2; c.save(sys.argv[1])' "$@"
}
if [ -z "$CHOSEN" ]; then
refine plain &  # the two heads train side by side, one core (one torch thread) each
if [ ! -f $D/head_rules/refine.json ]; then
  refine rules --still_mode=true --holds=true
  arm_targets $D/head_rules
fi
wait
if [ ! -f $D/head_targets/refine.json ]; then  # three variants: no rule, arm targets only, every rule
  rm -rf $D/head_targets.tmp && cp -r $D/head_plain $D/head_targets.tmp && arm_targets $D/head_targets.tmp
  mv $D/head_targets.tmp $D/head_targets
fi
# The contact head (head.contact: contact outcomes from the gripper-cube geometry alone), with the still
# mode, holds, arm targets and falls; and the same weights without holds.
if [ ! -f $D/head_contact/refine.json ]; then
  refine contact --still_mode=true --holds=true --contact=true
  arm_targets $D/head_contact falls
fi
# The same with the box between the pads (head.pads): outside it a gripper closes as on nothing.
if [ ! -f $D/head_pads/refine.json ]; then
  refine pads --still_mode=true --holds=true --contact=true --pads=true --pad_overlap=0.0  # any touch
  arm_targets $D/head_pads falls
fi
if [ ! -f $D/head_contact_noholds/refine.json ]; then
  rm -rf $D/head_contact_noholds.tmp && cp -r $D/head_contact $D/head_contact_noholds.tmp
  $BIN/python -c 'import sys; from r2s2r.model.configuration_world_model import WorldModelConfig as C
c = C.load(sys.argv[1]); c.head.holds = False; c.save(sys.argv[1])' $D/head_contact_noholds.tmp
  mv $D/head_contact_noholds.tmp $D/head_contact_noholds
fi
fi  # (the heads above are not in head_pushes' line)
# A pads head refined on all 25,000 with the stop rule on (head.stops: a closing gripper stops where its
# pads meet the cube).
if [ ! -f $D/head_approach/refine.json ]; then
  DATA="[$D/part0,$D/part1,$D/part2,$D/part3,$D/part4]"
  refine approach --still_mode=true --holds=true --contact=true --pads=true --stops=true
  arm_targets $D/head_approach falls
fi
if [ ! -f $D/head_approach_nostops/refine.json ]; then  # the same weights without the stop rule
  rm -rf $D/head_approach_nostops.tmp && cp -r $D/head_approach $D/head_approach_nostops.tmp
  $BIN/python -c 'import sys; from r2s2r.model.configuration_world_model import WorldModelConfig as C
c = C.load(sys.argv[1]); c.head.stops = False; c.save(sys.argv[1])' $D/head_approach_nostops.tmp
  mv $D/head_approach_nostops.tmp $D/head_approach_nostops
fi
# The arms' tracking (head.arm_tracking): the same weights, the arms ending each imagined frame where a
# tracking model fitted to the coverage data puts them (the real arm lags its target), not at the target.
if [ ! -f $D/head_tracking/refine.json ]; then
  $BIN/r2s2r-refine-head --checkpoint=$D/head_approach_nostops --cameras=false --still_mode=true \
    --holds=true --contact=true --pads=true --falls=true --arm_tracking=true --head.steps=0 \
    --max_episodes=1000 --data="[$D/part0,$D/part1,$D/part2,$D/part3,$D/part4]" --output_dir=$D/head_tracking
fi
# The grasp rules (no weights, config only): head_tracking's head with head.balance (a grasp lifts only a
# cube centred over the pads across gravity: head_balance), and with head.pad_holds (holds only between
# the fingers, rigid) and head.held_success (imagined success only while a gripper holds the cube) too:
# head_held; and head.takes (a gripper closing on a cube between its pads takes it): head_takes.
rules() {  # rules <name> <head fields set true>
  local out=$D/head_$1
  shift
  [ -f $out/refine.json ] && return
  rm -rf $out.tmp && cp -r $D/head_tracking $out.tmp
  $BIN/python -c 'import sys; from r2s2r.model.configuration_world_model import WorldModelConfig as C
c = C.load(sys.argv[1])
for rule in sys.argv[2:]:
    setattr(c.head, rule, True)
c.save(sys.argv[1])' $out.tmp "$@"
  mv $out.tmp $out
}
if [ -z "$CHOSEN" ]; then  # the heads from here to head_substeps are not in head_pushes' line
rules balance balance
rules held balance pad_holds held_success
rules takes balance pad_holds held_success takes
# The grippers' servo fitted to the coverage data (head.grip_servo), head.capture (each frame's control steps
# played: fingers shut before the cube comes between them rest on it), head.squeeze (a light squeeze lifts
# nothing) and head.turns (a held cube turns with its gripper), with head_takes' rules, and head.doubt (the
# uncertainty rises near the rules' edges): head_servo. The arms' tracking is fitted again on the same
# frames (the same fit).
if [ ! -f $D/head_servo/refine.json ]; then
  $BIN/r2s2r-refine-head --checkpoint=$D/head_tracking --cameras=false --still_mode=true \
    --holds=true --contact=true --pads=true --falls=true --arm_tracking=true --head.steps=0 \
    --balance=true --pad_holds=true --held_success=true --takes=true \
    --grip_servo=true --capture=true --squeeze=true --turns=true --doubt=true \
    --max_episodes=1000 --data="[$D/part0,$D/part1,$D/part2,$D/part3,$D/part4]" --output_dir=$D/head_servo
fi
# Grasp odds fitted to the coverage data (head.chance: a grasp takes and holds the cube with odds from its
# balance margin and squeeze depth, drawn once per gripper and episode; fitted on every episode's grasps),
# with head_takes' rules and head.doubt: head_chance. The arms' tracking is fitted again on head_tracking's
# frames (--max_episodes=1000: the same fit; fitted on every episode it moved rate's figures by itself).
if [ ! -f $D/head_chance/refine.json ]; then
  $BIN/r2s2r-refine-head --checkpoint=$D/head_tracking --cameras=false --still_mode=true \
    --holds=true --contact=true --pads=true --falls=true --arm_tracking=true --head.steps=0 \
    --balance=true --pad_holds=true --held_success=true --takes=true --chance=true --doubt=true \
    --max_episodes=1000 --data="[$D/part0,$D/part1,$D/part2,$D/part3,$D/part4]" --output_dir=$D/head_chance
fi
# The same odds for the uncertainty alone (head.odds_doubt: even odds raise it; the rules still decide every
# grasp), with head_takes' rules: head_odds, head_takes' rankings with head_chance's uncertainty.
if [ ! -f $D/head_odds/refine.json ]; then
  $BIN/r2s2r-refine-head --checkpoint=$D/head_tracking --cameras=false --still_mode=true \
    --holds=true --contact=true --pads=true --falls=true --arm_tracking=true --head.steps=0 \
    --balance=true --pad_holds=true --held_success=true --takes=true --odds_doubt=true --doubt=true \
    --max_episodes=1000 --data="[$D/part0,$D/part1,$D/part2,$D/part3,$D/part4]" --output_dir=$D/head_odds
fi
# head_odds with the observations between model frames following the commands (head.substeps: the arms by
# the tracking model, the grippers by a servo fitted here, a held cube with its hand): head_substeps. The
# same weights, tracking and odds as head_odds (the same 1,000 episodes per dataset).
if [ ! -f $D/head_substeps/refine.json ]; then
  $BIN/r2s2r-refine-head --checkpoint=$D/head_tracking --cameras=false --still_mode=true \
    --holds=true --contact=true --pads=true --falls=true --arm_tracking=true --head.steps=0 \
    --balance=true --pad_holds=true --held_success=true --takes=true --odds_doubt=true --doubt=true \
    --substeps=true --max_episodes=1000 --data="[$D/part0,$D/part1,$D/part2,$D/part3,$D/part4]" \
    --output_dir=$D/head_substeps
fi
fi
# head_substeps with pushes (head.pushes: a finger moving into a cube resting on the table, not closing on
# it, pushes it out of its way along the table, step by step; no weights): head_pushes. The same weights,
# tracking, odds and servo fit as head_substeps.
if [ ! -f $D/head_pushes/refine.json ]; then
  $BIN/r2s2r-refine-head --checkpoint=$D/head_tracking --cameras=false --still_mode=true \
    --holds=true --contact=true --pads=true --falls=true --arm_tracking=true --head.steps=0 \
    --balance=true --pad_holds=true --held_success=true --takes=true --odds_doubt=true --doubt=true \
    --substeps=true --pushes=true --max_episodes=1000 --data="[$D/part0,$D/part1,$D/part2,$D/part3,$D/part4]" \
    --output_dir=$D/head_pushes
fi
# The chosen head as a committed asset: head_pushes with the appearance of assets/world_model_small (for
# frames drawn from its state, --frames=head). The video model's and judge's weight matrices go back to the
# float16 they were loaded from (exactly); the refined head stays float32, as it was measured.
if [ "$CHOSEN" = chosen ]; then
  A=assets/world_model_coverage
  rm -rf $A.tmp && mkdir -p $A.tmp
  $BIN/python - $D/head_pushes/model.safetensors $A.tmp/model.safetensors <<'PY'
import sys
from safetensors.torch import load_file, save_file
tensors = load_file(sys.argv[1])
tensors = {k: v.half() if v.dim() >= 2 and not k.startswith("state_head.") else v for k, v in tensors.items()}
save_file(tensors, sys.argv[2], metadata={"format": "pt", "library": "r2s2r"})
PY
  cp $D/head_pushes/{config.json,provenance.json} assets/world_model_small/appearance.* $A.tmp/
  # head.drops (no weights: a cube let go in mid-air falls, or is caught), kept on family 14; head.turns,
  # head.rests and head.success_touch together, kept on families 17 and 18 pooled (docs/benchmarks.md)
  $BIN/python - $A.tmp/config.json <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["head"].update(drops=True, turns=True, rests=True, success_touch=0)
open(sys.argv[1], "w").write(json.dumps(config, indent=2))
PY
  [ -f $A/README.md ] && cp $A/README.md $A.tmp/
  rm -rf $A && mv $A.tmp $A
fi
