"""r2s2r-train: train the world model on LeRobot datasets (accelerate: CPU, one GPU, or several).

Examples:
    r2s2r-train --data.root=outputs/datasets/demo --output_dir=outputs/train/demo
    r2s2r-train --preset=tiny --steps=200 --data.root=outputs/datasets/demo --output_dir=outputs/train/tiny
    r2s2r-train --output_dir=outputs/train/demo --resume=true          # continue where it stopped
    r2s2r-train --model.width=256 --model.depth=8 --batch_size=16 --lr=2e-4
    accelerate launch --num_processes=2 -m r2s2r.scripts.train --preset=base --data.root=...   # multi-GPU
    accelerate launch --config_file=configs/accelerate_deepspeed_zero2.yaml -m r2s2r.scripts.train ...

Pretraining on several datasets, robots and tasks, and fine-tuning on a new one:
    r2s2r-train --data.root=[outputs/datasets/insertion,outputs/datasets/pusht,outputs/datasets/video] \
        --data.action_free=[outputs/datasets/video] --output_dir=outputs/train/pretrained
    r2s2r-train --init_from=outputs/train/pretrained/checkpoints/last/pretrained_model \
        --data.root=outputs/datasets/transfer_cube --output_dir=outputs/train/finetuned --steps=1000
  The first dataset's robot and task are the model's own (its state head and judge serve them); every robot
  gets its own action and proprio projections and view embeddings (from its robot spec, named by the
  dataset's robot_type), every task an embedding; datasets in --data.action_free are read as footage without
  actions. --init_from starts from a pretrained model (its architecture: --model.* flags are not read), loads
  every weight whose shape still fits and keeps its robots' normalization; a dataset of a robot it does not
  know is refused. <checkpoint>/init.json lists what was loaded and what starts fresh.

Checkpoints go to <output_dir>/checkpoints/<step>/ with a `last` link; each holds `pretrained_model/`
(config.json + model.safetensors, EMA weights: what r2s2r-eval-openloop and WorldModelEnv load) and
`training_state/` (what --resume reads). Every flag is a field of `TrainConfig` (r2s2r/training/train.py)
or of the model/data configs under it; `--config_path=recipe.yaml` reads them from a file.
"""

from __future__ import annotations

import sys

from r2s2r.scripts import cli
from r2s2r.training.train import TrainConfig, train


def train_main(cfg: TrainConfig) -> int:
    print(f"checkpoint: {train(cfg)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(TrainConfig, train_main, __doc__, argv, prog="r2s2r-train")


if __name__ == "__main__":
    sys.exit(main())
