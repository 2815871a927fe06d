"""How a GPU's speed drifts within one benchmark process, and how the benchmarks time calls side by side.

On one TW case (8192^3 by default, the benchmark's mask) or a 2:4 weight, a fresh process times dense cuBLAS,
`auto`, the forced kernel `auto` runs there (wgmma.ws; the sp24 route) and `auto` once more under another name: one
after another, each alone after 50 ms idle, for a few passes, reading the SM clock, temperature and power from
nvidia-smi after each timing; then all four in turns (`bench.common.time_in_turns`) three ways: each round of a call
after one untimed batch, after 50 ms of untimed batches, and after 50 ms of an idle GPU and one untimed batch (what
the benchmarks do). The three names of one kernel should read alike; where they do not, the difference is the GPU's
state, which the call before left.
    python -m bench.probes.timing_drift --out bench/results/tw_h200_timing_turns
    python -m bench.probes.timing_drift --cases 2:4@256x8192x4096 2:4@256x4096x4096 --passes 1 \
        --out bench/results/sp24_h200_timing_positions
"""

from __future__ import annotations

import subprocess
from typing import Any

from bench.common import (
    IDLE_MS,
    case_generator,
    markdown_table,
    require_kernels,
    sweep_parser,
    time_in_turns,
    write_results,
)
from bench.nm_bench import random_nm_mask
from bench.tw_bench import SHAPES, bench_tw_mask, cuda_generator, draw_case
from sparseprune.export.formats.nm import nm_matmul, pack_nm
from sparseprune.export.formats.tw import pack_tw

COLUMNS = [
    ("case", "case"),
    ("timing", "timing"),
    ("step", "step"),
    ("call", "call"),
    ("us", "µs"),
    ("sm_mhz", "SM MHz after"),
    ("temp_c", "°C after"),
    ("power_w", "W after"),
]


def gpu_state() -> dict[str, Any]:
    """SM clock (MHz), temperature (°C) and power draw (W) now, from nvidia-smi (None where it cannot tell)."""
    query = ["nvidia-smi", "--query-gpu=clocks.sm,temperature.gpu,power.draw", "--format=csv,noheader,nounits"]
    try:
        fields = subprocess.run(query, capture_output=True, text=True, check=True).stdout.splitlines()[0].split(",")
        clock, temp, power = (float(f) for f in fields)
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return {"sm_mhz": None, "temp_c": None, "power_w": None}
    return {"sm_mhz": clock, "temp_c": temp, "power_w": power}


def tw_calls(shape: str, granularity: int, sparsity: float, seed: int) -> dict[str, Any]:
    """Dense cuBLAS, `auto`, the forced wgmma.ws and `auto` again on the TW benchmark's inputs for one case, x
    feature-major."""
    m, k, n = SHAPES[shape]
    gen = case_generator(seed, shape, granularity, sparsity)
    mask = bench_tw_mask(k, n, granularity, sparsity, gen).cuda()
    b, x, _ = draw_case(m, k, n, gen)
    packed, xt = pack_tw(b, mask, granularity), x.t().contiguous()
    return {
        "dense": lambda: x @ b,
        "auto": lambda: packed.matmul_feature_major(xt),
        "wgmma.ws": lambda: packed.matmul_feature_major(xt, kernel="wgmma.ws"),
        "auto, timed last": lambda: packed.matmul_feature_major(xt),
    }


def sp24_calls(m: int, k: int, n: int, seed: int) -> dict[str, Any]:
    """Dense cuBLAS, `auto`, the forced 2:4 route (the route `auto` takes) and `auto` again for a random 2:4 weight."""
    gen = case_generator(seed, "2:4", m, k, n)
    mask = random_nm_mask(k, n, 2, 4, 1, cuda_generator(gen))
    b, x, _ = draw_case(m, k, n, gen)
    packed = pack_nm(b, mask, 4)
    return {
        "dense": lambda: x @ b,
        "auto": lambda: nm_matmul(x, packed),
        "sp24": lambda: nm_matmul(x, packed, kernel="sp24"),
        "auto, timed last": lambda: nm_matmul(x, packed),
    }


def case_calls(case: str, seed: int) -> dict[str, Any]:
    """A case's calls: 'shape:G:sparsity' for TW on the benchmark's shapes, '2:4@MxKxN' for a 2:4 weight."""
    if case.startswith("2:4@"):
        m, k, n = (int(v) for v in case.removeprefix("2:4@").split("x"))
        return sp24_calls(m, k, n, seed)
    shape, granularity, sparsity = case.split(":")
    return tw_calls(shape, int(granularity), float(sparsity), seed)


def main() -> None:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", nargs="+", default=["cube_8192:128:0.3", "cube_8192:128:0.75"], help="shape:G:sparsity or 2:4@MxKxN"
    )
    parser.add_argument("--passes", type=int, default=3, help="passes of the calls one after another")
    args = parser.parse_args()
    require_kernels("timing_drift")
    rows: list[dict[str, Any]] = []
    for case in args.cases:
        calls = case_calls(case, args.seed)
        for step in range(args.passes):
            for name, fn in calls.items():
                us = time_in_turns({name: fn}, rounds=1, settle_ms=0.0)[name].median_us
                rows.append({"case": case, "timing": "one after another", "step": step, "call": name, "us": us})
                rows[-1].update(gpu_state())
        for timing, settle_ms, idle_ms in [
            ("in turns, one untimed batch first", 0.0, 0.0),
            ("in turns, 50 ms of untimed batches first", 50.0, 0.0),
            (f"in turns, {IDLE_MS:g} ms idle and one untimed batch first", 0.0, IDLE_MS),
        ]:
            for name, result in time_in_turns(calls, settle_ms=settle_ms, idle_ms=idle_ms).items():
                rows.append({"case": case, "timing": timing, "step": 0, "call": name, "us": result.median_us})
                rows[-1].update(gpu_state())
    notes = [
        "Each 'one after another' line is one call's median over 15 timed batches, timed alone; the 'in turns' lines "
        "time the four calls side by side in three rounds. 'auto, timed last' is `auto` again. x feature-major, fp16; "
        "the GPU's state is read after each line's timing."
    ]
    if args.out:
        write_results(args.out, rows, COLUMNS, notes)
    print(markdown_table(rows, COLUMNS))


if __name__ == "__main__":
    main()
