#!/bin/bash
# The camera-only learned families of benchmarks/generalization.py: LeRobot ACT reading the top view and the
# joint state only (never the cube's pose), as ACT's own simulated transfer-cube policies do, its ResNet-18
# trained from scratch (nothing is downloaded). act_cam: 5 checkpoints of one run on 120 rendered episodes
# of the nominal demonstrator; act_cam_small: a run on 30 others. Their rollouts enter no dataset.
# ~15 min recording + ~40 min training (the two runs side by side) + ~10 min scoring on 2 cores; resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 MUJOCO_GL=egl OMP_NUM_THREADS=1
PY=${PY:-.venv/bin/python}
D=outputs/bench/data
.venv/bin/r2s2r-record --root=$D/cam_act_demos --num_episodes=120 --distribution=mixed --seed=8300 \
  --world.num_envs=10 --workers=2
.venv/bin/r2s2r-record --root=$D/cam_act_small_demos --num_episodes=30 --distribution=mixed --seed=8400 \
  --world.num_envs=10 --workers=2
ACT=(--heldout= --cameras='[top]' --batch_size=8 --dim_model=256 --chunk_size=50 --n_action_steps=25
  --eval_episodes=10 --workers=1)
$PY benchmarks/zoo_act.py --data=$D/cam_act_demos --output_dir=outputs/bench/zoo/act_cam --seed=3 "${ACT[@]}" \
  --steps=6000 --save_at='[500,1000,2000,4000,6000]' --out=outputs/bench/zoo/act_cam.json &
big=$!
$PY benchmarks/zoo_act.py --data=$D/cam_act_small_demos --output_dir=outputs/bench/zoo/act_cam_small --seed=4 \
  "${ACT[@]}" --steps=3000 --save_at='[1000,3000]' --out=outputs/bench/zoo/act_cam_small.json &
small=$!
wait $big
wait $small
