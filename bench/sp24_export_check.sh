#!/usr/bin/env bash
# The 2:4 product path on a GPU machine, from the repository root, in about 5 minutes: build the extension in place
# (incremental after bench/sp24_gpu_check.sh), prune the embedded MiniLM to 2:4 on the tweets (the BERT demo preset,
# on the GPU), then export it at 1 and 32 sequences with layer_choice=fastest, which times each 2:4 layer under auto
# and with every CTA tile forced and runs it on the fastest. Every step runs under `timeout` and one overall deadline.
# Usage: bash bench/sp24_export_check.sh OUT_DIR (default: $OUT)
# Writes OUT_DIR/{device.txt,build.log,train.log,export_b1.log,export_b32.log} and OUT_DIR/report_b{1,32}.json;
# exits non-zero if any step failed.
set -uo pipefail

out=${1:-${OUT:?usage: bench/sp24_export_check.sh OUT_DIR (or set OUT)}}
deadline=$((SECONDS + 540))
source "$(dirname "$0")/gpu_check.sh"
step build "$out/build.log" 420 python setup.py build_ext --inplace || exit 1
run=$(mktemp -d)
step train "$out/train.log" 240 python train.py model=bert trainer=gpu logger=csv pattern=nm pattern.n=2 pattern.m=4 \
  schedule.target=0.5 "hydra.run.dir=$run" || exit 1
for batch in 1 32; do
  step "export b$batch" "$out/export_b$batch.log" 90 python export.py "ckpt=$run/checkpoints/last.ckpt" \
    "out_dir=$run/export_b$batch" layer_choice=fastest "batch_size=$batch" repeats=100 warmup=20 &&
    cp "$run/export_b$batch/export_report.json" "$out/report_b$batch.json"
done
rm -rf "$run"
exit "$status"
