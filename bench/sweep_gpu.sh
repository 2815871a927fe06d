#!/usr/bin/env bash
# One workload's accuracy table on one GPU: a dense reference, then its sweep file's pattern points pruned from it
# (JOBS at once on the same GPU), the sweep report with its figures, and bench/results/<workload>_sweep.{json,md}.
#   bash bench/sweep_gpu.sh vgg16      # EW, VW, BW, TW, TEW x {50, 75, 90}% on Fashion-MNIST, exported and timed
#   bash bench/sweep_gpu.sh bert       # MiniLM on the tweets: EW, VW, TW G=64/128, TEW x {50, 75}%
#   bash bench/sweep_gpu.sh lstm_nmt   # the 2 x 512 LSTM on the Bible corpus, same points (2-epoch stages), BLEU
# Environment: RUNS (where runs go, default logs/gpu), JOBS (default 3), EXTRA (overrides for every run),
# TRAIN_ONLY=1 (stop after training; rerun without it to export and report), MODEL_DIR / TWEETS_CSV (copies of the
# MiniLM checkpoint and the tweets where their packages are not installed). Resumable: finished runs are kept.
set -euo pipefail
runs=${RUNS:-logs/gpu}
read -ra extra <<< "${EXTRA:-}"
source "$(dirname "$0")/workloads.sh"
use_workload "${1:?usage: bash bench/sweep_gpu.sh vgg16|bert|lstm_nmt}"
train_dense
sweep_dir=$runs/${workload}_sweep
points=("${common[@]}" "${extra[@]}" "${text[@]}" "${schedule[@]}" init_ckpt="$dense_dir/checkpoints/last.ckpt"
  schedule.dense_epochs=0)
# A failed point does not stop the report of the others; the script still exits non-zero at the end.
failed=0
python -m sparseprune.sweeps "$sweep" --run "$sweep_dir" --jobs "${JOBS:-3}" "${points[@]}" || failed=1
[[ -n ${TRAIN_ONLY:-} ]] && exit $failed
if (( timed_export )); then  # one at a time, after all training, so the timings see an otherwise idle GPU
  python -m sparseprune.sweeps "$sweep" --run "$sweep_dir" --export "${points[@]}" || failed=1
fi
python -m sparseprune.report "$sweep_dir"
out=bench/results/${workload}_sweep
mkdir -p "$out"
cp -r "$sweep_dir/report.md" "$sweep_dir/figures" "$out/"
python bench/collect_runs.py --out "$out/table" --metric "$metric" --scale "$scale" \
  --command "${EXTRA:+EXTRA='$EXTRA' }bash bench/sweep_gpu.sh $workload" --device "$(gpu_name)" \
  dense="$dense_dir/summary.json" --sweep "$sweep_dir"
exit $failed
