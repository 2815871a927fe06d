#!/usr/bin/env bash
# TW kernels on a Hopper GPU machine, from the repository root, in under 8 minutes: build the extension in place,
# dump the SASS and resource usage of the wgmma kernels, run the kernel tests, compute-sanitizer memcheck on one
# small call per Hopper kernel, then a timed subset of the benchmark. Every step runs under `timeout` (a deadlock
# in a kernel must not hold the machine) and within one overall deadline.
# Usage: bash bench/tw_gpu_check.sh [OUT_DIR]   (default: $OUT)
# Writes OUT_DIR/{device.txt,build.log,res_usage.txt,sass_summary.txt,sass_wgmma_ws_sync.txt,pytest.log,
# memcheck.log,bench.log} and OUT_DIR/tw.{json,md}; exits non-zero if any step failed.
set -uo pipefail

out=${1:-${OUT:?usage: bench/tw_gpu_check.sh OUT_DIR (or set OUT)}}
deadline=$((SECONDS + 470))
source "$(dirname "$0")/gpu_check.sh"
step build "$out/build.log" 240 python setup.py build_ext --inplace || exit 1

# setmaxnreg is dropped (warning C7508) when ptxas cannot pin the kernel's register count.
grep -n "C7508\|setmaxnreg" "$out/build.log" >"$out/setmaxnreg_warnings.txt" && status=1
cuobjdump="$CUDA_HOME/bin/cuobjdump"
[ -x "$cuobjdump" ] || cuobjdump=$(python -c "import os, triton; print(os.path.dirname(triton.__file__))")/backends/nvidia/bin/cuobjdump
so=$(ls sparseprune/_kernels*.so | head -n 1)
"$cuobjdump" -res-usage "$so" 2>&1 | grep -A1 "tw_wgmma" >"$out/res_usage.txt"
sass=$(mktemp)
"$cuobjdump" -sass "$so" >"$sass" 2>&1
# Per wgmma kernel instantiation: HGMMA count, local-memory traffic (spills), warpgroup register reallocation.
awk '/Function :/ { name = $3 } name ~ /tw_wgmma/ {
       if ($0 ~ /HGMMA/) hgmma[name]++; if ($0 ~ /(LDL|STL)/) local_mem[name]++; if ($0 ~ /USETMAXREG/) setmax[name]++;
       seen[name] = 1 }
     END { for (n in seen) printf "%s HGMMA=%d LDL/STL=%d USETMAXREG=%d\n", n, hgmma[n], local_mem[n], setmax[n] }' \
  "$sass" | sort >"$out/sass_summary.txt"
cat "$out/sass_summary.txt"
# The synchronisation skeleton of the warp-specialized kernels (the full SASS is tens of MB).
awk '/Function :/ { keep = ($3 ~ /tw_wgmma_ws_kernel/) } keep' "$sass" |
  grep -E "Function|HGMMA|USETMAXREG|SYNCS|ARRIVES|WARPGROUP|BAR\.|FENCE|EXIT" >"$out/sass_wgmma_ws_sync.txt"
rm -f "$sass"

step pytest "$out/pytest.log" 240 python -m pytest tests/test_tw_kernel.py -x -q -p no:cacheprovider
sanitizer="$CUDA_HOME/bin/compute-sanitizer"
[ -x "$sanitizer" ] || sanitizer=compute-sanitizer
step memcheck "$out/memcheck.log" 120 "$sanitizer" --tool memcheck --error-exitcode 3 \
  python -m bench.tw_bench --check-only --shapes lstm_gates --sparsities 0.75 --granularities 128
step bench "$out/bench.log" 200 python -m bench.tw_bench --shapes bert_ffn_in bert_ffn_out vgg_conv4 cube_8192 \
  --sparsities 0.4 0.75 0.9 --granularities 128 --out "$out/tw"
exit "$status"
