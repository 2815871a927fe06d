#!/usr/bin/env bash
# N:M kernels on a GPU machine, from the repository root: build the extension in place, run the kernel tests (the
# slow int64-offset one included), compute-sanitizer memcheck on one small call per kernel path, then the benchmark.
# Usage: bash bench/nm_gpu_check.sh OUT_DIR [nm_bench args...]
# Writes OUT_DIR/{build,pytest,memcheck,bench}.log and OUT_DIR/nm_<device>.{json,md}; exits non-zero if any step failed.
set -uo pipefail

out=${1:?usage: bench/nm_gpu_check.sh OUT_DIR [nm_bench args...]}
shift
mkdir -p "$out"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda-13.0}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
export MAX_JOBS=${MAX_JOBS:-16}
status=0

step() {  # step NAME LOG COMMAND...: runs the command, logs it, records a failure without stopping
  local name=$1 log=$2
  shift 2
  echo "== $name: $*" | tee "$log"
  "$@" >>"$log" 2>&1
  local rc=$?
  echo "== $name exit $rc" | tee -a "$log"
  tail -n 15 "$log"
  [ "$rc" -eq 0 ] || status=1
  return "$rc"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/device.txt" 2>&1
step build "$out/build.log" python setup.py build_ext --inplace || exit 1
step pytest "$out/pytest.log" python -m pytest tests/test_nm_kernel.py tests/test_nm_format.py -m "gpu or not gpu" -q -x -p no:cacheprovider
step memcheck "$out/memcheck.log" "$CUDA_HOME/bin/compute-sanitizer" --tool memcheck --error-exitcode 3 \
  python -m pytest tests/test_nm_kernel.py -q -k test_each_path_once -p no:cacheprovider
device=$(python -c "import re, torch; n = torch.cuda.get_device_name(); m = re.search(r'[A-Z]\d{2,3}', n); print((m.group(0) if m else 'gpu').lower())")
step bench "$out/bench.log" python -m bench.nm_bench --out "$out/nm_$device" "$@"
exit "$status"
