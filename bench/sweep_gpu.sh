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
workload=${1:?usage: bash bench/sweep_gpu.sh vgg16|bert|lstm_nmt}
runs=${RUNS:-logs/gpu}
read -ra extra <<< "${EXTRA:-}"
# One checkpoint per run (last.ckpt and the latest epoch): a sweep of 15 VGG16 runs would otherwise keep ~30 GB.
common=(logger=csv "~callbacks.progress_bar" trainer.enable_progress_bar=false callbacks.model_checkpoint.save_top_k=1
  "${extra[@]}")
timed_export=0
scale=100  # deltas in points: accuracy x 100, BLEU as is
case $workload in
  vgg16)
    dense=(experiment=vgg16_fmnist_dense)
    sweep=(conf/sweep/vgg16_fmnist.yaml)
    timed_export=1
    pruned=()
    metric=test/acc ;;
  bert)
    text=(model.pretrained="${MODEL_DIR:-embedded-minilm}" data.csv_path="${TWEETS_CSV:-null}" importance.num_batches=16)
    dense=(experiment=bert_tweets "${text[@]}" schedule.dense_epochs=2)
    sweep=(conf/sweep/bert_patterns.yaml)
    pruned=("${text[@]}" schedule.stages=2 schedule.finetune_epochs=1)
    metric=test/acc ;;
  lstm_nmt)
    dense=(experiment=lstm_nmt_bible)
    sweep=(conf/sweep/lstm_nmt_patterns.yaml)
    pruned=(schedule.finetune_epochs=2)
    metric=test/bleu
    scale=1 ;;
  *) echo "unknown workload $workload (vgg16, bert or lstm_nmt)" >&2; exit 2 ;;
esac
dense_dir=$runs/${workload}_dense
sweep_dir=$runs/${workload}_sweep
if [[ ! -f $dense_dir/summary.json ]]; then
  python train.py "${dense[@]}" schedule.stages=0 "${common[@]}" hydra.run.dir="$dense_dir"
fi
# A failed point does not stop the report of the others; the script still exits non-zero at the end.
failed=0
python -m sparseprune.sweeps "${sweep[@]}" --run "$sweep_dir" --jobs "${JOBS:-3}" "${common[@]}" "${pruned[@]}" \
  init_ckpt="$dense_dir/checkpoints/last.ckpt" schedule.dense_epochs=0 || failed=1
[[ -n ${TRAIN_ONLY:-} ]] && exit $failed
if (( timed_export )); then  # one at a time, after all training, so the timings see an otherwise idle GPU
  python -m sparseprune.sweeps "${sweep[@]}" --run "$sweep_dir" --export "${common[@]}" "${pruned[@]}" \
    init_ckpt="$dense_dir/checkpoints/last.ckpt" schedule.dense_epochs=0 || failed=1
fi
python -m sparseprune.report "$sweep_dir"
out=bench/results/${workload}_sweep
mkdir -p "$out"
cp -r "$sweep_dir/report.md" "$sweep_dir/figures" "$out/"
python bench/collect_runs.py --out "$out/table" --metric "$metric" --scale "$scale" --command "${EXTRA:+EXTRA='$EXTRA' }bash bench/sweep_gpu.sh $workload" \
  --device "$(python -c 'import torch; print(torch.cuda.get_device_name())')" \
  dense="$dense_dir/summary.json" --sweep "$sweep_dir"
exit $failed
