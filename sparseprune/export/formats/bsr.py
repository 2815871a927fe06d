"""Block-wise sparsity: the kept bk x bn blocks of B, each with its block coordinates (the CPU reference format)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from sparseprune.errors import UserError
from sparseprune.export.formats.base import TensorBundleMixin, apply_epilogue


@dataclass
class PackedBSR(TensorBundleMixin):
    format_name: ClassVar[str] = "bsr"
    blocks: torch.Tensor  # (nnzb, bk, bn)
    block_k: torch.Tensor  # int32 (nnzb,) block-row index along K
    block_n: torch.Tensor  # int32 (nnzb,) block-column index along N
    shape: tuple[int, int]

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"blocks": self.blocks, "block_k": self.block_k, "block_n": self.block_n}

    def metadata(self) -> dict[str, Any]:
        return {"shape": list(self.shape)}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> PackedBSR:
        return cls(tensors["blocks"], tensors["block_k"], tensors["block_n"], tuple(metadata["shape"]))

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
        """CPU reference: one small GEMM per kept block, accumulated into its output columns. Blocks 32, 64 or 128
        wide pack as TW tiles instead (`packing.pack_layer`) and run on the TW kernels; other widths have no GPU
        kernel, and timing this einsum on a GPU would measure a reference as if it were one."""
        if x.is_cuda:
            raise UserError(
                f"BW blocks {self.blocks.shape[1]}x{self.blocks.shape[2]} have no GPU kernel: blocks 32, 64 or 128 "
                f"wide (pattern.block_n) run on the TW kernels; export this checkpoint with device=cpu"
            )
        k, n = self.shape
        bk, bn = self.blocks.shape[1:]
        x_blocks = x.reshape(x.shape[0], k // bk, bk)[:, self.block_k.long()]  # (M, nnzb, bk)
        partial = torch.einsum("mbk,bkn->mbn", x_blocks, self.blocks.to(x.dtype))
        y = torch.zeros(x.shape[0], n // bn, bn, dtype=x.dtype, device=x.device)
        y.index_add_(1, self.block_n.long(), partial)
        return apply_epilogue(y.reshape(x.shape[0], n), bias, activation)


def kept_blocks(keep: torch.Tensor, block_k: int, block_n: int) -> torch.Tensor:
    """(K / block_k, N / block_n) flags of the kept blocks of a K x N block-wise `keep` mask; any other mask (one
    altered by hand, or of other block sizes) is refused, so no format packs it as if it were block-wise."""
    k, n = keep.shape
    if k % block_k or n % block_n:
        raise UserError(f"BW packing needs blocks dividing {(k, n)}, got {block_k}x{block_n}")
    grid = keep.reshape(k // block_k, block_k, n // block_n, block_n).permute(0, 2, 1, 3)
    kept = grid.any(dim=(2, 3))
    if not bool((grid == kept[:, :, None, None]).all()):
        raise UserError(f"mask is not block-wise with {block_k}x{block_n} blocks")
    return kept


def pack_bsr(weight_kn: torch.Tensor, keep: torch.Tensor, block_k: int, block_n: int) -> PackedBSR:
    k, n = weight_kn.shape
    if keep.shape != weight_kn.shape:
        raise UserError(f"BSR packing needs a mask like the weight {(k, n)}, got {tuple(keep.shape)}")
    coords = torch.nonzero(kept_blocks(keep, block_k, block_n))
    weights = weight_kn.reshape(k // block_k, block_k, n // block_n, block_n).permute(0, 2, 1, 3)
    blocks = weights[coords[:, 0], coords[:, 1]].contiguous()
    return PackedBSR(blocks, coords[:, 0].int(), coords[:, 1].int(), (k, n))
