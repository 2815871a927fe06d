"""What the TW GEMV's time at one row of x is made of, against the weight-bytes bound (GPU).

Builds bench/probes/tw_gemv_anatomy.cu with torch's extension loader: the whole-x GEMV reduced to its M = 1 core, the
core with parts of its work left out (x, then the row indices), and the same bytes split between CTAs by quarters of a
tile's kept rows instead of 32-column slices (each CTA then reads one contiguous block). They run on the packed weights
of the TW benchmark's decode case (4096 -> 11008, G = 128, the same masks), beside the GEMV itself, dense cuBLAS and
cuBLAS on a dense weight of the packed values' bytes, every call reading its weight from HBM (bench.common.Rotation).
'bound µs' is dense cuBLAS's time scaled by packed bytes / dense bytes, the time at the issue's weight-bytes bound. The
core variants are checked against fp32; the others compute other sums and are timed only. Run on a GPU with the
extension built:
    python -m bench.probes.tw_gemv_anatomy --out bench/results/tw_h200_gemv_anatomy
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bench.common import (
    Rotation,
    case_generator,
    dense_yardsticks,
    finish_row,
    finish_sweep,
    relative_error,
    require_kernels,
    sweep_parser,
    time_cuda,
    time_variants,
)
from bench.probes import load_probe_extension
from bench.tw_bench import SHAPES, bench_tw_mask
from sparseprune.export.formats.tw import PackedTW, pack_tw

SHAPE = "decode_m1"
GRANULARITY = 128
# (key, index in tw_gemv_anatomy.cu's kVariants, what the variant does, whether it computes x @ B)
PARTS = [
    (
        "core",
        0,
        "the whole-x GEMV's M = 1 core: 32-column slices, x staged whole, each row's index beside its values",
        True,
    ),
    ("no_x", 1, "the core with the row indices loaded but x neither staged nor read", False),
    ("bytes_only", 2, "the core's value loads summed, nothing else", False),
    ("quarters_core", 3, "the core with each CTA on a quarter of the tile's kept rows over all 128 columns", True),
    ("quarters_bytes_only", 4, "the quarters' value loads summed, nothing else", False),
    (
        "quarters_cluster",
        5,
        "quarters_core with the tile's four CTAs in a cluster, each adding one slice's four partial sums (pushed "
        "into its shared memory by the others) and writing it as core does",
        True,
    ),
]
COLUMNS = [
    ("sparsity", "sparsity"),
    ("tiles", "tiles"),
    ("packed_mb", "packed MB"),
    ("dense_us", "dense µs"),
    ("bound_us", "bound µs"),
    ("same_bytes_dense_us", "dense, same bytes µs"),
    ("gemv_us", "TW GEMV µs"),
    *[(f"{key}_us", f"{key} µs") for key, *_ in PARTS],
    ("gemv_of_bound", "GEMV / bound"),
    ("bytes_only_of_bound", "bytes_only / bound"),
    ("quarters_bytes_only_of_bound", "quarters_bytes_only / bound"),
    ("rel_err", "worst rel err"),
]


def run_case(ext: Any, sparsity: float, seed: int) -> tuple[dict[str, Any], list[float]]:
    m, k, n = SHAPES[SHAPE]
    gen = case_generator(seed, SHAPE, GRANULARITY, sparsity)
    mask = bench_tw_mask(k, n, GRANULARITY, sparsity, gen).cuda()
    b = (torch.randn(k, n, generator=gen) / math.sqrt(k)).half().cuda()
    x = torch.randn(m, k, generator=gen).half().cuda()
    packed = pack_tw(b, mask, GRANULARITY)
    ref = x.float() @ (b * mask).float()
    xt = x.t().contiguous()
    cols = packed.cols.long()
    kept = cols >= 0
    y = torch.empty(packed.num_tiles * 4 * GRANULARITY, device="cuda", dtype=torch.float32)

    row: dict[str, Any] = {"sparsity": sparsity, "tiles": packed.num_tiles, "packed_mb": packed.nbytes() / 1e6}
    row["dense_us"], row["same_bytes_dense_us"] = dense_yardsticks(x, b, packed.values.nbytes, gen)
    row["bound_us"] = row["dense_us"] * packed.nbytes() / b.nbytes
    row["gemv_us"] = time_cuda(Rotation(lambda p: p.matmul_feature_major(xt), packed, packed.nbytes(), m)).median_us
    errors = [relative_error(packed.matmul_feature_major(xt).t(), ref)]

    def run_variant(code: int, p: PackedTW) -> None:
        ext.anatomy(code, p.values, p.rows, p.tile_ptr, x[0], y)

    def error_of(key: str, code: int) -> float:
        y.fill_(float("nan"))
        run_variant(code, packed)
        outputs = packed.num_tiles * GRANULARITY
        per_cta = key in ("quarters_core", "quarters_bytes_only")  # the others write the slices' layout
        sums = y.view(packed.num_tiles, 4, GRANULARITY).sum(1).flatten() if per_cta else y[:outputs]
        return relative_error(sums[kept], ref[0, cols[kept]])

    errors += time_variants(row, PARTS, run_variant, packed, packed.nbytes(), m, error_of)
    for key in ("gemv", "bytes_only", "quarters_bytes_only"):
        row[f"{key}_of_bound"] = row["bound_us"] / row[f"{key}_us"]
    return row, errors


def main() -> None:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument("--sparsities", nargs="*", type=float, default=[0.5, 0.75, 0.9])
    args = parser.parse_args()
    require_kernels("tw_gemv_anatomy")
    ext = load_probe_extension(__file__)
    rows: list[dict[str, Any]] = []
    for sparsity in args.sparsities:
        row, errors = run_case(ext, sparsity, args.seed)
        finish_row(row, errors, torch.float16, rows, COLUMNS)
    notes = [
        f"fp16, {SHAPE} ({' x '.join(map(str, SHAPES[SHAPE]))}), G = {GRANULARITY}, x feature-major, the TW "
        "benchmark's masks (kept K within ±40% of the mean per tile); medians of CUDA-graph replays, weights read "
        "from HBM. 'TW GEMV' is the extension's call (kernels_ext/tw_gemv.cu, epilogue and pruned columns included); "
        "'bound' is the time at the weight-bytes bound (dense µs × packed / dense bytes); 'dense, same bytes' is "
        "cuBLAS on a dense K x N' weight with the packed values' bytes. The variants of "
        "bench/probes/tw_gemv_anatomy.cu:",
        "",
        *[f"- {key}: {what}." for key, _, what, _ in PARTS],
    ]
    finish_sweep(args.out, rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
