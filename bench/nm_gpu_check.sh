#!/usr/bin/env bash
# N:M kernels on a GPU machine, from the repository root: build the extension in place, run the kernel tests (the
# slow int64-offset one included), compute-sanitizer memcheck on one small call per kernel path, then the benchmark.
# Usage: bash bench/nm_gpu_check.sh OUT_DIR [nm_bench args...]
# Writes OUT_DIR/{build,pytest,memcheck,bench}.log and OUT_DIR/nm_<device>.{json,md}; exits non-zero if any step failed.
set -uo pipefail

out=${1:?usage: bench/nm_gpu_check.sh OUT_DIR [nm_bench args...]}
shift
source "$(dirname "$0")/gpu_check.sh"
step build "$out/build.log" 0 python setup.py build_ext --inplace || exit 1
step pytest "$out/pytest.log" 0 python -m pytest tests/test_nm_kernel.py tests/test_nm_format.py -m "gpu or not gpu" -q -x -p no:cacheprovider
step memcheck "$out/memcheck.log" 0 "$CUDA_HOME/bin/compute-sanitizer" --tool memcheck --error-exitcode 3 \
  python -m pytest tests/test_nm_kernel.py -q -k test_each_path_once -p no:cacheprovider
device=$(device_tag)
step bench "$out/bench.log" 0 python -m bench.nm_bench --out "$out/nm_$device" "$@"
exit "$status"
