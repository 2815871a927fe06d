#!/usr/bin/env bash
# The trained text models through export.py on a GPU machine, from the repository root, in one call of under 10
# minutes: MiniLM trained on the tweets and pruned to 75% TW (experiment=bert_tweets, shortened by $BERT_EXTRA),
# exported at 1 and 32 sequences; then the LSTM translator trained on the Bible verses and pruned to 75% TW
# (experiment=lstm_nmt_demo on the GPU), exported at 1 and 64 sentences. Every export times dense, dense compiled and
# the sparse twins side by side (export's compile=auto). Builds the extension first unless sparseprune/_kernels*.so
# is there (a carried build).
# Usage: bash bench/text_export_gpu_check.sh [OUT_DIR]  (default: $OUT); BERT_EXTRA and NMT_EXTRA add overrides.
# Writes OUT_DIR/{device.txt,build.log,train_<model>.log,export_<model>_b<batch>.log} and
# OUT_DIR/report_<model>_b<batch>.json; exits non-zero if any step failed.
set -uo pipefail

out=${1:-${OUT:?usage: bench/text_export_gpu_check.sh OUT_DIR (or set OUT)}}
deadline=$((SECONDS + 570))
source "$(dirname "$0")/gpu_check.sh"
build_unless_carried

runs=$(mktemp -d)
# model, its training overrides, and the batch sizes its export times
# shellcheck disable=SC2206  # the extra overrides split on spaces, as on a command line
bert=(experiment=bert_tweets pattern=tw logger=csv schedule.dense_epochs=1 schedule.finetune_epochs=1 ${BERT_EXTRA:-})
# shellcheck disable=SC2206
nmt=(model=lstm_nmt experiment=lstm_nmt_demo trainer=gpu pattern=tw logger=csv ${NMT_EXTRA:-})
for model in bert nmt; do
  declare -n overrides=$model
  batches=$([ "$model" = bert ] && echo "1 32" || echo "1 64")
  step "train $model" "$out/train_$model.log" 240 python train.py "${overrides[@]}" "hydra.run.dir=$runs/$model" ||
    continue
  for batch in $batches; do
    step "export $model b$batch" "$out/export_${model}_b$batch.log" 120 python export.py \
      "ckpt=$runs/$model/checkpoints/last.ckpt" "out_dir=$runs/$model/export_b$batch" "batch_size=$batch" \
      repeats=50 warmup=10 &&
      cp "$runs/$model/export_b$batch/export_report.json" "$out/report_${model}_b$batch.json"
  done
done
rm -rf "$runs"
exit "$status"
