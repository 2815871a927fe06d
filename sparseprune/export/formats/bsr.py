"""Block-wise sparsity: the kept bk x bn blocks of B, each with its block coordinates."""

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
        """Reference: one small GEMM per kept block, accumulated into its output columns."""
        k, n = self.shape
        bk, bn = self.blocks.shape[1:]
        x_blocks = x.reshape(x.shape[0], k // bk, bk)[:, self.block_k.long()]  # (M, nnzb, bk)
        partial = torch.einsum("mbk,bkn->mbn", x_blocks, self.blocks.to(x.dtype))
        y = torch.zeros(x.shape[0], n // bn, bn, dtype=x.dtype, device=x.device)
        y.index_add_(1, self.block_n.long(), partial)
        return apply_epilogue(y.reshape(x.shape[0], n), bias, activation)


def pack_bsr(weight_kn: torch.Tensor, keep: torch.Tensor, block_k: int, block_n: int) -> PackedBSR:
    k, n = weight_kn.shape
    if keep.shape != weight_kn.shape or k % block_k or n % block_n:
        raise UserError(
            f"BSR packing needs a mask like the weight and blocks dividing {(k, n)}, got {block_k}x{block_n}"
        )
    grid = keep.reshape(k // block_k, block_k, n // block_n, block_n).permute(0, 2, 1, 3)
    kept_blocks = grid.any(dim=(2, 3))
    if not bool((grid == kept_blocks[:, :, None, None]).all()):
        raise UserError(f"mask is not block-wise with {block_k}x{block_n} blocks")
    coords = torch.nonzero(kept_blocks)
    weights = weight_kn.reshape(k // block_k, block_k, n // block_n, block_n).permute(0, 2, 1, 3)
    blocks = weights[coords[:, 0], coords[:, 1]].contiguous()
    return PackedBSR(blocks, coords[:, 0].int(), coords[:, 1].int(), (k, n))
