"""Timing inference fairly: warm-up, many repeats, the median; CUDA events on GPU so only device time counts, and
CUDA-graph replays there so that the host's launch overhead does not stand in for the kernels' time."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from sparseprune.errors import UserError

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


def _sample_ms(run: Callable[[], object], device: torch.device) -> float:
    """Milliseconds of one call: device time between CUDA events on a GPU, wall time on the CPU."""
    if device.type != "cuda":
        begin = time.perf_counter()
        run()
        return 1000.0 * (time.perf_counter() - begin)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _settle(run: Callable[[], object], device: torch.device, settle_ms: float) -> None:
    """Untimed calls of run, at least one and for at least settle_ms: the cache state its own repeats leave and, with
    settle_ms, the GPU's clocks for this call rather than for the call before it."""
    spent = _sample_ms(run, device)
    while spent < settle_ms:
        spent += _sample_ms(run, device)


def _idle(device: torch.device, idle_ms: float) -> None:
    """The device idle for idle_ms after its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    time.sleep(idle_ms / 1000.0)


@torch.inference_mode()
def time_calls(
    calls: Mapping[str, Callable[[], object]],
    device: torch.device,
    warmup: int = 5,
    repeats: int = 30,
    cuda_graph: bool = True,
    rounds: int = 3,
    settle_ms: float = 0.0,
    idle_ms: float = 0.0,
) -> dict[str, Timing]:
    """Median, 10th and 90th percentile of `repeats` timed calls of each of `calls` after `warmup` untimed ones; on
    CUDA, with `cuda_graph`, of replays of one captured call (after one more untimed call that checks it never waits
    for the GPU).

    A GPU's speed drifts over a run (an H200 ran the same BERT-base kernels 7% slower later in one run,
    bench/results/model_h200_bert_dense_once.md), so the models compared are timed side by side: in `rounds` rounds,
    each call's share of the repeats back to back after one untimed call, which leaves the caches as the call's own
    repeats do (or after `settle_ms` of them), and after `idle_ms` of an idle device: a GPU's clocks follow its power
    draw with a lag of over 50 ms, so a call timed right after a power-hungry one runs at that one's clocks. On an
    H200 the call right after dense cuBLAS read 8% slower than the same call timed later, even after 50 ms of its own
    untimed calls; after 50 ms idle, the same call under three names read within 1%
    (bench/results/sp24_h200_timing_positions.md).
    Alternating call by call slowed both VGG16 models at one image, the sparse one by 16%, most likely as each pass
    evicts the other model's data from L2 (bench/results/export_h200_vgg16_fmnist_tw75_timing_rounds.md).
    """
    if rounds < 1:
        raise UserError(f"timing rounds must be at least 1, got {rounds}")
    if settle_ms < 0 or idle_ms < 0:
        raise UserError(f"timing settle and idle times must be at least 0 ms, got {settle_ms} and {idle_ms}")
    runs = {}
    for name, fn in calls.items():
        for _ in range(warmup):
            fn()
        replay = _captured(fn, device) if device.type == "cuda" and cuda_graph else None
        runs[name] = (replay or fn, replay is not None)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    shares = [repeats // rounds + (r < repeats % rounds) for r in range(rounds)]
    for share in filter(None, shares):
        for name, (run, _) in runs.items():
            if idle_ms > 0:
                _idle(device, idle_ms)
            if len(runs) > 1 or settle_ms > 0:
                _settle(run, device, settle_ms)
            samples[name] += [_sample_ms(run, device) for _ in range(share)]
    return {
        name: Timing(statistics.median(ms), _quantile(ms, 0.1), _quantile(ms, 0.9), repeats, runs[name][1])
        for name, ms in samples.items()
    }


def time_call(
    fn: Callable[[], object], device: torch.device, warmup: int = 5, repeats: int = 30, cuda_graph: bool = True
) -> Timing:
    """`time_calls` of fn alone."""
    return time_calls({"call": fn}, device, warmup, repeats, cuda_graph)["call"]
