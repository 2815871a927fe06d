"""Tile-wise sparse GEMM vs dense cuBLAS, 2:4 cuSPARSELt, an index_select emulation and the ideal K-cut GEMM.

Run from the repository root on a GPU with the extension built:
    python -m bench.tw_bench --out bench/results/tw_h100
Every case is checked against an fp32 reference on fresh random inputs before it is timed.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable
from typing import Any

import torch

from bench.common import (
    COLD_WEIGHTS_MAX_M,
    TOLERANCE,
    Rotation,
    bench_parser,
    case_generator,
    case_notes,
    exit_if_any_failed,
    kernel_times,
    markdown_table,
    relative_error,
    require_kernels,
    semi24_call,
    time_into,
    worst_error,
    write_results,
)
from sparseprune.export.formats.tw import MMA_GEMV_MAX_M, PackedTW, pack_tw

log = logging.getLogger("tw_bench")

SHAPES: dict[str, tuple[int, int, int]] = {  # name: (M, K, N), cheapest first so a cut-short run keeps most
    "bert_qkv": (4096, 768, 2304),
    "bert_ffn_in": (4096, 768, 3072),
    "bert_ffn_out": (4096, 3072, 768),
    "decode_m1": (1, 4096, 11008),
    "decode_m16": (16, 4096, 11008),
    "lstm_gates": (128, 1024, 2048),
    "vgg_conv4": (6272, 4608, 512),
    "cube_8192": (8192, 8192, 8192),
}
EMULATION_MAX_BYTES = 2 << 30
GEMV_FORCED_MAX_M = 1024  # rows up to which each case also times the tensor-core GEMV forced
# What every call adds after the product: the TW kernels fuse it; dense, ideal and the emulation run it as torch ops.
EPILOGUES: dict[str, str | None] = {"none": None, "bias": None, "bias-relu": "relu", "bias-gelu": "gelu"}
LEGEND = (
    "Times are medians of CUDA-graph replays (launch overhead excluded) on the same device in one run, each case's "
    "calls timed side by side in three rounds, each round of a call after 50 ms of an idle GPU and one untimed batch "
    "(every call from the same state: the GPU's clocks follow its power draw with a lag); "
    "'TW' takes x row-major (M x K) and includes its transpose, 'TW-fm' takes x feature-major (K x M); "
    "the 'wgmma', 'wgmma.ws' and 'wgmma.rows' columns force the Hopper kernels on feature-major x, the 'gemv.mma' "
    "column the "
    f"tensor-core GEMV ('auto' picks that GEMV up to 32 rows, and up to {MMA_GEMV_MAX_M} where its CTAs are few; "
    "wgmma.ws above, or wgmma.rows where few, uneven tiles would spread wgmma.ws's 128-row items unevenly)."
)
SHORT_COLUMNS = {
    "shape",
    "G",
    "sparsity",
    "tiles",
    "dense_us",
    "tw_us",
    "tw_fm_us",
    "speedup",
    "speedup_fm",
    "ideal_ratio",
    "fm_of_ideal",
    "tw_fm_wgmma_ws_us",
    "tw_fm_wgmma_rows_us",
    "tw_fm_wgmma_us",
    "tw_fm_gemv_mma_us",
    "ws_of_ideal",
    "rows_of_ideal",
    "wgmma_of_ideal",
    "fm_of_bound",
    "emul_speedup",
    "semi24_speedup",
    "rel_err",
}

COLUMNS = [
    ("shape", "shape"),
    ("M", "M"),
    ("K", "K"),
    ("N", "N"),
    ("G", "G"),
    ("sparsity", "sparsity"),
    ("tiles", "tiles"),
    ("dense_us", "dense µs"),
    ("tw_us", "TW µs (x row-major)"),
    ("tw_fm_us", "TW µs (x feature-major)"),
    ("tw_fm_mma_sync_us", "TW-fm µs (mma.sync)"),
    ("tw_fm_wgmma_us", "TW-fm µs (wgmma)"),
    ("tw_fm_wgmma_ws_us", "TW-fm µs (wgmma.ws)"),
    ("tw_fm_wgmma_rows_us", "TW-fm µs (wgmma.rows)"),
    ("tw_fm_gemv_mma_us", "TW-fm µs (gemv.mma)"),
    ("speedup", "TW ×dense"),
    ("speedup_fm", "TW-fm ×dense"),
    ("ideal_ratio", "ideal ×dense"),
    ("fm_of_ideal", "TW-fm / ideal"),
    ("wgmma_of_ideal", "wgmma / ideal"),
    ("ws_of_ideal", "wgmma.ws / ideal"),
    ("rows_of_ideal", "wgmma.rows / ideal"),
    ("bytes_bound", "weight-bytes bound ×"),
    ("fm_of_bound", "TW-fm / bound"),
    ("emul_speedup", "index_select emul ×dense"),
    ("semi24_speedup", "2:4 ×dense"),
    ("tw_tflops", "TW-fm TFLOP/s (kept)"),
    ("rel_err", "rel err"),
]


def cuda_generator(gen: torch.Generator) -> torch.Generator:
    """A CUDA generator seeded from one draw of the case's CPU generator `gen`."""
    return torch.Generator(device="cuda").manual_seed(int(torch.randint(1 << 30, (1,), generator=gen)))


def draw_case(
    m: int, k: int, n: int, gen: torch.Generator, dtype: torch.dtype = torch.float16
) -> tuple[torch.Tensor, torch.Tensor, torch.Generator]:
    """B (K x N, scaled by 1/sqrt(K)) and x (M x K) on the GPU as every TW bench draws them after the case's mask, and
    the CUDA generator they came from, seeded from `gen` (a case's further draws continue it)."""
    cuda_gen = cuda_generator(gen)
    b = (torch.randn(k, n, generator=cuda_gen, device="cuda") / math.sqrt(k)).to(dtype)
    return b, torch.randn(m, k, generator=cuda_gen, device="cuda").to(dtype), cuda_gen


def bench_tw_mask(k: int, n: int, granularity: int, sparsity: float, gen: torch.Generator) -> torch.Tensor:
    """TW mask near `sparsity`: sqrt(density) of the columns survive, and each tile of G of them keeps its own
    random row set of a size drawn within ±40% of the mean, so tiles differ in kept K."""
    density = 1.0 - sparsity
    col_keep = math.sqrt(density)
    n_cols = max(granularity, round(col_keep * n))
    kept_cols = torch.randperm(n, generator=gen)[:n_cols].sort().values
    tiles = kept_cols.split(granularity)
    row_keep = density * n / sum(t.numel() for t in tiles)
    spread = 0.6 + 0.8 * torch.rand(len(tiles), generator=gen)
    spread = spread / spread.mean()
    mask = torch.zeros(k, n, dtype=torch.bool)
    for cols, s in zip(tiles, spread.tolist(), strict=True):
        n_rows = min(k, max(8, round(row_keep * s * k)))
        rows = torch.randperm(k, generator=gen)[:n_rows]
        mask[rows.unsqueeze(1), cols.unsqueeze(0)] = True
    return mask


ROWS_MAX_TILES = 64  # tiles the row-flexible kernel schedules (kRowsMaxTiles in kernels_ext/tw_gemm_sm90_rows.cu)


def hopper_kernels(m: int, granularity: int, tiles: int) -> tuple[str, ...]:
    """The forced wgmma kernels this case can run: Hopper, G 64/128, M past the GEMV range; the row-flexible one up
    to ROWS_MAX_TILES tiles."""
    if torch.cuda.get_device_capability() != (9, 0) or granularity == 32 or m <= 16:
        return ()
    return ("wgmma", "wgmma.ws") + (("wgmma.rows",) if tiles <= ROWS_MAX_TILES else ())


def gemv_kernels(m: int) -> tuple[str, ...]:
    """The tensor-core GEMV forced, past the GEMV sizes (where auto runs it anyway) up to GEMV_FORCED_MAX_M rows."""
    return ("gemv.mma",) if 16 < m <= GEMV_FORCED_MAX_M else ()


def emulation(packed: PackedTW) -> Callable[[torch.Tensor], torch.Tensor]:
    """index_select + batched torch.matmul over tiles padded to the largest kept K: the best plain-torch route."""
    g, t, kmax = packed.granularity, packed.num_tiles, packed.max_tile_k
    ptr = packed.tile_ptr.tolist()
    idx = torch.zeros(t, kmax, dtype=torch.long, device=packed.values.device)
    vals = torch.zeros(t, kmax, g, dtype=packed.values.dtype, device=packed.values.device)
    for i in range(t):
        rows = packed.rows[ptr[i] : ptr[i + 1]].long()
        idx[i, : rows.numel()] = rows.clamp_min(0)
        vals[i, : rows.numel()] = packed.values[ptr[i] : ptr[i + 1]]
    cols = packed.cols.long()
    used = torch.nonzero(cols >= 0).flatten()
    idx_flat, out_cols = idx.flatten(), cols[used]

    def run(x: torch.Tensor) -> torch.Tensor:
        gathered = x.index_select(1, idx_flat).view(x.shape[0], t, kmax).transpose(0, 1)
        out = torch.bmm(gathered, vals).transpose(0, 1).reshape(x.shape[0], t * g)
        y = torch.zeros(x.shape[0], packed.shape[1], dtype=x.dtype, device=x.device)
        y.index_copy_(1, out_cols, out.index_select(1, used))
        return y

    return run


def kernel_profile(fn: Callable[[], Any], calls: int = 3) -> dict[str, float]:
    """Device µs per call of each kernel `fn` launches (top 6), to see where a variant's time goes."""
    top = list(kernel_times(fn, calls).items())[:6]
    return {name[:60]: round(us, 2) for name, us in top}


def run_case(
    name: str,
    granularity: int,
    sparsity: float,
    dtype: torch.dtype,
    gen: torch.Generator,
    check_only: bool,
    profile_kernels: bool = False,
    epilogue: str = "none",
    rows: int | None = None,
) -> dict[str, Any]:
    m, k, n = SHAPES[name]
    m = rows or m
    dev = torch.device("cuda")
    mask = bench_tw_mask(k, n, granularity, sparsity, gen).to(dev)
    b, x, cuda_gen = draw_case(m, k, n, gen, dtype)
    packed = pack_tw(b, mask, granularity)
    bias = None if epilogue == "none" else torch.randn(n, generator=cuda_gen, device=dev).to(dtype)
    activation = EPILOGUES[epilogue]
    act = {None: lambda v: v, "relu": torch.relu, "gelu": torch.nn.functional.gelu}[activation]

    def finish(y: torch.Tensor) -> torch.Tensor:  # the epilogue as torch ops, for the baselines
        return y if bias is None else act(y + bias)

    def tw(kernel: str = "auto") -> torch.Tensor:
        return packed.matmul_feature_major(xt, bias, activation, kernel=kernel)

    ref = finish(x.float() @ (b * mask).float())
    y = packed.matmul(x, bias, activation)
    xt = x.t().contiguous()
    y_fm = tw()
    # The emulation materialises x gathered per tile (M x tiles x max K); skip it where that alone is huge.
    gather = emulation(packed) if m * packed.num_tiles * packed.max_tile_k * 2 <= EMULATION_MAX_BYTES else None
    emul = (lambda v: finish(gather(v))) if gather else None  # checked here; timed below
    row: dict[str, Any] = {
        "shape": name,
        "M": m,
        "K": k,
        "N": n,
        "G": granularity,
        "sparsity": sparsity,
        "density": float(mask.float().mean()),
        "tiles": packed.num_tiles,
        "dtype": str(dtype).split(".")[-1],
        "epilogue": epilogue,
        "rel_err": relative_error(y, ref),
        "rel_err_fm": relative_error(y_fm.t(), ref),
        "rel_err_emul": relative_error(emul(x), ref) if emul else None,
    }
    for kernel in hopper_kernels(m, granularity, packed.num_tiles) + gemv_kernels(m):
        row[f"rel_err_{kernel}"] = relative_error(tw(kernel).t(), ref)
    worst = worst_error(v for key, v in row.items() if key.startswith("rel_err") and v is not None)
    row["passed"] = worst <= TOLERANCE[dtype]
    if check_only:
        return row
    k_ideal = max(8, round((1 - sparsity) * k / 8) * 8)
    x_ideal, b_ideal = x[:, :k_ideal].contiguous(), b[:k_ideal].contiguous()
    # The timings a case may lack (no mma.sync run at M <= 16, no Hopper kernel, no emulation) read None.
    forced = ["mma_sync", "wgmma", "wgmma_ws", "wgmma_rows", "gemv_mma"]
    row.update(dict.fromkeys([f"tw_fm_{kernel}_us" for kernel in forced] + ["emul_us"]))
    # At the decode sizes each timed call reads its weight from HBM (bench.common.Rotation), as in a model.
    row["cold_weights"] = m <= COLD_WEIGHTS_MAX_M
    packs = Rotation(lambda p: p.matmul(x, bias, activation), packed, packed.nbytes(), m)
    calls = {
        "dense_us": Rotation(lambda w: finish(torch.matmul(x, w)), b, b.nbytes, m),
        "tw_us": packs,
        "tw_fm_us": packs.sharing(lambda p: p.matmul_feature_major(xt, bias, activation)),
        "ideal_us": Rotation(lambda w: finish(torch.matmul(x_ideal, w)), b_ideal, b_ideal.nbytes, m),
    }
    if m > 16:
        calls["tw_fm_mma_sync_us"] = lambda: tw("mma.sync")
    forced_kernels = hopper_kernels(m, granularity, packed.num_tiles) + gemv_kernels(m)
    forced_keys = {kernel: f"tw_fm_{kernel.replace('.', '_')}_us" for kernel in forced_kernels}
    for kernel, key in forced_keys.items():
        calls[key] = lambda kernel=kernel: tw(kernel)
    if gather:
        emul_bytes = packed.num_tiles * packed.max_tile_k * granularity * x.element_size()
        calls["emul_us"] = Rotation(lambda run: finish(run(x)), gather, emul_bytes, m, lambda _: emulation(packed))
    if sparsity == 0.5 and bias is None:  # torch's 2:4 has no fused epilogue to compare with
        calls.update(semi24_call(row, x, b))
    times = time_into(row, calls)
    t_dense, t_tw, t_fm, t_ideal = (times[key] for key in ("dense_us", "tw_us", "tw_fm_us", "ideal_us"))
    t_forced = {kernel: times[key] for kernel, key in forced_keys.items()}
    t_emul = times.get("emul_us")
    kept_flops = 2.0 * m * float(mask.sum())
    row.update(
        {
            "wgmma_of_ideal": t_ideal / t_forced["wgmma"] if "wgmma" in t_forced else None,
            "ws_of_ideal": t_ideal / t_forced["wgmma.ws"] if "wgmma.ws" in t_forced else None,
            "rows_of_ideal": t_ideal / t_forced["wgmma.rows"] if "wgmma.rows" in t_forced else None,
            "k_ideal": k_ideal,
            "speedup": t_dense / t_tw,
            "speedup_fm": t_dense / t_fm,
            "emul_speedup": t_dense / t_emul if t_emul else None,
            "ideal_ratio": t_dense / t_ideal,
            "fm_of_ideal": (t_dense / t_fm) / (t_dense / t_ideal),
            "dense_tflops": 2.0 * m * k * n / t_dense * 1e-6,
            "tw_tflops": kept_flops / t_fm * 1e-6,
            "packed_bytes": packed.nbytes(),
            "bytes_bound": 2.0 * k * n / packed.nbytes(),
        }
    )
    row["fm_of_bound"] = row["speedup_fm"] / row["bytes_bound"]
    if profile_kernels:
        row["profile_fm"] = kernel_profile(tw)
        row["profile_row_major"] = kernel_profile(lambda: packed.matmul(x, bias, activation))
    if "semi24_us" in row:
        row["semi24_speedup"] = t_dense / row["semi24_us"]
    return row


def legend(epilogue: str) -> str:
    if epilogue == "none":
        return LEGEND
    act = EPILOGUES[epilogue]
    return LEGEND + (
        f" Every call adds a random bias{f' and applies {act}' if act else ''}: fused into the TW kernels, as torch "
        "ops after the dense and ideal GEMMs and the emulation."
    )


def main() -> None:
    parser = bench_parser(__doc__.splitlines()[0], SHAPES)
    parser.add_argument("--sparsities", nargs="*", type=float, default=[0.3, 0.4, 0.5, 0.75, 0.9])
    parser.add_argument("--granularities", nargs="*", type=int, default=[64, 128])
    parser.add_argument("--profile", action="store_true", help="also log per-kernel device times of each case")
    parser.add_argument(
        "--epilogue",
        choices=list(EPILOGUES),
        default="none",
        help="a random bias (and activation) on every call: fused by TW, torch ops after the dense GEMMs",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    require_kernels("tw_bench")
    dtype = getattr(torch, args.dtype)
    columns = COLUMNS[:7] + [("rel_err", "rel err"), ("passed", "passed")] if args.check_only else COLUMNS
    rows: list[dict[str, Any]] = []
    for name in args.shapes:
        for m, granularity, sparsity in itertools.product(args.rows, args.granularities, args.sparsities):
            gen = case_generator(args.seed, name, granularity, sparsity)
            row = run_case(name, granularity, sparsity, dtype, gen, args.check_only, args.profile, args.epilogue, m)
            rows.append(row)
            log.info(
                "%s M=%d G=%d s=%.2f err=%.2e speedup_fm=%s",
                name,
                row["M"],
                granularity,
                sparsity,
                row["rel_err"],
                f"{row['speedup_fm']:.2f}" if "speedup_fm" in row else "-",
            )
            if "profile_fm" in row:
                log.info("  kernels fm: %s\n  kernels row-major: %s", row["profile_fm"], row["profile_row_major"])
        if args.out:  # after every shape, so a run cut short still leaves its finished cases
            write_results(args.out, rows, columns, case_notes(rows, args.dtype, legend(args.epilogue)))
    short = [c for c in columns if c[0] in SHORT_COLUMNS] if not args.check_only else columns
    print(markdown_table(rows, short))  # the table is the bench's output
    exit_if_any_failed(rows)


if __name__ == "__main__":
    main()
