"""The contract every packed weight format honours, so export, saving and timing treat them alike."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import torch


class PackedWeight(Protocol):
    """A pruned GEMM weight B (K x N) in a layout its kernel reads directly.

    `matmul` computes x @ B (+ bias, then activation) from the packed form only: on CUDA through
    `kernels_ext` when it is built, otherwise through a pure-torch reference with the same semantics.
    """

    format_name: ClassVar[str]
    shape: tuple[int, int]  # (K, N) of the dense B it came from

    def tensors(self) -> dict[str, torch.Tensor]:
        """The packed arrays, named, for safetensors."""
        ...

    def metadata(self) -> dict[str, Any]:
        """JSON-able scalars needed to rebuild the object from `tensors()`."""
        ...

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> PackedWeight:
        """Inverse of (`tensors`, `metadata`)."""
        ...

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None) -> torch.Tensor:
        """y = act(x @ B + bias) for x of shape (M, K); activation is None, "relu" or "gelu"."""
        ...

    def nbytes(self) -> int:
        """Bytes of the packed arrays: the weight traffic a kernel reading this layout pays."""
        ...

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> PackedWeight:
        """A copy on another device; `dtype` converts the values only, never the indices."""
        ...


class TensorBundleMixin:
    """`nbytes` and `to` for any format whose state is exactly `tensors()` + `metadata()`."""

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())  # type: ignore[attr-defined]

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> PackedWeight:
        moved = {
            name: t.to(device=device, dtype=dtype if dtype is not None and t.is_floating_point() else t.dtype)
            for name, t in self.tensors().items()  # type: ignore[attr-defined]
        }
        return type(self).from_tensors(moved, self.metadata())  # type: ignore[attr-defined]


def apply_epilogue(y: torch.Tensor, bias: torch.Tensor | None, activation: str | None) -> torch.Tensor:
    """Bias then activation, as every kernel's fused epilogue does."""
    if bias is not None:
        y = y + bias
    if activation is None:
        return y
    if activation == "relu":
        return torch.relu(y)
    if activation == "gelu":
        return torch.nn.functional.gelu(y)
    raise ValueError(f"unknown activation {activation!r}; expected None, 'relu' or 'gelu'")
