"""N:M sparse GEMM (element- and vector-wise) vs dense cuBLAS, torch's 2:4 semi-structured and the ideal K-cut GEMM.

Run from the repository root on a GPU with the extension built:
    python -m bench.nm_bench --out bench/results/nm_h100
Sparsities map to N:M patterns: 50% -> 2:4, 75% -> 2:8, 90% -> 3:32 (90.6%); `--patterns` picks others. Shapes are
the TW bench's plus nmSPARSE's 32 operator shapes (its M1-M32: M in 1, 256, 1024, 4096 over eight K -> N, the squares
1024 to 8192, 1024 -> 4096 and back, 5120 -> 20480 and back). Every case is checked against an fp32 reference on
fresh random inputs before it is timed.
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import Any

import torch

from bench.common import (
    COLD_WEIGHTS_MAX_M,
    TOLERANCE,
    Rotation,
    bench_parser,
    case_notes,
    exit_if_any_failed,
    markdown_table,
    relative_error,
    require_kernels,
    semi24_call,
    time_into,
    worst_error,
    write_results,
)
from bench.tw_bench import SHAPES as TW_SHAPES
from bench.tw_bench import gemv_kernels, hopper_kernels
from sparseprune.export.formats.nm import (
    PackedNM,
    auto_route,
    nm_matmul,
    pack_nm,
    route_unavailable,
    sp24_view,
    tw_view,
)
from sparseprune.export.formats.sp24 import FORCED_TILES

log = logging.getLogger("nm_bench")

LEGEND = (
    "Times are medians of CUDA-graph replays (launch overhead excluded) on the same device in one run, each case's "
    "calls timed side by side in three rounds, each round of a call after 50 ms of an idle GPU and one untimed batch "
    "(every call from the same state: the GPU's clocks follow its power draw with a lag). "
    "'N:M' takes x row-major through PackedNM.matmul (kernel: simt = CUDA-core SpMV/SpMM, tw = TW tensor-core "
    "kernel on the repacked weight, with its transpose of x); 'TW-fm' gives the TW route x feature-major, and from "
    "17 rows up to 1024 also forced to the tensor-core GEMV ('gemv.mma') and to the warp-specialized kernel "
    "('wgmma.ws'), to check auto's choice between them, and to the row-flexible kernel ('wgmma.rows'). "
    "'ideal' is the dense GEMM over the kept K; 'weight-bytes bound' is dense weight bytes / packed bytes "
    "(values + in-group positions: 4 bits each for element-wise N:M with M <= 16, else 1 byte), the M = 1 ceiling. "
    "'HW 2:4' is the CUTLASS sm90 sparse-tensor-core GEMM (kernel sp24) "
    "on the same mask, forced at every M, checked against fp32 like the rest, with the CTA tile its shape rule picks "
    "(cooperative 'wide' 128 features x 256 rows, 'tall' 256 x 128 and 'narrow' 128 x 64, "
    "'pingpong' 128 x 128 per consumer warpgroup: each also forced); torch 2:4 is cuSPARSELt through "
    "to_sparse_semi_structured, which prunes B by magnitude itself (timing only)."
)
# nmSPARSE's operator table (M1-M32): BERT and OPT layers and synthetic squares, each at one decode and three batch M.
NMSPARSE_KN = ((1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192), (1024, 4096), (4096, 1024), (5120, 20480),
               (20480, 5120))  # fmt: skip
NMSPARSE_SHAPES = {f"nms_m{m}_k{k}_n{n}": (m, k, n) for m in (1, 256, 1024, 4096) for k, n in NMSPARSE_KN}
SHAPES: dict[str, tuple[int, int, int]] = {
    **TW_SHAPES,
    **dict(sorted(NMSPARSE_SHAPES.items(), key=lambda s: math.prod(s[1]))),
}
COLUMNS = [
    ("shape", "shape"),
    ("M", "M"),
    ("K", "K"),
    ("N", "N"),
    ("pattern", "N:M"),
    ("vector", "V"),
    ("route", "kernel"),
    ("dense_us", "dense µs"),
    ("nm_us", "N:M µs"),
    ("speedup", "N:M ×dense"),
    ("nm_fm_us", "TW-fm µs"),
    ("speedup_fm", "TW-fm ×dense"),
    ("tw_fm_gemv_mma_us", "TW-fm µs (gemv.mma)"),
    ("tw_fm_wgmma_ws_us", "TW-fm µs (wgmma.ws)"),
    ("tw_fm_wgmma_rows_us", "TW-fm µs (wgmma.rows)"),
    ("ideal_ratio", "ideal ×dense"),
    ("of_ideal", "N:M / ideal"),
    ("bytes_bound", "weight-bytes bound ×"),
    ("of_bound", "N:M / bound"),
    ("sp24_us", "HW 2:4 µs"),
    ("sp24_speedup", "HW 2:4 ×dense"),
    *((f"sp24_{tile}_speedup", f"HW 2:4 {tile} ×dense") for tile in FORCED_TILES),
    ("semi24_speedup", "torch 2:4 ×dense"),
    ("rel_err", "rel err"),
    ("rel_err_sp24", "HW 2:4 rel err"),
]


def random_nm_mask(k: int, n: int, kept: int, m: int, vector: int, gen: torch.Generator) -> torch.Tensor:
    """Boolean K x N mask keeping `kept` random entries of each group of m, shared by blocks of `vector` columns."""
    scores = torch.rand(k // m, m, n // vector, generator=gen, device=gen.device)
    keep = torch.zeros(scores.shape, dtype=torch.bool, device=gen.device)
    keep.scatter_(1, scores.topk(kept, dim=1).indices, True)
    return keep.repeat_interleave(vector, dim=2).reshape(k, n)


def parse_pattern(text: str) -> tuple[int, int]:
    kept, m = (int(v) for v in text.split(":"))
    return kept, m


def run_case(
    name: str, pattern: str, vector: int, x: torch.Tensor, b: torch.Tensor, gen: torch.Generator, check_only: bool
) -> dict[str, Any]:
    m_rows, k = x.shape
    n = b.shape[1]
    kept, m = parse_pattern(pattern)
    mask = random_nm_mask(k, n, kept, m, vector, gen)
    packed: PackedNM = pack_nm(b, mask, m, vector)
    ref = x.float() @ (b * mask).float()
    y = packed.matmul(x)
    route = auto_route(x, packed)
    row: dict[str, Any] = {
        "shape": name,
        "M": m_rows,
        "K": k,
        "N": n,
        "pattern": pattern,
        "vector": vector,
        "sparsity": 1 - kept / m,
        "route": route,
        "dtype": str(x.dtype).removeprefix("torch."),
        "rel_err": relative_error(y, ref),
    }
    xt = x.t().contiguous() if route == "tw" else None
    view = tw_view(packed) if xt is not None else None
    # The TW route's mid-M choice, checked by forcing each side of it.
    forced: list[str] = []
    if view is not None:
        kernels = gemv_kernels(m_rows) + hopper_kernels(m_rows, view.granularity, view.num_tiles)
        forced = [kernel for kernel in kernels if kernel != "wgmma"]
        row["rel_err_fm"] = relative_error(view.matmul_feature_major(xt).t(), ref)
        for kernel in forced:
            row[f"rel_err_{kernel}"] = relative_error(view.matmul_feature_major(xt, kernel=kernel).t(), ref)
    sp24 = route_unavailable(x, packed, "sp24") is None
    if sp24:  # the worst of the shape's own tile and each forced one
        errors = [relative_error(sp24_view(packed).matmul(x, tile=tile), ref) for tile in FORCED_TILES]
        row["rel_err_sp24"] = worst_error([relative_error(nm_matmul(x, packed, kernel="sp24"), ref), *errors])
    worst = worst_error(v for key, v in row.items() if key.startswith("rel_err"))
    row["passed"] = worst <= TOLERANCE[x.dtype]
    if check_only:
        return row
    k_ideal = max(8, round(kept / m * k / 8) * 8)
    x_ideal, b_ideal = x[:, :k_ideal].contiguous(), b[:k_ideal].contiguous()
    # At the decode sizes each timed call reads its weight from HBM (bench.common.Rotation), as in a model.
    packed_bytes = packed.nbytes()
    row["cold_weights"] = m_rows <= COLD_WEIGHTS_MAX_M
    packs = Rotation(lambda p: p.matmul(x), packed, packed_bytes, m_rows)
    calls = {
        "dense_us": Rotation(lambda w: torch.matmul(x, w), b, b.nbytes, m_rows),
        "nm_us": packs,
        "ideal_us": Rotation(lambda w: torch.matmul(x_ideal, w), b_ideal, b_ideal.nbytes, m_rows),
    }
    row.update({"k_ideal": k_ideal, "packed_bytes": packed_bytes, "bytes_bound": 2.0 * k * n / packed_bytes})
    if view is not None:
        rotation = Rotation(lambda v: v.matmul_feature_major(xt), view, view.nbytes(), m_rows)
        calls["nm_fm_us"] = rotation
        for kernel in forced:
            run = rotation.sharing(lambda v, kernel=kernel: v.matmul_feature_major(xt, kernel=kernel))
            calls[f"tw_fm_{kernel.replace('.', '_')}_us"] = run
    if sp24:
        calls["sp24_us"] = packs.sharing(lambda p: nm_matmul(x, p, kernel="sp24"))
        compressed = sp24_view(packed)
        for tile in FORCED_TILES:
            calls[f"sp24_{tile}_us"] = Rotation(
                lambda c, tile=tile: c.matmul(x, tile=tile), compressed, packed_bytes, m_rows
            )
    if kept * 2 == m and vector == 1:
        calls.update(semi24_call(row, x, b))
    time_into(row, calls)
    add_ratios(row)
    return row


def add_ratios(row: dict[str, Any]) -> None:
    """Speedups against the dense GEMM of the same shape, timed beside them."""
    t_dense = row["dense_us"]
    row["speedup"] = t_dense / row["nm_us"]
    row["ideal_ratio"] = t_dense / row["ideal_us"]
    row["of_ideal"] = row["speedup"] / row["ideal_ratio"]
    row["of_bound"] = row["speedup"] / row["bytes_bound"]
    if row.get("nm_fm_us"):
        row["speedup_fm"] = t_dense / row["nm_fm_us"]
    for key in ("sp24", *(f"sp24_{tile}" for tile in FORCED_TILES), "semi24"):
        if row.get(f"{key}_us"):
            row[f"{key}_speedup"] = t_dense / row[f"{key}_us"]


def run_shape(
    name: str,
    patterns: list[str],
    vectors: list[int],
    dtype: torch.dtype,
    gen: torch.Generator,
    check_only: bool,
    rows: int | None = None,
) -> list[dict[str, Any]]:
    """Every pattern and vector of one shape (at `rows` rows of x instead of its own M when given)."""
    m_rows, k, n = SHAPES[name]
    m_rows = rows or m_rows
    dev = gen.device
    b = (torch.randn(k, n, generator=gen, device=dev) / math.sqrt(k)).to(dtype)
    x = torch.randn(m_rows, k, generator=gen, device=dev).to(dtype)
    rows = []
    for pattern, vector in itertools.product(patterns, vectors):
        kept, m = parse_pattern(pattern)
        if k % m or n % vector:
            log.info("%s %s V=%d skipped: needs M | K and V | N", name, pattern, vector)
            continue
        row = run_case(name, pattern, vector, x, b, gen, check_only)
        log.info(
            "%s %s V=%d %s err=%.2e speedup=%s hw 2:4=%s",
            name,
            pattern,
            vector,
            row["route"],
            row["rel_err"],
            f"{row['speedup']:.2f}" if "speedup" in row else "-",
            f"{row['sp24_speedup']:.2f}" if "sp24_speedup" in row else "-",
        )
        rows.append(row)
    return rows


def main() -> None:
    parser = bench_parser(__doc__.splitlines()[0], SHAPES)
    parser.add_argument("--patterns", nargs="*", default=["2:4", "2:8", "3:32"], help="N:M patterns (kept:group)")
    parser.add_argument("--vectors", nargs="*", type=int, default=[1, 128], help="1 = element-wise, V = vector-wise")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    require_kernels("nm_bench")
    for pattern in args.patterns:
        kept, m = parse_pattern(pattern)
        if not 1 <= kept < m:
            raise SystemExit(f"pattern {pattern} must keep 1 <= N < M")
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    check_columns = [("rel_err", "rel err"), ("rel_err_sp24", "HW 2:4 rel err"), ("passed", "passed")]
    columns = COLUMNS[:7] + check_columns if args.check_only else COLUMNS
    rows: list[dict[str, Any]] = []
    for name, m in itertools.product(args.shapes, args.rows):
        rows += run_shape(name, args.patterns, args.vectors, dtype, gen, args.check_only, m)
        torch.cuda.empty_cache()
        if args.out:  # after every shape, so a run cut short still leaves its finished cases
            write_results(args.out, rows, columns, case_notes(rows, args.dtype, LEGEND))
    print(markdown_table(rows, columns))  # the table is the bench's output
    exit_if_any_failed(rows)


if __name__ == "__main__":
    main()
