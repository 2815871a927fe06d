"""export's timing: every warm-up and timed call runs the work; on CUDA a capturable pass is timed as CUDA-graph
replays and one that syncs with the host falls back to eager calls."""

from __future__ import annotations

import pytest
import torch

from sparseprune.errors import UserError
from sparseprune.export import timing
from sparseprune.export.timing import capture_graph, time_call, time_calls

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cpu_timing_runs_every_call_eagerly() -> None:
    counter = torch.zeros(1)
    timing = time_call(lambda: counter.add_(1), torch.device("cpu"), warmup=2, repeats=3)
    assert counter.item() == 5 and not timing.cuda_graph
    assert timing.repeats == 3 and 0 <= timing.p10_ms <= timing.median_ms <= timing.p90_ms


def test_calls_compared_are_timed_in_turn_in_rounds() -> None:
    order: list[str] = []
    timings = time_calls({"dense": lambda: order.append("dense"), "sparse": lambda: order.append("sparse")},
                         torch.device("cpu"), warmup=1, repeats=5, rounds=2)  # fmt: skip
    # warm-ups, then per round each call once untimed and its share of the repeats (3, then 2) back to back
    assert order == ["dense", "sparse"] + ["dense"] * 4 + ["sparse"] * 4 + ["dense"] * 3 + ["sparse"] * 3
    assert set(timings) == {"dense", "sparse"} and all(t.repeats == 5 and not t.cuda_graph for t in timings.values())
    with pytest.raises(UserError, match="at least 1"):
        time_calls({"dense": lambda: None}, torch.device("cpu"), rounds=0)
    with pytest.raises(UserError, match="at least 0 ms"):
        time_calls({"dense": lambda: None}, torch.device("cpu"), settle_ms=-1.0)
    with pytest.raises(UserError, match="at least 0 ms"):
        time_calls({"dense": lambda: None}, torch.device("cpu"), idle_ms=-1.0)


def test_each_round_of_a_call_starts_after_the_idle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(timing.time, "sleep", lambda seconds: order.append(f"idle {seconds * 1000:g} ms"))
    time_calls({"dense": lambda: order.append("dense"), "sparse": lambda: order.append("sparse")},
               torch.device("cpu"), warmup=0, repeats=2, rounds=2, idle_ms=50.0)  # fmt: skip
    # per round and call: the idle time, one untimed call, then its one timed call
    assert order == ["idle 50 ms", "dense", "dense", "idle 50 ms", "sparse", "sparse"] * 2


def test_each_round_of_a_call_starts_after_its_settle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(timing, "_sample_ms", lambda run, device: (run(), 2.0)[1])  # every call takes 2 ms
    time_calls({"dense": lambda: order.append("dense"), "sparse": lambda: order.append("sparse")},
               torch.device("cpu"), warmup=0, repeats=4, rounds=2, settle_ms=5.0)  # fmt: skip
    # per round, three untimed calls (6 ms >= 5) and two timed ones of each call in turn
    assert order == (["dense"] * 5 + ["sparse"] * 5) * 2


@pytest.mark.gpu
@cuda
def test_cuda_timing_replays_a_captured_graph() -> None:
    device = torch.device("cuda")
    counter = torch.zeros(1, device=device)
    timing = time_call(lambda: counter.add_(1), device, warmup=2, repeats=3)
    assert timing.cuda_graph and counter.item() == 6  # warm-up, the check for host syncs, replays: capture runs nothing
    assert 0 < timing.p10_ms <= timing.median_ms <= timing.p90_ms


@pytest.mark.gpu
@cuda
def test_cuda_calls_compared_replay_their_own_graphs() -> None:
    device = torch.device("cuda")
    first, second = torch.zeros(1, device=device), torch.zeros(1, device=device)
    timings = time_calls({"first": lambda: first.add_(1), "second": lambda: second.add_(2)}, device, 1, 3, rounds=3)
    assert all(t.cuda_graph for t in timings.values())
    assert first.item() == 8 and second.item() == 16  # warm-up, sync check, per round an untimed and a timed replay


@pytest.mark.gpu
@cuda
def test_cuda_timing_falls_back_to_eager_calls_where_capture_fails() -> None:
    device = torch.device("cuda")
    counter = torch.zeros(1, device=device)
    timing = time_call(lambda: counter.add_(1).sum().item(), device, warmup=2, repeats=3)  # .item() syncs
    assert not timing.cuda_graph and counter.item() == 6  # warm-up, the check for host syncs, eager calls
    assert torch.randn(4, device=device).isfinite().all()


@pytest.mark.gpu
@cuda
def test_a_failed_capture_leaves_random_ops_working() -> None:
    device = torch.device("cuda")
    counter = torch.zeros(1, device=device)
    assert capture_graph(lambda: (torch.rand(1, device=device), counter.add_(1).sum().item()), device) is None
    assert torch.randn(4, device=device).isfinite().all() and counter.item() == 0  # captured work never ran
