"""Timing inference fairly: warm-up, many repeats, the median; CUDA events on GPU so only device time counts."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@torch.inference_mode()
def time_call(fn: Callable[[], object], device: torch.device, warmup: int = 5, repeats: int = 30) -> Timing:
    for _ in range(warmup):
        fn()
    samples = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
    else:
        for _ in range(repeats):
            begin = time.perf_counter()
            fn()
            samples.append(1000.0 * (time.perf_counter() - begin))
    return Timing(statistics.median(samples), _quantile(samples, 0.1), _quantile(samples, 0.9), repeats)
