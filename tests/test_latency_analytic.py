"""The analytic latency model against the committed H200 timings: the errors its docstring states."""

from __future__ import annotations

import statistics

import pytest
from latency_fixtures import conv_cases, rows_of

from sparseprune.errors import UserError
from sparseprune.latency.analytic import dense_call_us, sparse_call_us, tw_gemm_us
from sparseprune.latency.geometry import LayerGeometry

TW = {"name": "tw", "granularity": 128}


def _gemm(row: dict) -> LayerGeometry:
    return LayerGeometry(row["M"], row["K"], row["N"])


def _mean_error(predicted: list[float], measured: list[float]) -> float:
    return statistics.mean(abs(p / m - 1.0) for p, m in zip(predicted, measured, strict=True))


def test_tw_gemm_errors_against_tw_h200_full_idle() -> None:
    rows = rows_of("tw_h200_full_idle.json")
    dense = [dense_call_us(_gemm(r)) for r in rows]
    tw = [tw_gemm_us(_gemm(r), r["density"], r["G"]) for r in rows]
    assert len(rows) == 80
    assert round(_mean_error(dense, [r["dense_us"] for r in rows]), 3) == 0.034
    assert round(_mean_error(tw, [r["tw_fm_us"] for r in rows]), 3) == 0.089
    speedups = [d / t for d, t in zip(dense, tw, strict=True)]
    assert round(_mean_error(speedups, [r["dense_us"] / r["tw_fm_us"] for r in rows]), 3) == 0.095


def test_convolution_errors_against_model_h200_layers() -> None:
    cases = conv_cases()
    dense = [dense_call_us(layer) for layer, _, _, _ in cases]
    sparse = [sparse_call_us(layer, TW, sparsity) for layer, sparsity, _, _ in cases]
    assert len(cases) == 48
    assert round(_mean_error(dense, [c[2] for c in cases]), 3) == 0.178
    assert round(_mean_error(sparse, [c[3] for c in cases]), 3) == 0.154
    measured = [c[2] / c[3] for c in cases]
    assert round(_mean_error([d / s for d, s in zip(dense, sparse, strict=True)], measured), 3) == 0.149


def test_nm_errors_against_nm_vw_h200_full_idle() -> None:
    rows = rows_of("nm_vw_h200_full_idle.json")
    predicted = [sparse_call_us(_gemm(r), {"name": "nm"}, r["sparsity"]) for r in rows]
    assert round(_mean_error(predicted, [r["nm_us"] for r in rows]), 3) == 0.181


def test_sparser_is_faster_and_ew_has_no_model() -> None:
    layer = LayerGeometry(6272, 4608, 512, taps=9)
    times = [sparse_call_us(layer, TW, s) for s in (0.3, 0.5, 0.75, 0.9)]
    assert times == sorted(times, reverse=True)
    with pytest.raises(UserError, match="no latency model for pattern 'ew'"):
        sparse_call_us(layer, {"name": "ew"}, 0.5)
