"""Shared GPU benchmark helpers: event timing with warm-up and medians, fp32-reference checks, result files.

Used by every kernel-family bench (TW, N:M) so their numbers are taken, checked and written the same way.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import shlex
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch
import torch.nn.functional as F

from sparseprune.export.formats.extension import load_kernels
from sparseprune.export.timing import time_calls

TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1e-2}  # relative error vs the fp32 reference
COLD_WEIGHTS_MAX_M = 16  # rows of x up to which a timed call reads its weights from HBM (the decode sizes)
IDLE_MS = 50.0  # the GPU idles this long before each round of a call's timed batches (time_in_turns)
W = TypeVar("W")


@dataclass(frozen=True)
class Timing:
    median_us: float
    graphed: bool  # replays of a CUDA graph; False: eager batches (the calls could not be captured)


class Rotation(Generic[W]):
    """`op(weight)` over copies of the weight, each call on the next one. Timed back to back at a decode size
    (x of at most COLD_WEIGHTS_MAX_M rows), a call then finds none of its weight in L2, as a layer of a model whose
    weights do not all fit there: with a single copy, a packed sparse weight that fits in L2 (TW at 75% keeps 22 MB
    of a 4096 x 11008 weight; an H200 has 50 MB of L2) is read from L2 on every repeat while the dense one (90 MB)
    streams from HBM, which flatters the sparse kernel against the bytes it must move. There are enough copies to
    fill twice the L2; at larger M, where x and y are most of the bytes, one."""

    def __init__(
        self,
        op: Callable[[W], Any],
        weight: W,
        weight_bytes: int,
        rows: int,
        copy_weight: Callable[[W], W] = copy.deepcopy,
        l2_bytes: int | None = None,
    ) -> None:
        copies = 1
        if rows <= COLD_WEIGHTS_MAX_M:
            if l2_bytes is None:
                l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
            copies = max(1, min(64, math.ceil(2 * l2_bytes / max(1, weight_bytes))))
        self.op = op
        self.weights = [weight] + [copy_weight(weight) for _ in range(copies - 1)]
        self.turn = 0

    def sharing(self, op: Callable[[W], Any]) -> Rotation[W]:
        """Another operation over the same copies (none made again)."""
        other = copy.copy(self)
        other.op, other.turn = op, 0
        return other

    def __call__(self) -> Any:
        weight = self.weights[self.turn % len(self.weights)]
        self.turn += 1
        return self.op(weight)


def batch_of_calls(fn: Callable[[], Any], warmup: int = 3) -> tuple[Callable[[], None], int]:
    """fn warmed up, and a batch of about 1 ms of its calls with their count: CUDA events cannot time one call of a
    few microseconds. A Rotation's batch visits each of its copies at least twice, after a warm-up call on each (a
    copy's first call may build what it needs)."""
    copies = len(fn.weights) if isinstance(fn, Rotation) and len(fn.weights) > 1 else 0
    for _ in range(max(warmup, copies)):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    calls = max(2 * copies, 1, min(100, int(1.0 / max(start.elapsed_time(end), 1e-3))))

    def batch() -> None:
        for _ in range(calls):
            fn()

    return batch, calls


def time_in_turns(
    fns: Mapping[str, Callable[[], Any]],
    samples: int = 15,
    rounds: int = 3,
    settle_ms: float = 0.0,
    idle_ms: float = IDLE_MS,
) -> dict[str, Timing]:
    """Median device time of one call of each of `fns`, from CUDA events around replays of a CUDA graph of a batch
    of its calls (host launch overhead stays out; a batch that cannot be captured runs eagerly, `graphed` False).

    The calls are timed side by side, `samples` batches each over `rounds` rounds, each round of a call after
    `idle_ms` of an idle GPU and, where several calls take turns, one untimed batch (or `settle_ms` of them;
    `sparseprune.export.timing.time_calls`).
    An H200's clocks follow its power draw with a lag of over 50 ms: a call timed right after a power-hungry one runs
    at that one's clocks, and calls kept busy for tens of milliseconds throttle. Timed in turns with one untimed batch
    each, dense 8192^3 took 1647 us against 1443-1456 alone (bench/results/tw_h200_timing_turns.md); after 50 ms of
    untimed calls each, a 2:4 GEMM timed right after dense cuBLAS read 40.3 us against 37.3 for the same call timed
    later (sp24_h200_timing_positions.md). After 50 ms idle each call starts from the same state: the same kernel
    under three names reads within 1%, and every call as it does alone.
    """
    batches = {name: batch_of_calls(fn) for name, fn in fns.items()}
    runs = {name: batch for name, (batch, _) in batches.items()}
    cuda = torch.device("cuda")
    timings = time_calls(
        runs, cuda, warmup=0, repeats=samples, rounds=min(rounds, samples), settle_ms=settle_ms, idle_ms=idle_ms
    )
    return {
        name: Timing(median_us=timings[name].median_ms * 1e3 / calls, graphed=timings[name].cuda_graph)
        for name, (_, calls) in batches.items()
    }


def time_cuda(fn: Callable[[], Any]) -> Timing:
    """`time_in_turns` of fn alone."""
    return time_in_turns({"call": fn}, rounds=1)["call"]


def kernel_times(fn: Callable[[], Any], calls: int = 1) -> dict[str, float]:
    """Device µs per call of each kernel (and memset or copy) `fn` launches, profiled over `calls` calls, longest
    first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)
    return {e.key: e.device_time_total / calls for e in events if e.device_time_total > 0}


def time_into(row: dict[str, Any], calls: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
    """row[key] = the median µs of each of `calls` (keyed by row key), timed in turns (`time_in_turns`); a timing that
    fell back to eager batches is listed in row["eager"]. Returns the medians."""
    timings = time_in_turns(calls)
    for key, timing in timings.items():
        row[key] = timing.median_us
        if not timing.graphed:
            row.setdefault("eager", []).append(key)
    return {key: timing.median_us for key, timing in timings.items()}


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in fp64; NaN anywhere gives inf so it can never pass a tolerance."""
    out64, ref64 = out.double(), ref.double()
    if not bool(torch.isfinite(out64).all()):
        return float("inf")
    return float(torch.linalg.norm(out64 - ref64) / torch.linalg.norm(ref64).clamp_min(1e-30))


def device_name() -> str:
    props = torch.cuda.get_device_properties(0)
    return f"{props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}, CUDA {torch.version.cuda}"


def command_line() -> str:
    """The exact invocation, `-m module` included (sys.orig_argv keeps what sys.argv rewrites)."""
    argv = sys.orig_argv[1:] if sys.orig_argv else sys.argv
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *argv])


def git_commit() -> str:
    """Commit of the working tree the numbers come from (with '+dirty' for local changes), or 'unknown'."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """Markdown table of `rows` with (key, header) columns; floats to 3 significant digits."""

    def cell(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value)

    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(k)) for k, _ in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_results(
    prefix: Path,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[tuple[str, str]],
    notes: Sequence[str] = (),
    device: str | None = None,
) -> str:
    """Writes prefix.json (all fields) and prefix.md (the table), both naming the command and the device (this one,
    unless the rows were measured elsewhere and `device` names it)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    header = {"command": command_line(), "device": device or device_name(), "commit": git_commit()}
    prefix.with_suffix(".json").write_text(json.dumps({**header, "notes": list(notes), "rows": list(rows)}, indent=1))
    table = markdown_table(rows, columns)
    body = [
        f"Command: `{header['command']}` (commit {header['commit']})",
        "",
        f"Device: {header['device']}",
        "",
        *notes,
        "",
        table,
        "",
    ]
    prefix.with_suffix(".md").write_text("\n".join(body))
    return table


def semi_structured_24(x: torch.Tensor, b: torch.Tensor) -> tuple[Callable[[], torch.Tensor] | None, str]:
    """torch's 2:4 (cuSPARSELt) GEMM for x @ B with B pruned 2:4 along K, or None and the reason."""
    try:
        from torch.sparse import to_sparse_semi_structured

        w = b.t().contiguous()
        groups = w.view(w.shape[0], -1, 4)
        keep = groups.abs().topk(2, dim=-1).indices
        mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, keep, True).view_as(w)
        w_sparse = to_sparse_semi_structured(w * mask)
        xin = x if x.shape[0] >= 32 else F.pad(x, (0, 0, 0, 32 - x.shape[0]))
        ref = (xin.float() @ (w * mask).t().float())[: x.shape[0]]
        out = F.linear(xin, w_sparse)[: x.shape[0]]
        err = relative_error(out, ref)
        if not err <= TOLERANCE[x.dtype]:  # NaN included
            return None, f"2:4 result off by {err:.2e}"
        return (lambda: F.linear(xin, w_sparse)), ""
    except (RuntimeError, ValueError, NotImplementedError) as err:
        return None, f"2:4 unavailable: {str(err).splitlines()[0][:120]}"


def semi24_call(row: dict[str, Any], x: torch.Tensor, b: torch.Tensor) -> dict[str, Callable[[], Any]]:
    """torch's 2:4 call for this case, {"semi24_us": call} to time beside the others (over copies of the compressed
    weight, about half the dense bytes, compressed from copies of b), or {} with the reason in row["semi24_note"]."""
    fn, why = semi_structured_24(x, b)
    if fn is None:
        row["semi24_note"] = why
        return {}
    recompress = lambda _: semi_structured_24(x, b.clone())[0]  # noqa: E731
    return {"semi24_us": Rotation(lambda run: run(), fn, b.nbytes // 2, x.shape[0], recompress)}


def case_notes(rows: Sequence[dict[str, Any]], dtype_name: str, legend: str) -> list[str]:
    """The notes above a results table: dtype and failures against the tolerance, the columns' legend, and why
    torch's 2:4 could not run where it could not."""
    failed = sum(not r["passed"] for r in rows)
    notes = [
        f"dtype {dtype_name}; {len(rows)} cases, {failed} over the error tolerance "
        f"({TOLERANCE[getattr(torch, dtype_name)]:g} relative to the fp32 reference on fresh random inputs).",
        legend,
    ]
    notes += sorted({f"{r['shape']}: {r['semi24_note']}" for r in rows if "semi24_note" in r})
    eager = sorted({f"{r['shape']} {key}" for r in rows for key in r.get("eager", [])})
    if eager:
        notes.append("Timed in eager batches (CUDA graph capture failed; host overhead included): " + ", ".join(eager))
    return notes


def sweep_parser(description: str) -> argparse.ArgumentParser:
    """The options of every seeded sweep that writes a results file; each adds its own sweep axes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="results prefix: writes PREFIX.json and PREFIX.md")
    return parser


def bench_parser(description: str, shapes: Sequence[str]) -> argparse.ArgumentParser:
    """sweep_parser with the options every kernel bench over named shapes takes."""
    parser = sweep_parser(description)
    parser.add_argument("--shapes", nargs="*", default=list(shapes), choices=list(shapes))
    parser.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    parser.add_argument("--check-only", action="store_true", help="correctness only, no timing")
    parser.add_argument(
        "--rows", nargs="+", type=int, default=[None], help="run every shape at each of these M instead of its own"
    )
    return parser


def case_generator(seed: int, *case: object) -> torch.Generator:
    """A CPU generator for one benchmark case, seeded from --seed and the case's own parameters, so that a case draws
    the same mask and inputs whichever cases run with it. One generator shared by a whole run made a TW case's
    kept-K draw, and with it the time of its heaviest tile, depend on the cases listed before it."""
    key = "/".join(str(part) for part in (seed, *case))
    return torch.Generator().manual_seed(zlib.crc32(key.encode()))


def worst_error(errors: Iterable[float]) -> float:
    """The largest error, or NaN if any is NaN: max() keeps a NaN only when it comes first, and NaN passes no check."""
    errors = list(errors)
    return math.nan if any(math.isnan(e) for e in errors) else max(errors)


def finish_row(
    row: dict[str, Any],
    errors: Sequence[float],
    dtype: torch.dtype,
    results: list[dict[str, Any]],
    columns: Sequence[tuple[str, str]],
) -> None:
    """Marks a case by its worst relative error against the fp32 reference, keeps it and prints its table line, so that
    a long sweep shows each case as it ends."""
    row["rel_err"] = worst_error(errors)
    row["passed"] = row["rel_err"] <= TOLERANCE[dtype]
    results.append(row)
    print(markdown_table([row], columns).splitlines()[-1], flush=True)


def finish_sweep(
    out: Path | None, rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], notes: Sequence[str]
) -> None:
    """Writes the results when --out names a prefix, then ends with an error if a case failed its fp32 check."""
    if out:
        write_results(out, rows, columns, notes)
    exit_if_any_failed(rows)


def dense_yardsticks(
    x: torch.Tensor, weight: torch.Tensor, packed_bytes: int, gen: torch.Generator
) -> tuple[float, float]:
    """The anatomy benches' two yardsticks, each reading its weight from HBM: median µs of dense cuBLAS x @ weight, and
    of x @ a random dense K x N' weight of packed_bytes (what cuBLAS makes of the packed weight's bytes)."""
    k, rows = weight.shape[0], x.shape[0]
    same_bytes = torch.randn(k, packed_bytes // (2 * k), generator=gen).half().cuda()
    dense_us = time_cuda(Rotation(lambda w: x @ w, weight, weight.nbytes, rows)).median_us
    same_bytes_us = time_cuda(Rotation(lambda w: x @ w, same_bytes, same_bytes.nbytes, rows)).median_us
    return dense_us, same_bytes_us


def time_variants(
    row: dict[str, Any],
    parts: Sequence[tuple[str, int, str, bool]],
    run_variant: Callable[[int, W], Any],
    weight: W,
    weight_bytes: int,
    rows: int,
    error_of: Callable[[str, int], float],
) -> list[float]:
    """Times an anatomy bench's variants (key, code in its .cu, what it does, whether it computes x @ B) into
    row[f"{key}_us"], each call run_variant(code, copy) on rotated copies of `weight`; returns error_of(key, code) for
    the variants that compute x @ B."""
    errors = []
    for key, code, _, computes in parts:
        call = functools.partial(run_variant, code)
        row[f"{key}_us"] = time_cuda(Rotation(call, weight, weight_bytes, rows)).median_us
        if computes:
            errors.append(error_of(key, code))
    return errors


def exit_if_any_failed(rows: Sequence[dict[str, Any]], what: str = "cases") -> None:
    """Ends the run with an error when a row failed its check against the fp32 reference (row["passed"])."""
    failed = [r for r in rows if not r["passed"]]
    if failed:
        raise SystemExit(f"{len(failed)} {what} exceeded the error tolerance")


def require_kernels(bench: str) -> None:
    if not torch.cuda.is_available() or load_kernels() is None:
        raise SystemExit(f"{bench} needs a CUDA GPU and the built sparseprune._kernels extension")
