"""The feature-major BERT encoder (CPU reference ops): the masked dense model's outputs with and without padding
masks, for TW, vector-wise N:M, 2:4 and layers kept dense; Q, K, V fused into one TW weight; GELU in FFN in's
epilogue; the residual add and LayerNorm op against torch's LayerNorm (and its CUDA kernel against the reference);
and the custom ops under torch.compile with no graph break."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertModel

from bench.model_bench import prune_in_place
from sparseprune.export.feature_major_bert import (
    DenseProjection,
    FeatureMajorBertEncoder,
    StackedProjection,
    TWProjection,
    fused_activation,
    with_feature_major_encoders,
)
from sparseprune.export.formats.tw import concat_tw, pack_tw, unpack_tw
from sparseprune.export.ops import add_layer_norm_reference
from sparseprune.export.swap import sparsify, with_dense_layers
from sparseprune.pruning.gemm_view import find_prunable
from tests.random_masks import random_tw_mask

PATTERNS = {
    "tw": {"name": "tw", "granularity": 32},
    "vw": {"name": "nm", "n": 2, "m": 8, "vector": 32},
    "2:4": {"name": "nm", "n": 2, "m": 4},
}


def tiny_bert() -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=16, attn_implementation="sdpa")  # fmt: skip
    return BertModel(config, add_pooling_layer=False).eval()


def pruned_twin(pattern: str) -> tuple[BertModel, nn.Module]:
    model = tiny_bert()
    weights = find_prunable(model, ("*embeddings*",))
    packed, _ = prune_in_place(weights, PATTERNS[pattern], 0.5)
    twin, replaced = with_feature_major_encoders(sparsify(model, weights, packed))
    assert replaced == ([] if pattern == "2:4" else ["encoder"])
    return model, twin


def hidden(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    with torch.inference_mode():
        return model(ids, attention_mask=mask).last_hidden_state


def padding_mask(batch: int, seq: int) -> torch.Tensor:
    lengths = torch.tensor([seq - 3 * i for i in range(batch)])
    return (torch.arange(seq)[None, :] < lengths[:, None]).long()


@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize(("batch", "seq"), [(3, 16), (1, 11), (2, 13)])
def test_twin_keeps_the_masked_models_outputs(pattern: str, batch: int, seq: int) -> None:
    model, twin = pruned_twin(pattern)
    ids = torch.randint(0, 40, (batch, seq), generator=torch.Generator().manual_seed(seq))
    mask = padding_mask(batch, seq)
    expected, got = hidden(model, ids, mask), hidden(twin, ids, mask)
    real = mask.bool()  # padding positions are free to differ
    assert got.shape == expected.shape
    torch.testing.assert_close(got[real], expected[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(hidden(twin, ids, None), hidden(model, ids, None), rtol=1e-4, atol=1e-4)


def test_each_format_gets_its_projection() -> None:
    layers = {p: pruned_twin(p)[1].encoder.layer[0] for p in ("tw", "vw")}
    assert type(layers["tw"].qkv) is TWProjection and layers["tw"].qkv.shape == (64, 192)
    assert type(layers["vw"].qkv) is TWProjection  # vector-wise N:M runs on the TW kernels
    assert type(pruned_twin("2:4")[1].encoder) is not FeatureMajorBertEncoder  # 2:4 reads rows: stays swapped


def test_ffn_gelu_runs_in_the_tw_epilogue_and_dense_layers_keep_theirs() -> None:
    layer = pruned_twin("tw")[1].encoder.layer[0]
    assert layer.ffn_in.activation == 2 and type(layer.activation) is nn.Identity and layer.qkv.activation == 0
    model = tiny_bert()
    weights = find_prunable(model, ("*embeddings*",))
    packed, _ = prune_in_place(weights, PATTERNS["tw"], 0.5)
    kept = with_dense_layers(sparsify(model, weights, packed), model, ["encoder.layer.0.intermediate.dense"])
    dense_layer = with_feature_major_encoders(kept)[0].encoder.layer[0]
    assert type(dense_layer.ffn_in) is DenseProjection and type(dense_layer.activation) is not nn.Identity


@pytest.mark.parametrize(
    ("module", "expected"),
    [(nn.GELU(), "gelu"), (nn.GELU(approximate="tanh"), None), (nn.ReLU(), "relu"), (nn.SiLU(), None)],
)
def test_fused_activation_names_only_what_the_epilogue_computes_exactly(module: nn.Module, expected: str) -> None:
    assert fused_activation(module) == expected


def test_feature_major_layer_norm_is_torchs_layer_norm_of_the_sum() -> None:
    gen = torch.Generator().manual_seed(3)
    x, residual = torch.randn(2, 96, 40, generator=gen).unbind(0)
    weight, bias = torch.randn(2, 96, generator=gen).unbind(0)
    expected = F.layer_norm((x + residual).t(), (96,), weight, bias, 1e-12).t()
    torch.testing.assert_close(add_layer_norm_reference(x, residual, weight, bias, 1e-12), expected)
    op = torch.ops.sparseprune.add_layer_norm_feature_major(x, residual, weight, bias, 1e-12)
    torch.testing.assert_close(op, expected)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("hidden", [64, 384, 768, 1024, 832, 96])  # 96: not the kernel's, the reference runs
# Token counts cover every tiling the launcher picks: 16-byte runs of 32, 16 and 8 tokens with clusters of 1-8 CTAs
# (multiples of 8), and the scalar tiles (the rest).
@pytest.mark.parametrize("tokens", [1, 5, 16, 32, 100, 128, 256, 2047, 4096, 4101, 16384])
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
def test_layer_norm_kernel_matches_the_fp32_reference(
    dtype: torch.dtype, hidden: int, tokens: int, misaligned: bool
) -> None:
    gen = torch.Generator("cuda").manual_seed(hidden * tokens)
    storage = (torch.randn(2 * hidden * tokens + 1, generator=gen, device="cuda") * 3 + 1).to(dtype)
    start = 1 if misaligned else 0  # one element in: 2-byte alignment, so the kernel must take its scalar tiles
    x, residual = storage[start : start + 2 * hidden * tokens].view(2, hidden, tokens).unbind(0)
    weight, bias = torch.randn(2, hidden, generator=gen, device="cuda").to(dtype).unbind(0)
    got = torch.ops.sparseprune.add_layer_norm_feature_major(x, residual, weight, bias, 1e-12)
    expected = F.layer_norm((x + residual).float().t(), (hidden,), weight.float(), bias.float(), 1e-12).t()
    assert got.dtype == dtype and got.shape == (hidden, tokens)
    tolerance = 8e-3 if dtype == torch.bfloat16 else 1e-3  # the output's rounding, and fp32 statistics
    torch.testing.assert_close(got.float(), expected, rtol=tolerance, atol=tolerance)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("rows", "cols", "row_stride"), [(1, 7, 7), (4096, 2304, 2304), (250, 768, 800), (13, 5, 9)])
def test_transpose_op_is_the_contiguous_transpose(dtype: torch.dtype, rows: int, cols: int, row_stride: int) -> None:
    base = torch.randn(rows, row_stride, device="cuda", generator=torch.Generator("cuda").manual_seed(rows)).to(dtype)
    x = base[:, :cols]  # rows contiguous, any row stride
    got = torch.ops.sparseprune.transpose(x)
    assert got.is_contiguous() and torch.equal(got, x.t())


def test_layers_kept_dense_run_on_cublas_in_the_stream() -> None:
    model = tiny_bert()
    weights = find_prunable(model, ("*embeddings*",))
    packed, _ = prune_in_place(weights, PATTERNS["tw"], 0.5)
    dense_back = ["encoder.layer.0.attention.self.key", "encoder.layer.1.output.dense",
                  *(f"encoder.layer.0.attention.self.{p}" for p in ("query", "value"))]  # fmt: skip
    mixed = with_dense_layers(sparsify(model, weights, packed), model, dense_back[:2])
    all_dense_qkv = with_dense_layers(sparsify(model, weights, packed), model, dense_back)
    ids, mask = torch.randint(0, 40, (2, 16)), padding_mask(2, 16)
    for net in (mixed, all_dense_qkv):
        twin, _ = with_feature_major_encoders(net)
        torch.testing.assert_close(hidden(twin, ids, mask), hidden(model, ids, mask), rtol=1e-4, atol=1e-4)
    twin_mixed = with_feature_major_encoders(mixed)[0].encoder.layer
    assert type(twin_mixed[0].qkv) is StackedProjection and type(twin_mixed[1].ffn_out) is DenseProjection
    assert type(with_feature_major_encoders(all_dense_qkv)[0].encoder.layer[0].qkv) is DenseProjection


def test_dense_encoder_is_left_alone() -> None:
    model = tiny_bert()
    _, replaced = with_feature_major_encoders(model)
    assert replaced == [] and type(model.encoder) is not FeatureMajorBertEncoder


def test_concat_tw_is_the_stacked_weight_and_unpack_inverts_pack() -> None:
    gen = torch.Generator().manual_seed(5)
    parts, dense = [], []
    for i in range(3):
        b = torch.randn(64, 96, generator=gen)
        keep = random_tw_mask(64, 96, 32, 0.7, (0.2, 0.8), gen, empty_tiles=i % 2)
        packed = pack_tw(b, keep, 32)
        weight, mask, residual = unpack_tw(packed)
        assert residual is None and torch.equal(mask, keep) and torch.equal(weight, b * keep)
        parts.append(packed)
        dense.append(b * keep)
    fused = concat_tw(parts)
    x = torch.randn(7, 64, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(fused.matmul(x), x @ torch.cat(dense, 1).double())
    assert fused.num_tiles <= sum(p.num_tiles for p in parts)


def test_concat_tw_refuses_mixed_granularities() -> None:
    b, keep = torch.randn(64, 64), torch.ones(64, 64, dtype=torch.bool)
    with pytest.raises(Exception, match="one granularity"):
        concat_tw([pack_tw(b, keep, 32), pack_tw(b, keep, 64)])


def test_sparse_op_compiles_without_graph_breaks() -> None:
    _, twin = pruned_twin("tw")
    encoder = twin.encoder
    x = torch.randn(2, 16, 64)
    explained = torch._dynamo.explain(encoder)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    with torch.inference_mode():
        compiled = torch.compile(encoder, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(x).last_hidden_state, encoder(x).last_hidden_state)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("pattern", ["tw", "vw"])
@pytest.mark.parametrize(("batch", "seq"), [(4, 16), (1, 13), (1, 16)])
def test_twin_on_the_kernels_keeps_the_masked_models_outputs(pattern: str, batch: int, seq: int) -> None:
    model, twin = pruned_twin(pattern)
    reference, twin = model.cuda(), twin.cuda().half()
    ids = torch.randint(0, 40, (batch, seq), device="cuda", generator=torch.Generator("cuda").manual_seed(seq))
    mask = padding_mask(batch, seq).cuda()
    real = mask.bool()
    expected = hidden(reference, ids, mask)[real]
    for net in (twin, torch.compile(twin, dynamic=False)):
        got = hidden(net, ids, mask)[real].float()
        assert float((got - expected).abs().max() / expected.abs().max()) < 1e-2
