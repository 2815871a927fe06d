#!/usr/bin/env bash
# The product path on a GPU machine, from the repository root, in under 9 minutes: build the extension in place,
# run the export, folding, layer-choice and im2col tests, compute-sanitizer memcheck on the im2col kernels, time
# the im2col kernels (bench.im2col_bench at 1, 16 and 256 images) and the sparse convolutions (bench.conv_bench),
# then train the full-width VGG16 on Fashion-MNIST, prune it to 75% TW in three stages and export it at 1, 16 and
# 256 images with and without folded batch norms. Every step runs under `timeout` and within one overall deadline.
# Usage: SPARSEPRUNE_DATA_DIR=<dir holding FashionMNIST/raw> bash bench/export_gpu_check.sh [OUT_DIR]  (default: $OUT)
# Writes OUT_DIR/{device.txt,build.log,pytest.log,memcheck.log,im2col.log,conv.log,train.log,export_*.log} and
# OUT_DIR/{im2col,conv}.{json,md}, OUT_DIR/report_{folded,kept}_bB.json; exits non-zero if any step failed.
set -uo pipefail

out=${1:-${OUT:?usage: bench/export_gpu_check.sh OUT_DIR (or set OUT)}}
deadline=$((SECONDS + 530))
source "$(dirname "$0")/gpu_check.sh"
step build "$out/build.log" 200 python setup.py build_ext --inplace || exit 1
step pytest "$out/pytest.log" 150 python -m pytest -x -q -p no:cacheprovider tests/test_export.py \
  tests/test_fold.py tests/test_layer_choice.py tests/test_timing.py tests/test_tw_kernel.py -k "not sweep"
sanitizer="$CUDA_HOME/bin/compute-sanitizer"
[ -x "$sanitizer" ] || sanitizer=compute-sanitizer
step memcheck "$out/memcheck.log" 120 "$sanitizer" --tool memcheck --error-exitcode 3 \
  python -m pytest -q -p no:cacheprovider tests/test_tw_kernel.py -k "im2col_kernel_matches and dtype0"
step im2col "$out/im2col.log" 60 python -m bench.im2col_bench --batches 1 16 256 --out "$out/im2col"
step conv "$out/conv.log" 60 python -m bench.conv_bench --out "$out/conv"

run=$(mktemp -d)
step train "$out/train.log" 150 python train.py trainer=gpu logger=csv model.width_multiplier=1.0 \
  data.train_subset=null schedule.dense_epochs=4 schedule.stages=3 schedule.finetune_epochs=1 data.download=false \
  "hydra.run.dir=$run" || exit 1
for batch in 1 16 256; do
  for norms in folded kept; do
    fold=$([ "$norms" = folded ] && echo true || echo false)
    step "export $norms b$batch" "$out/export_${norms}_b$batch.log" 60 python export.py \
      "ckpt=$run/checkpoints/last.ckpt" "out_dir=$run/export_${norms}_b$batch" layer_choice=fastest \
      "batch_size=$batch" repeats=100 warmup=20 "fold_batch_norm=$fold" &&
      cp "$run/export_${norms}_b$batch/export_report.json" "$out/report_${norms}_b$batch.json"
  done
done
rm -rf "$run"
exit "$status"
