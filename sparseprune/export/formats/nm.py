"""Packed N:M layout (also serves balanced VW, which is N:M with M = V and a per-layer N).

For B (K x N): every group of `m` consecutive K entries keeps `kept` entries per column block of `vector`
columns. `values` [K/m * kept, N] holds the kept values group after group; `idx` uint8 [K/m * kept, N/vector]
holds each kept value's position inside its group, shared by the `vector` columns of a block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from sparseprune.errors import UserError
from sparseprune.export.formats.base import TensorBundleMixin, apply_epilogue


@dataclass
class PackedNM(TensorBundleMixin):
    format_name: ClassVar[str] = "nm"
    values: torch.Tensor
    idx: torch.Tensor
    shape: tuple[int, int]
    m: int
    kept: int
    vector: int

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"values": self.values, "idx": self.idx}

    def metadata(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "m": self.m, "kept": self.kept, "vector": self.vector}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> PackedNM:
        return cls(
            tensors["values"], tensors["idx"], tuple(metadata["shape"]), metadata["m"], metadata["kept"],
            metadata["vector"],
        )  # fmt: skip

    def row_indices(self) -> torch.Tensor:
        """Absolute K index of every stored value, (K/m * kept, N)."""
        groups = self.shape[0] // self.m
        base = (torch.arange(groups, device=self.idx.device) * self.m).repeat_interleave(self.kept)
        return (base[:, None] + self.idx.long()).repeat_interleave(self.vector, dim=1)

    def dense(self) -> torch.Tensor:
        dense = torch.zeros(self.shape, dtype=self.values.dtype, device=self.values.device)
        return dense.scatter_(0, self.row_indices(), self.values)

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
        """Reference: scatter the kept values into B, one GEMM (fp32 accumulate on CPU)."""
        return apply_epilogue(x @ self.dense().to(x.dtype), bias, activation)


def pack_nm(weight_kn: torch.Tensor, keep: torch.Tensor, m: int, vector: int = 1) -> PackedNM:
    """Pack B under an N:M keep mask; every group must keep the same count and share indices per block."""
    k, n = weight_kn.shape
    if keep.shape != weight_kn.shape:
        raise UserError(f"mask shape {tuple(keep.shape)} differs from weight shape {(k, n)}")
    if k % m or n % vector or m > 256:
        raise UserError(f"N:M packing needs M | K, vector | N and M <= 256, got K={k}, N={n}, M={m}, V={vector}")
    groups = keep.reshape(k // m, m, n)
    counts = groups.sum(1)
    kept = int(counts.flatten()[0]) if counts.numel() else 0
    if not bool((counts == kept).all()):
        raise UserError("mask is not N:M: groups keep different counts")
    blocks = groups.reshape(k // m, m, n // vector, vector)
    if not bool((blocks == blocks[..., :1]).all()):
        raise UserError(f"mask is not vector-wise N:M: columns of a {vector}-wide block keep different indices")
    # Positions of the kept entries inside each group, ascending (a stable sort puts kept ones first in order).
    order = torch.sort((~groups).to(torch.uint8), dim=1, stable=True).indices[:, :kept, :]  # (K/m, kept, N)
    values = torch.gather(weight_kn.reshape(k // m, m, n), 1, order).reshape(-1, n)
    idx = order[:, :, ::vector].reshape(-1, n // vector).to(torch.uint8)
    return PackedNM(values.contiguous(), idx.contiguous(), (k, n), m, kept, vector)
