"""How fast the warp-specialized TW kernel's producer can gather kept rows of xT alone, by cp.async or by the TMA unit
(GPU).

Builds bench/probes/tw_gather_probe.cu with torch's extension loader and times its gather-only kernel on the 8192^3
case's operand (xT of 8192 x 8192 fp16, 32 tiles of 4096 kept rows at 75%, 256-row items, four or six 32 KB stages per
SM), so the rate compares with what the TW kernel moves at that shape and with what it would need at cuBLAS's speed.
Each mode first runs a check that compares every chunk of each CTA's first stages with xT (a TMA box of one row lands
where wgmma reads it only if the unit swizzles by shared-memory address). Run on a GPU:
    python -m bench.probes.tw_gather_probe --out bench/results/tw_h200_gather_probe
"""

from __future__ import annotations

from typing import Any

import torch

from bench.common import finish_sweep, markdown_table, sweep_parser, time_cuda
from bench.probes import load_probe_extension

MODES = [
    (0, "cp.async", "16-byte cp.async by the 128 producer threads, as the TW kernel gathers"),
    (1, "TMA, 1 warp", "one TMA copy per 64-element box of a kept row (4 per row), from the lanes of one warp"),
    (2, "TMA, 4 warps", "the same TMA copies from all four producer warps"),
    (3, "cp.async, 6 stages", "cp.async with a ring of six stages instead of four"),
]
COLUMNS = [
    ("mode", "mode"),
    ("tile_group", "tiles per group"),
    ("k", "K"),
    ("m", "M"),
    ("tiles", "tiles"),
    ("kept_rows", "kept rows per tile"),
    ("gathered_gb", "gathered GB"),
    ("us", "µs"),
    ("tb_per_s", "TB/s"),
    ("mismatches", "mismatched chunks"),
]


def run_mode(
    ext: Any, mode: int, name: str, xt: torch.Tensor, rows: torch.Tensor, kept: int, tile_group: int = 1
) -> dict[str, Any]:
    grid = torch.cuda.get_device_properties(0).multi_processor_count
    mismatches = torch.zeros(1, dtype=torch.int32, device="cuda")
    ext.gather(mode, xt, rows, kept, tile_group, mismatches, 8, grid)
    torch.cuda.synchronize()
    timing = time_cuda(lambda: ext.gather(mode, xt, rows, kept, tile_group, mismatches, 0, grid))
    tiles = rows.numel() // kept
    gathered = tiles * kept * xt.shape[1] * 2
    row = {"mode": name, "tile_group": tile_group, "k": xt.shape[0], "m": xt.shape[1], "tiles": tiles}
    row["kept_rows"] = kept
    row |= {"gathered_gb": gathered / 1e9, "us": timing.median_us, "tb_per_s": gathered / timing.median_us / 1e6}
    row["mismatches"] = int(mismatches.item())
    row["passed"] = row["mismatches"] == 0
    return row


def main() -> None:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--m", type=int, default=8192)
    parser.add_argument("--tiles", type=int, default=32)
    parser.add_argument("--kept", type=int, default=4096, help="kept rows per tile (a multiple of 64)")
    parser.add_argument(
        "--tile-groups", nargs="*", type=int, default=[4, 32], help="cp.async again with items M-block-major in groups"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("tw_gather_probe needs a CUDA GPU")
    ext = load_probe_extension(__file__)
    gen = torch.Generator().manual_seed(args.seed)
    xt = torch.randn(args.k, args.m, generator=gen).half().cuda()
    rows = torch.stack([torch.randperm(args.k, generator=gen)[: args.kept].sort().values for _ in range(args.tiles)])
    rows = rows.to(torch.int32).cuda()
    results = [run_mode(ext, mode, name, xt, rows, args.kept) for mode, name, _ in MODES]
    results += [run_mode(ext, 0, MODES[0][1], xt, rows, args.kept, group) for group in args.tile_groups]
    notes = [
        "Medians of CUDA-graph replays of the gather-only kernel of bench/probes/tw_gather_probe.cu: one CTA per SM, "
        "items of 256 M rows of one tile, four stages (six in the last mode) of 64 kept rows x 256 M elements "
        "(32 KB), 128-byte swizzled as the TW kernel's wgmma reads them; the consumer warpgroup hands each stage "
        "back when it lands. Modes:",
        "",
        *[f"- {name}: {what}." for _, name, what in MODES],
        "",
        "'tiles per group': items numbered M-block-major within groups of that many tiles, so that CTAs at work "
        "at once share more xT slices (1: tile-major, as the TW kernel numbers them).",
        "",
        "'mismatched chunks' counts 16-byte chunks of each CTA's first 8 stages that differ from xT (0: the layout "
        "wgmma expects).",
    ]
    print(markdown_table(results, COLUMNS), flush=True)
    finish_sweep(args.out, results, COLUMNS, notes)


if __name__ == "__main__":
    main()
