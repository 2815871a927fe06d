"""BERT-base's feed-forward block on a GPU, its parts timed apart: dense, the sparse twin with the feature-major chain
(`sparseprune.export.chains`) and without it, each GEMM with x and y in either storage, GELU fused into the kernel's
epilogue, and torch's GELU pass. One encoder layer, TW G = 128 at 75%, fp16, 16 and 1 sequences of 256 tokens.

Run from the repository root on a GPU with the extension built (prints one dict of µs per batch):
    python -m bench.probes.bert_ffn_chain
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import BertConfig, BertModel

from bench.common import require_kernels, time_cuda
from bench.model_bench import BERT_TOKENS, PATTERNS, WORKLOADS, prune_in_place
from sparseprune.export.swap import sparsify


def main() -> None:
    require_kernels("bert_ffn_chain")
    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=1), add_pooling_layer=False).eval()
    weights = WORKLOADS["bert"].prunable(model)
    packed, _ = prune_in_place(weights, PATTERNS["tw"], 0.75)
    layers = {
        name: net.cuda().half().encoder.layer[0]
        for name, net in [("dense", model), ("chained", sparsify(model, weights, packed)),
                          ("unchained", sparsify(model, weights, packed, chain=False))]
    }  # fmt: skip
    with torch.inference_mode():
        for batch in (16, 1):
            x = torch.randn(batch, BERT_TOKENS, 768, device="cuda", dtype=torch.float16)
            print(batch, {name: round(time_cuda(fn).median_us, 1) for name, fn in parts(layers, x).items()})


def parts(layers: dict[str, torch.nn.Module], x: torch.Tensor) -> dict[str, Callable[[], object]]:
    """The timed calls on input x: each whole block, then its GEMMs and GELU apart."""
    dense, chained, unchained = layers["dense"], layers["chained"], layers["unchained"]
    inner, bias = chained.intermediate.dense.packed, chained.intermediate.dense.bias
    h_fm, h_rows = chained.intermediate(x), unchained.intermediate(x)
    calls = {
        f"{name} block": (lambda layer=layer: layer.output.dense(layer.intermediate(x)))
        for name, layer in layers.items()
    }
    return calls | {
        "FFN in, y feature-major": lambda: inner.matmul(x, bias, feature_major_out=True),
        "FFN in, y row-major": lambda: inner.matmul(x, bias),
        "FFN in, GELU fused, y feature-major": lambda: inner.matmul(x, bias, "gelu", True),
        "FFN in, GELU fused, y row-major": lambda: inner.matmul(x, bias, "gelu"),
        "torch GELU": lambda: torch.nn.functional.gelu(h_rows),
        "FFN out, x feature-major": lambda: chained.output.dense(h_fm),
        "FFN out, x row-major": lambda: unchained.output.dense(h_rows),
        "dense FFN in": lambda: dense.intermediate.dense(x),
        "dense FFN out": lambda: dense.output.dense(h_rows),
        "dense FFN out, x feature-major": lambda: dense.output.dense(h_fm),
    }


if __name__ == "__main__":
    main()
