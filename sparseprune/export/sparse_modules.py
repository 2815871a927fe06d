"""Modules that compute from a packed weight, drop-in for the dense layers they replace."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sparseprune.export.formats.base import PackedWeight
from sparseprune.export.formats.nm import PackedNM, sp24_tiles
from sparseprune.export.formats.tw import FeatureMajorMatmul, PackedTW


class SparseLinear(nn.Module):
    """y = x @ B + bias for x (..., K), B packed.

    The packed arrays are buffers, so `.to()`, `.cuda()` and `.half()` move and cast them like any module
    state (floating values only; indices keep their integer type). With `feature_major_out` y keeps the kernel's
    feature-major storage, which a following sparse layer reads without a transpose (`sparseprune.export.chains`
    sets it where one layer feeds another). `sp24_tile` is "auto", or a CTA tile of the 2:4 GEMM that an N:M weight
    then runs on wherever auto would read x row-major: export's layer choice sets it where a tile ran faster on the
    layer's own input than auto's route.
    """

    def __init__(self, packed: PackedWeight, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.packed_type = type(packed)
        self.packed_metadata = packed.metadata()
        self.packed_names = list(packed.tensors())
        for name, tensor in packed.tensors().items():
            self.register_buffer(f"packed_{name}", tensor)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.feature_major_out = False
        self.sp24_tile = "auto"

    @property
    def packed(self) -> PackedWeight:
        tensors = {name: getattr(self, f"packed_{name}") for name in self.packed_names}
        return self.packed_type.from_tensors(tensors, self.packed_metadata)

    @staticmethod
    def _feature_major_weight(packed: PackedWeight, x: torch.Tensor, rows: int) -> FeatureMajorMatmul | None:
        """The weight that computes this call feature-major: TW itself, an N:M weight where auto takes the TW
        kernels for these rows (`PackedNM.feature_major_twin`), else None (the format reads rows). Decided from x's
        device, dtype and row count only, so a traced graph fixes it once."""
        if isinstance(packed, PackedTW):
            return packed
        return packed.feature_major_twin(x, rows) if isinstance(packed, PackedNM) else None

    def gemm_rows(self, x: torch.Tensor) -> int:
        """Rows of the GEMM this layer runs for input x."""
        return x.numel() // max(x.shape[-1], 1)

    def sp24_tiles(self, x: torch.Tensor) -> tuple[str, ...]:
        """The 2:4 CTA tiles `sp24_tile` can force for input x (nm.sp24_tiles): none for other formats."""
        packed = self.packed
        return sp24_tiles(x, packed, self.gemm_rows(x)) if isinstance(packed, PackedNM) else ()

    def _row_major_matmul(self, packed: PackedWeight, x: torch.Tensor) -> torch.Tensor:
        if isinstance(packed, PackedNM):
            return packed.matmul(x, self.bias, tile=self.sp24_tile)
        return packed.matmul(x, self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self.packed
        weight = self._feature_major_weight(packed, x, self.gemm_rows(x))
        if weight is not None:
            return weight.matmul(x, self.bias, feature_major_out=self.feature_major_out)
        return self._row_major_matmul(packed, x)


def conv_output_size(
    x: torch.Tensor,
    kernel_size: tuple[int, int],
    dilation: tuple[int, int],
    padding: tuple[int, int],
    stride: tuple[int, int],
) -> tuple[int, int]:
    """(oh, ow) of a convolution of x (B, C, H, W); ValueError where the kernel does not fit."""
    height, width = x.shape[2:]
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
    out_h = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    out_w = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if out_h < 1 or out_w < 1:
        raise ValueError(f"input {height} x {width} is smaller than the {kh} x {kw} kernel (dilation {dh} x {dw}) "
                         f"with padding {ph} x {pw}")  # fmt: skip
    return out_h, out_w


def im2col(
    x: torch.Tensor,
    kernel_size: tuple[int, int],
    dilation: tuple[int, int],
    padding: tuple[int, int],
    stride: tuple[int, int],
    feature_major: bool,
) -> tuple[torch.Tensor, int, int]:
    """The im2col matrix of x (B, C, H, W), as F.unfold orders it, in one pass: feature-major (C*kh*kw, B*oh*ow) or
    row-major (B*oh*ow, C*kh*kw); and the output grid (oh, ow). Feature-major is `sparseprune::im2col_feature_major`,
    on CUDA in fp16/bf16 the extension's im2col kernel, which writes VGG16's matrices at 1.7-3.9x F.unfold's rate on
    an H200 (and F.unfold's (B, C*kh*kw, L) would need a second copy for several images); the rest is a strided copy
    of the padded input."""
    out_h, out_w = conv_output_size(x, kernel_size, dilation, padding, stride)
    if feature_major:
        (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
        return torch.ops.sparseprune.im2col_feature_major(x, kh, kw, dh, dw, ph, pw, sh, sw), out_h, out_w
    batch, channels = x.shape[:2]
    windows = _windows(x, kernel_size, dilation, padding, stride, out_h, out_w)
    return windows.permute(0, 4, 5, 1, 2, 3).reshape(-1, channels * kernel_size[0] * kernel_size[1]), out_h, out_w


def im2col_reference(
    x: torch.Tensor,
    kernel_size: tuple[int, int],
    dilation: tuple[int, int],
    padding: tuple[int, int],
    stride: tuple[int, int],
) -> torch.Tensor:
    """The feature-major im2col matrix (C*kh*kw, B*oh*ow) in torch: one strided copy into a fresh tensor."""
    batch, channels = x.shape[:2]
    (kh, kw), out = kernel_size, conv_output_size(x, kernel_size, dilation, padding, stride)
    columns = x.new_empty((channels * kh * kw, batch * out[0] * out[1]))
    windows = _windows(x, kernel_size, dilation, padding, stride, *out)
    columns.view(channels, kh, kw, batch, *out).copy_(windows.permute(1, 2, 3, 0, 4, 5))
    return columns


def _windows(
    x: torch.Tensor,
    kernel_size: tuple[int, int],
    dilation: tuple[int, int],
    padding: tuple[int, int],
    stride: tuple[int, int],
    out_h: int,
    out_w: int,
) -> torch.Tensor:
    """windows[b, c, i, j, y, x] = padded[b, c, y*sh + i*dh, x*sw + j*dw], a strided view of the padded input."""
    batch, channels = x.shape[:2]
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
    padded = F.pad(x, (pw, pw, ph, ph)) if ph or pw else x
    sb, sc, sy, sx = padded.stride()
    return padded.as_strided((batch, channels, kh, kw, out_h, out_w), (sb, sc, sy * dh, sx * dw, sy * sh, sx * sw))


class SparseConv2d(SparseLinear):
    """Convolution as im2col + packed GEMM (K = Cin*kh*kw, N = Cout): the GEMM view the pattern pruned.

    A format that computes feature-major (TW, and N:M where auto takes the TW kernels) takes the im2col matrix
    K x (B*L) and returns Cout x (B*L), which is NCHW for one image: no transposes around the GEMM, where the
    row-major route pays four (H200, VGG16 conv4 at 75%: bench/results/tw_h200_conv_feature_major.md).
    """

    def __init__(self, packed: PackedWeight, bias: torch.Tensor | None, conv: nn.Conv2d) -> None:
        super().__init__(packed, bias)
        if conv.groups != 1:
            raise ValueError("grouped convolutions have no single GEMM view")
        if isinstance(conv.padding, str) or conv.padding_mode != "zeros":
            raise ValueError(f"only explicit zero padding has an im2col view here, got padding={conv.padding!r}, "
                             f"padding_mode={conv.padding_mode!r}")  # fmt: skip
        self.geometry = (conv.kernel_size, conv.dilation, conv.padding, conv.stride)

    def gemm_rows(self, x: torch.Tensor) -> int:
        """Rows of the im2col matrix: one per image and output position."""
        out_h, out_w = conv_output_size(x, *self.geometry)
        return x.shape[0] * out_h * out_w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        packed = self.packed
        out_h, out_w = conv_output_size(x, *self.geometry)
        weight = self._feature_major_weight(packed, x, batch * out_h * out_w)
        columns, _, _ = im2col(x, *self.geometry, feature_major=weight is not None)
        if weight is not None:
            yt = weight.matmul_feature_major(columns, self.bias)  # (N, B*L)
            return yt.reshape(-1, batch, out_h, out_w).transpose(0, 1)  # contiguous for one image
        y = self._row_major_matmul(packed, columns)  # (B*L, N)
        return y.reshape(batch, out_h, out_w, -1).permute(0, 3, 1, 2)


class StorageOrderMaxPool2d(nn.MaxPool2d):
    """nn.MaxPool2d that pools a channel-major input (B, C, H, W) stored as (C, B, H, W), the layout a sparse
    convolution returns for several images, in its storage order. Pooling works plane by plane, so pooling the
    contiguous (C, B, H, W) tensor gives the same values, about twice as fast on an H200 as torch's strided NCHW
    path, and hands the next layer the same channel-major layout."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4 and not x.is_contiguous() and x.transpose(0, 1).is_contiguous():
            return super().forward(x.transpose(0, 1)).transpose(0, 1)
        return super().forward(x)
