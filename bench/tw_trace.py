"""PROBE: per-CTA timeline of the warp-specialized TW kernel from its clock64 trace (a probe build only).

python -m bench.tw_trace --cases bert_qkv:0.75 vgg_conv4:0.4 --out OUT/trace
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import statistics
from pathlib import Path

import torch

import sparseprune._kernels as kernels
from bench.common import time_cuda
from bench.tw_bench import SHAPES, bench_tw_mask
from sparseprune.export.formats.tw import pack_tw

CTAS, SLOTS, FIELDS = 160, 64, 32
MMA_CYCLES_PER_STEP = 2 * 128 * 128 * 64 / 4096  # one 128 x 128 x 64 step at the dense fp16 peak per SM


def dump(lib: ctypes.CDLL) -> torch.Tensor:
    buf = (ctypes.c_longlong * (CTAS * SLOTS * FIELDS))()
    assert lib.sparseprune_tw_trace_copy(buf, ctypes.sizeof(buf)) == 0
    return torch.tensor(list(buf), dtype=torch.int64).view(CTAS, SLOTS, FIELDS)


def union_length(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def analyse(tr: torch.Tensor, grid: int) -> dict:
    t = tr.tolist()
    grid = sum(1 for c in range(grid) if t[c][63][0] != 0)
    g0 = min(t[c][63][0] for c in range(grid))
    ends, rates, rows = [], [], []
    busy, per = (
        [],
        {
            k: []
            for k in (
                "p_setup",
                "p_issue",
                "empty_wait",
                "c_first_wait",
                "c_mma_per_step",
                "c_epi",
                "full_wait_per_step",
                "order_to_first",
                "steps",
                "epi_stage0",
                "epi_store0",
                "epi_stage1",
                "epi_store1",
            )
        },
    )
    for c in range(grid):
        meta = t[c][63]
        n = meta[7]
        cta_end_cycles = max(meta[2], meta[3], meta[4])
        span_ns = meta[6] - meta[0]
        if span_ns > 2000:
            rates.append(meta[2] / span_ns)
        intervals = []
        for i in range(n):
            s = t[c][i]
            cw = 0 if s[8 + 2] else 1
            b = 8 + 12 * cw
            steps = s[1]
            per["steps"].append(steps)
            per["p_setup"].append(s[3] - s[2])
            per["p_issue"].append(s[4] - s[3])
            per["empty_wait"].append(s[5])
            per["order_to_first"].append(s[b + 1] - s[b])
            per["epi_stage0"].append(s[b + 6] - s[b + 2])
            per["epi_store0"].append(s[b + 7] - s[b + 6])
            per["epi_stage1"].append(s[b + 8] - s[b + 7])
            per["epi_store1"].append(s[b + 9] - s[b + 8])
            per["c_first_wait"].append(s[b + 5])
            per["c_mma_per_step"].append((s[b + 2] - s[b + 1]) / max(1, steps))
            per["c_epi"].append(s[b + 3] - s[b + 2])
            per["full_wait_per_step"].append(s[b + 4] / max(1, steps))
            intervals.append((s[b + 1], s[b + 2]))
        busy.append(union_length(intervals) / max(1, cta_end_cycles))
        ends.append(cta_end_cycles)
        rows.append(
            {
                "cta": c,
                "items": n,
                "steps": sum(t[c][i][1] for i in range(n)),
                "start_ns": meta[0] - g0,
                "gather_end": meta[1],
                "producer_end": meta[2],
                "consumer_ends": [meta[3], meta[4]],
            }
        )
    rate = statistics.median(rates) if rates else float("nan")
    summary = {
        "cycles_per_ns": rate,
        "kernel_span_ns": max(t[c][63][6] for c in range(grid)) - g0,
        "start_skew_ns": max(t[c][63][0] for c in range(grid)) - g0,
        "cta_end_cycles": {"min": min(ends), "median": statistics.median(ends), "max": max(ends)},
        "mma_busy_fraction": {"min": min(busy), "median": statistics.median(busy), "max": max(busy)},
        "per_item_median": {k: statistics.median(v) for k, v in per.items() if v},
        "per_item_mean": {k: sum(v) / len(v) for k, v in per.items() if v},
        "mma_cycles_per_step_at_peak": MMA_CYCLES_PER_STEP,
    }
    return {"summary": summary, "ctas": rows, "raw_cta0": [t[0][i][:32] for i in range(t[0][63][7])] + [t[0][63]]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", nargs="+", default=["bert_qkv:0.75"])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lib = ctypes.CDLL(kernels.__file__)
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for case in args.cases:
        name, sparsity = case.split(":")
        m, k, n = SHAPES[name]
        gen = torch.Generator().manual_seed(0)
        mask = bench_tw_mask(k, n, 128, float(sparsity), gen).cuda()
        b = (torch.randn(k, n, device="cuda") / math.sqrt(k)).half()
        xt = torch.randn(k, m, device="cuda").half()
        packed = pack_tw(b, mask, 128)
        call = lambda: packed.matmul_feature_major(xt, kernel="wgmma.ws")  # noqa: E731
        us = time_cuda(call).median_us
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        assert lib.sparseprune_tw_trace_clear() == 0
        call()
        torch.cuda.synchronize()
        grid = min(132, torch.cuda.get_device_properties(0).multi_processor_count)
        res = analyse(dump(lib), grid)
        res["summary"]["graph_us"] = us
        results[case] = res
        s = res["summary"]
        print(
            f"== {case}: graph {us:.1f} us; span {s['kernel_span_ns'] / 1e3:.1f} us; start skew "
            f"{s['start_skew_ns']} ns; {s['cycles_per_ns']:.2f} cyc/ns"
        )
        print(
            "   cta end cycles",
            s["cta_end_cycles"],
            "mma busy",
            {k: round(v, 3) for k, v in s["mma_busy_fraction"].items()},
        )
        print("   per item median", {k: round(v, 1) for k, v in s["per_item_median"].items()})
        print("   per item mean  ", {k: round(v, 1) for k, v in s["per_item_mean"].items()})
        for row in sorted(res["ctas"], key=lambda r: -max(r["consumer_ends"] + [r["producer_end"]]))[:3]:
            print("   slowest", row)
        print("   cta0", res["raw_cta0"])
    for mb in (9.4, 18.9, 64.0):
        buf = torch.empty(int(mb * 2**20) // 2, dtype=torch.half, device="cuda")
        us = time_cuda(buf.zero_).median_us
        print(f"zero_ {mb} MiB: {us:.1f} us = {mb * 2**20 / us / 1e6:.2f} TB/s")
    (args.out / "trace.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
