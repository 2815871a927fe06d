"""Element-wise N:M at 1 to 16 rows of x on the decode weight (4096 x 11008): each route against dense cuBLAS.

Where the SpMV's time grows with the rows, its tensor-core GEMV (from a few rows) and the sparse tensor cores hardly
move; this sweep shows where `auto` changes route. Every case is checked against fp32 on fresh random inputs, and
every timed call reads its weight from HBM (bench.common.Rotation). Run on a GPU with the extension built:
    python -m bench.probes.nm_rows --out bench/results/nm_h200_rows
"""

from __future__ import annotations

import math
from typing import Any

import torch

from bench.common import (
    Rotation,
    finish_row,
    finish_sweep,
    relative_error,
    require_kernels,
    sweep_parser,
    time_into,
)
from bench.nm_bench import parse_pattern, random_nm_mask
from sparseprune.export.formats.nm import (
    TENSOR_CORE_GEMV_MIN_ROWS,
    auto_route,
    nm_matmul,
    pack_nm,
    route_unavailable,
    takes_tensor_core_gemv,
)

COLUMNS = [
    ("pattern", "N:M"),
    ("rows", "rows of x"),
    ("route", "auto route"),
    ("dense_us", "dense µs"),
    ("simt_us", "simt µs"),
    ("simt_kernel", "simt kernel"),
    ("sp24_us", "sp24 µs"),
    ("auto_x_dense", "auto ×dense"),
    ("rel_err", "worst rel err"),
]


def run(patterns: list[str], rows_list: list[int], k: int, n: int, seed: int) -> list[dict[str, Any]]:
    gen = torch.Generator().manual_seed(seed)
    b = (torch.randn(k, n, generator=gen) / math.sqrt(k)).half().cuda()
    results = []
    for pattern in patterns:
        kept, m = parse_pattern(pattern)
        mask = random_nm_mask(k, n, kept, m, 1, gen).cuda()
        packed = pack_nm(b, mask, m, 1)
        ref_b = (b * mask).float()
        for rows in rows_list:
            x = torch.randn(rows, k, generator=gen).half().cuda()
            ref = x.float() @ ref_b
            route = auto_route(x, packed)
            tensor_cores = rows >= TENSOR_CORE_GEMV_MIN_ROWS and takes_tensor_core_gemv(packed, x)
            row: dict[str, Any] = {"pattern": pattern, "rows": rows, "route": route}
            row["simt_kernel"] = "tensor-core GEMV" if tensor_cores else "SpMV"
            calls = {"dense_us": Rotation(lambda w, x=x: x @ w, b, b.nbytes, rows)}
            errors = []
            kernels = ["simt"] + (["sp24"] if route_unavailable(x, packed, "sp24") is None else [])
            for kernel in kernels:
                errors.append(relative_error(nm_matmul(x, packed, kernel=kernel), ref))
                call = lambda p, x=x, kernel=kernel: nm_matmul(x, p, kernel=kernel)  # noqa: E731
                calls[f"{kernel}_us"] = Rotation(call, packed, packed.nbytes(), rows)
            time_into(row, calls)
            row["auto_x_dense"] = row["dense_us"] / row.get(f"{route}_us", math.nan)
            finish_row(row, errors, torch.float16, results, COLUMNS)
    return results


def main() -> None:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument("--patterns", nargs="*", default=["2:8", "1:4", "2:4", "1:8", "4:16"])
    parser.add_argument("--rows", nargs="*", type=int, default=[1, 2, 3, 4, 5, 8, 16])
    args = parser.parse_args()
    require_kernels("nm_rows")
    rows = run(args.patterns, args.rows, 4096, 11008, args.seed)
    notes = [
        "fp16, K = 4096, N = 11008, element-wise N:M; medians of CUDA-graph replays, weights read from HBM; 'simt' "
        f"runs the SpMV below {TENSOR_CORE_GEMV_MIN_ROWS} rows and its tensor-core GEMV from there where the packing "
        "allows; "
        "'sp24' is the sparse-tensor-core route (n/a where this build or device lacks it).",
    ]
    finish_sweep(args.out, rows, COLUMNS, notes)


if __name__ == "__main__":
    main()
