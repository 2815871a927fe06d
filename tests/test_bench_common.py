"""bench.common's timing and result helpers (CPU, but for the timing of calls in turns on a GPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from bench.common import (
    COLD_WEIGHTS_MAX_M,
    Rotation,
    exit_if_any_failed,
    finish_row,
    finish_sweep,
    time_in_turns,
    worst_error,
)


def test_rotation_cycles_copies_that_fill_twice_the_l2() -> None:
    seen: list[int] = []
    weight = torch.arange(4.0)
    rotation = Rotation(lambda w: seen.append(id(w)), weight, weight_bytes=10, rows=1, l2_bytes=24)
    assert len(rotation.weights) == 5  # ceil(2 * 24 / 10)
    assert rotation.weights[0] is weight
    assert all(torch.equal(w, weight) and w is not weight for w in rotation.weights[1:])
    for _ in range(7):
        rotation()
    ids = [id(w) for w in rotation.weights]
    assert seen == ids + ids[:2]


def test_rotation_copies_through_the_given_copier() -> None:
    next_copy = lambda w: w + 1  # noqa: E731
    rotation = Rotation(lambda w: w, 1, weight_bytes=8, rows=COLD_WEIGHTS_MAX_M, l2_bytes=8, copy_weight=next_copy)
    assert rotation.weights == [1, 2]
    assert [rotation() for _ in range(3)] == [1, 2, 1]


def test_rotation_keeps_one_copy_past_the_decode_sizes() -> None:
    weight = torch.ones(3)
    rotation = Rotation(lambda w: w.sum(), weight, weight_bytes=10, rows=COLD_WEIGHTS_MAX_M + 1, l2_bytes=1 << 30)
    assert rotation.weights == [weight]
    assert float(rotation()) == 3.0


def test_rotation_sharing_reuses_the_copies_under_another_op() -> None:
    rotation = Rotation(lambda w: ("first", w), 1, weight_bytes=8, rows=1, l2_bytes=8, copy_weight=lambda w: w + 1)
    other = rotation.sharing(lambda w: ("second", w))
    assert other.weights is rotation.weights
    rotation()
    assert [other() for _ in range(3)] == [("second", 1), ("second", 2), ("second", 1)]
    assert rotation() == ("first", 2)


def test_exit_if_any_failed_names_the_failures() -> None:
    exit_if_any_failed([{"passed": True}, {"passed": True}])
    with pytest.raises(SystemExit, match="1 models exceeded the error tolerance"):
        exit_if_any_failed([{"passed": True}, {"passed": False}], "models")


def test_finish_row_marks_keeps_and_prints_the_worst_error(capsys: pytest.CaptureFixture[str]) -> None:
    results: list[dict[str, object]] = []
    columns = [("case", "case"), ("rel_err", "worst rel err")]
    finish_row({"case": "a"}, [1e-4, 3e-3], torch.float16, results, columns)
    finish_row({"case": "b"}, [1e-4, 3e-3], torch.bfloat16, results, columns)
    finish_row({"case": "c"}, [1e-4, float("nan")], torch.float16, results, columns)
    assert [(r["case"], r["rel_err"], r["passed"]) for r in results][:2] == [("a", 3e-3, False), ("b", 3e-3, True)]
    assert math.isnan(results[2]["rel_err"]) and results[2]["passed"] is False
    assert [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines()] == ["a", "b", "c"]


def test_worst_error_keeps_a_nan_wherever_it_sits() -> None:
    assert worst_error([1e-4, 3e-3, 2e-4]) == 3e-3
    assert math.isnan(worst_error([1e-4, float("nan")]))
    assert math.isnan(worst_error(iter([float("nan"), 1e-4])))


def test_finish_sweep_writes_the_results_then_fails_on_a_failed_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bench.common.device_name", lambda: "test device")  # no GPU to name here
    columns = [("case", "case"), ("rel_err", "rel err")]
    passing = [{"case": "a", "rel_err": 1e-4, "passed": True}]
    finish_sweep(tmp_path / "ok", passing, columns, ["a note"])
    written = json.loads((tmp_path / "ok.json").read_text())
    assert written["rows"] == passing and written["notes"] == ["a note"]
    assert "| a | 0.0001 |" in (tmp_path / "ok.md").read_text()
    finish_sweep(None, passing, columns, [])  # no --out: nothing written, nothing raised
    with pytest.raises(SystemExit, match="1 cases exceeded"):
        finish_sweep(tmp_path / "bad", [*passing, {"case": "b", "rel_err": 1.0, "passed": False}], columns, [])
    assert (tmp_path / "bad.json").exists()  # written before the failure ends the run


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_calls_timed_in_turns_report_device_time_per_call() -> None:
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.half)
    timings = time_in_turns({"one": lambda: a @ a, "four": lambda: [a @ a for _ in range(4)]})
    assert all(t.graphed for t in timings.values())
    assert 3.0 < timings["four"].median_us / timings["one"].median_us < 5.0  # each batch's time over its own calls
