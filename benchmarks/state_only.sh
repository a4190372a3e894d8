#!/bin/bash
# A state head without cameras, refined on state-only recordings, ranks the zoo against 50 + 50 state-only
# "hardware logs" per checkpoint (benchmarks/rank.py --state_only). No frame is rendered anywhere, so the
# whole run takes 40-60 minutes on 2 CPU cores, and a re-run from a clean checkout gives the same head
# (the refinement's seed, --head.seed, sets the new head's initial weights too):
#   - the ACT zoo (benchmarks/zoo_act.py, 8,000 steps, checkpoints 500 ... 8,000): ~15 min, if not there;
#   - refinement data, all state-only (r2s2r-record --world.cameras='[]'), ~12 min: the world model's own
#     160 training recordings (mixed skill, seed 100), 640 more (seed 400), 200 of the `fumbling`
#     demonstrator (near-misses), 64 rollouts of each ACT checkpoint the ranking does NOT rank (500, 4,000,
#     5,000, 6,500; new seeds);
#   - r2s2r-refine-head --cameras=false --still_mode=true --holds=true from assets/world_model_small (3,000
#     steps), ~15 min, then head.arm_targets switched on in its config.json;
#   - benchmarks/rank.py --state_only: logs of the 11 ranked checkpoints (new seeds), a second real run,
#     and the ranking on the state-head path, ~20 min (the logs and the second run are kept for re-runs).
# Usage: bash benchmarks/state_only.sh [NAME]   (results: benchmarks/results/state_only.json)
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 MUJOCO_GL=${MUJOCO_GL:-egl}
PY=${PY:-.venv/bin/python}
NAME=${1:-blind}
D=outputs/bench/data
record() { $PY -m r2s2r.scripts.record --distribution=mixed --workers=2 --world.cameras='[]' "$@"; }

record --root=$D/train --num_episodes=160 --seed=100 --world.num_envs=8 --policy.kwargs='{skill: mix}'
record --root=$D/heldout --num_episodes=32 --seed=200 --world.num_envs=8 --policy.kwargs='{skill: mix}'
[ -f outputs/bench/zoo/act/step_8000/config.json ] || $PY benchmarks/zoo_act.py --eval_episodes=20
record --root=$D/train_more --num_episodes=640 --seed=400 --world.num_envs=8 --policy.kwargs='{skill: mix}'
record --root=$D/fumbling --num_episodes=200 --seed=777 --world.num_envs=10 --policy.kwargs='{skill: fumbling}'
ACT=""
for s in 500 4000 5000 6500; do
  record --root=$D/act_rollouts/step_$s --num_episodes=64 --seed=$((5000 + s)) --world.num_envs=8 \
    --policy.path=outputs/bench/zoo/act/step_$s
  ACT="$ACT,$D/act_rollouts/step_$s"
done
# A still pose mode ("the cube stays exactly where it is") and imagined holds that hold (--holds: a cube in
# mid-air in a closed hand stays there, moving rigidly with it); why: docs/benchmarks.md, "Ranking on the
# state path".
$PY -m r2s2r.scripts.refine_head --checkpoint=assets/world_model_small --cameras=false --still_mode=true \
  --holds=true --data="[$D/train,$D/train_more,$D/fumbling$ACT]" --heldout=$D/heldout \
  --output_dir=outputs/bench/blind/$NAME
# The arms end each imagined frame at their commanded target (head.arm_targets, no weights): switched on
# after refining, as a head trained with it drifts more in the open loop.
$PY -c 'import sys; from r2s2r.model.configuration_world_model import WorldModelConfig as C
c = C.load(sys.argv[1]); c.head.arm_targets = True; c.save(sys.argv[1])' outputs/bench/blind/$NAME
# Imagined results belong to one head: drop the last head's (the logs and the second real run are kept).
rm -rf outputs/bench/rank_state/state_head
$PY benchmarks/rank.py --state_only --world_model outputs/bench/blind/$NAME --samples 4 \
  --output_dir outputs/bench/rank_state --out benchmarks/results/state_only.json
