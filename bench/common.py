"""Shared GPU benchmark helpers: event timing with warm-up and medians, fp32-reference checks, result files.

Used by every kernel-family bench (TW now, N:M later) so their numbers are taken and written the same way.
"""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Timing:
    median_us: float
    min_us: float
    samples: int
    graphed: bool


def time_cuda(fn: Callable[[], Any], warmup: int = 3, samples: int = 15, graph: bool = True) -> Timing:
    """Median device time of one `fn()` call, from CUDA events around batches of ~1 ms of calls.

    With `graph` the batch is captured once as a CUDA graph and replayed, so host launch overhead (Python, op
    dispatch) stays out and microsecond kernels are timed as the GPU runs them; ops that cannot be captured
    fall back to eager batches (`graphed` says which).
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    calls = max(1, min(100, int(1.0 / max(start.elapsed_time(end), 1e-3))))

    def batch() -> None:
        for _ in range(calls):
            fn()

    run, graphed = batch, False
    if graph:
        try:
            cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cuda_graph):
                batch()
            run, graphed = cuda_graph.replay, True
        except RuntimeError:
            torch.cuda.synchronize()
    run()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return Timing(median_us=statistics.median(times), min_us=min(times), samples=samples, graphed=graphed)


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
    prefix: Path, rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]], notes: Sequence[str] = ()
) -> str:
    """Writes prefix.json (all fields) and prefix.md (the table), both naming the command and the device."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    header = {"command": command_line(), "device": device_name(), "commit": git_commit()}
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
