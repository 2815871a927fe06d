"""How a GPU's speed drifts within one benchmark process, and how the benchmarks time calls side by side.

On one TW case (8192^3 by default, the benchmark's mask), a fresh process times dense cuBLAS, `auto`, the forced
warp-specialized kernel (the kernel `auto` runs there) and `auto` once more under another name: one after another,
as the benchmarks used to, for a few passes, reading the SM clock, temperature and power from nvidia-smi after each
timing; then all four in turns (`bench.common.time_in_turns`) three ways: each round of a call after one untimed
batch, after 50 ms of untimed batches, and after 50 ms of an idle GPU and one untimed batch (what the benchmarks do).
The three names of one kernel should read alike; where they do not, the difference is the GPU's state, which the
call before left.
    python -m bench.timing_drift --out bench/results/tw_h200_timing_turns
"""

from __future__ import annotations

import math
import subprocess
from typing import Any

import torch

from bench.common import (
    IDLE_MS,
    case_generator,
    markdown_table,
    require_kernels,
    sweep_parser,
    time_in_turns,
    write_results,
)
from bench.tw_bench import SHAPES, bench_tw_mask
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


def case_calls(shape: str, granularity: int, sparsity: float, seed: int) -> dict[str, Any]:
    """Dense cuBLAS, `auto`, the forced wgmma.ws and `auto` again on the benchmark's inputs for one case, x
    feature-major."""
    m, k, n = SHAPES[shape]
    gen = case_generator(seed, shape, granularity, sparsity)
    mask = bench_tw_mask(k, n, granularity, sparsity, gen).cuda()
    cuda_gen = torch.Generator(device="cuda").manual_seed(int(torch.randint(1 << 30, (1,), generator=gen)))
    b = (torch.randn(k, n, generator=cuda_gen, device="cuda") / math.sqrt(k)).half()
    x = torch.randn(m, k, generator=cuda_gen, device="cuda").half()
    packed, xt = pack_tw(b, mask, granularity), x.t().contiguous()
    return {
        "dense": lambda: x @ b,
        "auto": lambda: packed.matmul_feature_major(xt),
        "wgmma.ws": lambda: packed.matmul_feature_major(xt, kernel="wgmma.ws"),
        "auto, timed last": lambda: packed.matmul_feature_major(xt),
    }


def main() -> None:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["cube_8192:128:0.3", "cube_8192:128:0.75"])
    parser.add_argument("--passes", type=int, default=3, help="passes of the calls one after another")
    args = parser.parse_args()
    require_kernels("timing_drift")
    rows: list[dict[str, Any]] = []
    for case in args.cases:
        shape, granularity, sparsity = case.split(":")
        calls = case_calls(shape, int(granularity), float(sparsity), args.seed)
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
