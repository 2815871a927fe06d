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


def _syncs_with_host(fn: Callable[[], object]) -> bool:
    """Whether a call of fn waits for the GPU (an `.item()`, a copy to the host): such a pass cannot be captured."""
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError:
        return True
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    return False


def capture_graph(fn: Callable[[], object], device: torch.device) -> Callable[[], object] | None:
    """Replays of fn's work from a CUDA graph, or None where the capture fails."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    generator = torch.cuda.default_generators[index]
    saved_rng = generator.clone_state()
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError as err:
        # A capture that fails midway leaves the CUDA generator in capture mode, where every later random op fails.
        generator.graphsafe_set_state(saved_rng)
        torch.cuda.synchronize(device)
        log.warning("timing eager calls: the pass cannot be captured in a CUDA graph (%s)", str(err).splitlines()[0])
        return None
    return graph.replay


def _captured(fn: Callable[[], object], device: torch.device) -> Callable[[], object] | None:
    """fn's work replayed from a CUDA graph, or None where it cannot be captured.

    A small model's eager forward pass is bound by the host launching its kernels (VGG16 on 32 x 32 images at one
    image: about 50 us per layer on an H200 whatever the layer computes), which would time the Python around a
    kernel, not the kernel; a deployed model replays a captured graph to avoid exactly that."""
    if _syncs_with_host(fn):
        log.warning("timing eager calls: the pass waits for the GPU, so it cannot be captured in a CUDA graph")
        return None
    return capture_graph(fn, device)


@torch.inference_mode()
def time_call(
    fn: Callable[[], object], device: torch.device, warmup: int = 5, repeats: int = 30, cuda_graph: bool = True
) -> Timing:
    """Median, 10th and 90th percentile of `repeats` timed calls of `fn` after `warmup` untimed ones; on CUDA, with
    `cuda_graph`, of replays of one captured call (after one more untimed call that checks it never waits for the
    GPU)."""
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
