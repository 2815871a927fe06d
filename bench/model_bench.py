"""Whole-model inference on a GPU: VGG16 on 224 x 224 images in cuDNN against its sparse twin, as export.py builds
it (every prunable weight packed and its module swapped), and against the twin with each layer on whichever of its
sparse kernel and the masked dense layer ran faster alone (export.py's layer_choice=fastest), one pattern at a time;
PREFIX_layers holds those per-layer times.

Run from the repository root on a GPU with the extension built:
    python -m bench.model_bench --out bench/results/model_h200
The model is the project's VGG16 with its compact head (global pooling, 512 -> 512 -> 1000), so the thirteen
convolutions carry the work. The weights are its random initialisation, pruned layer by layer by magnitude to the
pattern's structure (what the kernels see does not depend on how the mask was chosen) and rescaled to the dense
layer's norm, so that activations keep their scale through fifteen layers in fp16 (unscaled, 90% TW shrinks them
into fp16's subnormals by the last convolution). Every sparse model's logits are checked against the masked dense
model in fp32 on the same random images before it is timed.
"""

from __future__ import annotations

import argparse
import copy
import logging
from pathlib import Path
from typing import Any

import torch

from bench.common import exit_if_any_failed, markdown_table, relative_error, require_kernels, time_cuda, write_results
from sparseprune.export.fold import fold_batch_norms
from sparseprune.export.layer_choice import fastest_twin, time_layers
from sparseprune.export.packing import pack_layer
from sparseprune.export.swap import sparsify, swapped_modules
from sparseprune.gemm_view import find_prunable, from_gemm, to_gemm
from sparseprune.models.vgg import build_vgg16, vgg16_dense_layers
from sparseprune.patterns import build_pattern, keep_mask
from sparseprune.patterns.base import Pattern

log = logging.getLogger("model_bench")

PATTERNS = {
    "tw": {"name": "tw", "granularity": 128},
    "nm-2:8-v64": {"name": "nm", "n": 2, "m": 8, "vector": 64},
    "nm-2:4": {"name": "nm", "n": 2, "m": 4},
}
TOLERANCE = 1e-2  # fp16 through 15 layers against fp32
COLUMNS = [
    ("pattern", "pattern"),
    ("sparsity", "sparsity"),
    ("batch", "batch"),
    ("batch_norms", "batch norms"),
    ("dense_us", "dense µs"),
    ("sparse_us", "sparse µs"),
    ("speedup", "×dense"),
    ("sparse_layers", "layers faster sparse"),
    ("fastest_us", "fastest choice µs"),
    ("fastest_speedup", "fastest ×dense"),
    ("rel_err", "rel err vs fp32"),
    ("fastest_rel_err", "fastest rel err"),
]
LAYER_COLUMNS = [
    ("pattern", "pattern"),
    ("sparsity", "sparsity"),
    ("batch", "batch"),
    ("layer", "layer"),
    ("input", "input"),
    ("dense_us", "dense µs"),
    ("sparse_us", "sparse µs"),
    ("speedup", "×dense"),
]
LEGEND = (
    "Whole-model forward, fp16, eval mode, medians of CUDA-graph replays, batch norms folded into the convolutions in "
    "both models as export.py folds them (unless 'kept'); 'dense' is the same model in cuDNN and "
    "cuBLAS with the unpruned weights; 'sparse' is the model with every prunable layer (all but the first "
    "convolution and the last Linear) swapped for its packed module; 'fastest choice' keeps the masked dense layer "
    "wherever it ran faster than the sparse one, each timed alone on the input it gets inside the model (as "
    "export.py's layer_choice=fastest does; the per-layer times are in the _layers file), and 'layers faster sparse' "
    "counts the layers that stay sparse; 'rel err' compares the logits with the masked dense model run in fp32."
)
LAYER_LEGEND = (
    "Each swapped layer of the whole-model run alone, on the input it gets inside the sparse model (one call, "
    "median of CUDA-graph replays, fp16): the masked dense layer in cuDNN/cuBLAS against its sparse module "
    "(im2col + packed kernel for a convolution)."
)


def pattern_structure(pattern: dict[str, Any]) -> Pattern:
    """The pattern object of one PATTERNS entry (its config dict, as export's pack_layer reads it)."""
    return build_pattern(pattern["name"], **{k: v for k, v in pattern.items() if k != "name"})


def prune_in_place(model: torch.nn.Module, pattern: dict[str, Any], sparsity: float) -> tuple[dict[str, Any], float]:
    """Masks every prunable weight of `model` to `pattern` at `sparsity` (an N:M pattern fixes its own); returns the
    packed layers and the sparsity."""
    structure = pattern_structure(pattern)
    target = structure.fixed_sparsity() or sparsity
    packed = {}
    for weight in find_prunable(model, vgg16_dense_layers(model)):
        b = to_gemm(weight.param.detach()).float()
        codes = structure.keep_codes({weight.name: b.abs().cpu()}, target)[weight.name]
        masked = b * keep_mask(codes).to(b.device)
        masked *= b.norm() / masked.norm().clamp_min(1e-30)  # keeps activations at scale through 15 layers in fp16
        weight.param.data.copy_(from_gemm(masked, weight.param.shape))
        packed[weight.name] = pack_layer(masked.cpu(), codes, pattern)
    return packed, target


def vgg16(fold: bool) -> torch.nn.Module:
    """The benchmark's VGG16 in eval mode, its batch norms folded into the convolutions as export.py folds them."""
    torch.manual_seed(0)
    model = build_vgg16(num_classes=1000).eval()
    if fold:
        fold_batch_norms(model)
    return model


def time_ms(fn: Any) -> float:
    return time_cuda(fn).median_us / 1e3


def run_case(
    name: str, sparsity: float, batches: list[int], dense_times: dict[int, float], fold: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(whole-model rows, per-layer rows) of one pattern at one sparsity, for each batch size."""
    model = vgg16(fold)
    packed, target = prune_in_place(model, PATTERNS[name], sparsity)
    masked32 = model.cuda()
    masked16 = copy.deepcopy(masked32).half()
    weights = find_prunable(model, vgg16_dense_layers(model))
    sparse = sparsify(model, weights, packed).cuda().half()
    rows, layer_rows = [], []
    for batch in batches:
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        xh = x.half()
        layers = time_layers(masked16, sparse, swapped_modules(weights, packed), lambda xh=xh: sparse(xh), time_ms)
        fastest, kept_dense = fastest_twin(sparse, masked16, layers)
        with torch.inference_mode():
            ref = masked32(x)
            err, fastest_err = relative_error(sparse(xh), ref), relative_error(fastest(xh), ref)
            t_sparse = time_cuda(lambda xh=xh: sparse(xh)).median_us
            t_fastest = time_cuda(lambda xh=xh, net=fastest: net(xh)).median_us
        case = {"pattern": name, "sparsity": target, "batch": batch, "batch_norms": "folded" if fold else "kept"}
        rows.append({**case, "dense_us": dense_times[batch], "sparse_us": t_sparse,
                     "speedup": dense_times[batch] / t_sparse, "rel_err": err,
                     "sparse_layers": f"{len(layers) - len(kept_dense)} of {len(layers)}",
                     "fastest_us": t_fastest, "fastest_speedup": dense_times[batch] / t_fastest,
                     "fastest_rel_err": fastest_err,
                     "passed": max(err, fastest_err) <= TOLERANCE})  # fmt: skip
        layer_rows += [{**case, "layer": layer, "input": " × ".join(map(str, t.input_shape)),
                        "dense_us": 1e3 * t.dense_ms, "sparse_us": 1e3 * t.sparse_ms, "speedup": t.speedup}
                       for layer, t in layers.items()]  # fmt: skip
        row = rows[-1]
        log.info("%s %.2f batch %d: %.2fx dense, fastest choice %.2fx (%s layers sparse), rel err %.1e", name, target,
                 batch, row["speedup"], row["fastest_speedup"], row["sparse_layers"], err)  # fmt: skip
    return rows, layer_rows


def dense_times(batches: list[int], fold: bool) -> dict[int, float]:
    model = vgg16(fold).cuda().half()
    times = {}
    for batch in batches:
        x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
        with torch.inference_mode():
            times[batch] = time_cuda(lambda x=x: model(x)).median_us
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", nargs="*", default=list(PATTERNS), choices=list(PATTERNS))
    parser.add_argument("--sparsities", nargs="*", type=float, default=[0.75, 0.9], help="for patterns without N:M")
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 8])
    parser.add_argument("--keep-batch-norms", action="store_true", help="time the norms instead of folding them")
    parser.add_argument("--out", type=Path, default=None, help="results prefix: writes PREFIX.json and PREFIX.md")
    args = parser.parse_args()
    fold = not args.keep_batch_norms
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    require_kernels("model_bench")
    torch.backends.cudnn.benchmark = True
    dense = dense_times(args.batches, fold)
    rows: list[dict[str, Any]] = []
    layer_rows: list[dict[str, Any]] = []
    for name in args.patterns:
        fixed = pattern_structure(PATTERNS[name]).fixed_sparsity() is not None
        for sparsity in args.sparsities[:1] if fixed else args.sparsities:
            case_rows, case_layers = run_case(name, sparsity, args.batches, dense, fold)
            rows, layer_rows = rows + case_rows, layer_rows + case_layers
            if args.out:
                write_results(args.out, rows, COLUMNS, [LEGEND])
                write_results(args.out.with_name(args.out.name + "_layers"), layer_rows, LAYER_COLUMNS, [LAYER_LEGEND])
    print(markdown_table(rows, COLUMNS))
    exit_if_any_failed(rows, "models")


if __name__ == "__main__":
    main()
