"""`python -m sparseprune.calibrate model=vgg16 data.batch_size=64`: the latency table of a model on this GPU.

Each prunable layer is timed on the input it gets in the model (one batch of `data`), dense and packed at each of
`sparsities` (a magnitude mask of the pattern on that layer alone), side by side in rounds as export times layers;
the rest of the forward pass is the dense model's time less its prunable layers'. The table is keyed by the GPU's
name and the kernels' source hash, and training refuses it anywhere else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from sparseprune.app.cli import exit_on_user_error
from sparseprune.app.console import quiet_console
from sparseprune.errors import UserError
from sparseprune.files import write_text

log = logging.getLogger("sparseprune.calibrate")


def require_gpu() -> None:
    """Calibration times kernels: on a CPU, or without the extension, there is nothing to time."""
    if not torch.cuda.is_available():
        raise UserError(
            "calibration times the sparse kernels on a CUDA GPU and none is visible; run it on the GPU the model "
            "will serve on (without a table, training predicts from the analytic model)"
        )
    from sparseprune.export.formats.extension import load_kernels

    if load_kernels() is None:
        raise UserError("the CUDA extension sparseprune._kernels is not built (pip install -e . on this GPU machine); "
                        "without it only the torch references would be timed")  # fmt: skip


def grid(cfg: DictConfig, fixed: float | None) -> list[float]:
    """The sparsities to time: the configured grid, or the one sparsity a pattern fixes (N:M)."""
    values = sorted({float(s) for s in cfg.sparsities})
    if fixed is not None:
        return [fixed]
    if not values or not all(0.0 <= s < 1.0 for s in values):
        raise UserError(f"sparsities must be a non-empty list of values in [0, 1), got {list(cfg.sparsities)}")
    return values


def _sparse_layer(
    module: nn.Module, weight_kn: torch.Tensor, codes: torch.Tensor, pattern: dict[str, Any]
) -> nn.Module:
    from sparseprune.export.packing import pack_layer
    from sparseprune.export.sparse_modules import SparseConv2d, SparseLinear

    packed = pack_layer(weight_kn, codes, pattern)
    if isinstance(module, nn.Conv2d):
        return SparseConv2d(packed, module.bias, module)
    return SparseLinear(packed, module.bias)


def calibrate(cfg: DictConfig) -> Path:
    """Time every prunable layer and write the table; returns its path."""
    require_gpu()
    from hydra.utils import instantiate

    from sparseprune.batches import to_dtype, transfer_batch
    from sparseprune.export.layer_choice import as_consumed, first_inputs
    from sparseprune.export.timing import time_calls
    from sparseprune.latency.geometry import record_geometry
    from sparseprune.latency.table import LatencyTable, LayerTimes, current_gpu, kernel_build, table_name
    from sparseprune.progress import progress
    from sparseprune.pruning.gemm_view import find_prunable, to_gemm
    from sparseprune.pruning.patterns.base import pattern_from_config

    torch.manual_seed(cfg.seed)
    device, dtype = torch.device("cuda"), torch.float16
    pattern_config = OmegaConf.to_container(cfg.pattern, resolve=True)
    pattern = pattern_from_config(pattern_config)  # type: ignore[arg-type]
    datamodule = instantiate(cfg.data)
    model = instantiate(cfg.model, **datamodule.model_kwargs()).eval()
    weights = find_prunable(model, model.prune_exclude)
    pattern.check_fits({w.name: w.gemm_shape for w in weights})
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    model = model.to(device, dtype)
    batch = to_dtype(transfer_batch(batch, model, None), dtype)

    def forward() -> object:
        return model.predict_batch(batch)

    geometry = record_geometry(model, forward)
    modules = {w.name.removesuffix(".weight"): w for w in weights}
    inputs = first_inputs(model, modules, forward)

    def timed(calls: dict[str, Callable[[], object]]) -> dict[str, float]:
        found = time_calls(calls, device, cfg.warmup, cfg.repeats, True, cfg.timing_rounds, idle_ms=cfg.timing_idle_ms)
        return {name: 1000.0 * timing.median_ms for name, timing in found.items()}

    sparsities = grid(cfg, pattern.fixed_sparsity())
    layers = {}
    for module_name, weight in progress(modules.items(), "calibrating layers"):
        module, (x, _) = model.get_submodule(module_name), inputs[module_name]
        if not isinstance(module, nn.Linear | nn.Conv2d):
            raise UserError(f"{weight.name} is not a Linear or Conv2d weight: no sparse module times it")
        weight_kn = to_gemm(weight.param.detach())
        calls = {"dense": lambda m=module, x=x: m(x).contiguous()}
        for s in sparsities:
            codes = pattern.keep_codes({weight.name: weight_kn.abs().float()}, s, "layer")[weight.name]
            sparse = _sparse_layer(module, weight_kn, codes, pattern_config).to(device, dtype)  # type: ignore[arg-type]
            calls[f"{s}"] = lambda m=sparse, x=x: as_consumed(m, m(x))
        us = timed(calls)
        layers[weight.name] = LayerTimes(
            geometry[weight.name], us["dense"], sparsities, [us[f"{s}"] for s in sparsities]
        )
    whole = timed({"model": forward})["model"]
    other = max(whole - sum(t.geometry.calls * t.dense_us for t in layers.values()), 0.0)
    gpu, build = current_gpu() or "", kernel_build()
    table = LatencyTable(gpu, build, dict(pattern_config), int(cfg.data.batch_size), "float16", other, layers)  # type: ignore[arg-type]
    model_name = str(cfg.model._target_).rpartition(".")[2].lower()
    out = (
        Path(cfg.out)
        if cfg.out
        else Path(cfg.paths.root_dir) / "calibration" / table_name(model_name, gpu, build, table.batch_size)
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, table.to_json())
    log.info("latency table of %d layers on %s (kernel build %s): %s", len(layers), gpu, build, out)
    return out


@hydra.main(version_base="1.3", config_path="../conf", config_name="calibrate")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    quiet_console()
    print(f"latency table: {calibrate(cfg)}")


if __name__ == "__main__":
    main()
