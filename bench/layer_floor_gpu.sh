#!/usr/bin/env bash
# Does the per-layer floor of global ranking stop the BW collapse the VGG16 sweep showed? One dense VGG16 on
# Fashion-MNIST, then BW 32x32 pruned to 75% from it with the floor off (max_layer_sparsity=1.0) and on (0.99),
# both at once on one GPU. Writes bench/results/vgg16_bw_layer_floor.{json,md}. Environment: RUNS (default logs/gpu).
set -euo pipefail
runs=${RUNS:-logs/gpu}
common=(logger=csv "~callbacks.progress_bar" trainer.enable_progress_bar=false callbacks.model_checkpoint.save_top_k=1)
python train.py experiment=vgg16_fmnist_dense "${common[@]}" hydra.run.dir="$runs/floor_dense"
for cap in 1.0 0.99; do
  python train.py experiment=vgg16_fmnist_prune pattern=bw schedule.target=0.75 \
    init_ckpt="$runs/floor_dense/checkpoints/last.ckpt" callbacks.staged_pruning.max_layer_sparsity=$cap \
    "${common[@]}" hydra.run.dir="$runs/floor_bw_$cap" &
done
wait
python bench/collect_runs.py --out bench/results/vgg16_bw_layer_floor --command "bash bench/layer_floor_gpu.sh" \
  --device "$(python -c 'import torch; print(torch.cuda.get_device_name())')" dense="$runs/floor_dense/summary.json" \
  bw-75-no-floor="$runs/floor_bw_1.0/summary.json" bw-75-floor-0.99="$runs/floor_bw_0.99/summary.json"
