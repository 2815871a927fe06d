"""What the packing and kernel tests compare against: the dense GEMM with the fused epilogue, and relative error."""

from __future__ import annotations

import torch
import torch.nn.functional as F

KERNEL_TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1e-2}  # relative error vs the fp32 reference


def dense_reference(
    x: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, act: str | None, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """act(x @ B + bias) from the dense B, computed in `dtype`."""
    y = x.to(dtype) @ b.to(dtype)
    if bias is not None:
        y = y + bias.to(dtype)
    if act == "relu":
        return torch.relu(y)
    if act == "gelu":
        return F.gelu(y)
    return y


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error; a non-finite output (unwritten or corrupted) fails outright."""
    assert bool(torch.isfinite(out).all()), "non-finite output (unwritten or corrupted)"
    return float(torch.linalg.norm(out.double() - ref.double()) / torch.linalg.norm(ref.double()).clamp_min(1e-30))
