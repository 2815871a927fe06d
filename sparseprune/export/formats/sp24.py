"""2:4 weights on Hopper sparse tensor cores: the compressed form of a 2:4 GEMM matrix B and its matmul.

The hardware wants the weight as the sparse operand of D = W x^T, W = B^T (N x K) with 2:4 groups along K, split
into its kept values [N, K/2] and CUTLASS's metadata (2-bit positions in its own tiled order). CUTLASS's compressor
builds both on the GPU (kernels_ext/sp24_gemm.cu), so the metadata layout is the one the kernel reads by
construction. The kernel writes y = act(x B + bias) row-major (M x N) with bias and activation fused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparseprune.errors import UserError
from sparseprune.export.formats.extension import load_kernels, sp24_unavailable_on
from sparseprune.export.formats.limits import codes, limit
from sparseprune.export.formats.tw import ACTIVATIONS, KERNEL_DTYPES

K_ALIGN = limit("sp24::kKAlign")  # compressed rows of K/2 values, 16-byte aligned
N_ALIGN = limit("sp24::kNAlign")  # 16-byte aligned output columns
# CTA tile codes of kernels_ext/sp24_gemm.h (auto picks by shape).
TILES = codes("sp24::Tile", {"auto": "kAuto", "wide": "kWide", "tall": "kTall", "pingpong": "kPingpong",
                             "narrow": "kNarrow"})  # fmt: skip
FORCED_TILES = tuple(name for name in TILES if name != "auto")


@dataclass(frozen=True)
class CompressedSP24:
    """A 2:4 matrix B (K x N) as CUTLASS compressed W = B^T: values [N, K/2] and metadata bytes, on one GPU."""

    values: torch.Tensor
    meta: torch.Tensor
    shape: tuple[int, int]

    def matmul(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None = None,
        activation: str | None = None,
        tile: str = "auto",
        source: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """y = act(x @ B + source + bias) for x (M, K); the caller has checked the route with device_unavailable().

        `tile` forces the GEMM's CTA tile (cooperative "wide" 128 features x 256 rows, "tall" 256 x 128 and
        "narrow" 128 x 64, or "pingpong" 128 x 128 per consumer warpgroup) so benchmarks
        can compare them; "auto" takes the one measured faster for the shape. `source` (M, N, x's dtype) is another
        pass's partial y, added in the epilogue.
        """
        if tile not in TILES:
            raise UserError(f"tile must be one of {tuple(TILES)}, got {tile!r}")
        k, n = self.shape
        return torch.ops.sparseprune.sp24_matmul(  # sparseprune.export.ops
            x, self.values, self.meta, bias, k, n, ACTIVATIONS[activation], TILES[tile], source
        )


def shape_unsupported(k: int, n: int) -> str | None:
    """Why the 2:4 kernel cannot take a K x N matrix B, or None when it can."""
    if k % K_ALIGN:
        return f"the 2:4 kernel needs K a multiple of {K_ALIGN}, got K = {k}"
    if n % N_ALIGN:
        return f"the 2:4 kernel needs N a multiple of {N_ALIGN}, got N = {n}"
    return None


def device_unavailable(x: torch.Tensor) -> str | None:
    """Why the 2:4 kernel cannot run on x's device in this build, or None when it can."""
    return sp24_unavailable_on(x.device)


def _nonzero_groups(b_kn: torch.Tensor) -> torch.Tensor:
    """Which entries of B (K x N) are non-zero, as (K/4, 4, N): the groups of 4 consecutive K entries 2:4 speaks of."""
    k, n = b_kn.shape
    if k % 4:
        raise UserError(f"a 2:4 matrix needs K a multiple of 4, got K = {k}")
    return (b_kn != 0).reshape(k // 4, 4, n)


def check_24(b_kn: torch.Tensor) -> None:
    """Raise UserError unless every group of 4 consecutive K entries of each column of B holds at most 2 non-zeros."""
    n = b_kn.shape[1]
    per_group = _nonzero_groups(b_kn).sum(1)
    if per_group.numel() and int(per_group.max()) > 2:
        group, col = divmod(int(per_group.argmax()), n)
        raise UserError(
            f"matrix is not 2:4 along K: column {col}, K {4 * group}..{4 * group + 3} holds "
            f"{int(per_group.max())} non-zeros"
        )


def compress_24(b_kn: torch.Tensor) -> CompressedSP24:
    """Compress the 2:4 matrix B (K x N, fp16/bf16, on a Hopper GPU) for the sparse tensor cores."""
    if b_kn.dim() != 2 or b_kn.dtype not in KERNEL_DTYPES:
        raise UserError(f"2:4 compression takes a 2-D float16/bfloat16 B, got {b_kn.dtype} {tuple(b_kn.shape)}")
    why = shape_unsupported(*b_kn.shape) or device_unavailable(b_kn)
    if why is not None:
        raise UserError(f"cannot compress for the 2:4 kernel: {why}")
    check_24(b_kn)
    values, meta = load_kernels().sp24_compress(b_kn.t().contiguous())
    return CompressedSP24(values, meta, tuple(b_kn.shape))


@dataclass(frozen=True)
class TwoPassSP24:
    """B = main + rest for a B that is not 2:4 (N:M with N >= 3), both parts 2:4 (see split_24), as two passes on
    the sparse tensor cores: the second adds the first's y in its epilogue. The hardware cannot skip rest's empty
    groups, so B costs two 2:4 GEMMs however few entries rest holds (H200: gathering 3:32's rest, under 1% of its
    entries, was slower; bench/results/nm_h200_two_pass.md)."""

    main: CompressedSP24
    rest: CompressedSP24

    def matmul(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None, tile: str = "auto"
    ) -> torch.Tensor:
        return self.main.matmul(x, bias, activation, tile, source=self.rest.matmul(x, tile=tile))


@dataclass(frozen=True)
class StackedSP24:
    """B = main + rest (as TwoPassSP24) as one 2:4 GEMM over K twice: [x, x] @ [main; rest]. One launch and no
    partial y, for the price of copying x twice: the cheaper form where K is short beside N (see two_part_form)."""

    stacked: CompressedSP24  # [main; rest], 2K x N

    def matmul(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None, tile: str = "auto"
    ) -> torch.Tensor:
        return self.stacked.matmul(torch.cat([x, x], dim=1), bias, activation, tile)


def two_part_form(k: int, n: int) -> str:
    """The form ("stacked" or "two-pass") of a K x N weight of two 2:4 parts that moves fewer extra bytes per row of x.
    Stacking writes x twice and reads it (3K values), two passes write and read back a partial y (2N values); H200:
    BERT FFN in (768 -> 3072) 0.67x against 0.51x dense stacked, FFN out (3072 -> 768) 0.36x against 0.46x."""
    return "stacked" if 3 * k < 2 * n else "two-pass"


def split_24(b_kn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """B as main + rest, both 2:4 along K: in every group of 4 consecutive K entries of a column the first two
    non-zeros stay in main, the others (at most two) move to rest."""
    nonzero = _nonzero_groups(b_kn)
    first_two = (nonzero & (nonzero.cumsum(1) <= 2)).reshape(b_kn.shape)
    main = torch.where(first_two, b_kn, torch.zeros_like(b_kn))
    return main, b_kn - main


SplitSP24 = TwoPassSP24 | StackedSP24


def compress_split_24(b_kn: torch.Tensor) -> CompressedSP24 | SplitSP24:
    """compress_24 for any B: a 2:4 B as it is, else both 2:4 parts of split_24 in the form two_part_form picks."""
    main, rest = split_24(b_kn)
    if not bool(rest.any()):
        return compress_24(main)
    if two_part_form(*b_kn.shape) == "stacked":
        return StackedSP24(compress_24(torch.cat([main, rest])))
    return TwoPassSP24(compress_24(main), compress_24(rest))


def aligned(t: torch.Tensor) -> torch.Tensor:
    """t itself when its data is 16-byte aligned (what TMA needs), else an aligned copy."""
    return t if t.data_ptr() % 16 == 0 else t.clone()
