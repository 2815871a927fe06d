"""A BERT encoder whose hidden states stay feature-major, (hidden, tokens), the layout the TW kernels read and write.

Swapped layer by layer, a sparse BERT pays a transpose on each side of every sparse GEMM: on an H200, BERT-base at
16 x 256 tokens and 75% TW spent 32% of its GPU time in transposes, and its three 768 -> 768 Q, K, V calls each
filled a fraction of the GPU. Here the residual stream is one contiguous (H, T) tensor through the whole encoder:
- Q, K and V are one projection (`concat_tw`: one launch, one pass over x, a grid three times as wide);
- every projection maps xT (K, T) to yT (N, T): a TW weight through `torch.ops.sparseprune.tw_matmul` with both
  sides feature-major, a dense one (kept dense by the layer choice) as W @ xT on cuBLAS, which reads that layout
  as it reads any (an encoder with a format that reads rows, 2:4, keeps the swapped layers);
- residual add and LayerNorm are one kernel over dim 0 of that layout (`sparseprune::add_layer_norm_feature_major`:
  one pass over memory where torch and inductor take two), and GELU runs in FFN in's TW epilogue (H200, BERT-base
  at 16 x 256 tokens, compiled: 70 us less than inductor's GELU pass after the GEMM);
- attention reads Q, K and V from the stacked (3H, T) projection and writes its context (H, T) in the stream's
  layout (`sparseprune::attention_feature_major`, sparseprune/export/attention.py): no layout change at all, where
  the swapped twin made ten copies of the activations per layer.
Under torch.compile the torch code between the custom ops fuses (GELU after a layer kept dense, the embeddings);
eager, each is a torch kernel or two. Inference only: dropout is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

from sparseprune.errors import UserError
from sparseprune.export.attention import additive_mask
from sparseprune.export.formats.nm import TW_MIN_VECTOR, PackedNM, tw_view
from sparseprune.export.formats.tw import ACTIVATIONS, FEATURE_MAJOR_M_ALIGN, SMALL_M, PackedTW, concat_tw
from sparseprune.export.sparse_modules import SparseLinear


def _tw_weight(module: nn.Module) -> PackedTW | None:
    """The module's weight as a TW weight the feature-major kernels run, or None (dense, or a row-major format)."""
    if not isinstance(module, SparseLinear):
        return None
    packed = module.packed
    if isinstance(packed, PackedTW):
        return packed
    if isinstance(packed, PackedNM) and packed.vector >= TW_MIN_VECTOR and packed.kernel_unsupported() is None:
        return tw_view(packed)
    return None


def _bias(module: nn.Module) -> torch.Tensor | None:
    bias = getattr(module, "bias", None)
    return None if bias is None else bias.detach()


def _cat_biases(modules: Sequence[nn.Module]) -> torch.Tensor | None:
    biases = [_bias(m) for m in modules]
    like = next((b for b in biases if b is not None), None)
    if like is None:
        return None
    sizes = [int(m.weight.shape[0]) if isinstance(m, nn.Linear) else int(m.packed.shape[1]) for m in modules]
    return torch.cat([b if b is not None else like.new_zeros(n) for b, n in zip(biases, sizes, strict=True)])


class TWProjection(nn.Module):
    """yT = act(xT^T @ B + bias)^T on the TW kernels, both sides feature-major, the activation in their epilogue."""

    def __init__(self, packed: PackedTW, bias: torch.Tensor | None, activation: str | None = None) -> None:
        super().__init__()
        self.shape = packed.shape
        self.activation = ACTIVATIONS[activation]
        self.granularity, self.max_tile_k = packed.granularity, packed.max_tile_k
        self.names = list(packed.tensors())
        for name, tensor in packed.tensors().items():
            self.register_buffer(name, tensor.clone())
        self.register_buffer("bias", None if bias is None else bias.clone())

    def _tensor(self, name: str) -> torch.Tensor | None:
        return getattr(self, name) if name in self.names else None

    def forward(self, xt: torch.Tensor) -> torch.Tensor:
        k, n = self.shape
        return torch.ops.sparseprune.tw_matmul(
            xt, self.values, self.rows, self.tile_ptr, self.cols, self.col_pos, self.pruned_cols,
            self.bias, self._tensor("res_ptr"), self._tensor("res_rows"), self._tensor("res_vals"),
            k, n, self.granularity, self.max_tile_k, self.activation, True, True, 0,
        )  # fmt: skip


class DenseProjection(nn.Module):
    """yT = W @ xT + bias on cuBLAS: a layer the layer choice kept dense, in the stream's layout."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().clone())
        self.register_buffer("bias", None if bias is None else bias.detach().clone()[:, None])

    def forward(self, xt: torch.Tensor) -> torch.Tensor:
        if self.bias is None:
            return self.weight @ xt
        return torch.addmm(self.bias, self.weight, xt)


def feature_major_projection(modules: Sequence[nn.Module], activation: str | None = None) -> nn.Module:
    """One projection computing every module's output, stacked along features, from xT: fused where the modules
    share a kernel family (TW weights of one granularity, or dense weights), else one call each. `activation` (a
    single TW module only) runs in the kernel's epilogue."""
    weights = [_tw_weight(m) for m in modules]
    if activation is not None and (len(weights) != 1 or weights[0] is None):
        raise UserError("only a single TW projection fuses its activation")
    if all(w is not None for w in weights) and len({w.granularity for w in weights}) == 1:
        packed = weights[0] if len(weights) == 1 else concat_tw(weights)
        return TWProjection(packed, _cat_biases(modules), activation)
    if all(type(m) is nn.Linear for m in modules):
        return DenseProjection(torch.cat([m.weight for m in modules]), _cat_biases(modules))
    if len(modules) > 1:
        return StackedProjection([feature_major_projection([m]) for m in modules])
    raise UserError(f"{type(modules[0]).__name__} has no feature-major projection (streams_feature_major says which)")


class StackedProjection(nn.Module):
    """Projections of different kernel families on one input, outputs stacked along features."""

    def __init__(self, parts: Sequence[nn.Module]) -> None:
        super().__init__()
        self.parts = nn.ModuleList(parts)

    def forward(self, xt: torch.Tensor) -> torch.Tensor:
        return torch.cat([part(xt) for part in self.parts], dim=0)


def fused_activation(activation: nn.Module) -> str | None:
    """The TW epilogue's name for a transformers/torch activation module it computes exactly, else None."""
    if isinstance(activation, nn.ReLU) or type(activation).__name__ == "ReLUActivation":
        return "relu"
    exact_gelu = isinstance(activation, nn.GELU) and activation.approximate == "none"
    if exact_gelu or type(activation).__name__ == "GELUActivation" and not getattr(activation, "use_gelu_python", 0):
        return "gelu"
    return None


def feature_major_layer_norm(x: torch.Tensor, residual: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """LayerNorm(x + residual) over the features of feature-major (H, T) tensors, in fp32 as torch's LayerNorm: one
    kernel (`sparseprune::add_layer_norm_feature_major`)."""
    weight, bias = norm.weight.detach(), norm.bias.detach()
    return torch.ops.sparseprune.add_layer_norm_feature_major(x, residual, weight, bias, norm.eps)


class FeatureMajorBertLayer(nn.Module):
    """One BERT encoder layer (post-LayerNorm, self-attention only) on an (H, T) hidden state."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        attention = layer.attention.self
        self.heads, self.head_size = attention.num_attention_heads, attention.attention_head_size
        self.scaling = getattr(attention, "scaling", self.head_size**-0.5)
        self.qkv = feature_major_projection([attention.query, attention.key, attention.value])
        self.attention_out = feature_major_projection([layer.attention.output.dense])
        self.attention_norm = layer.attention.output.LayerNorm
        activation = layer.intermediate.intermediate_act_fn
        fused = fused_activation(activation) if _tw_weight(layer.intermediate.dense) is not None else None
        self.ffn_in = feature_major_projection([layer.intermediate.dense], fused)
        self.activation = nn.Identity() if fused else activation
        self.ffn_out = feature_major_projection([layer.output.dense])
        self.output_norm = layer.output.LayerNorm

    def attend(self, qkv_t: torch.Tensor, batch: int, seq: int, mask: torch.Tensor | None) -> torch.Tensor:
        """Context (H, T) from the stacked QKV (3H, T), read and written in the stream's layout."""
        return torch.ops.sparseprune.attention_feature_major(qkv_t, mask, batch, self.heads, self.scaling)

    def forward(self, hidden_t: torch.Tensor, batch: int, seq: int, mask: torch.Tensor | None) -> torch.Tensor:
        context = self.attend(self.qkv(hidden_t), batch, seq, mask)
        attended = feature_major_layer_norm(self.attention_out(context), hidden_t, self.attention_norm)
        inner = self.activation(self.ffn_in(attended))
        return feature_major_layer_norm(self.ffn_out(inner), attended, self.output_norm)


def _sdpa_mask(mask: torch.Tensor | None, seq: int, padded: int, device: torch.device) -> torch.Tensor | None:
    """The encoder's 4-D attention mask as sdpa's fused kernels take it (last dimension contiguous), with `padded -
    seq` padding tokens appended that no query attends to (and that attend to everything, so they stay finite)."""
    if mask is not None and mask.dim() == 2:
        raise UserError("the feature-major encoder takes the 4-D mask BertModel builds, not a 2-D token mask")
    pad = padded - seq
    if pad and mask is None:
        return (torch.arange(padded, device=device) < seq).view(1, 1, 1, padded)
    if mask is None:
        return None
    if pad:
        if mask.dtype == torch.bool:
            mask = F.pad(mask, (0, pad), value=False)
            mask = F.pad(mask, (0, 0, 0, pad), value=True) if mask.shape[-2] == seq else mask
        else:
            mask = F.pad(mask, (0, pad), value=torch.finfo(mask.dtype).min)
            mask = F.pad(mask, (0, 0, 0, pad), value=0.0) if mask.shape[-2] == seq else mask
    return mask if mask.stride(-1) == 1 else mask.contiguous()


class FeatureMajorBertEncoder(nn.Module):
    """Drop-in for transformers' BertEncoder in inference: the hidden states enter row-major, run feature-major
    through every layer, and leave as a (batch, seq, H) view of the (H, T) result (no copy back)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.layer = nn.ModuleList(FeatureMajorBertLayer(layer) for layer in encoder.layer)

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        if kwargs.get("output_attentions") or kwargs.get("output_hidden_states"):
            raise UserError("the feature-major encoder returns the last hidden state only")
        batch, seq, hidden = hidden_states.shape
        # the TW kernels read a feature-major x in 16-byte runs of tokens, or run a GEMV on at most SMALL_M tokens
        padded = seq if (batch * seq) % FEATURE_MAJOR_M_ALIGN == 0 or batch * seq <= SMALL_M else _aligned(seq)
        mask = additive_mask(_sdpa_mask(attention_mask, seq, padded, hidden_states.device), hidden_states.dtype)
        if padded != seq:
            hidden_states = F.pad(hidden_states, (0, 0, 0, padded - seq))
        stream = hidden_states.reshape(batch * padded, hidden).t().contiguous()
        for layer in self.layer:
            stream = layer(stream, batch, padded, mask)
        out = stream.t().view(batch, padded, hidden)[:, :seq]
        if kwargs.get("return_dict") is False:
            return (out,)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=out)


def _aligned(seq: int) -> int:
    return -(-seq // FEATURE_MAJOR_M_ALIGN) * FEATURE_MAJOR_M_ALIGN


def _is_bert_encoder(module: nn.Module) -> bool:
    """An encoder-only transformers BertEncoder (no cross-attention), whose layers the rewrite understands."""
    layers = getattr(module, "layer", None)
    if type(module).__name__ != "BertEncoder" or not isinstance(layers, nn.ModuleList) or not layers:
        return False
    return all(not getattr(layer, "add_cross_attention", False) and not getattr(layer, "is_decoder", False)
               and hasattr(layer, "attention") and hasattr(layer, "intermediate") for layer in layers)  # fmt: skip


def streams_feature_major(encoder: nn.Module) -> bool:
    """Whether the encoder gains from the feature-major stream: it holds sparse layers and the TW kernels run every
    one of them. A format that reads rows (2:4 on the sparse tensor cores) would pay two transposes per call in the
    stream, more than the swapped twin pays (H200, BERT-base at 16 x 256 tokens: 1.31 against 1.28 ms,
    bench/results/e2e_h200_bert.md)."""
    sparse = [m for m in encoder.modules() if isinstance(m, SparseLinear)]
    return bool(sparse) and all(_tw_weight(m) is not None for m in sparse)


def with_feature_major_encoders(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """(model with each BERT encoder that `streams_feature_major` replaced by its feature-major twin, in place, the
    names replaced). Dense encoders, and those whose sparse layers read rows, stay as they are."""
    replaced = []
    for name, module in list(model.named_modules()):
        if _is_bert_encoder(module) and streams_feature_major(module):
            twin = FeatureMajorBertEncoder(module)
            parent_name, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, child, twin)
            replaced.append(name)
    return model, replaced
