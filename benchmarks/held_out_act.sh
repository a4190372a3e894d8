#!/bin/bash
# The held-out learned families of benchmarks/generalization.py: two new ACT runs (other data, seeds and
# sizes than benchmarks/zoo_act.py's), whose rollouts never enter any training data. ~30 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 MUJOCO_GL=egl
PY=${PY:-.venv/bin/python}
D=outputs/bench/data
.venv/bin/r2s2r-record --root=$D/act_b_demos --num_episodes=200 --distribution=mixed --seed=8100 \
  --world.cameras='[]' --world.num_envs=20 --policy.kwargs='{skill: noisy}'
.venv/bin/r2s2r-record --root=$D/act_c_demos --num_episodes=40 --distribution=mixed --seed=8200 \
  --world.cameras='[]' --world.num_envs=20 --policy.kwargs='{skill: hesitant}'
$PY benchmarks/zoo_act.py --data=$D/act_b_demos --heldout='' --output_dir=outputs/bench/zoo/act_b --seed=1 \
  --dim_model=192 --chunk_size=40 --n_action_steps=20 --steps=6000 --save_at='[500,1500,3000,6000]' \
  --eval_episodes=2 --workers=1 --out=outputs/bench/zoo/act_b.json
$PY benchmarks/zoo_act.py --data=$D/act_c_demos --heldout='' --output_dir=outputs/bench/zoo/act_c --seed=2 \
  --steps=3000 --save_at='[1000,3000]' --eval_episodes=2 --workers=1 --out=outputs/bench/zoo/act_c.json
