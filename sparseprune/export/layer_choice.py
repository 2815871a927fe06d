"""Per-layer timing of a sparse twin: each swapped layer on its own input, against the masked dense layer.

A sparse kernel wins only where the layer's shape and sparsity let it: on an H200, VGG16's 28 x 28 and 14 x 14
convolutions at 75% TW beat cuDNN while its 224 x 224 and 112 x 112 ones, whose im2col matrices cuDNN never builds,
lose more, so the whole model runs slower than dense. Timing every layer on the input it gets inside the model says
which layers win, and the "fastest" choice keeps the masked dense layer wherever it is faster: its outputs are those
of the sparse layer (the pruned weights are zeros), only its time differs. An N:M layer that the 2:4 sparse tensor
cores can take where auto reads x row-major is also timed on them with each of the GEMM's CTA tiles forced, and
"fastest" runs it on the fastest where that beats auto: the tile rule was fitted to a few shapes on two GPUs, and
where they disagreed (BERT FFN out: the tall tile ahead on an H200, behind on an H100) the layer's own timing on the
GPU at hand decides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from sparseprune.export.swap import with_dense_layers
from sparseprune.progress import progress

# Milliseconds per call of each of the named calls, timed side by side (`timing.time_calls`, so that both run under
# the same drift of the GPU's clocks).
TimeCalls = Callable[[Mapping[str, Callable[[], object]]], Mapping[str, float]]

LAYER_CHOICES = ("sparse", "fastest")  # every swapped layer on its sparse kernel, or each on the faster of the two


@dataclass(frozen=True)
class LayerTiming:
    """One swapped layer: how often a forward pass calls it, its input shape, and one call's time both ways
    (`sparse_ms` as `auto` runs it), with each 2:4 CTA tile forced where it runs on the sparse tensor cores."""

    calls: int
    input_shape: tuple[int, ...]
    dense_ms: float
    sparse_ms: float
    sp24_tile_ms: dict[str, float] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.dense_ms / self.sparse_ms

    @property
    def fastest_tile(self) -> str:
        """The tile the sparse layer ran fastest with: "auto" unless a forced tile beat auto's own choice."""
        return min({"auto": self.sparse_ms, **self.sp24_tile_ms}.items(), key=lambda tile_ms: tile_ms[1])[0]

    @property
    def fastest_sparse_ms(self) -> float:
        return self.sp24_tile_ms.get(self.fastest_tile, self.sparse_ms)


@torch.inference_mode()
def first_inputs(model: nn.Module, names: Iterable[str], forward: Callable[[], object]) -> dict[str, tuple]:
    """(first input, calls) of each named submodule over one `forward()` of `model`; inputs are cloned, so later
    in-place ops of the model cannot change them. Submodules the forward pass never calls with a positional input
    are left out."""
    seen: dict[str, list] = {}

    def record(name: str) -> Callable:
        def hook(_module: nn.Module, args: tuple) -> None:
            if not args:
                return
            if name in seen:
                seen[name][1] += 1
            else:
                seen[name] = [args[0].clone(), 1]

        return hook

    handles = [model.get_submodule(name).register_forward_pre_hook(record(name)) for name in names]
    try:
        forward()
    finally:
        for handle in handles:
            handle.remove()
    return {name: (x, calls) for name, (x, calls) in seen.items()}


@torch.inference_mode()
def time_layers(
    dense: nn.Module,
    sparse: nn.Module,
    names: Iterable[str],
    forward: Callable[[], object],
    time_ms: TimeCalls,
) -> dict[str, LayerTiming]:
    """Each named layer of `sparse` and its namesake in `dense`, timed side by side by `time_ms` on the input
    `forward()` (a pass of `sparse`) gives it. Each output is made contiguous within the timed call, as a dense
    layer after it would need it: a sparse convolution over several images leaves its output as a transposed view
    (H200, VGG16 at eight images: chosen by times without that copy, the model ran at 0.91-0.98x dense; with it, at
    0.99-1.02x). A sparse layer that hands the next one its feature-major output (`feature_major_out`) is timed
    without the copy, which its consumer does not make. A layer with 2:4 CTA tiles to choose from
    (`SparseLinear.sp24_tiles`) is timed under `auto` and with each tile forced, in the same rounds."""
    timings = {}
    for name, (x, calls) in progress(first_inputs(sparse, names, forward).items(), "timing layers"):
        dense_layer, sparse_layer = dense.get_submodule(name), sparse.get_submodule(name)
        tiles = sparse_layer.sp24_tiles(x) if hasattr(sparse_layer, "sp24_tiles") else ()
        ms = time_ms(
            {
                "dense": lambda layer=dense_layer, x=x: layer(x).contiguous(),
                "sparse": lambda layer=sparse_layer, x=x: run_with_tile(layer, x, "auto"),
                **{
                    f"sparse:{tile}": lambda layer=sparse_layer, x=x, tile=tile: run_with_tile(layer, x, tile)
                    for tile in tiles
                },
            }
        )
        timings[name] = LayerTiming(
            calls,
            tuple(x.shape),
            dense_ms=ms["dense"],
            sparse_ms=ms["sparse"],
            sp24_tile_ms={tile: ms[f"sparse:{tile}"] for tile in tiles},
        )
    return timings


def run_with_tile(layer: nn.Module, x: torch.Tensor, tile: str) -> torch.Tensor:
    """One call of the sparse layer, as consumed, with its 2:4 CTA tile set to `tile` for the call (a layer without
    one just runs)."""
    if not hasattr(layer, "sp24_tile"):
        return as_consumed(layer, layer(x))
    saved, layer.sp24_tile = layer.sp24_tile, tile
    try:
        return as_consumed(layer, layer(x))
    finally:
        layer.sp24_tile = saved


def as_consumed(layer: nn.Module, y: torch.Tensor) -> torch.Tensor:
    """y as the layer after `layer` reads it: as it is from a layer that keeps it feature-major, else contiguous."""
    return y if getattr(layer, "feature_major_out", False) else y.contiguous()


def slower_sparse_layers(timings: dict[str, LayerTiming]) -> list[str]:
    """The layers whose sparse kernel, with its fastest tile, took longer than the masked dense layer: "fastest" keeps
    these dense."""
    return [name for name, timing in timings.items() if timing.dense_ms < timing.fastest_sparse_ms]


def forced_tiles(timings: dict[str, LayerTiming], kept_dense: Iterable[str]) -> dict[str, str]:
    """The sparse layers "fastest" runs with a forced 2:4 tile, and their tiles."""
    dense = set(kept_dense)
    return {name: t.fastest_tile for name, t in timings.items() if name not in dense and t.fastest_tile != "auto"}


def fastest_twin(sparse: nn.Module, dense: nn.Module, timings: dict[str, LayerTiming]) -> tuple[nn.Module, list[str]]:
    """A copy of the sparse twin with its slower sparse layers taken back from the masked dense model and the others
    on their fastest 2:4 tiles, and the names of the layers taken back."""
    kept_dense = slower_sparse_layers(timings)
    twin = with_dense_layers(sparse, dense, kept_dense)
    for name, tile in forced_tiles(timings, kept_dense).items():
        twin.get_submodule(name).sp24_tile = tile
    return twin, kept_dense


@dataclass(frozen=True)
class LayerChoice:
    """The "fastest" choice: the twin, the layers it took back to dense, the sparse layers timed again in it, and the
    layers it runs with a forced 2:4 tile."""

    twin: nn.Module
    dense_layers: list[str]
    retimed: dict[str, LayerTiming]
    sp24_tiles: dict[str, str]


@torch.inference_mode()
def _input_layouts(model: nn.Module, names: Iterable[str], forward: Callable[[], object]) -> dict[str, tuple]:
    """(shape, strides) of each named layer's input, ignoring dimensions of size 1, whose strides do not move data:
    a channel-major (C, B, H, W) tensor of one image is stored as NCHW."""
    layouts = {}
    for name, (x, _) in first_inputs(model, names, forward).items():
        layouts[name] = tuple((size, stride) for size, stride in zip(x.shape, x.stride(), strict=True) if size > 1)
    return layouts


def fastest_choice(
    sparse: nn.Module,
    dense: nn.Module,
    timings: dict[str, LayerTiming],
    forward_of: Callable[[nn.Module], object],
    time_ms: TimeCalls,
) -> LayerChoice:
    """The "fastest" twin for `timings` (each layer timed in the all-sparse twin, `time_layers`), checked once more.

    Taking a layer back to dense can change how the next sparse layer's input is stored: a sparse FFN out reads a
    chained feature-major input in the all-sparse twin but a row-major one behind a dense FFN in, where it pays a
    transpose its timing did not. Each sparse layer whose input is now stored differently is timed again on its input
    in the mixed twin, and taken back to dense too where it now loses; `forward_of(model)` runs a pass. (BERT-base at
    one sequence on an H200, 90% TW: the first choice, its twelve FFN outs sparse, ran at 0.94x dense; timed again they
    lose, and the choice runs at 1.00x, bench/results/model_h200_bert.md.)
    """
    twin, kept_dense = fastest_twin(sparse, dense, timings)
    still_sparse = [name for name in timings if name not in kept_dense]
    before = _input_layouts(sparse, still_sparse, lambda: forward_of(sparse))
    after = _input_layouts(twin, still_sparse, lambda: forward_of(twin))
    moved = [name for name in still_sparse if name in after and after[name] != before.get(name)]
    if not moved:
        return LayerChoice(twin, kept_dense, {}, forced_tiles(timings, kept_dense))
    retimed = time_layers(dense, twin, moved, lambda: forward_of(twin), time_ms)
    final = {**timings, **retimed}
    twin, kept_dense = fastest_twin(sparse, dense, final)
    return LayerChoice(twin, kept_dense, retimed, forced_tiles(final, kept_dense))
