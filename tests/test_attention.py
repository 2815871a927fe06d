"""sparseprune::attention_feature_major: softmax attention from the stream's stacked (3H, T) QKV to the (H, T)
context, against attention written out in fp64 on row-major tensors; the reference path on a CPU, the Triton kernel
on a GPU."""

from __future__ import annotations

import pytest
import torch

from sparseprune.export import attention
from sparseprune.export.attention import additive_mask, attention_op, kernel_unsupported


def attention_fp64(qkv_t: torch.Tensor, bias: torch.Tensor | None, batch: int, heads: int, scale: float):
    """softmax(q kᵀ scale + bias) v per sequence and head, in fp64, from the (3H, T) layout; (H, T)."""
    hidden, tokens = qkv_t.shape[0] // 3, qkv_t.shape[1]
    seq, head = tokens // batch, hidden // heads
    q, k, v = qkv_t.double().view(3, heads, head, batch, seq).permute(0, 3, 1, 4, 2).unbind(0)  # (B, heads, S, d)
    scores = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias.double()
    context = scores.softmax(-1) @ v  # (B, heads, S, d)
    return context.permute(1, 3, 0, 2).reshape(hidden, tokens)


def padding_keep(batch: int, seq: int, device: str = "cpu") -> torch.Tensor:
    """(batch, 1, 1, seq) bool: sequence i keeps its first seq - i % 3 - 1 tokens (at least one)."""
    kept = torch.tensor([max(1, seq - i % 3 - 1) for i in range(batch)], device=device)
    return (torch.arange(seq, device=device) < kept[:, None]).view(batch, 1, 1, seq)


def test_additive_mask_is_zero_where_kept_and_minus_infinity_elsewhere() -> None:
    keep = torch.tensor([[True, False, True]]).view(1, 1, 1, 3)
    expected = torch.tensor([0.0, float("-inf"), 0.0]).view(1, 1, 1, 3)
    assert torch.equal(additive_mask(keep, torch.float16), expected.half())
    additive = torch.randn(1, 1, 1, 3)
    assert additive_mask(additive) is additive and additive_mask(None) is None


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive per query"])
def test_reference_path_is_attention_of_the_stacked_qkv(mask_kind: str) -> None:
    gen = torch.Generator().manual_seed(5)
    batch, seq, heads, head = 3, 7, 2, 16
    qkv_t = torch.randn(3 * heads * head, batch * seq, generator=gen)
    mask = {
        "none": None,
        "bool": padding_keep(batch, seq),
        "additive per query": torch.randn(batch, 1, seq, seq, generator=gen),
    }[mask_kind]
    got = attention_op(qkv_t, mask, batch, heads, 0.3)
    expected = attention_fp64(qkv_t, additive_mask(mask), batch, heads, 0.3)
    assert got.shape == (heads * head, batch * seq)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    torch.library.opcheck(attention_op, (qkv_t, mask, batch, heads, 0.3))


def test_kernel_unsupported_says_why() -> None:
    expected = "Triton is not installed" if attention.triton is None else "the kernel takes fp16/bf16 CUDA activations"
    assert kernel_unsupported(torch.zeros(96, 4), 2) == expected


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("batch", "seq", "heads", "head"), [(16, 256, 12, 64), (1, 256, 12, 64), (1, 128, 12, 64),
                                                             (2, 100, 4, 32), (3, 1, 2, 64), (1, 520, 2, 128),
                                                             (4, 33, 12, 16)])  # fmt: skip
@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_kernel_matches_fp64_attention(
    dtype: torch.dtype, batch: int, seq: int, heads: int, head: int, mask_kind: str
) -> None:
    gen = torch.Generator("cuda").manual_seed(batch * seq + head)
    qkv_t = torch.randn(3 * heads * head, batch * seq, generator=gen, device="cuda").to(dtype)
    assert kernel_unsupported(qkv_t, heads) is None, kernel_unsupported(qkv_t, heads)
    mask = {
        "none": None,
        "bool": padding_keep(batch, seq, "cuda"),
        "additive": (torch.randn(batch, 1, seq, seq, generator=gen, device="cuda") * 2).to(dtype),
    }[mask_kind]
    expected = attention_fp64(qkv_t, additive_mask(mask), batch, heads, head**-0.5)
    tolerance = 2e-2 if dtype == torch.bfloat16 else 4e-3
    bias = attention._kernel_bias(mask, batch, heads, seq)
    configs = [attention.KernelConfig(32), attention.KernelConfig(128, 128, 8, 2)]
    for got in [attention_op(qkv_t, mask, batch, heads, head**-0.5)] + [
        attention.launch(qkv_t, bias, batch, heads, head**-0.5, config) for config in configs
    ]:
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), expected, rtol=tolerance, atol=tolerance)


def test_kernel_config_takes_shorter_query_blocks_where_tall_ones_leave_sms_idle() -> None:
    if attention.triton is None:
        pytest.skip("needs Triton")
    assert attention.kernel_config(16 * 12, 256, 132) == attention.KernelConfig(128, 64, 4, 3)
    assert attention.kernel_config(12, 256, 132) == attention.KernelConfig(64, 128, 4, 3)
