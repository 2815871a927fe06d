"""What a layer's time depends on: its GEMM (rows M of x, K, N), how often a forward pass calls it, and for a
convolution the taps of its im2col matrix. Recorded from one forward pass, so every model is covered the same way."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from sparseprune.export.sparse_modules import conv_output_size


@dataclass(frozen=True)
class LayerGeometry:
    """One GEMM layer at one batch size: y = x @ B with x (rows x k), B (k x n), called `calls` times per forward
    pass; `taps` is kh * kw for a convolution (its sparse call builds the rows x k im2col matrix) and 0 for a Linear."""

    rows: int
    k: int
    n: int
    calls: int = 1
    taps: int = 0

    @property
    def is_conv(self) -> bool:
        return self.taps > 0

    def at_batch(self, scale: float) -> LayerGeometry:
        """The same layer with `scale` times the rows (rows grow with the batch for every model here)."""
        return replace(self, rows=max(1, round(self.rows * scale)))


def _rows_of(module: nn.Module, x: torch.Tensor) -> tuple[int, int]:
    """(rows of the GEMM, im2col taps) of one call of `module` on input x."""
    if isinstance(module, nn.Conv2d):
        out_h, out_w = conv_output_size(x, module.kernel_size, module.dilation, module.padding, module.stride)
        return x.shape[0] * out_h * out_w, module.kernel_size[0] * module.kernel_size[1]
    return x.numel() // max(x.shape[-1], 1), 0


@contextmanager
def preserved_random_state() -> Iterator[None]:
    """torch's, numpy's and Python's generators as they were before the block: drawing a batch to record the geometry
    (augmentation draws from them) changes nothing a training run draws afterwards."""
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


@contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode for the block: no batch-norm statistics move, no dropout draws."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def gemm_modules(model: nn.Module) -> Iterable[tuple[str, nn.Module]]:
    """Every Linear and Conv2d of the model: the layers whose GEMMs the latency model times."""
    return ((name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear | nn.Conv2d))


@torch.no_grad()
def record_geometry(model: nn.Module, forward: Callable[[], object]) -> dict[str, LayerGeometry]:
    """{weight name: geometry} of every Linear and Conv2d that `forward()` (a pass of `model`) calls."""
    seen: dict[str, list] = {}

    def hook(name: str) -> Callable:
        def record(module: nn.Module, args: tuple) -> None:
            if name in seen:
                seen[name][1] += 1
            elif args:
                seen[name] = [(*_rows_of(module, args[0]), module.weight), 1]

        return record

    handles = [module.register_forward_pre_hook(hook(name)) for name, module in gemm_modules(model)]
    try:
        with _evaluating(model), preserved_random_state():
            forward()
    finally:
        for handle in handles:
            handle.remove()
    geometry = {}
    for name, ((rows, taps, weight), calls) in seen.items():
        k, n = int(weight[0].numel()), int(weight.shape[0])
        geometry[f"{name}.weight" if name else "weight"] = LayerGeometry(rows, k, n, calls, taps)
    return geometry
