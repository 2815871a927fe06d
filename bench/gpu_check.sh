# Sourced by bench/*_gpu_check.sh: the output folder, the build environment, the device note, `step`,
# `build_unless_carried` and `device_tag`. Needs `out`; a script may set `deadline` (a $SECONDS value) that every
# step must end by.
mkdir -p "$out"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda-13.0}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
export MAX_JOBS=${MAX_JOBS:-16}
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/device.txt" 2>&1

# step NAME LOG LIMIT_S COMMAND...: runs the command under a timeout (LIMIT_S 0: none, unless $deadline cuts it to
# what is left), logs it, and records a failure in $status without stopping the script.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  if [[ -n ${deadline:-} ]]; then
    local left=$((deadline - SECONDS))
    if ((left <= 0)); then
      echo "== $name skipped: out of time" | tee "$log"
      status=1
      return 1
    fi
    if ((limit == 0 || limit > left)); then limit=$left; fi
  fi
  echo "== $name$( ((limit > 0)) && echo " (limit ${limit}s)"): $*" | tee "$log"
  timeout -k 10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  echo "== $name exit $rc$([ "$rc" -eq 124 ] && echo ' (timed out)')" | tee -a "$log"
  tail -n 15 "$log"
  [ "$rc" -eq 0 ] || status=1
  return "$rc"
}

# Short lower-case GPU tag for result file names (h100, h200; gpu when the name carries none).
device_tag() {
  python -c "import re, torch; n = torch.cuda.get_device_name(); m = re.search(r'[A-Z]\d{2,3}', n); print((m.group(0) if m else 'gpu').lower())"
}

# build_unless_carried [GZ]: builds the extension in place unless sparseprune/_kernels*.so is there (a build carried
# in); after a build, GZ (when given) gets the gzipped .so to carry into the next call. A failed build ends the script.
build_unless_carried() {
  ls sparseprune/_kernels*.so >/dev/null 2>&1 && return 0
  step build "$out/build.log" 300 python setup.py build_ext --inplace || exit 1
  [[ -z ${1:-} ]] || gzip -c sparseprune/_kernels*.so >"$1"
}
