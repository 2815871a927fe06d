"""The extension's im2col kernels on a GPU: each kernel forced, and the automatic choice, against F.unfold over plane
sizes, channel counts and batches of a 3 x 3 convolution with padding 1, fp16.

Run from the repository root on a GPU with the extension built:
    python -m bench.im2col_bench --out bench/results/im2col_h200_dispatch
writes PREFIX.json/.md. Every matrix of every kernel is checked bit for bit against F.unfold. 'auto / best' is the
automatic choice's time over the fastest forced kernel's: how much the size rules in kernels_ext/im2col.cu leave.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.common import exit_if_any_failed, require_kernels, time_cuda, write_results
from sparseprune.export.formats.extension import load_kernels

KERNELS = ("staged", "direct", "spread", "auto")
COLUMNS = [
    ("channels", "C"),
    ("side", "H = W"),
    ("batch", "batch"),
    ("mbytes", "matrix MB"),
    ("unfold_us", "F.unfold µs"),
    *((f"{kernel}_us", f"{kernel} µs") for kernel in KERNELS),
    ("auto_over_best", "auto / best"),
    ("auto_tbs", "auto TB/s written"),
]
LEGEND = (
    "The feature-major im2col matrix (C·9 × B·H·W) of a random fp16 NCHW input, medians of CUDA-graph replays. "
    "'staged' stages each (image, channel) plane's rows in shared memory; 'direct' gives a thread 8 outputs of one "
    "channel for every tap; 'spread' gives it one tap (threadIdx.y); 'auto' is what SparseConv2d runs. F.unfold "
    "writes (B, C·9, H·W), which for several images needs a second copy to reach this layout (not timed)."
)


def im2col_row(channels: int, side: int, batch: int) -> dict[str, Any]:
    """Times every kernel on one random input, each checked against F.unfold."""
    kernels = load_kernels()
    x = torch.randn(batch, channels, side, side, device="cuda", dtype=torch.float16)
    unfolded = F.unfold(x, 3, 1, 1, 1)
    expected = unfolded.transpose(0, 1).reshape(unfolded.shape[1], -1)
    row: dict[str, Any] = {"channels": channels, "side": side, "batch": batch, "mbytes": expected.nbytes / 1e6}
    row["unfold_us"] = time_cuda(lambda: F.unfold(x, 3, 1, 1, 1)).median_us
    row["passed"] = True
    for kernel in KERNELS:
        run = partial(kernels.im2col_feature_major, x, 3, 3, 1, 1, 1, 1, 1, 1, kernel=kernel)
        row["passed"] &= torch.equal(run(), expected)
        row[f"{kernel}_us"] = time_cuda(run).median_us
    row["auto_over_best"] = row["auto_us"] / min(row[f"{kernel}_us"] for kernel in KERNELS[:-1])
    row["auto_tbs"] = expected.nbytes / row["auto_us"] / 1e6
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", nargs="*", type=int, default=[2, 4, 7, 8, 14, 16, 28, 32, 56, 112, 224])
    parser.add_argument("--channels", nargs="*", type=int, default=[64, 256, 512])
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    parser.add_argument("--max-mb", type=float, default=2500, help="skips inputs whose matrix would exceed this")
    parser.add_argument("--out", type=Path, default=None, help="results prefix: writes PREFIX.json/.md")
    args = parser.parse_args()
    require_kernels("im2col_bench")
    rows = []
    for side in args.sides:
        for channels in args.channels:
            for batch in args.batches:
                if channels * 9 * batch * side * side * 2 / 1e6 <= args.max_mb:
                    rows.append(im2col_row(channels, side, batch))
                    print(rows[-1], flush=True)
    if args.out:
        write_results(args.out, rows, COLUMNS, [LEGEND])
    exit_if_any_failed(rows, "inputs")


if __name__ == "__main__":
    main()
