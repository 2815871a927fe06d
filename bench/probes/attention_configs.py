"""Launch shapes of the feature-major attention kernel (sparseprune/export/attention.py) at BERT-base's shapes,
timed side by side with what the stream ran before it: sdpa between a transpose of QKV in and of the context out,
and sdpa alone on row-major views (the dense model's attention). CUDA-graph replays, fp16, padding mask.

    python -m bench.probes.attention_configs [--shapes 16x256 1x256] [--out PREFIX]
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.common import time_in_turns, write_results
from bench.e2e_bench import SHAPES, padding_mask
from sparseprune.export import attention

HEADS, HEAD = 12, 64
CONFIGS = [
    attention.KernelConfig(m, n, w, s)
    for m, n, w, s in itertools.product((128, 64), (64, 128), (4, 8), (2, 3))
    if not (m == 64 and w == 8)
]


def calls(batch: int, seq: int) -> dict[str, object]:
    tokens, scale = batch * seq, HEAD**-0.5
    qkv_t = torch.randn(3 * HEADS * HEAD, tokens, device="cuda").half()
    keep = attention.additive_mask(padding_mask(batch, seq), torch.float16)
    bias = attention._kernel_bias(keep, batch, HEADS, seq)
    q, k, v = qkv_t.t().contiguous().view(batch, seq, 3, HEADS, HEAD).permute(2, 0, 3, 1, 4).unbind(0)
    out = {
        "transposes + sdpa": lambda: attention.attention_reference(qkv_t, keep, batch, HEADS, scale),
        "sdpa on rows": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=scale),
    }
    for c in CONFIGS:
        name = f"triton m{c.block_m} n{c.block_n} w{c.warps} s{c.stages}"
        out[name] = lambda c=c: attention.launch(qkv_t, bias, batch, HEADS, scale, c)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="*", default=["16x256", "1x256"], choices=sorted(SHAPES))
    parser.add_argument("--out", default="bench/results/attention_configs")
    args = parser.parse_args()
    rows = []
    for shape in args.shapes:
        batch, seq = SHAPES[shape]
        fns = calls(batch, seq)
        for fn in fns.values():
            fn()
        for name, timing in time_in_turns(fns, samples=7, rounds=1).items():
            rows.append({"shape": shape, "route": name, "us": round(timing.median_us, 2)})
    columns = [("shape", "tokens"), ("route", "route"), ("us", "µs per call")]
    print(write_results(Path(args.out), rows, columns, [__doc__.split("\n\n")[0].replace("\n", " ")]))


if __name__ == "__main__":
    main()
