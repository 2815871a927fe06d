"""Before/after timing of the TW kernel between two builds: `auto` kernel, against dense cuBLAS.

Repeated timings of one case spread by up to 10% between processes at 8192^3 on an H200, more than many kernel
changes move it, so a comparison runs both builds in one device session, alternating their order over rounds, and
keeps each build's fastest median. From each tree's root (the same cases, masks, inputs and, at the decode sizes,
weights read from HBM as `tw_bench`):
    python -m bench.probes.tw_ab time --tag base --cases cube_8192:128:0.9 bert_qkv:128:0.75 >> ab.jsonl
A case may name its rows of x (`lstm_gates:128:0.75:32`); `--row-major` times x and y row-major (`matmul`, with
whatever transposes the call makes) instead of feature-major (`matmul_feature_major`); `--kernel` forces one
kernel instead of `auto` (the summary then compares that kernel's two builds). And at the end
    python -m bench.probes.tw_ab summarize ab.jsonl --out bench/results/NAME
Every timed case is first checked against the fp32 reference; the summary reports the largest error.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import (
    Rotation,
    case_generator,
    device_name,
    relative_error,
    require_kernels,
    time_into,
    write_results,
)
from bench.tw_bench import SHAPES, bench_tw_mask, draw_case
from sparseprune.export.formats.tw import KERNELS, pack_tw


def parse_case(case: str) -> tuple[str, int, float, int | None]:
    """'shape:G:sparsity[:M]' -> (shape, G, sparsity, M or None for the shape's own)."""
    try:
        name, granularity, sparsity, *rows = case.split(":")
        if len(rows) > 1:
            raise ValueError(case)
        parsed = name, int(granularity), float(sparsity), int(rows[0]) if rows else None
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected shape:G:sparsity[:M], got {case!r}") from err
    if name not in SHAPES:
        raise argparse.ArgumentTypeError(f"unknown shape {name!r}; one of {', '.join(SHAPES)}")
    return parsed


def time_case(
    name: str, granularity: int, sparsity: float, rows: int | None, seed: int, row_major: bool, kernel: str
) -> dict[str, Any]:
    """The case's error against fp32 and the medians of dense and TW, drawn exactly as tw_bench draws them."""
    case = f"{name}:{granularity}:{sparsity}" + (f":{rows}" if rows else "") + (" row-major" if row_major else "")
    case += "" if kernel == "auto" else f" {kernel}"
    m, k, n = SHAPES[name]
    m = rows or m
    gen = case_generator(seed, name, granularity, sparsity)
    mask = bench_tw_mask(k, n, granularity, sparsity, gen).cuda()
    b, x, _ = draw_case(m, k, n, gen)
    xt = x.t().contiguous()
    packed = pack_tw(b, mask, granularity)
    if row_major:
        run = lambda p: p.matmul(x, kernel=kernel)  # noqa: E731
    else:
        run = lambda p: p.matmul_feature_major(xt, kernel=kernel).t()  # noqa: E731
    err = relative_error(run(packed), x.float() @ (b * mask).float())
    line = {"case": case, "device": device_name(), "rel_err": err}
    dense, tw = Rotation(lambda w: x @ w, b, b.nbytes, m), Rotation(run, packed, packed.nbytes(), m)
    time_into(line, {"dense_us": dense, "tw_us": tw})
    return line


def tw_us(line: dict[str, Any]) -> float:
    """A line's TW median (`tw_fm_us` in files written before row-major timing)."""
    return line["tw_us"] if "tw_us" in line else line["tw_fm_us"]


def summarize(lines: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """One row per case: each tag's fastest median, its gain over `baseline` and its ratio to the fastest dense."""
    by_case: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for line in lines:
        by_case[line["case"]][line["tag"]].append(line)
    rows = []
    for case, tags in by_case.items():
        dense = min(r["dense_us"] for runs in tags.values() for r in runs)
        base = min(tw_us(r) for r in tags[baseline]) if baseline in tags else math.nan
        row: dict[str, Any] = {"case": case, "dense_us": dense, "rounds": min(len(runs) for runs in tags.values())}
        for tag, runs in tags.items():
            best = min(tw_us(r) for r in runs)
            row[f"{tag}_us"] = best
            row[f"{tag}_x_dense"] = dense / best
            row[f"{tag}_gain"] = base / best - 1.0
        row["max_rel_err"] = max(r["rel_err"] for runs in tags.values() for r in runs)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    timing = sub.add_parser("time", help="time cases in this tree's build; one JSON line per case on stdout")
    timing.add_argument("--tag", required=True, help="the build's name in the summary")
    timing.add_argument("--cases", nargs="+", type=parse_case, required=True, metavar="SHAPE:G:SPARSITY")
    timing.add_argument("--seed", type=int, default=0)
    timing.add_argument("--row-major", action="store_true", help="x and y row-major, as export.py's Linear layers")
    timing.add_argument("--kernel", choices=sorted(KERNELS), default="auto", help="the kernel to force")
    summary = sub.add_parser("summarize", help="fastest median per build and case")
    summary.add_argument("files", nargs="+", type=Path)
    summary.add_argument("--baseline", default="base")
    summary.add_argument("--out", type=Path, required=True, help="results prefix: writes PREFIX.json and PREFIX.md")
    summary.add_argument("--note", action="append", default=[], help="a line for the results file (what each tag is)")
    args = parser.parse_args()
    if args.command == "time":
        require_kernels("tw_ab")
        for case in args.cases:
            line = {"tag": args.tag, **time_case(*case, args.seed, args.row_major, args.kernel)}
            print(json.dumps(line), flush=True)
        return
    lines = [json.loads(text) for path in args.files for text in path.read_text().splitlines() if text.strip()]
    rows = summarize(lines, args.baseline)
    tags = sorted({line["tag"] for line in lines}, key=lambda t: (t != args.baseline, t))
    columns = [("case", "case"), ("dense_us", "dense µs")]
    for tag in tags:
        columns += [(f"{tag}_us", f"{tag} µs"), (f"{tag}_x_dense", f"{tag} ×dense")]
        if tag != args.baseline:
            columns.append((f"{tag}_gain", f"{tag} vs {args.baseline}"))
    columns += [("rounds", "rounds"), ("max_rel_err", "max rel err")]
    notes = [
        "TW (`auto` kernel unless the case names one; x feature-major unless the case says row-major) and dense "
        "cuBLAS, fp16; each build's "
        "fastest median over the rounds, "
        "builds alternating their order from round to round; 'vs' is the baseline's time over the build's, minus 1.",
        *args.note,
    ]
    devices = sorted({line["device"] for line in lines})
    write_results(args.out, rows, columns, notes, device=" / ".join(devices))


if __name__ == "__main__":
    main()
