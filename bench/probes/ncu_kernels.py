"""Nsight Compute driver: one call of each Hopper kernel worth profiling, inside a cudaProfilerStart/Stop window.

    ncu --profile-from-start off --nvtx --section SpeedOfLight --section LaunchStats --section Occupancy \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats \
        --section ComputeWorkloadAnalysis python -m bench.probes.ncu_kernels [--cases NAME ...]

Default cases: the TW kernels (wgmma.ws and wgmma, feature-major x, G=128, 75%) at BERT QKV and 8192^3, and the
2:4 sparse-tensor-core kernel next to cuBLAS at 8192^3 and BERT FFN in. Other cases profile the long-item TW
calls (8192^3 at 90%, vector-wise 2:8 with V = 128 on VGG conv4) beside cuBLAS on the full and on the kept K.
The layer_norm cases profile the feature-major residual add + LayerNorm at BERT-base's 16 x 256 and 1 x 256
tokens beside torch's add and LayerNorm on row-major activations. Each call sits in an NVTX range named after its
case; every operation runs twice first, so packing, compression and autotuning stay out of the window.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

import sparseprune.export.ops  # noqa: F401  (registers torch.ops.sparseprune)
from bench.nm_bench import random_nm_mask
from bench.tw_bench import bench_tw_mask
from sparseprune.export.formats.nm import nm_matmul, pack_nm, tw_view
from sparseprune.export.formats.tw import pack_tw

Call = Callable[[], torch.Tensor]


def _weight(k: int, n: int) -> torch.Tensor:
    return (torch.randn(k, n, device="cuda") / k**0.5).half()


def _tw(m: int, k: int, n: int, sparsity: float, kernel: str, gen: torch.Generator) -> Call:
    """TW call on a feature-major x with the benchmark's mask (G = 128)."""
    packed = pack_tw(_weight(k, n), bench_tw_mask(k, n, 128, sparsity, gen).cuda(), 128)
    xt = torch.randn(k, m, device="cuda").half()
    return lambda: packed.matmul_feature_major(xt, kernel=kernel)


def _vw_tw(m: int, k: int, n: int, kept: int, group: int, vector: int, gen: torch.Generator) -> Call:
    """Vector-wise N:M on the TW route with a feature-major x, as nm_bench's 'TW-fm' column."""
    view = tw_view(pack_nm(_weight(k, n), random_nm_mask(k, n, kept, group, vector, gen).cuda(), group, vector))
    xt = torch.randn(k, m, device="cuda").half()
    return lambda: view.matmul_feature_major(xt)


def _sp24(m: int, k: int, n: int, gen: torch.Generator) -> Call:
    packed = pack_nm(_weight(k, n), random_nm_mask(k, n, 2, 4, 1, gen).cuda(), 4, 1)
    x = torch.randn(m, k, device="cuda").half()
    return lambda: nm_matmul(x, packed, kernel="sp24")


def _add_layer_norm(h: int, t: int, feature_major: bool) -> Call:
    """Residual add + LayerNorm of BERT's encoder: the stream's kernel on (H, T), or torch's on row-major (T, H)."""
    x, res = (torch.randn(h, t, device="cuda").half() for _ in range(2))
    weight, bias = torch.randn(h, device="cuda").half(), torch.randn(h, device="cuda").half()
    if feature_major:
        return lambda: torch.ops.sparseprune.add_layer_norm_feature_major(x, res, weight, bias, 1e-12)
    xr, rr = x.t().contiguous(), res.t().contiguous()
    return lambda: torch.nn.functional.layer_norm(xr + rr, (h,), weight, bias, 1e-12)


def _dense(m: int, k: int, n: int) -> Call:
    b, x = _weight(k, n), torch.randn(m, k, device="cuda").half()
    return lambda: x @ b


CASES: dict[str, Callable[[torch.Generator], Call]] = {
    "tw_bert_qkv": lambda g: _tw(4096, 768, 2304, 0.75, "wgmma.ws", g),
    "tw_bert_qkv_old": lambda g: _tw(4096, 768, 2304, 0.75, "wgmma", g),
    "tw_cube": lambda g: _tw(8192, 8192, 8192, 0.75, "wgmma.ws", g),
    "tw_cube_old": lambda g: _tw(8192, 8192, 8192, 0.75, "wgmma", g),
    "sp24_cube": lambda g: _sp24(8192, 8192, 8192, g),
    "sp24_cube_dense": lambda g: _dense(8192, 8192, 8192),
    "sp24_ffn_in": lambda g: _sp24(4096, 768, 3072, g),
    "sp24_ffn_in_dense": lambda g: _dense(4096, 768, 3072),
    "tw_cube_90": lambda g: _tw(8192, 8192, 8192, 0.9, "wgmma.ws", g),
    "vw28_vgg": lambda g: _vw_tw(6272, 4608, 512, 2, 8, 128, g),
    "dense_vgg": lambda g: _dense(6272, 4608, 512),
    "dense_vgg_kept": lambda g: _dense(6272, 1152, 512),
    "layer_norm_bert": lambda g: _add_layer_norm(768, 4096, True),
    "layer_norm_bert_rows": lambda g: _add_layer_norm(768, 4096, False),
    "layer_norm_seq": lambda g: _add_layer_norm(768, 256, True),
}
DEFAULT_CASES = (
    "tw_bert_qkv",
    "tw_bert_qkv_old",
    "tw_cube",
    "tw_cube_old",
    "sp24_cube",
    "sp24_cube_dense",
    "sp24_ffn_in",
    "sp24_ffn_in_dense",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="*", choices=sorted(CASES), default=list(DEFAULT_CASES))
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    ops = [(name, CASES[name](gen)) for name in args.cases]
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
