"""Sparse convolutions on a GPU: SparseConv2d (the im2col matrix plus the packed kernel) against dense cuDNN, at
VGG16's 3 x 3 layers for one and eight images, fp16.

Run from the repository root on a GPU with the extension built:
    python -m bench.conv_bench --out bench/results/conv_h200
writes PREFIX.json/.md. Every convolution is checked against F.conv2d in fp32 with the masked weight; TW masks come
from the project's TW pattern (G = 128) on the layer's random weight, vector-wise N:M masks at random. The im2col
kernels alone are timed by bench.im2col_bench.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.common import exit_if_any_failed, relative_error, require_kernels, time_into, write_results
from bench.nm_bench import random_nm_mask
from sparseprune.export.formats.nm import pack_nm
from sparseprune.export.formats.tw import pack_tw
from sparseprune.export.sparse_modules import SparseConv2d, im2col
from sparseprune.pruning.patterns import build_pattern, keep_mask

LAYERS = {"64x224": (64, 224), "128x112": (128, 112), "256x56": (256, 56), "512x28": (512, 28), "512x14": (512, 14)}
WEIGHTS = {"tw-0.75": ("tw", 0.75), "tw-0.9": ("tw", 0.9), "nm-2:8-v128": ((2, 8, 128), 0.75)}
TOLERANCE = 2e-3
CONV_COLUMNS = [
    ("layer", "Cin × H × W"),
    ("weight", "weight"),
    ("batch", "batch"),
    ("cudnn_us", "cuDNN µs"),
    ("im2col_us", "im2col µs"),
    ("sparse_us", "SparseConv2d µs"),
    ("speedup", "× cuDNN"),
    ("rel_err", "rel err vs fp32"),
]
CONV_LEGEND = (
    "A 3 × 3 convolution with padding 1 and Cout = Cin: dense nn.Conv2d in cuDNN against SparseConv2d (the im2col "
    "matrix built as export.py's modules build it, then the packed kernel), fp16, medians of CUDA-graph replays; "
    "'im2col µs' is the matrix alone, part of the SparseConv2d time."
)


def packed_conv(conv: torch.nn.Conv2d, weight: str) -> tuple[SparseConv2d, torch.Tensor]:
    """The sparse module of `conv` pruned to WEIGHTS[weight] and its masked dense weight (Cout, Cin, 3, 3)."""
    kind, sparsity = WEIGHTS[weight]
    w_kn = conv.weight.detach().reshape(conv.out_channels, -1).t().float().cpu()
    if kind == "tw":
        mask = keep_mask(build_pattern("tw", granularity=128).keep_codes({"w": w_kn.abs()}, sparsity)["w"])
        packed = pack_tw((w_kn * mask).half(), mask, 128)
    else:
        kept, group, vector = kind
        mask = random_nm_mask(*w_kn.shape, kept, group, vector, torch.Generator().manual_seed(0))
        packed = pack_nm((w_kn * mask).half(), mask, group, vector)
    sparse = SparseConv2d(packed.to("cuda", torch.float16), conv.bias, conv).cuda()
    return sparse, (w_kn * mask).t().reshape(conv.weight.shape).cuda()


def conv_row(conv: torch.nn.Conv2d, sparse: SparseConv2d, masked: torch.Tensor, x: torch.Tensor) -> dict[str, Any]:
    """Times and checks one sparse convolution against cuDNN on the images x."""
    with torch.inference_mode():
        err = relative_error(sparse(x), F.conv2d(x.float(), masked, conv.bias.float(), padding=1))
        row = {"batch": x.shape[0]}
        time_into(row, {"cudnn_us": lambda: conv(x), "sparse_us": lambda: sparse(x),
                        "im2col_us": lambda: im2col(x, *sparse.geometry, feature_major=True)})  # fmt: skip
    return {**row, "speedup": row["cudnn_us"] / row["sparse_us"], "rel_err": err, "passed": err <= TOLERANCE}


def conv_rows(layers: list[str], weights: list[str], batches: list[int]) -> list[dict[str, Any]]:
    rows = []
    for layer in layers:
        channels, side = LAYERS[layer]
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(channels, channels, 3, padding=1).cuda().half()
        for weight in weights:
            sparse, masked = packed_conv(conv, weight)
            for batch in batches:
                x = torch.randn(batch, channels, side, side, device="cuda", dtype=torch.float16)
                rows.append({"layer": f"{channels} × {side} × {side}", "weight": weight,
                             **conv_row(conv, sparse, masked, x)})  # fmt: skip
                print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="*", default=["256x56", "512x28", "512x14"], choices=list(LAYERS))
    parser.add_argument("--weights", nargs="*", default=list(WEIGHTS), choices=list(WEIGHTS))
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 8])
    parser.add_argument("--out", type=Path, default=None, help="results prefix: writes PREFIX.json/.md")
    args = parser.parse_args()
    require_kernels("conv_bench")
    convs = conv_rows(args.layers, args.weights, args.batches)
    if args.out:
        write_results(args.out, convs, CONV_COLUMNS, [CONV_LEGEND])
    exit_if_any_failed(convs)


if __name__ == "__main__":
    main()
