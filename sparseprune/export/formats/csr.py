"""Element-wise sparsity as CSR of B^T (one row per output column): cuSPARSE / MKL SpMM through torch.sparse."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from sparseprune.errors import UserError
from sparseprune.export.formats.base import TensorBundleMixin, apply_epilogue


@dataclass
class PackedCSR(TensorBundleMixin):
    format_name: ClassVar[str] = "csr"
    crow: torch.Tensor
    col: torch.Tensor
    values: torch.Tensor
    shape: tuple[int, int]

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"crow": self.crow, "col": self.col, "values": self.values}

    def metadata(self) -> dict[str, Any]:
        return {"shape": list(self.shape)}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> PackedCSR:
        return cls(tensors["crow"], tensors["col"], tensors["values"], tuple(metadata["shape"]))

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
        k, n = self.shape
        weight_t = torch.sparse_csr_tensor(self.crow, self.col, self.values.to(x.dtype), (n, k), check_invariants=False)
        return apply_epilogue((weight_t @ x.t()).t(), bias, activation)


def pack_csr(weight_kn: torch.Tensor, keep: torch.Tensor) -> PackedCSR:
    if keep.shape != weight_kn.shape:
        raise UserError(f"mask shape {tuple(keep.shape)} differs from weight shape {tuple(weight_kn.shape)}")
    with warnings.catch_warnings():  # torch flags its CSR support as beta on every conversion
        warnings.simplefilter("ignore", UserWarning)
        sparse = (weight_kn * keep).t().contiguous().to_sparse_csr()
    # Kept weights that are exactly zero are dropped too: they contribute nothing.
    return PackedCSR(sparse.crow_indices().int(), sparse.col_indices().int(), sparse.values(), tuple(weight_kn.shape))
