#!/usr/bin/env bash
# VGG16 on Fashion-MNIST on one GPU: dense reference, then TW (G=128), EW and VW (V=16) pruned to 75% from it.
# Writes bench/results/vgg16_fmnist_75.{json,md}. Run from the repository root: bash bench/vgg16_fmnist_gpu.sh
set -euo pipefail
runs=logs/vgg16_fmnist
common="logger=csv ~callbacks.progress_bar trainer.enable_progress_bar=false"
python train.py experiment=vgg16_fmnist_dense $common hydra.run.dir=$runs/dense
dense=$runs/dense/checkpoints/last.ckpt
for pattern in tw ew vw; do
  python train.py experiment=vgg16_fmnist_prune pattern=$pattern init_ckpt=$dense $common hydra.run.dir=$runs/$pattern
done
python bench/collect_runs.py --out bench/results/vgg16_fmnist_75 --command "bash bench/vgg16_fmnist_gpu.sh" \
  --device "$(python -c 'import torch; print(torch.cuda.get_device_name())')" \
  dense=$runs/dense/summary.json tw-g128=$runs/tw/summary.json ew=$runs/ew/summary.json vw-v16=$runs/vw/summary.json
