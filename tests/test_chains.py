"""Sparse layers chained through an activation: BERT's feed-forward block kept feature-major in the sparse twin, with
the outputs of the masked dense model; and the storage-aware TW matmul underneath (CPU reference)."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from transformers import BertConfig, BertModel

from bench.model_bench import prune_in_place
from sparseprune.export.chains import chain_feed_forward, release_dense_consumers
from sparseprune.export.formats.tw import pack_tw, stored_feature_major, tw_matmul_reference
from sparseprune.export.layer_choice import LayerTiming, fastest_choice, first_inputs
from sparseprune.export.sparse_modules import SparseLinear
from sparseprune.export.swap import sparsify, swapped_modules, with_dense_layers
from sparseprune.pruning.gemm_view import find_prunable

TW = {"name": "tw", "granularity": 32}


def tiny_bert() -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=16)  # fmt: skip
    return BertModel(config, add_pooling_layer=False).eval()


def pruned_bert() -> tuple[BertModel, list, dict]:
    model = tiny_bert()
    weights = find_prunable(model, ("*embeddings*",))
    packed, _ = prune_in_place(weights, TW, 0.5)
    return model, weights, packed


def run(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(ids).last_hidden_state


def test_matmul_reads_and_writes_either_storage() -> None:
    gen = torch.Generator().manual_seed(3)
    b = torch.randn(64, 96, generator=gen)
    mask = torch.rand(64, 96, generator=gen) < 0.5
    packed = pack_tw(b, mask, 32)
    x, bias = torch.randn(2, 5, 64, generator=gen), torch.randn(96, generator=gen)
    expected = tw_matmul_reference(x.reshape(-1, 64), packed, bias, "gelu").reshape(2, 5, 96)
    x_feature_major = x.reshape(-1, 64).t().contiguous().t().reshape(2, 5, 64)
    assert stored_feature_major(x_feature_major.reshape(-1, 64)) and not stored_feature_major(x.reshape(-1, 64))
    for x_in, out_feature_major in itertools.product((x, x_feature_major), (False, True)):
        y = packed.matmul(x_in, bias, "gelu", feature_major_out=out_feature_major)
        torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)
        assert stored_feature_major(y.reshape(-1, 96)) == out_feature_major


def test_feed_forward_chain_keeps_the_masked_models_outputs() -> None:
    model, weights, packed = pruned_bert()
    ids = torch.randint(0, 40, (3, 11))
    expected = run(model, ids)
    sparse = sparsify(model, weights, packed)
    chained = [f"encoder.layer.{i}.intermediate.dense" for i in range(2)]
    assert [n for n, m in sparse.named_modules() if getattr(m, "feature_major_out", False)] == chained
    seen = []
    hook = sparse.encoder.layer[0].output.dense.register_forward_pre_hook(
        lambda _m, args: seen.append(stored_feature_major(args[0].reshape(-1, args[0].shape[-1])))
    )
    torch.testing.assert_close(run(sparse, ids), expected, rtol=1e-4, atol=1e-4)
    hook.remove()
    assert seen == [True]  # FFN out reads FFN in's output, through GELU, as the kernel left it
    unchained = sparsify(model, weights, packed, chain=False)
    assert not any(m.feature_major_out for m in unchained.modules() if isinstance(m, SparseLinear))
    torch.testing.assert_close(run(unchained, ids), expected, rtol=1e-4, atol=1e-4)
    assert chain_feed_forward(unchained) == chained


@pytest.mark.parametrize("restored", ["intermediate.dense", "output.dense"])
def test_dense_layer_taken_back_reads_or_writes_either_storage(restored: str) -> None:
    model, weights, packed = pruned_bert()
    ids = torch.randint(0, 40, (2, 9))
    sparse = sparsify(model, weights, packed)
    names = [f"encoder.layer.{i}.{restored}" for i in range(2)]
    assert set(names) <= set(swapped_modules(weights, packed))
    mixed = with_dense_layers(sparse, model, names)
    torch.testing.assert_close(run(mixed, ids), run(model, ids), rtol=1e-4, atol=1e-4)
    assert not any(m.feature_major_out for m in mixed.modules() if isinstance(m, SparseLinear))  # no sparse pair left


def test_chain_needs_a_sparse_consumer() -> None:
    model, weights, packed = pruned_bert()
    sparse = sparsify(model, weights, packed)
    consumer = "encoder.layer.1.output.dense"
    mixed = with_dense_layers(sparse, model, [consumer])
    chained = [n for n, m in mixed.named_modules() if getattr(m, "feature_major_out", False)]
    assert chained == ["encoder.layer.0.intermediate.dense"]  # layer 1's FFN in writes row-major for its dense FFN out
    assert release_dense_consumers(mixed) == [] and chain_feed_forward(mixed) == chained
    assert sparse.encoder.layer[1].intermediate.dense.feature_major_out  # the sparse twin itself keeps its chains


def test_fastest_choice_times_a_sparse_layer_again_when_its_input_storage_changes() -> None:
    model, weights, packed = pruned_bert()
    ids = torch.randint(0, 40, (2, 9))
    sparse = sparsify(model, weights, packed)
    names = list(swapped_modules(weights, packed))
    producers = [f"encoder.layer.{i}.intermediate.dense" for i in range(2)]
    consumers = [f"encoder.layer.{i}.output.dense" for i in range(2)]
    timings = {name: LayerTiming(1, (2, 9, 64), dense_ms=1.0, sparse_ms=2.0 if name in producers else 0.5)
               for name in names}  # fmt: skip
    timed = []

    def time_ms(calls: dict) -> dict[str, float]:  # timed again, each sparse FFN out now loses
        timed.extend(fn() for fn in calls.values())
        return {"dense": 1.0, "sparse": 3.0}

    def consumer_inputs_feature_major(net: nn.Module) -> list[bool]:
        inputs = first_inputs(net, consumers, lambda: run(net, ids))
        return [stored_feature_major(inputs[name][0].reshape(-1, 128)) for name in consumers]

    assert consumer_inputs_feature_major(sparse) == [True, True]
    assert consumer_inputs_feature_major(with_dense_layers(sparse, model, producers)) == [False, False]
    choice = fastest_choice(sparse, model, timings, lambda net: run(net, ids), time_ms)
    assert sorted(choice.retimed) == consumers and len(timed) == 4  # both FFN outs, dense and sparse each
    assert sorted(choice.dense_layers) == sorted(producers + consumers)
    torch.testing.assert_close(run(choice.twin, ids), run(model, ids), rtol=1e-4, atol=1e-4)


def test_fastest_choice_keeps_the_first_choice_where_no_input_changes() -> None:
    model, weights, packed = pruned_bert()
    ids = torch.randint(0, 40, (2, 9))
    sparse = sparsify(model, weights, packed)
    query = "encoder.layer.0.attention.self.query"
    timings = {name: LayerTiming(1, (2, 9, 64), 1.0, 2.0 if name == query else 0.5)
               for name in swapped_modules(weights, packed)}  # fmt: skip
    choice = fastest_choice(sparse, model, timings, lambda net: run(net, ids), lambda calls: pytest.fail("timed again"))
    assert choice.dense_layers == [query] and choice.retimed == {}
