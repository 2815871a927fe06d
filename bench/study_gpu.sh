#!/usr/bin/env bash
# A controlled comparison on one GPU: points that differ in one setting, all pruned at once from the workload's
# dense reference (the one bench/sweep_gpu.sh trains, reused when present), collected into
# bench/results/<study>.{json,md} with per-run logs.
#   bash bench/study_gpu.sh vgg16_layer_floor  # BW 32x32 at 75%: no per-layer floor against 0.99
#   bash bench/study_gpu.sh bert_layer_floor   # MiniLM, TW G=128 at 75%: no floor, 0.9, 0.8
#   bash bench/study_gpu.sh bert_schedule      # MiniLM at 75%, the presets' 3 stages x 2 epochs: EW, TW G=64/128, TEW
#   bash bench/study_gpu.sh bert_finetune_lr   # MiniLM at 75%, EW and TW G=128 fine-tuned at 1e-5 to 2e-4 (default 5e-5)
#   bash bench/study_gpu.sh bert_distill       # MiniLM at 75%, EW and TW G=128 with and without distillation from the
#                                              # dense model (logits; TW also with hidden states, and at lr 2e-4)
#   bash bench/study_gpu.sh bert_distill_combined  # MiniLM at 75%: TW G=128/64 and TEW with hidden-state distillation
#                                                  # at lr 2e-4, against EW with and without the same distillation
# Environment: RUNS (default logs/gpu), EXTRA (overrides for every run), MODEL_DIR / TWEETS_CSV as for sweep_gpu.sh,
# TAG (suffix of the result and run names: TAG=seed1 EXTRA='seed=1' repeats a study with another seed).
set -euo pipefail
study=${1:?usage: bash bench/study_gpu.sh vgg16_layer_floor|bert_layer_floor|bert_schedule|bert_finetune_lr|bert_distill|bert_distill_combined}
runs=${RUNS:-logs/gpu}
read -ra extra <<< "${EXTRA:-}"
source "$(dirname "$0")/workloads.sh"
floor=callbacks.staged_pruning.max_layer_sparsity
# Distillation for the bert_distill studies. Soft targets at T=2 share the loss equally with the labels. Hidden
# states: MiniLM's layer outputs vary by about 0.35 per element, and TW pruning at 66% and 75% leaves a mean MSE of
# 0.2-0.25 against the dense model (measured on 512 tweets with a MiniLM fine-tuned for 250 steps) that fine-tuning
# on labels alone barely lowers, while CE runs 0.65-1.0; a weight of 3 makes the term about as large as CE.
kd="model.distill.weight=0.5 model.distill.temperature=2"
hidden=model.distill.hidden_weight=3
case $study in
  vgg16_layer_floor)
    use_workload vgg16
    points=("bw-75-floor-1.0=pattern=bw $floor=1.0" "bw-75-floor-0.99=pattern=bw $floor=0.99")
    base=(experiment=vgg16_fmnist_prune schedule.target=0.75) ;;
  bert_layer_floor)
    use_workload bert
    points=("tw128-75-floor-1.0=$floor=1.0" "tw128-75-floor-0.9=$floor=0.9" "tw128-75-floor-0.8=$floor=0.8")
    base=(experiment=paper/bert_tw128 schedule.target=0.75 "${schedule[@]}") ;;
  bert_schedule)
    use_workload bert
    points=("ew-75=experiment=paper/bert_ew" "tw64-75=experiment=paper/bert_tw64"
      "tw128-75=experiment=paper/bert_tw128" "tew-75=experiment=paper/bert_tew"
      "tw128-75-no-columns=experiment=paper/bert_tw128 pattern.column_share=0")
    base=(schedule.target=0.75 schedule.stages=3 schedule.finetune_epochs=2) ;;
  bert_finetune_lr)
    use_workload bert
    points=()
    for lr in 1e-5 2e-5 1e-4 2e-4; do
      points+=("ew-75-lr$lr=experiment=paper/bert_ew model.optimizer.lr=$lr"
        "tw128-75-lr$lr=experiment=paper/bert_tw128 model.optimizer.lr=$lr")
    done
    base=(schedule.target=0.75 "${schedule[@]}") ;;
  bert_distill)
    use_workload bert
    ew=experiment=paper/bert_ew tw=experiment=paper/bert_tw128
    points=("ew-75=$ew" "tw128-75=$tw" "ew-75-kd=$ew $kd" "tw128-75-kd=$tw $kd" "tw128-75-kd-hidden=$tw $kd $hidden"
      "tw128-75-lr2e-4-kd=$tw model.optimizer.lr=2e-4 $kd")
    base=(schedule.target=0.75 "${schedule[@]}") ;;
  bert_distill_combined)
    use_workload bert
    # bert_distill's two TW gains together (hidden states and the 2e-4 rate) for every tile-wise pattern, against
    # EW with the same distillation and plain EW.
    points=("ew-75=experiment=paper/bert_ew" "ew-75-kd-hidden=experiment=paper/bert_ew $kd $hidden")
    for p in tw128 tw64 tew; do
      points+=("$p-75-kd-hidden-lr2e-4=experiment=paper/bert_$p $kd $hidden model.optimizer.lr=2e-4")
    done
    base=(schedule.target=0.75 "${schedule[@]}") ;;
  *) echo "unknown study $study" >&2; exit 2 ;;
esac
train_dense
out=bench/results/$study${TAG:+_$TAG}
labelled=(dense="$dense_dir/summary.json")
for point in "${points[@]}"; do
  label=${point%%=*}
  read -ra overrides <<< "${point#*=}"
  run_dir=$runs/${study}${TAG:+_$TAG}_$label
  python train.py "${base[@]}" "${overrides[@]}" "${text[@]}" init_ckpt="$dense_dir/checkpoints/last.ckpt" \
    schedule.dense_epochs=0 "${common[@]}" "${extra[@]}" hydra.run.dir="$run_dir" > "$run_dir.console.log" 2>&1 &
  labelled+=("$label=$run_dir/summary.json")
done
failed=0
for job in $(jobs -p); do wait "$job" || failed=1; done
mkdir -p "${out}_logs"
for item in "${labelled[@]}"; do  # each run's training log and summary beside the table
  summary=${item#*=}
  cp "$(dirname "$summary")/train.log" "${out}_logs/${item%%=*}.log" 2>/dev/null || true
  cp "$summary" "${out}_logs/${item%%=*}.summary.json" 2>/dev/null || true
done
python bench/collect_runs.py --out "$out" --metric "$metric" --scale "$scale" \
  --command "${TAG:+TAG=$TAG }${EXTRA:+EXTRA='$EXTRA' }bash bench/study_gpu.sh $study" --device "$(gpu_name)" "${labelled[@]}"
exit $failed
