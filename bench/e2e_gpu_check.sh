#!/usr/bin/env bash
# The whole-transformer path on a GPU machine, from the repository root, in one call of under 10 minutes: build the
# extension in place (skipped when sparseprune/_kernels*.so is already there, as when a build is carried in), run the
# feature-major BERT and 2:4 GPU tests, compute-sanitizer memcheck on the LayerNorm kernel, time the 2:4 tiles at
# decode sizes, then the whole-model benchmark (bench.e2e_bench, with its calls also timed alone) for $PATTERNS at
# $SHAPES.
# Usage: bash bench/e2e_gpu_check.sh [OUT_DIR]  (default: $OUT); PATTERNS, SHAPES, E2E_DEADLINE_S, SKIP_CHECKS=1.
# Writes OUT_DIR/{device.txt,build.log,pytest.log,memcheck.log,sp24.log,e2e.log}, OUT_DIR/{sp24,e2e}.{json,md}
# and, after a build, OUT_DIR/kernels.so.gz to carry into the next call; exits non-zero if any step failed.
set -uo pipefail

out=${1:-${OUT:?usage: bench/e2e_gpu_check.sh OUT_DIR (or set OUT)}}
deadline=$((SECONDS + 570))
source "$(dirname "$0")/gpu_check.sh"
build_unless_carried "$out/kernels.so.gz"
if [[ -z ${SKIP_CHECKS:-} ]]; then
  step pytest "$out/pytest.log" 150 python -m pytest -x -q -p no:cacheprovider -m gpu tests/test_feature_major_bert.py \
    tests/test_sp24_kernel.py tests/test_attention.py
  sanitizer="$CUDA_HOME/bin/compute-sanitizer"
  [ -x "$sanitizer" ] || sanitizer=compute-sanitizer
  step memcheck "$out/memcheck.log" 90 "$sanitizer" --tool memcheck --error-exitcode 3 \
    python -m pytest -q -p no:cacheprovider tests/test_feature_major_bert.py -k "layer_norm_kernel and 768 and (256 or 4101 or 16384)"
  step sp24 "$out/sp24.log" 90 python -m bench.nm_bench --patterns 2:4 --vectors 1 --shapes decode_m16 bert_qkv \
    --out "$out/sp24"
fi
step e2e "$out/e2e.log" 0 python -m bench.e2e_bench --patterns ${PATTERNS:-tw75 tw90 vw-2:8} \
  --shapes ${SHAPES:-16x256 1x256} --standalone --deadline-s "${E2E_DEADLINE_S:-300}" --out "$out/e2e"
exit "$status"
