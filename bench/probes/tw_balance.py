"""How evenly the warp-specialized TW kernel's static schedule spreads a benchmark case's work over the SMs (CPU).

Each work item is one M block of one tile and costs that tile's kept K; the kernel hands items out heaviest first, in
rounds of one per CTA whose direction alternates (`scheduled_item` in kernels_ext/tw_gemm_sm90_ws.cu). Balance is
the mean work per SM over the busiest SM's: the most of the ideal K-cut GEMM's ratio the kernel could reach if each
SM ran as fast as cuBLAS, since the ideal GEMM spreads its evenly. 'LPT' is the same for the longest-first greedy
assignment, which no static rule beats by much. The masks are the TW benchmark's (bench_tw_mask, same seeds), so
joined with a results file of that benchmark (`--measured`) the table sets each case's measured fraction of the
ideal ratio beside its balance; their quotient is the kernel's speed per busy SM against cuBLAS's:
    python -m bench.probes.tw_balance --measured bench/results/tw_h200_full_idle.json --out bench/results/tw_balance
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Any

from bench.common import case_generator, markdown_table, sweep_parser, write_results
from bench.tw_bench import SHAPES, bench_tw_mask

SM_COUNT = 132  # H100 SXM and H200
# Rows per item that make_plan (wgmma_block_m in kernels_ext/tw_gemm.cu) picked for the default cases, G = 128 at
# 30-75%, at ae2c629 (the run of the results file the docstring joins): 256 at 8192^3 (long items), else 128. Since
# 918ddc8 BERT FFN out and VGG conv4 at 30-50% take 192-row items instead; at 90% BERT FFN out takes 64-row items, so
# 90% is left out.
BLOCK_ROWS = {"cube_8192": 256}
DEFAULT_SHAPES = ["bert_qkv", "bert_ffn_in", "bert_ffn_out", "vgg_conv4", "cube_8192"]
COLUMNS = [
    ("shape", "shape"),
    ("sparsity", "sparsity"),
    ("tiles", "tiles"),
    ("kept_k", "kept K per tile (min / mean / max)"),
    ("items", "items"),
    ("rounds", "rounds"),
    ("balance", "balance (static schedule)"),
    ("lpt_balance", "balance (LPT)"),
    ("measured_of_ideal", "measured / ideal"),
    ("per_sm_speed", "measured / ideal / balance"),
]


def static_schedule_peak(costs: list[int], sms: int) -> int:
    """The busiest CTA's work in the kernel's schedule: item i of a round goes to CTA i, or sms - 1 - i on odd ones."""
    loads = [0] * sms
    for index, cost in enumerate(costs):
        round_, slot = divmod(index, sms)
        loads[slot if round_ % 2 == 0 else sms - 1 - slot] += cost
    return max(loads)


def lpt_peak(costs: list[int], sms: int) -> int:
    """The busiest SM's work when each item, longest first, goes to the least loaded SM."""
    loads = [0] * sms
    for cost in sorted(costs, reverse=True):
        heapq.heapreplace(loads, loads[0] + cost)
    return max(loads)


def tile_kept_k(shape: str, granularity: int, sparsity: float, seed: int) -> list[int]:
    """Kept K of each tile of the benchmark's mask for this case, heaviest first (the packed order)."""
    _, k, n = SHAPES[shape]
    mask = bench_tw_mask(k, n, granularity, sparsity, case_generator(seed, shape, granularity, sparsity))
    kept_cols = mask.any(0).nonzero().flatten()
    return sorted((int(mask[:, tile[0]].sum()) for tile in kept_cols.split(granularity)), reverse=True)


def measured_fractions(path: Path | None) -> dict[tuple[str, float], float]:
    if path is None:
        return {}
    rows = json.loads(path.read_text())["rows"]
    return {(r["shape"], round(r["sparsity"], 3)): r["fm_of_ideal"] for r in rows if r["G"] == 128 and r["fm_of_ideal"]}


def balance_row(shape: str, sparsity: float, seed: int, measured: dict[tuple[str, float], float]) -> dict[str, Any]:
    kept_k = tile_kept_k(shape, 128, sparsity, seed)
    m_blocks = -(-SHAPES[shape][0] // BLOCK_ROWS.get(shape, 128))
    costs = [k for k in kept_k for _ in range(m_blocks)]
    mean = sum(costs) / SM_COUNT
    row: dict[str, Any] = {
        "shape": shape,
        "sparsity": sparsity,
        "tiles": len(kept_k),
        "kept_k": f"{min(kept_k)} / {round(sum(kept_k) / len(kept_k))} / {max(kept_k)}",
        "items": len(costs),
        "rounds": round(len(costs) / SM_COUNT, 2),
        "balance": mean / static_schedule_peak(costs, SM_COUNT),
        "lpt_balance": mean / lpt_peak(costs, SM_COUNT),
        "measured_of_ideal": measured.get((shape, round(sparsity, 3))),
    }
    row["per_sm_speed"] = None if row["measured_of_ideal"] is None else row["measured_of_ideal"] / row["balance"]
    return row


def main() -> None:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="*", default=DEFAULT_SHAPES, choices=sorted(SHAPES))
    parser.add_argument("--sparsities", nargs="*", type=float, default=[0.3, 0.4, 0.5, 0.75])
    parser.add_argument("--measured", type=Path, help="a bench.tw_bench results JSON to join (G = 128 rows)")
    args = parser.parse_args()
    measured = measured_fractions(args.measured)
    rows = [balance_row(s, sp, args.seed, measured) for s in args.shapes for sp in args.sparsities]
    print(markdown_table(rows, COLUMNS))
    if args.out:
        source = f"; measured: {args.measured}" if args.measured else ""
        notes = [
            f"G = 128, {SM_COUNT} SMs, the TW benchmark's masks (seed {args.seed}){source}. Items of "
            f"{', '.join(f'{v} rows at {k}' for k, v in BLOCK_ROWS.items())}, 128 rows elsewhere."
        ]
        write_results(args.out, rows, COLUMNS, notes, device="CPU (no GPU needed)")


if __name__ == "__main__":
    main()
