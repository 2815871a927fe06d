"""What element-wise N:M's SpMV time at one row of x is made of (GPU).

Builds bench/probes/nm_spmv_anatomy.cu with torch's extension loader: the SpMV reduced to its M = 1 core, the same
kernel with parts of its work left out (reading x, staging x, x altogether, everything but the weight's bytes), and
trial designs of its parts (multicast staging of x over a cluster, the older shift-and-mask decoding, two panels per
CTA). Each is timed beside the extension's SpMV, dense cuBLAS, and cuBLAS on a dense weight of the packed weight's
bytes, every call reading its weight from HBM (bench.common.Rotation). The core and the trial designs are checked
against fp32 like the SpMV; the variants that leave work out compute other sums and are timed only. Run on a GPU with
the extension built:
    python -m bench.probes.nm_spmv_anatomy --out bench/results/nm_h200_spmv_anatomy
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bench.common import (
    Rotation,
    dense_yardsticks,
    finish_row,
    finish_sweep,
    relative_error,
    require_kernels,
    sweep_parser,
    time_cuda,
    time_variants,
)
from bench.nm_bench import parse_pattern, random_nm_mask
from bench.probes import load_probe_extension
from sparseprune.export.formats.nm import nm_matmul, pack_nm

K = 4096
# (key, index in nm_spmv_anatomy.cu's kVariants, what the variant does, whether it computes x @ B)
PARTS = [
    (
        "whole",
        0,
        "x staged in shared memory as fp32 from L2 and read once per kept value (the SpMV's M = 1 core)",
        True,
    ),
    ("local_x", 1, "shared memory filled by each thread instead of staged from L2, read as in the core", False),
    ("staged_x_unused", 2, "x staged as in the core, each value multiplied by its position instead of its x", False),
    ("no_x", 3, "x neither staged nor read: each value multiplied by its position", False),
    ("bytes_only", 4, "values summed and positions XORed: the weight's bytes and little else", False),
    ("shift_decode", 5, "the core with each column's position decoded by a shift, a mask, an add and a scale", True),
    ("multicast2", 6, "the core with x staged by clusters of 2 CTAs, each bulk-copying half of x to both", True),
    ("multicast4", 7, "as multicast2 with clusters of 4", True),
    ("two_panels", 8, "the core with two panels per CTA in turn, x staged once", True),
]
COLUMNS = [
    ("pattern", "N:M"),
    ("n", "N"),
    ("packed_mb", "packed MB"),
    ("dense_us", "dense µs"),
    ("same_bytes_dense_us", "dense, same bytes µs"),
    ("spmv_us", "SpMV µs"),
    *[(f"{key}_us", f"{key} µs") for key, *_ in PARTS],
    ("rel_err", "worst rel err"),
]


def run_case(ext: Any, pattern: str, n: int, gen: torch.Generator) -> tuple[dict[str, Any], list[float]]:
    kept, m = parse_pattern(pattern)
    b = (torch.randn(K, n, generator=gen) / math.sqrt(K)).half().cuda()
    mask = random_nm_mask(K, n, kept, m, 1, gen).cuda()
    packed = pack_nm(b, mask, m, 1)
    x = torch.randn(1, K, generator=gen).half().cuda()
    ref = x.float() @ (b * mask).float()
    y = torch.empty(n, device="cuda", dtype=torch.float16)
    row: dict[str, Any] = {"pattern": pattern, "n": n, "packed_mb": packed.nbytes() / 1e6}
    row["dense_us"], row["same_bytes_dense_us"] = dense_yardsticks(x, b, packed.nbytes(), gen)
    row["spmv_us"] = time_cuda(Rotation(lambda p: nm_matmul(x, p, kernel="simt"), packed, packed.nbytes(), 1)).median_us
    errors = [relative_error(nm_matmul(x, packed, kernel="simt"), ref)]

    def run_variant(code: int, p: Any) -> None:
        ext.anatomy(code, p.values, p.idx, x[0], y, p.m, p.kept)

    def error_of(key: str, code: int) -> float:
        y.fill_(float("nan"))
        run_variant(code, packed)
        return relative_error(y[None], ref)

    errors += time_variants(row, PARTS, run_variant, packed, packed.nbytes(), 1, error_of)
    return row, errors


def run(ext: Any, patterns: list[str], widths: list[int], seed: int) -> list[dict[str, Any]]:
    gen = torch.Generator().manual_seed(seed)
    results: list[dict[str, Any]] = []
    for pattern in patterns:
        for n in widths:
            row, errors = run_case(ext, pattern, n, gen)
            finish_row(row, errors, torch.float16, results, COLUMNS)
    return results


def main() -> None:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument("--patterns", nargs="*", default=["2:8", "1:4"])
    parser.add_argument("--widths", nargs="*", type=int, default=[11008, 5632], help="N; multiples of 128")
    args = parser.parse_args()
    require_kernels("nm_spmv_anatomy")
    ext = load_probe_extension(__file__)
    rows = run(ext, args.patterns, args.widths, args.seed)
    notes = [
        f"fp16, K = {K}, one row of x, element-wise N:M in the 32-column panels with 4-bit positions; medians of "
        "CUDA-graph replays, weights read from HBM. 'SpMV' is nm_matmul's CUDA-core route (kernels_ext/nm_gemm.cu); "
        "'dense, same bytes' is cuBLAS on a dense K x N' weight with as many bytes as the packed one. The variants "
        "of bench/probes/nm_spmv_anatomy.cu:",
        "",
        *[f"- {key}: {what}." for key, _, what, _ in PARTS],
    ]
    finish_sweep(args.out, rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
