"""Whole-model inference on a GPU: VGG16 on 224 x 224 images in cuDNN against its sparse twin, as export.py builds
it (every prunable weight packed and its module swapped), one pattern at a time.

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
import logging
from pathlib import Path
from typing import Any

import torch

from bench.common import exit_if_any_failed, markdown_table, relative_error, require_kernels, time_cuda, write_results
from sparseprune.export.packing import pack_layer
from sparseprune.export.swap import sparsify
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
    ("dense_us", "dense µs"),
    ("sparse_us", "sparse µs"),
    ("speedup", "×dense"),
    ("rel_err", "rel err vs fp32"),
]
LEGEND = (
    "Whole-model forward, fp16, eval mode, medians of CUDA-graph replays; 'dense' is the same model in cuDNN and "
    "cuBLAS with the unpruned weights; 'sparse' is the model with every prunable layer (all but the first "
    "convolution and the last Linear) swapped for its packed module; 'rel err' compares the sparse model's logits "
    "with the masked dense model run in fp32."
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


def vgg16() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_vgg16(num_classes=1000).eval()


def run_case(name: str, sparsity: float, batches: list[int], dense_times: dict[int, float]) -> list[dict[str, Any]]:
    model = vgg16()
    packed, target = prune_in_place(model, PATTERNS[name], sparsity)
    masked32 = model.cuda()
    sparse = sparsify(model, find_prunable(model, vgg16_dense_layers(model)), packed).cuda().half()
    rows = []
    for batch in batches:
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        with torch.inference_mode():
            ref = masked32(x)
            xh = x.half()
            err = relative_error(sparse(xh), ref)
            t_sparse = time_cuda(lambda xh=xh: sparse(xh)).median_us
        rows.append({"pattern": name, "sparsity": target, "batch": batch, "dense_us": dense_times[batch],
                     "sparse_us": t_sparse, "speedup": dense_times[batch] / t_sparse, "rel_err": err,
                     "passed": err <= TOLERANCE})  # fmt: skip
        log.info("%s %.2f batch %d: %.2fx dense, rel err %.1e", name, target, batch, rows[-1]["speedup"], err)
    return rows


def dense_times(batches: list[int]) -> dict[int, float]:
    model = vgg16().cuda().half()
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
    parser.add_argument("--out", type=Path, default=None, help="results prefix: writes PREFIX.json and PREFIX.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    require_kernels("model_bench")
    torch.backends.cudnn.benchmark = True
    dense = dense_times(args.batches)
    rows: list[dict[str, Any]] = []
    for name in args.patterns:
        fixed = pattern_structure(PATTERNS[name]).fixed_sparsity() is not None
        for sparsity in args.sparsities[:1] if fixed else args.sparsities:
            rows += run_case(name, sparsity, args.batches, dense)
            if args.out:
                write_results(args.out, rows, COLUMNS, [LEGEND])
    print(markdown_table(rows, COLUMNS))
    exit_if_any_failed(rows, "models")


if __name__ == "__main__":
    main()
