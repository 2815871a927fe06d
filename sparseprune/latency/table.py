"""Calibrated latency tables: each prunable layer's dense call and its sparse call at a grid of sparsities, timed on
one GPU with one build of the kernels, stored as JSON and read back only on that GPU and build."""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparseprune.errors import UserError
from sparseprune.latency.geometry import LayerGeometry

TABLE_FORMAT = "sparseprune-latency/1"
KERNEL_SOURCES = Path(__file__).resolve().parents[2] / "kernels_ext"
SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".cpp")


def kernel_build(sources: Path = KERNEL_SOURCES) -> str:
    """The kernels' version: a hash of every source file of the extension, so a table follows the code it timed."""
    digest = hashlib.sha256()
    for path in sorted(p for p in sources.rglob("*") if p.suffix in SOURCE_SUFFIXES):
        digest.update(path.relative_to(sources).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


KERNEL_OPTIONS = {"tw": ("granularity",), "tew": ("granularity", "delta"), "nm": ("n", "m", "vector"),
                  "vw": ("vector",), "bw": ("block_k", "block_n")}  # fmt: skip


def kernel_settings(pattern: Mapping[str, Any]) -> dict[str, Any]:
    """The pattern's name and the options its packed format and kernel depend on (not how units are ranked)."""
    name = str(pattern.get("name"))
    return {"name": name, **{key: pattern.get(key) for key in KERNEL_OPTIONS.get(name, ())}}


def interpolate(sparsities: Sequence[float], times_us: Sequence[float], sparsity: float) -> float:
    """Piecewise linear between measured sparsities, extended along the end segments; never below 1% of the fastest
    measured time."""
    if len(sparsities) == 1:
        return float(times_us[0])
    i = min(max(bisect_right(list(sparsities), sparsity) - 1, 0), len(sparsities) - 2)
    s0, s1, t0, t1 = sparsities[i], sparsities[i + 1], times_us[i], times_us[i + 1]
    value = t0 + (t1 - t0) * (sparsity - s0) / (s1 - s0)
    return max(value, 0.01 * min(times_us))


@dataclass(frozen=True)
class LayerTimes:
    """One layer's geometry and its times per call, in microseconds."""

    geometry: LayerGeometry
    dense_us: float
    sparsities: list[float]
    sparse_us: list[float]

    def __post_init__(self) -> None:
        ordered = all(a < b for a, b in zip(self.sparsities, self.sparsities[1:], strict=False))
        if not self.sparsities or len(self.sparsities) != len(self.sparse_us) or not ordered:
            raise UserError("a latency table layer needs increasing sparsities, one sparse time each")

    def sparse_at(self, sparsity: float) -> float:
        return interpolate(self.sparsities, self.sparse_us, sparsity)


@dataclass(frozen=True)
class LatencyTable:
    """Times measured by `python -m sparseprune.calibrate`, for one GPU, kernel build, pattern, dtype and batch."""

    gpu: str
    build: str
    pattern: dict[str, Any]
    batch_size: int
    dtype: str
    other_us: float  # the dense forward pass minus its prunable layers: what pruning leaves as it is
    layers: dict[str, LayerTimes] = field(default_factory=dict)

    def to_json(self) -> str:
        layers = {name: {**asdict(t.geometry), **{k: v for k, v in asdict(t).items() if k != "geometry"}}
                  for name, t in self.layers.items()}  # fmt: skip
        body = {"format": TABLE_FORMAT, **{k: v for k, v in asdict(self).items() if k != "layers"}, "layers": layers}
        return json.dumps(body, indent=2)

    @classmethod
    def from_json(cls, text: str, source: str) -> LatencyTable:
        try:
            body = json.loads(text)
            if body.get("format") != TABLE_FORMAT:
                raise UserError(f"{source} is not a latency table ({TABLE_FORMAT}); make one with "
                                "python -m sparseprune.calibrate")  # fmt: skip
            geometry_keys = ("rows", "k", "n", "calls", "taps")
            layers = {
                name: LayerTimes(LayerGeometry(**{k: int(row[k]) for k in geometry_keys}), float(row["dense_us"]),
                                 [float(s) for s in row["sparsities"]], [float(t) for t in row["sparse_us"]])
                for name, row in body["layers"].items()
            }  # fmt: skip
            return cls(str(body["gpu"]), str(body["build"]), dict(body["pattern"]), int(body["batch_size"]),
                       str(body["dtype"]), float(body["other_us"]), layers)  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise UserError(f"{source} is not a readable latency table ({type(error).__name__}: {error})") from None

    def check_for(self, gpu: str | None, build: str, pattern: Mapping[str, Any], source: str) -> None:
        """Refuse a table timed on another GPU, another kernel build or for another pattern: its times say nothing
        of this one. Without a GPU here the table stands for the GPU it names."""
        again = f"; recalibrate with python -m sparseprune.calibrate (table {source})"
        if gpu is not None and gpu != self.gpu:
            raise UserError(f"the latency table was measured on {self.gpu}, this GPU is {gpu}{again}")
        if build != self.build:
            raise UserError(f"the latency table was measured with kernel build {self.build}, the kernels here are "
                            f"build {build}{again}")  # fmt: skip
        if kernel_settings(pattern) != kernel_settings(self.pattern):
            raise UserError(f"the latency table was measured for pattern {kernel_settings(self.pattern)}, this run "
                            f"prunes {kernel_settings(pattern)}{again}")  # fmt: skip

    def check_layers(self, geometry: Mapping[str, LayerGeometry], source: str) -> None:
        """The table times this model's prunable layers at this run's batch: same names and GEMM shapes."""
        missing = sorted(set(geometry) - set(self.layers))
        if missing:
            raise UserError(f"latency table {source} has no times for {missing[:3]}: it was calibrated for another "
                            "model; recalibrate with python -m sparseprune.calibrate")  # fmt: skip
        for name, layer in geometry.items():
            timed = self.layers[name].geometry
            if (timed.rows, timed.k, timed.n) != (layer.rows, layer.k, layer.n):
                raise UserError(
                    f"latency table {source} timed {name} as a {timed.rows} x {timed.k} x {timed.n} GEMM (batch "
                    f"{self.batch_size}), this run's is {layer.rows} x {layer.k} x {layer.n}; calibrate at this "
                    "batch size (data.batch_size) or set callbacks.staged_pruning.latency.batch_size"
                )


def read_table(path: Path) -> LatencyTable:
    if not path.is_file():
        raise UserError(f"latency table {path} does not exist; make it with python -m sparseprune.calibrate")
    return LatencyTable.from_json(path.read_text(), str(path))


def table_name(model: str, gpu: str, build: str, batch_size: int) -> str:
    """The cache file of one model, GPU, build and batch: `vgg16_nvidia-h200_3f2a9c1d0b4e_b64.json`."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    return f"{model}_{slug}_{build}_b{batch_size}.json"


def current_gpu() -> str | None:
    """The visible GPU's name, or None on a machine without one."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None
