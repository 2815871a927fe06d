"""Whole BERT-base inference on a GPU, as a user runs it: transformers' BertModel with a padding attention mask, the
pruned model's twins against the faster of two dense baselines, all timed side by side in one run.

Run from the repository root on a GPU with the extension built:
    python -m bench.e2e_bench --out bench/results/e2e_h200_bert
    python -m bench.e2e_bench --patterns tw75 --shapes 16x256 --out /tmp/e2e   # one case

Models, each an fp16 BertModel (default BertConfig: 12 layers, hidden 768, FFN 3072, sdpa attention, no pooler) on
token ids with an attention mask whose sequences are padded by 1/16 to 1/4 of their length:
- dense: the unpruned model, CUDA-graph replays; dense compiled: torch.compile(mode="max-autotune-no-cudagraphs",
  GEMMs autotuned) captured in the same CUDA graphs, which is what mode="max-autotune" adds; the baseline is the
  faster of the two;
- swapped: every encoder GEMM swapped for its packed module (sparsify), hidden states row-major;
- stream: the feature-major encoder (export.feature_major_bert); stream compiled: that twin under torch.compile
  (default mode), so LayerNorm, residual adds and attention's copies fuse between the sparse custom ops.
Weights are the random initialisation, pruned layer by layer by magnitude to the pattern (bench.model_bench), every
twin checked against the masked model in fp32 before timing. Each twin's GPU time per forward is broken down by
kernel category from a profile of its CUDA-graph replays, and (--standalone) the stream's projections and norms are
timed alone, layer by layer, against the dense model's cuBLAS calls of the same shapes: a model whose sparse GEMMs
take longer in the model than alone loses its time around them, one whose calls lose alone loses it in the kernels.
"""

from __future__ import annotations

import argparse
import copy
import logging
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.common import (
    exit_if_any_failed,
    kernel_times,
    markdown_table,
    relative_error,
    require_kernels,
    time_in_turns,
    write_results,
)
from bench.model_bench import bert_base, prune_in_place
from sparseprune.export.attention import additive_mask
from sparseprune.export.feature_major_bert import with_feature_major_encoders
from sparseprune.export.swap import sparsify
from sparseprune.export.timing import capture_graph
from sparseprune.pruning.gemm_view import find_prunable

log = logging.getLogger("e2e_bench")

TW128, TW64 = {"name": "tw", "granularity": 128}, {"name": "tw", "granularity": 64}
PATTERNS = {
    "tw75": (TW128, 0.75),
    "tw90": (TW128, 0.9),
    "vw-2:8": ({"name": "nm", "n": 2, "m": 8, "vector": 64}, None),
    "tw50": (TW128, 0.5),
    "tw75-g64": (TW64, 0.75),
    "2:4": ({"name": "nm", "n": 2, "m": 4}, None),
}
SHAPES = {"16x256": (16, 256), "1x256": (1, 256), "1x128": (1, 128)}
VOCAB = 30522
TOLERANCE = 1e-2  # fp16 through 12 layers against the fp32 masked model
CATEGORIES = (  # the first category whose keys a kernel's name holds (the extension's names all hold "sparseprune")
    ("layout copies", ("transpose_kernel", "pad_rows")),
    ("LayerNorm", ("layer_norm", "var_mean", "welford", "triton_per", "triton_red")),
    ("sparse GEMM", ("tw_", "nm_", "sp24", "sparse")),
    ("dense GEMM", ("gemm", "nvjet", "xmma", "cublas", "cutlass", "triton_tem", "splitk", "matmul")),
    ("attention", ("fmha", "attention", "flash", "efficient")),
    ("elementwise and copies", ("elementwise", "copy", "triton_poi", "cat", "index", "gelu", "add")),
)
COLUMNS = [
    ("pattern", "pattern"),
    ("sparsity", "sparsity"),
    ("tokens", "tokens"),
    ("dense_us", "dense graph µs"),
    ("dense_compiled_us", "dense compiled µs"),
    ("swapped_us", "swapped µs"),
    ("stream_us", "stream µs"),
    ("stream_compiled_us", "stream compiled µs"),
    ("swapped_speedup", "swapped ×best dense"),
    ("stream_speedup", "stream ×best dense"),
    ("stream_compiled_speedup", "stream compiled ×best dense"),
    ("worst_rel_err", "worst rel err"),
]
LEGEND = (
    "Whole BERT-base forward (embeddings + 12 encoder layers, no pooler), fp16, eval mode, with a padding attention "
    "mask; medians of CUDA-graph replays, every model timed in turns in the same rounds (bench.common.time_in_turns). "
    "'×best dense' divides the faster of 'dense graph' (cuBLAS, cuDNN-free eager under a CUDA graph) and 'dense "
    "compiled' (torch.compile max-autotune, captured likewise) by the twin's time. 'swapped': each encoder GEMM a "
    "packed module, hidden states row-major; 'stream': the feature-major encoder; 'stream compiled': it under "
    "torch.compile. 'worst rel err': the largest max-abs error over the twins against the fp32 masked model, "
    "relative to its largest output."
)


def category(kernel: str) -> str:
    """The breakdown's category of a kernel, by its name."""
    name = kernel.lower()
    return next((cat for cat, keys in CATEGORIES if any(key in name for key in keys)), "other")


TOP_KERNELS = 12


def breakdown(fn: Any) -> tuple[dict[str, float], dict[str, float], str]:
    """Device µs per forward in each kernel category, and of the longest kernels by name, from a profile of three
    replays of a CUDA graph of fn, as the timing runs it (or of three eager calls where none can be captured, or the
    profiler sees no kernel inside the graph), and which of the two was profiled. Eager calls leave the GPU idle
    between launches, and an H200's clocks follow its load: the same kernels can read faster than they run in a
    graph."""
    totals: dict[str, float] = {}
    replay = capture_graph(fn, torch.device("cuda"))
    kernels = kernel_times(replay, calls=3) if replay is not None else {}
    source = "graph"
    if not kernels:
        kernels, source = kernel_times(fn, calls=3), "eager"
    for kernel, us in kernels.items():
        totals[category(kernel)] = totals.get(category(kernel), 0.0) + us
    top = {kernel[:160]: round(us, 1) for kernel, us in list(kernels.items())[:TOP_KERNELS]}
    return dict(sorted(totals.items(), key=lambda item: -item[1])), top, source


def padding_mask(batch: int, seq: int, device: torch.device | str = "cuda") -> torch.Tensor:
    """The 4-D mask (batch, 1, 1, seq) of sequences where sequence i keeps seq - (1 + i % 4) * seq / 16 tokens, as
    TextClassifier.predict_batch hands it to BertModel (built inside from a 2-D mask, it costs a host sync that no
    CUDA graph captures)."""
    lengths = torch.tensor([seq - (1 + i % 4) * seq // 16 for i in range(batch)], device=device)
    return (torch.arange(seq, device=device)[None, :] < lengths[:, None])[:, None, None, :]


def forward(net: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return net(input_ids=ids, attention_mask=mask).last_hidden_state


def compiled(net: torch.nn.Module, mode: str | None) -> torch.nn.Module:
    return torch.compile(net, mode=mode, dynamic=False)


def timed(fn: Any) -> tuple[Any, float]:
    """fn's first call (which compiles, for a compiled model) and its seconds."""
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def standalone_calls(stream: torch.nn.Module, masked: torch.nn.Module, batch: int, seq: int) -> dict[str, Any]:
    """Every encoder projection of the stream twin alone on fresh feature-major x, each beside the dense model's
    cuBLAS calls for it (Q, K and V as three), and the first layer's residual add + LayerNorm and attention beside
    torch's on row-major activations (sdpa on views of the QKV rows, as the dense model runs it); keyed
    'kind|layer|sparse' and 'kind|layer|dense'. `masked` is the masked dense model in the timing dtype, on the timing
    device."""
    tokens = batch * seq
    like = next(masked.parameters())
    generator = torch.Generator(like.device).manual_seed(1)

    def fresh(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=like.device, dtype=like.dtype, generator=generator)

    calls: dict[str, Any] = {}
    for index, (twin, dense) in enumerate(zip(stream.encoder.layer, masked.encoder.layer, strict=True)):
        attention = dense.attention.self
        parts = {
            "qkv": (twin.qkv, [attention.query, attention.key, attention.value]),
            "attention out": (twin.attention_out, [dense.attention.output.dense]),
            "ffn in": (twin.ffn_in, [dense.intermediate.dense]),
            "ffn out": (twin.ffn_out, [dense.output.dense]),
        }
        for kind, (projection, linears) in parts.items():
            xt = fresh(linears[0].in_features, tokens)
            x = xt.t().contiguous()
            calls[f"{kind}|{index}|sparse"] = lambda p=projection, xt=xt: p(xt)
            calls[f"{kind}|{index}|dense"] = lambda x=x, ls=linears: [F.linear(x, lin.weight, lin.bias) for lin in ls]
    norm = masked.encoder.layer[0].attention.output.LayerNorm
    a, r = fresh(norm.normalized_shape[0], tokens), fresh(norm.normalized_shape[0], tokens)
    a_rows, r_rows = a.t().contiguous(), r.t().contiguous()
    norm_op = torch.ops.sparseprune.add_layer_norm_feature_major
    calls["add + LayerNorm|0|sparse"] = lambda: norm_op(a, r, norm.weight, norm.bias, norm.eps)
    calls["add + LayerNorm|0|dense"] = lambda: F.layer_norm(a_rows + r_rows, norm.normalized_shape, norm.weight,
                                                            norm.bias, norm.eps)  # fmt: skip
    layer = stream.encoder.layer[0]
    heads, head = layer.heads, layer.head_size
    qkv_t = fresh(3 * heads * head, tokens)
    q, k, v = qkv_t.t().contiguous().view(batch, seq, 3, heads, head).permute(2, 0, 3, 1, 4).unbind(0)
    keep = additive_mask(padding_mask(batch, seq, like.device), like.dtype)
    attention_op = torch.ops.sparseprune.attention_feature_major
    calls["attention|0|sparse"] = lambda: attention_op(qkv_t, keep, batch, heads, layer.scaling)
    calls["attention|0|dense"] = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=layer.scaling)
    return calls


def standalone_rows(calls: dict[str, Any], pattern: str, tokens: str) -> list[dict[str, Any]]:
    """Per kind: µs summed over the layers, sparse and dense, and the slowest and fastest sparse layer."""
    timings = time_in_turns(calls, samples=7, rounds=1)
    kinds: dict[str, dict[str, list[float]]] = {}
    for key, timing in timings.items():
        kind, _, side = key.split("|")
        kinds.setdefault(kind, {"sparse": [], "dense": []})[side].append(timing.median_us)
    return [
        {
            "pattern": pattern,
            "tokens": tokens,
            "kind": kind,
            "layers": len(us["sparse"]),
            "sparse_us": sum(us["sparse"]),
            "dense_us": sum(us["dense"]),
            "speedup": sum(us["dense"]) / sum(us["sparse"]),
            "sparse_min_us": min(us["sparse"]),
            "sparse_max_us": max(us["sparse"]),
        }  # fmt: skip
        for kind, us in kinds.items()
    ]


STANDALONE_LEGEND = (
    "The stream's calls timed alone (CUDA-graph replays, fresh random x), summed over the encoder's layers, against "
    "the dense model's cuBLAS calls of the same shapes (Q, K, V as three), torch's add + LayerNorm on row-major "
    "activations, and sdpa on row-major views of QKV beside the stream's attention (first layer, padding mask):"
)
STANDALONE_COLUMNS = [
    ("pattern", "pattern"),
    ("tokens", "tokens"),
    ("kind", "call"),
    ("layers", "layers"),
    ("sparse_us", "stream µs (sum)"),
    ("dense_us", "dense µs (sum)"),
    ("speedup", "×dense"),
    ("sparse_min_us", "fastest layer µs"),
    ("sparse_max_us", "slowest layer µs"),
]


def run_pattern(
    name: str, dense: dict[str, torch.nn.Module], shapes: list[str], deadline: float, standalone: bool = False
) -> list[dict[str, Any]]:
    """The rows of one pattern at every shape, each with its models' kernel breakdown."""
    pattern, sparsity = PATTERNS[name]
    model = bert_base(False)
    weights = find_prunable(model, ("*embeddings*",))
    packed, target = prune_in_place(weights, pattern, sparsity or 0.5)
    masked32 = model.cuda()
    masked16 = copy.deepcopy(masked32).half() if standalone else None
    swapped = sparsify(model, weights, packed).cuda().half()
    stream, replaced = with_feature_major_encoders(copy.deepcopy(swapped))
    twins = {"swapped": swapped, "stream": stream, "stream_compiled": compiled(stream, None)}
    if not replaced:  # a format that reads rows keeps the swapped layers
        twins = {"swapped": swapped}
    rows = []
    for shape in shapes:
        if time.monotonic() > deadline:
            log.warning("out of time: %s skipped from %s on", name, shape)
            break
        batch, seq = SHAPES[shape]
        ids = torch.randint(0, VOCAB, (batch, seq), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
        mask = padding_mask(batch, seq)
        real = mask[:, 0, 0, :]
        row: dict[str, Any] = {"pattern": name, "sparsity": target, "tokens": f"{batch} × {seq}"}
        with torch.inference_mode():
            ref = forward(masked32, ids, mask)[real]
            for twin, net in twins.items():
                out, seconds = timed(lambda net=net, ids=ids, mask=mask: forward(net, ids, mask))
                row[f"{twin}_rel_err"] = relative_error(out[real], ref)
                row[f"{twin}_first_call_s"] = seconds
            calls = {
                key: (lambda net=net, ids=ids, mask=mask: forward(net, ids, mask))
                for key, net in {**dense[shape], **twins}.items()
            }
            timings = time_in_turns(calls)
            profiles = {twin: breakdown(calls[twin]) for twin in calls}
            row["breakdown_us"] = {twin: parts for twin, (parts, _, _) in profiles.items()}
            row["top_kernels_us"] = {twin: top for twin, (_, top, _) in profiles.items()}
            row["profiled"] = {twin: source for twin, (_, _, source) in profiles.items()}
        for key, timing in timings.items():
            row[f"{key}_us"] = timing.median_us
            if not timing.graphed:
                row.setdefault("eager", []).append(key)
        best = min(row["dense_us"], row["dense_compiled_us"])
        row["best_dense_us"] = best
        for twin in twins:
            row[f"{twin}_speedup"] = best / row[f"{twin}_us"]
        if standalone and "stream" in twins:
            with torch.inference_mode():
                row["standalone"] = standalone_rows(standalone_calls(stream, masked16, batch, seq), name, row["tokens"])
        row["worst_rel_err"] = max(row[f"{twin}_rel_err"] for twin in twins)
        row["passed"] = row["worst_rel_err"] <= TOLERANCE
        rows.append(row)
        log.info("%s %s: %s best dense (%.0f us)", name, shape,
                 {twin: round(row[f"{twin}_speedup"], 2) for twin in twins}, best)  # fmt: skip
    return rows


def breakdown_table(rows: list[dict[str, Any]]) -> str:
    """Per-forward GPU µs by kernel category, one line per pattern, shape and model."""
    lines = []
    for row in rows:
        for model, parts in row["breakdown_us"].items():
            lines.append({"case": f"{row['pattern']} {row['tokens']}", "model": model,
                          "profiled": row.get("profiled", {}).get(model, "eager"),
                          **{cat: round(us, 1) for cat, us in parts.items()}})  # fmt: skip
    cats = [cat for cat, _ in CATEGORIES] + ["other"]
    columns = [("case", "case"), ("model", "model"), ("profiled", "profiled"), *((c, f"{c} µs") for c in cats)]
    return markdown_table(lines, columns)


def notes(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown's legend, breakdown and (when timed) the standalone calls."""
    parts = [
        LEGEND,
        "",
        "GPU time per forward by kernel category (µs; profiled: graph replays, or eager calls):",
        "",
        breakdown_table(rows),
    ]
    alone = [entry for row in rows for entry in row.get("standalone", [])]
    if alone:
        parts += ["", STANDALONE_LEGEND, "", markdown_table(alone, STANDALONE_COLUMNS)]
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", nargs="*", default=list(PATTERNS), choices=list(PATTERNS))
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--deadline-s", type=float, default=1e9, help="skip what would start after this many seconds")
    parser.add_argument("--standalone", action="store_true", help="also time the stream's calls alone, per layer")
    parser.add_argument("--out", type=Path, default=None, help="results prefix: writes PREFIX.json and PREFIX.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    deadline = time.monotonic() + args.deadline_s
    require_kernels("e2e_bench")
    # Every model recompiles per token shape, and dynamo counts the compilations of BertModel.forward's frames over
    # all models together: past the default limit it would run the later ones uncompiled.
    torch._dynamo.config.recompile_limit = torch._dynamo.config.accumulated_recompile_limit = 1024
    dense16 = bert_base(False).cuda().half()
    dense_compiled = compiled(dense16, "max-autotune-no-cudagraphs")
    dense: dict[str, dict[str, torch.nn.Module]] = {}
    with torch.inference_mode():
        for shape in args.shapes:
            batch, seq = SHAPES[shape]
            ids, mask = torch.zeros(batch, seq, dtype=torch.long, device="cuda"), padding_mask(batch, seq)
            _, seconds = timed(lambda ids=ids, mask=mask: forward(dense_compiled, ids, mask))
            log.info("dense compiled at %s in %.0f s", shape, seconds)
            dense[shape] = {"dense": dense16, "dense_compiled": dense_compiled}
    rows: list[dict[str, Any]] = []
    for name in args.patterns:
        if time.monotonic() > deadline:
            log.warning("out of time: %s and later patterns skipped", name)
            break
        rows += run_pattern(name, dense, args.shapes, deadline, args.standalone)
        if args.out:
            write_results(args.out, rows, COLUMNS, notes(rows))
    print(markdown_table(rows, COLUMNS))
    print(breakdown_table(rows))
    exit_if_any_failed(rows, "models")


if __name__ == "__main__":
    main()
