"""The `latency` options of the pruning callback, and how they become the run's latency model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L

from sparseprune.config_types import check_dataclass
from sparseprune.errors import UserError
from sparseprune.latency.analytic import SPARSE_CALLS
from sparseprune.latency.geometry import record_geometry
from sparseprune.latency.predictor import LatencyModel, analytic_model, table_model
from sparseprune.latency.table import current_gpu, kernel_build, read_table
from sparseprune.pruning.gemm_view import PrunableWeight

PREFIX = "callbacks.staged_pruning.latency."


@dataclass(frozen=True)
class LatencyOptions:
    """`table`: a calibration file (python -m sparseprune.calibrate), None for the analytic model; `batch_size`: the
    batch the predictions are for, None for the training batch."""

    table: str | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        check_dataclass(self, PREFIX)
        if self.batch_size is not None and self.batch_size < 1:
            raise UserError(f"{PREFIX}batch_size must be at least 1, got {self.batch_size}")

    def build(
        self,
        module: L.LightningModule,
        batch: Any,
        loader_batch: int | None,
        weights: Sequence[PrunableWeight],
        pattern: Mapping[str, Any],
        required: bool,
    ) -> LatencyModel | None:
        """The latency model of `module`'s prunable weights from one forward pass on `batch` (of `loader_batch`
        examples); None, unless `required`, where some layer or the pattern has none."""
        geometry = record_geometry(module, lambda: module.predict_batch(batch))
        if self.batch_size is not None and loader_batch:
            geometry = {name: layer.at_batch(self.batch_size / loader_batch) for name, layer in geometry.items()}
        prunable = [w.name for w in weights]
        missing = [name for name in prunable if name not in geometry]
        if missing or (self.table is None and str(pattern.get("name")) not in SPARSE_CALLS):
            if required:
                raise UserError(f"no latency model for {missing[:3]}: only Linear and Conv2d layers are predicted")
            return None
        if self.table is None:
            return analytic_model(geometry, prunable, pattern)
        table = read_table(Path(self.table))
        table.check_for(current_gpu(), kernel_build(), pattern, self.table)
        table.check_layers({name: geometry[name] for name in prunable}, self.table)
        return table_model(table, prunable, self.table)


def stage_prediction(model: LatencyModel, sparsity: Mapping[str, float], dense_layers: Sequence[str]) -> dict[str, Any]:
    """A stage's predicted speedups over dense, whole model and per layer, labelled with the model's source."""
    return {
        "speedup": model.speedup(sparsity, dense_layers),
        "layers": model.layer_speedups(sparsity, dense_layers),
        "source": model.source,
    }
