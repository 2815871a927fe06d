"""bench.e2e_bench's standalone calls, built and summed on a CPU (the timing itself needs a GPU)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import BertConfig, BertModel

import bench.e2e_bench as e2e
from bench.common import Timing
from bench.model_bench import prune_in_place
from sparseprune.export.feature_major_bert import with_feature_major_encoders
from sparseprune.export.swap import sparsify
from sparseprune.pruning.gemm_view import find_prunable


@pytest.fixture(scope="module")
def twins() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=2)
    model = BertModel(config, add_pooling_layer=False).eval()
    weights = find_prunable(model, ("*embeddings*",))
    packed, _ = prune_in_place(weights, e2e.TW128, 0.75)
    stream, replaced = with_feature_major_encoders(copy.deepcopy(sparsify(model, weights, packed)))
    assert replaced == ["encoder"]
    return stream, model


def test_standalone_calls_compute_what_the_dense_calls_compute(twins: tuple[torch.nn.Module, ...]) -> None:
    stream, masked = twins
    calls = e2e.standalone_calls(stream, masked, batch=2, seq=12)
    assert len(calls) == 2 * (2 * 4 + 2)
    with torch.inference_mode():
        for key in [k for k in calls if k.endswith("|sparse")]:
            sparse, dense = calls[key](), calls[key.replace("|sparse", "|dense")]()
            if "LayerNorm" in key:
                torch.testing.assert_close(sparse, dense.t(), rtol=1e-5, atol=1e-5)
                continue
            if key.startswith("attention|"):
                # sdpa's (batch, heads, seq, head) context, as the (hidden, tokens) rows the stream carries
                batch, heads, seq, head = dense.shape
                expected = dense.permute(1, 3, 0, 2).reshape(heads * head, batch * seq)
                torch.testing.assert_close(sparse, expected, rtol=1e-5, atol=1e-5)
                continue
            # the same x reaches both: the fused projection's rows are the dense calls' outputs, stacked
            expected = torch.cat([y.t() for y in dense])
            if key.startswith("ffn in"):
                expected = torch.nn.functional.gelu(expected)  # fused into the TW epilogue
            torch.testing.assert_close(sparse, expected, rtol=1e-4, atol=1e-4)


def test_standalone_rows_sum_each_kind_over_the_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    us = {"qkv|0|sparse": 10.0, "qkv|1|sparse": 14.0, "qkv|0|dense": 20.0, "qkv|1|dense": 28.0,
          "add + LayerNorm|0|sparse": 4.0, "add + LayerNorm|0|dense": 6.0}  # fmt: skip
    monkeypatch.setattr(e2e, "time_in_turns", lambda calls, **_: {k: Timing(us[k], True) for k in calls})
    rows = e2e.standalone_rows(dict.fromkeys(us), "tw75", "16 × 256")
    assert rows == [
        {"pattern": "tw75", "tokens": "16 × 256", "kind": "qkv", "layers": 2, "sparse_us": 24.0, "dense_us": 48.0,
         "speedup": 2.0, "sparse_min_us": 10.0, "sparse_max_us": 14.0},
        {"pattern": "tw75", "tokens": "16 × 256", "kind": "add + LayerNorm", "layers": 1, "sparse_us": 4.0,
         "dense_us": 6.0, "speedup": 1.5, "sparse_min_us": 4.0, "sparse_max_us": 4.0},
    ]  # fmt: skip
