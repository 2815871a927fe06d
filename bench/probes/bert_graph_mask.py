"""Why model_bench runs BERT's encoder without BertModel's mask building: the attention path of dense BERT-base
(fp16, 16 sequences of 256 tokens) in eager calls and in CUDA-graph replays, for each way of calling it.

transformers drops the all-ones attention mask of unpadded input only where it may read the mask's values; inside a
CUDA-graph capture it builds the mask instead, and the mask it builds from no mask at all is an expanded view whose
last dimension has stride 0, which sdpa's fused kernels refuse, so attention falls to its unfused math path. A real
padding mask (contiguous) keeps the fused kernel in both. Each row names the mask sdpa got, the device time of one
forward's kernels (profiled), the fused attention kernel that ran (none on the math path), and the median of graph
replays.

Run from the repository root on a GPU:
    python -m bench.probes.bert_graph_mask --out bench/results/bert_graph_mask_h200
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import transformers

from bench.common import kernel_times, markdown_table, time_cuda, write_results
from bench.model_bench import BERT_TOKENS, WORKLOADS, bert_encoder_output
from sparseprune.export.timing import capture_graph

COLUMNS = [
    ("call", "call"),
    ("mode", "mode"),
    ("mask", "mask sdpa gets: shape, strides"),
    ("kernels_ms", "kernel time ms"),
    ("attention_kernel", "fused attention kernel"),
    ("replay_ms", "graph replay ms"),
]
LEGEND = (
    "BERT-base (transformers' default config, random weights), fp16, 16 × 256 tokens. 'kernel time' sums the device "
    "time of one forward's kernels under the profiler (eager: the eager call's kernels; graph: one replay's); "
    "'graph replay' is the median of time_cuda's CUDA-graph replays of the same call."
)


@contextmanager
def masks_seen() -> Iterator[list[str]]:
    """Records the attn_mask of every scaled_dot_product_attention call made inside the block."""
    seen: list[str] = []
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(*args: object, attn_mask: torch.Tensor | None = None, **kwargs: object) -> torch.Tensor:
        seen.append("none" if attn_mask is None else f"{tuple(attn_mask.shape)}, {attn_mask.stride()}")
        return original(*args, attn_mask=attn_mask, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        yield seen
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


FUSED_ATTENTION = ("sdpa", "fmha", "flash", "attention")  # in the names of cuDNN's, flash's and mem-efficient kernels


def kernel_time(fn: Callable[[], object]) -> tuple[float, str]:
    """(ms of device time of fn's kernels, the name of its fused attention kernel or "none"), after one warm call."""
    fn()
    torch.cuda.synchronize()
    per_kernel = kernel_times(fn)
    fused = [name for name in per_kernel if any(word in name.lower() for word in FUSED_ATTENTION)]
    return sum(per_kernel.values()) / 1e3, fused[0][:60] if fused else "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="results prefix: writes PREFIX.json and PREFIX.md")
    args = parser.parse_args()
    workload = WORKLOADS["bert"]
    model = workload.build(False).cuda().half()
    ids = workload.make_input(16)
    padding = torch.ones_like(ids)
    padding[:, BERT_TOKENS * 3 // 4 :] = 0
    calls = {
        "BertModel(ids)": lambda: model(ids),
        "BertModel(ids, padding mask)": lambda: model(ids, attention_mask=padding),
        "embeddings + encoder": lambda: bert_encoder_output(model, ids),
    }
    rows = []
    with torch.inference_mode(), masks_seen() as seen:
        for name, call in calls.items():
            kernels_ms, fused = kernel_time(call)
            rows.append({"call": name, "mode": "eager", "mask": seen[-1], "kernels_ms": kernels_ms,
                         "attention_kernel": fused})  # fmt: skip
            seen.clear()
            replay = capture_graph(call, torch.device("cuda"))
            if replay is None:
                raise SystemExit(f"{name} could not be captured in a CUDA graph")
            kernels_ms, fused = kernel_time(replay)
            rows.append({"call": name, "mode": "graph", "mask": seen[-1], "kernels_ms": kernels_ms,
                         "attention_kernel": fused,
                         "replay_ms": time_cuda(call).median_us / 1e3})  # fmt: skip
    if args.out:
        write_results(args.out, rows, COLUMNS, [f"{LEGEND} transformers {transformers.__version__}."])
    print(markdown_table(rows, COLUMNS))


if __name__ == "__main__":
    main()
