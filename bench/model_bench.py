"""Whole-model inference on a GPU: the dense model against its sparse twin, as export.py builds it (every prunable
weight packed and its module swapped), and against the twin with each layer on whichever of its sparse kernel and the
masked dense layer ran faster alone (export.py's layer_choice=fastest), one pattern at a time; PREFIX_layers holds
those per-layer times.

Run from the repository root on a GPU with the extension built:
    python -m bench.model_bench --out bench/results/model_h200
    python -m bench.model_bench --model bert --patterns tw --batches 16 --out bench/results/model_h200_bert
`--model vgg16` (the default) is the project's VGG16 on 224 x 224 images with its compact head (global pooling,
512 -> 512 -> 1000), so the thirteen convolutions carry the work; `--model bert` is a BERT-base encoder (12 layers,
hidden 768, FFN 3072) on batches of 256-token sequences, its 72 encoder GEMMs pruned, where the sparse twin also runs
without its feed-forward chains (`sparsify(..., chain=False)`: FFN in's output back to row-major) for comparison.
The weights are the model's random initialisation, pruned layer by layer by magnitude to the pattern's structure
(what the kernels see does not depend on how the mask was chosen) and rescaled to the dense layer's norm, so that
activations keep their scale through the layers in fp16 (unscaled, 90% TW shrinks VGG16's into fp16's subnormals by
the last convolution). Every sparse model's output is checked against the masked dense model in fp32 on the same
random inputs before it is timed.
"""

from __future__ import annotations

import argparse
import copy
import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.common import exit_if_any_failed, markdown_table, relative_error, require_kernels, time_cuda, write_results
from sparseprune.export.fold import fold_batch_norms
from sparseprune.export.layer_choice import fastest_choice, time_layers
from sparseprune.export.packing import pack_layer
from sparseprune.export.sparse_modules import SparseLinear
from sparseprune.export.swap import sparsify, swapped_modules
from sparseprune.models.vgg import build_vgg16, vgg16_dense_layers
from sparseprune.pruning.gemm_view import PrunableWeight, find_prunable, from_gemm, to_gemm
from sparseprune.pruning.patterns import build_pattern, keep_mask
from sparseprune.pruning.patterns.base import Pattern

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
    ("masked_us", "masked dense µs"),
    ("unchained_us", "sparse µs, no feed-forward chains"),
    ("unchained_speedup", "no chains ×dense"),
    ("sparse_layers", "layers faster sparse"),
    ("retimed", "layers timed again"),
    ("fastest_us", "fastest choice µs"),
    ("fastest_speedup", "fastest ×dense"),
    ("rel_err", "rel err vs fp32"),
    ("fastest_rel_err", "fastest rel err"),
    ("unchained_rel_err", "no chains rel err"),
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
    "Whole-model forward, fp16, eval mode, medians of CUDA-graph replays over rounds that time the dense model and "
    "each twin in turn, batch norms folded into the convolutions in both models as export.py folds them (unless "
    "'kept'); 'dense' is the same model in cuDNN and cuBLAS with the unpruned weights; 'sparse' is the model with "
    "every prunable layer (VGG16: all but the first convolution and the last Linear; BERT-base: the 72 encoder GEMMs, "
    "the model run as embeddings + encoder with no attention mask built) swapped for its packed module; 'masked "
    "dense' is the dense model with the pruned weights zeroed (the same kernels on zeros, which can run a little "
    "faster); 'fastest choice' keeps the masked dense layer wherever it ran faster than the sparse one, each timed "
    "alone on the input it gets inside the model (as export.py's layer_choice=fastest does; the per-layer times are "
    "in the _layers file), and 'layers faster sparse' counts the layers that stay sparse, after the 'layers timed "
    "again' were timed once more on the input they get in that twin (a sparse FFN out behind a dense FFN in reads a "
    "row-major input); 'rel err' compares the output with the masked dense model run in fp32."
)
LAYER_LEGEND = (
    "Each swapped layer of the whole-model run alone, on the input it gets inside the sparse model (one call, "
    "median of CUDA-graph replays, fp16): the masked dense layer in cuDNN/cuBLAS against its sparse module "
    "(im2col + packed kernel for a convolution)."
)


def pattern_structure(pattern: dict[str, Any]) -> Pattern:
    """The pattern object of one PATTERNS entry (its config dict, as export's pack_layer reads it)."""
    return build_pattern(pattern["name"], **{k: v for k, v in pattern.items() if k != "name"})


def prune_in_place(weights: list[PrunableWeight], pattern: dict[str, Any], sparsity: float) -> tuple[dict, float]:
    """Masks each of `weights` to `pattern` at `sparsity` (an N:M pattern fixes its own), rescaled to the dense
    weight's norm; returns the packed layers and the sparsity."""
    structure = pattern_structure(pattern)
    target = structure.fixed_sparsity() or sparsity
    packed = {}
    for weight in weights:
        b = to_gemm(weight.param.detach()).float()
        codes = structure.keep_codes({weight.name: b.abs().cpu()}, target)[weight.name]
        masked = b * keep_mask(codes).to(b.device)
        masked *= b.norm() / masked.norm().clamp_min(1e-30)  # keeps activations at scale through the layers in fp16
        weight.param.data.copy_(from_gemm(masked, weight.param.shape))
        packed[weight.name] = pack_layer(masked.cpu(), codes, pattern)
    return packed, target


@dataclass(frozen=True)
class Workload:
    """A model the benchmark times: how to build it, which weights it prunes, and a random input of a batch."""

    build: Callable[[bool], torch.nn.Module]  # fold batch norms?
    prunable: Callable[[torch.nn.Module], list[PrunableWeight]]
    make_input: Callable[[int], torch.Tensor]  # batch -> input on the GPU (images in fp32, token ids)
    forward: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] = torch.nn.Module.__call__


def vgg16(fold: bool) -> torch.nn.Module:
    """The benchmark's VGG16 in eval mode, its batch norms folded into the convolutions as export.py folds them."""
    torch.manual_seed(0)
    model = build_vgg16(num_classes=1000).eval()
    if fold:
        fold_batch_norms(model)
    return model


BERT_TOKENS = 256  # per sequence; 16 sequences make BERT-base's GEMMs the TW benchmark's M = 4096


def bert_base(_fold: bool) -> torch.nn.Module:
    """A BERT-base encoder (transformers' default BertConfig) in eval mode, random weights, no pooler."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig(), add_pooling_layer=False).eval()


def bert_encoder_output(model: torch.nn.Module, token_ids: torch.Tensor) -> torch.Tensor:
    """The encoder's last hidden state for unpadded sequences, with no attention mask built.

    BertModel drops the all-ones mask of unpadded input only outside a CUDA-graph capture: inside one it builds an
    expanded mask with stride 0 in its last dimension, which sdpa's fused attention kernels refuse, and its unfused
    math path took dense BERT-base at 16 x 256 tokens on an H200 from 1.95 ms of kernels to 6.6 ms
    (bench/results/bert_graph_mask_h200.md).
    """
    return model.encoder(model.embeddings(input_ids=token_ids)).last_hidden_state


WORKLOADS = {
    "vgg16": Workload(
        vgg16,
        lambda model: find_prunable(model, vgg16_dense_layers(model)),
        lambda batch: torch.randn(batch, 3, 224, 224, device="cuda"),
    ),
    "bert": Workload(
        bert_base,
        lambda model: find_prunable(model, ("*embeddings*",)),
        lambda batch: torch.randint(0, 30522, (batch, BERT_TOKENS), device="cuda"),
        bert_encoder_output,
    ),
}


def time_ms(fn: Any) -> float:
    return time_cuda(fn).median_us / 1e3


def time_in_rounds(calls: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median µs of each call over `rounds` rounds that time every call in turn. A GPU's speed drifts over a run
    (timed once before all cases, dense BERT-base at one sequence took 625 µs where the same kernels took 672 later,
    bench/results/model_h200_bert_dense_once.md), so a model is compared only with what was timed beside it."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            times[name].append(time_cuda(call).median_us)
    return {name: statistics.median(samples) for name, samples in times.items()}


def run_case(
    workload: Workload,
    dense: torch.nn.Module,
    name: str,
    sparsity: float,
    batches: list[int],
    fold: bool,
    rounds: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(whole-model rows, per-layer rows) of one pattern at one sparsity, for each batch size, against `dense`: the
    unpruned model in fp16 on the GPU."""
    model = workload.build(fold)
    weights = workload.prunable(model)
    packed, target = prune_in_place(weights, PATTERNS[name], sparsity)
    masked32 = model.cuda()
    masked16 = copy.deepcopy(masked32).half()
    sparse = sparsify(model, weights, packed).cuda().half()
    unchained = sparsify(model, weights, packed, chain=False).cuda().half()
    chained = any(m.feature_major_out for m in sparse.modules() if isinstance(m, SparseLinear))
    rows, layer_rows = [], []
    for batch in batches:
        x = workload.make_input(batch)
        xh = x.half() if x.is_floating_point() else x

        def run(net: torch.nn.Module, xh: torch.Tensor = xh) -> torch.Tensor:
            return workload.forward(net, xh)

        layers = time_layers(masked16, sparse, swapped_modules(weights, packed), lambda: run(sparse), time_ms)
        choice = fastest_choice(sparse, masked16, layers, run, time_ms)
        fastest, kept_dense = choice.twin, choice.dense_layers
        nets = {"dense": dense, "masked": masked16, "sparse": sparse, "fastest": fastest,
                **({"unchained": unchained} if chained else {})}  # fmt: skip
        with torch.inference_mode():
            ref = workload.forward(masked32, x)
            errors = {net: relative_error(run(nets[net]), ref) for net in nets if net not in ("dense", "masked")}
            times = time_in_rounds({net: lambda m=module: run(m) for net, module in nets.items()}, rounds)
        case = {"pattern": name, "sparsity": target, "batch": batch, "batch_norms": "folded" if fold else "kept"}
        rows.append({**case, "dense_us": times["dense"], "sparse_us": times["sparse"],
                     "speedup": times["dense"] / times["sparse"],
                     "masked_us": times["masked"], "rel_err": errors["sparse"],
                     "unchained_us": times.get("unchained"),
                     "unchained_speedup": times["dense"] / times["unchained"] if chained else None,
                     "unchained_rel_err": errors.get("unchained"),
                     "sparse_layers": f"{len(layers) - len(kept_dense)} of {len(layers)}",
                     "retimed": len(choice.retimed),
                     "fastest_us": times["fastest"], "fastest_speedup": times["dense"] / times["fastest"],
                     "fastest_rel_err": errors["fastest"],
                     "passed": max(errors.values()) <= TOLERANCE})  # fmt: skip
        layer_rows += [{**case, "layer": layer, "input": " × ".join(map(str, t.input_shape)),
                        "dense_us": 1e3 * t.dense_ms, "sparse_us": 1e3 * t.sparse_ms, "speedup": t.speedup}
                       for layer, t in layers.items()]  # fmt: skip
        row = rows[-1]
        log.info("%s %.2f batch %d: %.2fx dense, fastest choice %.2fx (%s layers sparse), rel err %.1e", name, target,
                 batch, row["speedup"], row["fastest_speedup"], row["sparse_layers"], row["rel_err"])  # fmt: skip
    return rows, layer_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vgg16", choices=list(WORKLOADS))
    parser.add_argument("--patterns", nargs="*", default=list(PATTERNS), choices=list(PATTERNS))
    parser.add_argument("--sparsities", nargs="*", type=float, default=[0.75, 0.9], help="for patterns without N:M")
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 8])
    parser.add_argument("--keep-batch-norms", action="store_true", help="time the norms instead of folding them")
    parser.add_argument("--rounds", type=int, default=3, help="rounds timing the dense model and each twin in turn")
    parser.add_argument("--out", type=Path, default=None, help="results prefix: writes PREFIX.json and PREFIX.md")
    args = parser.parse_args()
    fold = not args.keep_batch_norms
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    require_kernels("model_bench")
    torch.backends.cudnn.benchmark = True
    workload = WORKLOADS[args.model]
    dense = workload.build(fold).cuda().half()
    rows: list[dict[str, Any]] = []
    layer_rows: list[dict[str, Any]] = []
    for name in args.patterns:
        fixed = pattern_structure(PATTERNS[name]).fixed_sparsity() is not None
        for sparsity in args.sparsities[:1] if fixed else args.sparsities:
            case_rows, case_layers = run_case(workload, dense, name, sparsity, args.batches, fold, args.rounds)
            rows, layer_rows = rows + case_rows, layer_rows + case_layers
            if args.out:
                write_results(args.out, rows, COLUMNS, [LEGEND])
                write_results(args.out.with_name(args.out.name + "_layers"), layer_rows, LAYER_COLUMNS, [LAYER_LEGEND])
    print(markdown_table(rows, COLUMNS))
    exit_if_any_failed(rows, "models")


if __name__ == "__main__":
    main()
