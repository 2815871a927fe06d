#!/usr/bin/env bash
# 2:4 Hopper sparse-tensor-core kernel on a GPU machine, from the repository root: build the extension in place with
# the CUTLASS headers (from the nvidia-cutlass wheel in .whl/ when cutlass_library is not importable), run the sp24
# tests, compute-sanitizer memcheck on one small compression and GEMM per dtype, then the 2:4 rows of nm_bench
# (BERT shapes, VGG16 conv4, 8192^3, M = 1 and 16 decode rows). Every step runs under a timeout (14 min in all at
# worst, or $deadline; about 5-7 min expected, most of it the CUTLASS compile, one file per CTA tile).
# Usage: bash bench/sp24_gpu_check.sh OUT_DIR [nm_bench args...]
# Writes OUT_DIR/device.txt, OUT_DIR/{build,ready,pytest,memcheck,bench}.log and OUT_DIR/sp24_<device>.{json,md};
# exits non-zero if any step failed.
set -uo pipefail

out=${1:?usage: bench/sp24_gpu_check.sh OUT_DIR [nm_bench args...]}
shift
source "$(dirname "$0")/gpu_check.sh"
if ! python3 -c "import cutlass_library" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/nvidia_cutlass*.whl >"$out/cutlass.log" 2>&1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
step build "$out/build.log" 420 python setup.py build_ext --inplace || exit 1
step ready "$out/ready.log" 30 python -c "
from sparseprune.export.formats.extension import load_kernels
import torch
k = load_kernels()
assert k is not None and hasattr(k, 'sp24_matmul'), 'extension built without the 2:4 kernel'
assert k.sp24_available(), 'no sm_90a code for this device'
print('sp24 kernel ready on', torch.cuda.get_device_name())
" || exit 1
step pytest "$out/pytest.log" 120 python -m pytest tests/test_sp24_kernel.py tests/test_nm_format.py -m "gpu or not gpu" \
  -q -p no:cacheprovider -rs
step memcheck "$out/memcheck.log" 120 "$CUDA_HOME/bin/compute-sanitizer" --tool memcheck --error-exitcode 3 \
  python -m pytest tests/test_sp24_kernel.py -q -k test_each_call_once -p no:cacheprovider
device=$(device_tag)
step bench "$out/bench.log" 150 python -m bench.nm_bench --patterns 2:4 --vectors 1 \
  --shapes bert_qkv bert_ffn_in bert_ffn_out vgg_conv4 decode_m1 decode_m16 cube_8192 --out "$out/sp24_$device" "$@"
exit "$status"
