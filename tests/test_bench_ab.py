"""bench.probes.tw_ab's summary of two builds' timings: fastest median per build and case, gains on the base (CPU)."""

from __future__ import annotations

import argparse
import math

import pytest

from bench.probes.tw_ab import parse_case, summarize


def _line(tag: str, case: str, tw_us: float, dense_us: float, err: float = 1e-4) -> dict[str, object]:
    return {"tag": tag, "case": case, "device": "gpu", "rel_err": err, "dense_us": dense_us, "tw_us": tw_us}


def test_summary_keeps_each_builds_fastest_round() -> None:
    lines = [
        _line("base", "cube_8192:128:0.9", 300.0, 1450.0),
        _line("new", "cube_8192:128:0.9", 250.0, 1460.0, err=2e-4),
        _line("base", "cube_8192:128:0.9", 280.0, 1440.0),
        _line("new", "cube_8192:128:0.9", 240.0, 1455.0),
    ]
    (row,) = summarize(lines, "base")
    assert row["rounds"] == 2
    assert row["dense_us"] == 1440.0
    assert row["base_us"] == 280.0 and row["new_us"] == 240.0
    assert row["new_gain"] == pytest.approx(280.0 / 240.0 - 1.0)
    assert row["base_gain"] == 0.0
    assert row["new_x_dense"] == pytest.approx(6.0)
    assert row["max_rel_err"] == 2e-4


def test_summary_without_the_baseline_reports_no_gain() -> None:
    (row,) = summarize([_line("new", "bert_qkv:128:0.75", 17.6, 23.5)], "base")
    assert math.isnan(row["new_gain"])


def test_summary_reads_files_written_before_row_major_timing() -> None:
    old = {**_line("base", "lstm_gates:128:0.75", 5.5, 4.2)}
    old["tw_fm_us"] = old.pop("tw_us")
    (row,) = summarize([old, _line("new", "lstm_gates:128:0.75", 5.0, 4.1)], "base")
    assert row["base_us"] == 5.5 and row["new_us"] == 5.0


def test_parse_case_names_shape_granularity_sparsity_and_rows() -> None:
    assert parse_case("bert_qkv:128:0.75") == ("bert_qkv", 128, 0.75, None)
    assert parse_case("lstm_gates:64:0.5:32") == ("lstm_gates", 64, 0.5, 32)
    with pytest.raises(argparse.ArgumentTypeError, match="unknown shape"):
        parse_case("bert_qvk:128:0.75")
    for bad in ("bert_qkv:128", "bert_qkv:128:0.75:32:1", "bert_qkv:128:0.75:many"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"shape:G:sparsity\[:M\]"):
            parse_case(bad)
