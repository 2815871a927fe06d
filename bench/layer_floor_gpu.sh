#!/usr/bin/env bash
# Does the per-layer floor of global ranking (callbacks.staged_pruning.max_layer_sparsity) keep a pattern from
# emptying layers? Prunes from one dense model with several floors at once on one GPU and writes
# bench/results/<workload>_layer_floor.{json,md}.
#   bash bench/layer_floor_gpu.sh vgg16  # VGG16 on Fashion-MNIST, BW 32x32 at 75%: no floor (1.0) against 0.99
#   bash bench/layer_floor_gpu.sh bert   # MiniLM on the tweets, TW G=128 at 75%: no floor, 0.9 and 0.8
# The bert study prunes from the dense model of `bash bench/sweep_gpu.sh bert` (same RUNS) with the sweep's schedule.
# Environment: RUNS (default logs/gpu), MODEL_DIR / TWEETS_CSV as for bench/sweep_gpu.sh.
set -euo pipefail
workload=${1:?usage: bash bench/layer_floor_gpu.sh vgg16|bert}
runs=${RUNS:-logs/gpu}
common=(logger=csv "~callbacks.progress_bar" trainer.enable_progress_bar=false callbacks.model_checkpoint.save_top_k=1)
case $workload in
  vgg16)
    dense_dir=$runs/floor_dense
    python train.py experiment=vgg16_fmnist_dense "${common[@]}" hydra.run.dir="$dense_dir"
    points=(bw:1.0 bw:0.99)
    pruned=(experiment=vgg16_fmnist_prune) ;;
  bert)
    dense_dir=$runs/bert_dense
    [[ -f $dense_dir/checkpoints/last.ckpt ]] || { echo "no $dense_dir: run bash bench/sweep_gpu.sh bert first" >&2; exit 2; }
    points=(tw128:1.0 tw128:0.9 tw128:0.8)
    pruned=(model.pretrained="${MODEL_DIR:-embedded-minilm}" data.csv_path="${TWEETS_CSV:-null}"
      importance.num_batches=16 schedule.stages=2 schedule.finetune_epochs=1 schedule.dense_epochs=0) ;;
  *) echo "unknown workload $workload (vgg16 or bert)" >&2; exit 2 ;;
esac
labelled=()
for point in "${points[@]}"; do
  pattern=${point%%:*} cap=${point#*:}
  case $workload in
    vgg16) choice=(pattern="$pattern") ;;
    bert) choice=(experiment=paper/bert_"$pattern") ;;
  esac
  run_dir=$runs/floor_${workload}_${pattern}_$cap
  python train.py "${pruned[@]}" "${choice[@]}" schedule.target=0.75 init_ckpt="$dense_dir/checkpoints/last.ckpt" \
    callbacks.staged_pruning.max_layer_sparsity="$cap" "${common[@]}" hydra.run.dir="$run_dir" \
    > "$run_dir.console.log" 2>&1 &
  labelled+=("$pattern-75-floor-$cap=$run_dir/summary.json")
done
failed=0
for job in $(jobs -p); do wait "$job" || failed=1; done
python bench/collect_runs.py --out "bench/results/${workload}_layer_floor" --command "bash bench/layer_floor_gpu.sh $workload" \
  --device "$(python -c 'import torch; print(torch.cuda.get_device_name())')" dense="$dense_dir/summary.json" \
  "${labelled[@]}"
exit $failed
