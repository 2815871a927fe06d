"""Self-attention read straight from the feature-major encoder's stacked QKV, (3H, T), written as the (H, T) context.

sdpa's fused kernels read (batch, heads, seq, head) tensors with the head dimension contiguous, so the stream paid a
transpose of QKV in and of the context out of every layer: on an H200, BERT-base at 16 x 256 tokens spent 174 us of
its 2.05 ms in those copies (bench/results/e2e_h200_bert.md). The flash-attention kernel here loads Q and V tiles
token-contiguous, and Kᵀ tiles as they lie (the (head, tokens) block of the stream is Kᵀ already), so the only
traffic is the one attention itself needs. `sparseprune::attention_feature_major` runs it for fp16/bf16 CUDA inputs
when Triton is importable and the head size is a power of two from 16 to 128; elsewhere it runs the transposes and
sdpa (`attention_reference`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import sparseprune.export.ops  # noqa: F401  (registers torch.ops.sparseprune.transpose)

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the reference runs
    triton = None

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
LOG2E = 1.0 / math.log(2.0)


def attention_reference(
    qkv_t: torch.Tensor, mask: torch.Tensor | None, batch: int, heads: int, scale: float
) -> torch.Tensor:
    """Context (H, T) from the stacked QKV (3H, T): sdpa on the (batch, heads, seq, head) layout, one transpose in
    and one out (`sparseprune::transpose`)."""
    hidden, tokens = qkv_t.shape[0] // 3, qkv_t.shape[1]
    seq, head = tokens // batch, hidden // heads
    qkv = torch.ops.sparseprune.transpose(qkv_t).view(batch, seq, 3, heads, head)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return torch.ops.sparseprune.transpose(context.transpose(1, 2).reshape(tokens, hidden))


if triton is not None:

    @triton.jit
    def _attention_kernel(
        qkv, out, bias, tokens, seq, heads, scale_log2,
        bias_sb, bias_sh, bias_sq,
        HAS_BIAS: tl.constexpr, HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):  # fmt: skip
        """One (query block, batch x head) program: online softmax over key blocks, fp32 statistics."""
        hidden = heads * HEAD
        batch_head = tl.program_id(1)
        b, h = batch_head // heads, batch_head % heads
        q_pos = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, HEAD)
        first = b.to(tl.int64) * seq
        q_ok = q_pos < seq
        feature = (h * HEAD + d).to(tl.int64) * tokens  # row offsets of this head's features
        q = tl.load(qkv + feature[None, :] + (first + q_pos)[:, None], mask=q_ok[:, None], other=0.0)
        k_rows = qkv + hidden * tokens + feature[:, None]
        v_rows = qkv + 2 * hidden * tokens + feature[None, :]
        m_i = tl.full([BLOCK_M], -1.0e30, tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD], tl.float32)
        for start in range(0, seq, BLOCK_N):
            k_pos = start + tl.arange(0, BLOCK_N)
            k_ok = k_pos < seq
            kt = tl.load(k_rows + (first + k_pos)[None, :], mask=k_ok[None, :], other=0.0)
            s = tl.dot(q, kt) * scale_log2
            if HAS_BIAS:
                bias_at = bias + b * bias_sb + h * bias_sh + q_pos[:, None] * bias_sq + k_pos[None, :]
                bias_ij = tl.load(bias_at, mask=q_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
                s += bias_ij * 1.4426950408889634  # log2(e): the scores are in base 2
            s = tl.where(k_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_rows + (first + k_pos)[:, None], mask=k_ok[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        acc = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]  # a query with every key masked gets zeros
        out_at = out + feature[None, :] + (first + q_pos)[:, None]
        tl.store(out_at, acc.to(out.dtype.element_ty), mask=q_ok[:, None])


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """An sdpa mask as the additive bias of `dtype` it stands for (a bool mask keeps where True); the encoder
    converts once for all its layers."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def _kernel_bias(mask: torch.Tensor | None, batch: int, heads: int, seq: int) -> torch.Tensor | None:
    """The 4-D mask as the additive bias the kernel indexes, (1 or batch, 1 or heads, 1 or seq, seq) with the key
    dimension contiguous, or None when it has another shape."""
    if mask is None or mask.dim() != 4 or mask.shape[-1] != seq:
        return None
    if mask.shape[0] not in (1, batch) or mask.shape[1] not in (1, heads) or mask.shape[2] not in (1, seq):
        return None
    bias = additive_mask(mask)  # fp32 where the caller left it bool
    return bias if bias.stride(-1) == 1 else bias.contiguous()


@dataclass(frozen=True)
class KernelConfig:
    """Triton launch shape: query and key rows per block, warps, pipeline stages."""

    block_m: int
    block_n: int = 64
    warps: int = 4
    stages: int = 2


def kernel_config(sequences_x_heads: int, seq: int, sms: int) -> KernelConfig:
    """The launch shape for a call, from bench/results/attention_h200_configs.md (H200, BERT-base, 12 shapes
    timed): 128-query blocks over 64-key steps where they fill the GPU (16 x 256 tokens: 27.8 us against 41.0 for
    transposes + sdpa), else 64-query blocks over 128-key steps, twice the programs (1 x 256: 6.6 against 17.0)."""
    if sequences_x_heads * triton.cdiv(seq, 128) >= sms:
        return KernelConfig(128, 64, 4, 3)
    return KernelConfig(64, 128, 4, 3)


def kernel_unsupported(qkv_t: torch.Tensor, heads: int) -> str | None:
    """Why the Triton kernel cannot run this call, or None."""
    if triton is None:
        return "Triton is not installed"
    if not qkv_t.is_cuda or qkv_t.dtype not in KERNEL_DTYPES:
        return "the kernel takes fp16/bf16 CUDA activations"
    head = qkv_t.shape[0] // 3 // heads
    if head < 16 or head > 128 or head & (head - 1):
        return f"head size {head} is not a power of two from 16 to 128"
    if qkv_t.stride(1) != 1:
        return "the stacked QKV must have contiguous rows"
    return None


@torch.library.custom_op("sparseprune::attention_feature_major", mutates_args=())
def attention_op(qkv_t: torch.Tensor, mask: torch.Tensor | None, batch: int, heads: int, scale: float) -> torch.Tensor:
    """Softmax attention of the (3H, T) stacked Q, K, V of `batch` sequences of T / batch tokens, `heads` heads, an
    optional 4-D sdpa mask (bool keep, or additive); the (H, T) context."""
    seq = qkv_t.shape[1] // batch
    bias = _kernel_bias(mask, batch, heads, seq)
    if kernel_unsupported(qkv_t, heads) is not None or (mask is not None and bias is None):
        return attention_reference(qkv_t, mask, batch, heads, scale)
    sms = torch.cuda.get_device_properties(qkv_t.device).multi_processor_count
    return launch(qkv_t, bias, batch, heads, scale, kernel_config(batch * heads, seq, sms))


def launch(
    qkv_t: torch.Tensor, bias: torch.Tensor | None, batch: int, heads: int, scale: float, config: KernelConfig
) -> torch.Tensor:
    """The Triton kernel on a supported call (kernel_unsupported None; bias from _kernel_bias) in `config`."""
    hidden, tokens = qkv_t.shape[0] // 3, qkv_t.shape[1]
    seq = tokens // batch
    out = qkv_t.new_empty((hidden, tokens))
    strides = [0, 0, 0] if bias is None else [bias.stride(d) if bias.shape[d] > 1 else 0 for d in range(3)]
    grid = (triton.cdiv(seq, config.block_m), batch * heads)
    _attention_kernel[grid](
        qkv_t, out, bias if bias is not None else qkv_t, tokens, seq, heads, scale * LOG2E, *strides,
        HAS_BIAS=bias is not None, HEAD=hidden // heads, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
        num_warps=config.warps, num_stages=config.stages,
    )  # fmt: skip
    return out


@attention_op.register_fake
def _attention_fake(
    qkv_t: torch.Tensor, mask: torch.Tensor | None, batch: int, heads: int, scale: float
) -> torch.Tensor:
    return qkv_t.new_empty((qkv_t.shape[0] // 3, qkv_t.shape[1]))
