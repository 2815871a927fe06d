#!/usr/bin/env bash
# compute-sanitizer over one small call of every kernel family, on a GPU machine from the repository root, in one
# call of under 10 minutes: memcheck (out-of-bounds and misaligned accesses, leaks) and racecheck (shared-memory
# hazards) on the GPU tests that run each family at its smallest shapes. Run it once whenever a kernel changes.
# Builds the extension first unless sparseprune/_kernels*.so is there (a carried build).
# Usage: bash bench/sanitize_gpu_check.sh [OUT_DIR]  (default: $OUT); TOOLS="memcheck racecheck", FAMILIES="tw ...".
# Writes OUT_DIR/device.txt, OUT_DIR/build.log and OUT_DIR/<tool>_<family>.log; exits non-zero if any check failed.
set -uo pipefail

out=${1:-${OUT:?usage: bench/sanitize_gpu_check.sh OUT_DIR (or set OUT)}}
deadline=$((SECONDS + 570))
source "$(dirname "$0")/gpu_check.sh"
build_unless_carried
sanitizer="$CUDA_HOME/bin/compute-sanitizer"
[ -x "$sanitizer" ] || sanitizer=compute-sanitizer

# Per family: the test file and the -k expression of its smallest GPU cases (every kernel variant of the family).
declare -A CASES=(
  [tw]="tests/test_tw_kernel.py::test_feature_major_x_of_twelve_rows"
  [tw_gemv]="tests/test_tw_kernel.py::test_small_m_matches_fp32_reference"
  [nm]="tests/test_nm_kernel.py::test_each_path_once"
  [sp24]="tests/test_sp24_kernel.py::test_each_call_once"
  [im2col]="tests/test_tw_kernel.py::test_im2col_kernel_rejects_bad_input tests/test_tw_kernel.py::test_sparse_conv_feature_major_matches_fp32_conv"
  [layer_norm]="tests/test_feature_major_bert.py::test_layer_norm_kernel_matches_the_fp32_reference"
  [transpose]="tests/test_feature_major_bert.py::test_transpose_op_is_the_contiguous_transpose"
)
for tool in ${TOOLS:-memcheck racecheck}; do
  for family in ${FAMILIES:-tw tw_gemv nm sp24 im2col layer_norm transpose}; do
    [[ -n ${CASES[$family]:-} ]] || { echo "unknown family $family (one of ${!CASES[*]})" >&2; exit 2; }
    # shellcheck disable=SC2086  # a family may name several tests
    step "$tool $family" "$out/${tool}_${family}.log" 120 "$sanitizer" --tool "$tool" --error-exitcode 3 \
      python -m pytest -x -q -p no:cacheprovider -m gpu ${CASES[$family]}
  done
done
exit "$status"
