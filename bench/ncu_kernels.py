"""Nsight Compute driver: one call of each Hopper kernel worth profiling, inside a cudaProfilerStart/Stop window.

    ncu --profile-from-start off --nvtx --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
        --section ComputeWorkloadAnalysis python -m bench.ncu_kernels

Profiles the TW kernels (wgmma.ws and wgmma, feature-major x, G=128, 75%) at BERT QKV and 8192^3, and the
2:4 sparse-tensor-core kernel next to cuBLAS at 8192^3 and BERT FFN in; each call sits in an NVTX range named
after its case. Every operation runs twice first, so packing, compression and autotuning stay out of the window.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bench.nm_bench import random_nm_mask
from bench.tw_bench import bench_tw_mask
from sparseprune.export.formats.nm import nm_matmul, pack_nm
from sparseprune.export.formats.tw import pack_tw

TW_CASES = {"tw_bert_qkv": (4096, 768, 2304), "tw_cube": (8192, 8192, 8192)}
SP24_CASES = {"sp24_cube": (8192, 8192, 8192), "sp24_ffn_in": (4096, 768, 3072)}


def operations(gen: torch.Generator) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    """(case name, call) pairs in profiling order."""
    ops: list[tuple[str, Callable[[], torch.Tensor]]] = []
    for name, (m, k, n) in TW_CASES.items():
        mask = bench_tw_mask(k, n, 128, 0.75, gen).cuda()
        b = (torch.randn(k, n, device="cuda") / k**0.5).half()
        xt = torch.randn(k, m, device="cuda").half()
        packed = pack_tw(b, mask, 128)
        ops.append((name, lambda p=packed, xt=xt: p.matmul_feature_major(xt, kernel="wgmma.ws")))
        ops.append((name + "_old", lambda p=packed, xt=xt: p.matmul_feature_major(xt, kernel="wgmma")))
    for name, (m, k, n) in SP24_CASES.items():
        mask = random_nm_mask(k, n, 2, 4, 1, gen).cuda()
        b = (torch.randn(k, n, device="cuda") / k**0.5).half()
        x = torch.randn(m, k, device="cuda").half()
        packed = pack_nm(b, mask, 4, 1)
        ops.append((name, lambda p=packed, x=x: nm_matmul(x, p, kernel="sp24")))
        ops.append((name + "_dense", lambda b=b, x=x: x @ b))
    return ops


def main() -> None:
    ops = operations(torch.Generator().manual_seed(0))
    for _, call in ops:
        call()
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, call in ops:
        torch.cuda.nvtx.range_push(name)
        call()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
