"""Modules that compute from a packed weight, drop-in for the dense layers they replace."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sparseprune.export.formats.base import PackedWeight
from sparseprune.export.formats.nm import PackedNM
from sparseprune.export.formats.tw import PackedTW


class SparseLinear(nn.Module):
    """y = x @ B + bias for x (..., K), B packed.

    The packed arrays are buffers, so `.to()`, `.cuda()` and `.half()` move and cast them like any module
    state (floating values only; indices keep their integer type).
    """

    def __init__(self, packed: PackedWeight, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.packed_type = type(packed)
        self.packed_metadata = packed.metadata()
        self.packed_names = list(packed.tensors())
        for name, tensor in packed.tensors().items():
            self.register_buffer(f"packed_{name}", tensor)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    @property
    def packed(self) -> PackedWeight:
        tensors = {name: getattr(self, f"packed_{name}") for name in self.packed_names}
        return self.packed_type.from_tensors(tensors, self.packed_metadata)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        y = self.packed.matmul(rows, self.bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])


class SparseConv2d(SparseLinear):
    """Convolution as im2col + packed GEMM (K = Cin*kh*kw, N = Cout): the GEMM view the pattern pruned.

    A format that computes feature-major (TW, and N:M where it runs on the TW kernels) takes the im2col columns as
    they come, K x (B*L), and returns Cout x (B*L), which is NCHW for one image: no transposes around the GEMM, where
    the row-major route pays four (H200, VGG16 conv4 at 75%: bench/results/tw_h200_conv_feature_major.md).
    """

    def __init__(self, packed: PackedWeight, bias: torch.Tensor | None, conv: nn.Conv2d) -> None:
        super().__init__(packed, bias)
        if conv.groups != 1:
            raise ValueError("grouped convolutions have no single GEMM view")
        self.kernel_size, self.stride = conv.kernel_size, conv.stride
        self.padding, self.dilation = conv.padding, conv.dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, height, width = x.shape
        columns = F.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)  # (B, K, L)
        out_h = (height + 2 * self.padding[0] - self.dilation[0] * (self.kernel_size[0] - 1) - 1) // self.stride[0] + 1
        out_w = (width + 2 * self.padding[1] - self.dilation[1] * (self.kernel_size[1] - 1) - 1) // self.stride[1] + 1
        packed = self.packed
        if isinstance(packed, (PackedTW, PackedNM)):
            yt = packed.matmul_feature_major(columns.transpose(0, 1).reshape(columns.shape[1], -1), self.bias)
            return yt.reshape(-1, batch, out_h, out_w).transpose(0, 1)  # contiguous for one image
        rows = columns.transpose(1, 2).reshape(-1, columns.shape[1])  # (B*L, K)
        y = packed.matmul(rows, self.bias)  # (B*L, N)
        return y.reshape(batch, out_h * out_w, -1).transpose(1, 2).reshape(batch, -1, out_h, out_w)
