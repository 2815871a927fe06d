"""Committed H200 results as the analytic latency model's inputs, and a hand-written latency model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from sparseprune.latency.geometry import LayerGeometry
from sparseprune.latency.predictor import LatencyModel

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
VGG16_OUT_CHANNELS = {  # model_h200_auto_rows_layers.json names layers, not their widths
    "features.3": 64, "features.7": 128, "features.10": 128, "features.14": 256, "features.17": 256,
    "features.20": 256, "features.24": 512, "features.27": 512, "features.30": 512, "features.34": 512,
    "features.37": 512, "features.40": 512,
}  # fmt: skip


def rows_of(name: str) -> list[dict]:
    return json.loads((RESULTS / name).read_text())["rows"]


def conv_cases() -> list[tuple[LayerGeometry, float, float, float]]:
    """(geometry, sparsity, cuDNN us, sparse us) of each TW row of VGG16's 3 x 3 convolutions."""
    cases = []
    for row in rows_of("model_h200_auto_rows_layers.json"):
        if row["pattern"] != "tw" or row["layer"] not in VGG16_OUT_CHANNELS:
            continue
        batch, channels, height, width = (int(v) for v in row["input"].split(" × "))
        layer = LayerGeometry(batch * height * width, 9 * channels, VGG16_OUT_CHANNELS[row["layer"]], taps=9)
        cases.append((layer, row["sparsity"], row["dense_us"], row["sparse_us"]))
    return cases


def linear_model(curves: dict[str, tuple[float, float, float]], other_us: float = 0.0) -> LatencyModel:
    """Layers whose sparse time is `fixed + slope * density` against a `dense` time: {name: (dense, fixed, slope)}."""
    sparse: dict[str, Callable[[float], float]] = {
        name: (lambda s, fixed=fixed, slope=slope: fixed + slope * (1.0 - s))
        for name, (_, fixed, slope) in curves.items()
    }
    return LatencyModel({name: dense for name, (dense, _, _) in curves.items()}, sparse, other_us, "hand-written")
