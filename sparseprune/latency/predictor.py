"""The latency model a run prunes against: each prunable layer's time per forward pass, dense and sparse at any
sparsity, and the time of everything pruning leaves as it is; from a calibrated table or the analytic model."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sparseprune.latency.analytic import dense_call_us, sparse_call_us
from sparseprune.latency.geometry import LayerGeometry
from sparseprune.latency.table import LatencyTable


@dataclass(frozen=True)
class LatencyModel:
    """Predicted microseconds per forward pass (calls included) of each prunable layer; `source` says where from."""

    dense: dict[str, float]
    sparse: dict[str, Callable[[float], float]]
    other_us: float
    source: str

    def sparse_us(self, name: str, sparsity: float) -> float:
        return self.sparse[name](sparsity)

    def layer_us(self, name: str, sparsity: float, dense: bool) -> float:
        """The layer's time as the run deploys it: dense where it stays dense, else its sparse call."""
        return self.dense[name] if dense else self.sparse_us(name, sparsity)

    def loses(self, name: str, sparsity: float) -> bool:
        """Whether the sparse call at `sparsity` is no faster than the dense one."""
        return self.sparse_us(name, sparsity) >= self.dense[name]

    def model_us(self, sparsity: Mapping[str, float], dense_layers: Collection[str] = ()) -> float:
        return self.other_us + sum(self.layer_us(n, sparsity.get(n, 0.0), n in dense_layers) for n in self.dense)

    def speedup(self, sparsity: Mapping[str, float], dense_layers: Collection[str] = ()) -> float:
        """Predicted whole-model speedup over the dense model."""
        return self.model_us({}, self.dense) / self.model_us(sparsity, dense_layers)

    def layer_speedups(self, sparsity: Mapping[str, float], dense_layers: Collection[str] = ()) -> dict[str, float]:
        return {n: self.dense[n] / self.layer_us(n, sparsity.get(n, 0.0), n in dense_layers) for n in self.dense}


def analytic_model(
    geometry: Mapping[str, LayerGeometry], prunable: Collection[str], pattern: Mapping[str, Any]
) -> LatencyModel:
    """The analytic model over the recorded layers; the GEMM layers that stay dense count as the rest (other ops,
    such as norms and pooling, are not predicted)."""
    pattern = dict(pattern)
    dense = {n: g.calls * dense_call_us(g) for n, g in geometry.items() if n in prunable}
    sparse = {n: (lambda s, g=g: g.calls * sparse_call_us(g, pattern, s)) for n, g in geometry.items() if n in prunable}
    other = sum(g.calls * dense_call_us(g) for n, g in geometry.items() if n not in prunable)
    return LatencyModel(dense, sparse, other, "analytic (H200 peaks)")


def table_model(table: LatencyTable, prunable: Collection[str], source: str) -> LatencyModel:
    """The calibrated times of the prunable layers; the rest is the table's measured remainder, plus any layer it
    timed that this run leaves dense."""
    layers = table.layers
    dense = {n: layers[n].geometry.calls * layers[n].dense_us for n in prunable}
    sparse = {n: (lambda s, t=layers[n]: t.geometry.calls * t.sparse_at(s)) for n in prunable}
    other = table.other_us + sum(t.geometry.calls * t.dense_us for n, t in layers.items() if n not in prunable)
    return LatencyModel(dense, sparse, other, f"calibrated on {table.gpu} ({source})")
