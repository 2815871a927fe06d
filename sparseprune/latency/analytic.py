"""Predicted call times from FLOPs and bytes against an H200's peaks, for where no calibrated table exists (a CPU,
the tests): each call is a fixed overhead plus the longer of its compute and its memory traffic at a fitted share
of the peak.

Fitted to the committed H200 results, by the mean absolute log error (tests/test_latency_analytic.py recomputes
every figure below from the JSON files):
- dense GEMM (cuBLAS) and TW GEMM with feature-major x (`tw_h200_full_idle.json`, 80 cases: BERT-base, VGG16 conv4,
  LSTM gates, 8192^3 and decode shapes, 30-90%, G = 64 and 128): mean relative error 3.4% dense, 8.9% TW, 9.5% on
  the speedup. The model misses most on 8192^3 (TW 20% slow) and on the LSTM gate GEMM (TW 20% fast).
- convolutions (`model_h200_auto_rows_layers.json`, VGG16's twelve 3 x 3 layers at 224 x 224, one and eight images,
  TW 75% and 90%): cuDNN 18%, im2col plus TW 15%, speedup 15%; cuDNN's times follow its algorithm choice more than
  FLOPs (the 224 x 224 layer at eight images: 240 us measured, 100 predicted).
- N:M and VW (`nm_vw_h200_full_idle.json`, 2:8 and 2:4 at V = 128, 14 cases): 18%.
- TEW's residual and BW have no committed timing: their constants are assumptions, named below.
Recalibrating (`python -m sparseprune.calibrate`) replaces all of this with times measured on the GPU at hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sparseprune.errors import UserError
from sparseprune.latency.geometry import LayerGeometry

PEAK_FLOPS = 989e12  # H200 SXM, fp16 dense tensor cores
PEAK_BYTES_PER_S = 4.8e12  # H200 SXM, HBM3e
FP16 = 2  # bytes per value

GEMM_OVERHEAD_US, GEMM_COMPUTE, GEMM_MEMORY = 2.97, 0.738, 0.835  # cuBLAS
TW_OVERHEAD_US, TW_COMPUTE, TW_GRANULARITY_EXPONENT = 5.66, 0.455, 0.51  # share of peak x (G / 128) ** exponent
CONV_OVERHEAD_US, CONV_COMPUTE, CONV_MEMORY = 22.8, 0.386, 0.778  # cuDNN, implicit GEMM
IM2COL_OVERHEAD_US, IM2COL_MEMORY = 10.45, 0.535  # writing the rows x K matrix the sparse convolution reads
NM_OVERHEAD_US, NM_COMPUTE, NM_INDEX_BYTES = 4.92, 0.405, 0.25  # index bytes per kept value's byte
TEW_RESIDUAL_COMPUTE = 0.02  # assumed: the CSC residual runs on CUDA cores, about 2% of the tensor-core peak
BSR_MEMORY = GEMM_MEMORY  # assumed: BW's batched GEMM over kept blocks is bound by gathering x and writing partials


def _us(flops: float, nbytes: float, overhead_us: float, compute: float, memory: float) -> float:
    return overhead_us + 1e6 * max(flops / (PEAK_FLOPS * compute), nbytes / (PEAK_BYTES_PER_S * memory))


def dense_call_us(layer: LayerGeometry) -> float:
    """cuBLAS for a Linear, cuDNN for a convolution."""
    m, k, n = layer.rows, layer.k, layer.n
    if layer.is_conv:
        inputs = m * k // layer.taps
        return _us(2 * m * k * n, FP16 * (inputs + k * n + m * n), CONV_OVERHEAD_US, CONV_COMPUTE, CONV_MEMORY)
    return _us(2 * m * k * n, FP16 * (m * k + k * n + m * n), GEMM_OVERHEAD_US, GEMM_COMPUTE, GEMM_MEMORY)


def _im2col_us(layer: LayerGeometry) -> float:
    if not layer.is_conv:
        return 0.0
    return IM2COL_OVERHEAD_US + 1e6 * FP16 * layer.rows * layer.k / (PEAK_BYTES_PER_S * IM2COL_MEMORY)


def tw_gemm_us(layer: LayerGeometry, density: float, granularity: int) -> float:
    """The TW kernels on feature-major x: the kept tiles' FLOPs at a share of the peak that grows with G."""
    m, k, n = layer.rows, layer.k, layer.n
    compute = TW_COMPUTE * (granularity / 128) ** TW_GRANULARITY_EXPONENT
    nbytes = FP16 * (k * n * density + m * k + m * n)
    return _us(2 * m * k * n * density, nbytes, TW_OVERHEAD_US, compute, GEMM_MEMORY)


def _tw(layer: LayerGeometry, density: float, options: Mapping[str, Any]) -> float:
    return _im2col_us(layer) + tw_gemm_us(layer, density, int(options.get("granularity", 128)))


def _tew(layer: LayerGeometry, density: float, options: Mapping[str, Any]) -> float:
    residual = min(float(options.get("delta", 0.015)), density)
    tiles = _tw(layer, density - residual, options)
    return tiles + 1e6 * 2 * layer.rows * layer.k * layer.n * residual / (PEAK_FLOPS * TEW_RESIDUAL_COMPUTE)


def _nm(layer: LayerGeometry, density: float, options: Mapping[str, Any]) -> float:
    m, k, n = layer.rows, layer.k, layer.n
    nbytes = FP16 * (k * n * density * (1 + NM_INDEX_BYTES) + m * k + m * n)
    return _im2col_us(layer) + _us(2 * m * k * n * density, nbytes, NM_OVERHEAD_US, NM_COMPUTE, GEMM_MEMORY)


def _bw(layer: LayerGeometry, density: float, options: Mapping[str, Any]) -> float:
    """x gathered per kept block (rows x bk) and one partial (rows x bn) written and summed per kept block."""
    block_k, block_n = int(options.get("block_k", 32)), int(options.get("block_n", 32))
    blocks = density * (layer.k // block_k) * (layer.n // block_n)
    nbytes = FP16 * layer.rows * blocks * 2 * (block_k + block_n)
    flops = 2 * layer.rows * layer.k * layer.n * density
    return _im2col_us(layer) + _us(flops, nbytes, GEMM_OVERHEAD_US, GEMM_COMPUTE, BSR_MEMORY)


SPARSE_CALLS: dict[str, Callable[[LayerGeometry, float, Mapping[str, Any]], float]] = {
    "tw": _tw,
    "tew": _tew,
    "nm": _nm,
    "vw": _nm,
    "bw": _bw,
}  # by pattern name; EW runs on cuSPARSE, which no model here predicts


def sparse_call_us(layer: LayerGeometry, pattern: Mapping[str, Any], sparsity: float) -> float:
    """One sparse call of the layer pruned to `sparsity` with `pattern` (a pattern config: name and options)."""
    name = str(pattern.get("name"))
    if name not in SPARSE_CALLS:
        raise UserError(
            f"no latency model for pattern {name!r} (it has no fast kernel); models: {sorted(SPARSE_CALLS)}"
        )
    return SPARSE_CALLS[name](layer, 1.0 - sparsity, pattern)
