"""Timing inference fairly: warm-up, many repeats, the median; CUDA events on GPU so only device time counts, and
CUDA-graph replays there so that the host's launch overhead does not stand in for the kernels' time."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    repeats: int
    cuda_graph: bool  # replays of one captured CUDA graph; False: eager calls (CPU, or a pass that cannot be captured)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _captured(fn: Callable[[], object], device: torch.device) -> Callable[[], object] | None:
    """fn's work replayed from a CUDA graph, or None where it cannot be captured (a host sync inside, for one).

    A small model's eager forward pass is bound by the host launching its kernels (VGG16 on 32 x 32 images at one
    image: about 50 us per layer on an H200 whatever the layer computes), which would time the Python around a
    kernel, not the kernel; a deployed model replays a captured graph to avoid exactly that."""
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError as err:
        log.warning("timing eager calls: the pass cannot be captured in a CUDA graph (%s)", str(err).splitlines()[0])
        torch.cuda.synchronize(device)
        return None
    return graph.replay


@torch.inference_mode()
def time_call(
    fn: Callable[[], object], device: torch.device, warmup: int = 5, repeats: int = 30, cuda_graph: bool = True
) -> Timing:
    """Median, 10th and 90th percentile of `repeats` timed calls of `fn` after `warmup` untimed ones; on CUDA, with
    `cuda_graph`, of replays of one captured call."""
    for _ in range(warmup):
        fn()
    replay = _captured(fn, device) if device.type == "cuda" and cuda_graph else None
    run = replay or fn
    samples = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end))
    else:
        for _ in range(repeats):
            begin = time.perf_counter()
            run()
            samples.append(1000.0 * (time.perf_counter() - begin))
    median = statistics.median(samples)
    return Timing(median, _quantile(samples, 0.1), _quantile(samples, 0.9), repeats, replay is not None)
