"""Packed N:M layout (also serves balanced VW, which is N:M with M = V and a per-layer N), and its matmul.

For B (K x N): every group of `m` consecutive K entries keeps `kept` entries per column block of `vector`
columns. Packed row r (of K/m * kept) holds one kept value per column from group r // kept, and each value's
position inside its group (shared by the `vector` columns of a block).

Element-wise packings (vector 1) store both in column panels of PANEL columns, flat: panel after panel, each
[row][column] (the last one narrower when N % PANEL != 0), so that a kernel owning a panel streams one contiguous
block; the positions take 4 bits for M <= 16 (two columns per byte, the even column in the low nibble), else a byte.
At one row of x these kernels are bound by the bytes they read: against row-major values and byte positions, 2:8
on 4096 x 11008 went from 13.5 to 11.0 us on an H200 (bench/results/nm_h200_panels.md). Vector-wise packings keep
`values` [K/m * kept, N] and `idx` uint8 [K/m * kept, N/vector], row-major. `values_by_row` and `positions` give
either in the row-major form.

`nm_matmul` picks one of four routes per call, in its custom op (`sparseprune::nm_matmul`, sparseprune.export.ops),
so a traced graph holds one node per call whatever runs:
- "simt": kernels_ext/nm_gemm.cu, any `vector`. M <= 16 runs a memory-bound SpMV that reads every kept weight once
  (on tensor cores from 5 rows for an element-wise packing with N/M <= 1/2 and K, N multiples of 32: each K step
  expanded back to a dense block in shared memory, kernels_ext/nm_gemv_mma.cu); larger M a shared-memory-tiled SpMM
  with fp32 accumulation.
- "tw": vector-wise N:M with V >= 16 is a tile-wise layout (each V-column block keeps the same K*kept/m rows), so it
  is repacked once into PackedTW (memoised per `values` tensor) and runs on the TW kernels; chosen for M > 16, and
  for V >= 32 at every M (at small M, after the sparse tensor cores for 2:4). V = 16 fills half of each 32-column TW
  tile, so it does up to twice the ideal MMA work.
- "sp24": Hopper sparse tensor cores (sparseprune/export/formats/sp24.py). N <= 2 keeps at most two entries in any
  four consecutive K rows, so 1:4, 1:8, 2:8, 2:16, ... are 2:4 by construction and run there at 2:4's speed; any
  pattern with N >= 3 (4:16, 8:32, 3:32) is the sum of two 2:4 matrices (the first two kept entries of every four K
  rows, and the rest) and runs either as two passes, the second adding the first's result in its epilogue, or where
  K is short beside N as one GEMM over K twice ([x, x] @ [main; rest]). The weight is
  compressed once by CUTLASS on the GPU (memoised per `values` tensor, like the TW repack), on an sm_90 device
  when the extension holds the CUTLASS kernel; K must be a multiple of 16. Chosen for 2:4 itself
  above one row of x; where the TW route cannot run (V < 16), for N <= 2 past SPMV_MAX_ROWS element-wise or once
  rows x N/M passes SPMV_MAX_ROW_DENSITY vector-wise (the SpMV's time grows with both, the sparse tensor cores'
  hardly) unless M >= 4 and the SpMV's tensor-core GEMV takes the packing (up to SMALL_M rows), and for N >= 3 from
  SPLIT_SP24_MIN_ROWS rows, or past SMALL_M where the SpMV's tensor-core GEMV takes the packing.
- "reference": one dense GEMM on the scattered weight; CPU, no extension, dtypes other than fp16/bf16, or a
  packing outside the kernels' range (M not a power of two in [2, 32], N = 0 or N = M, N columns not a multiple
  of 8).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch
from torch.utils.weak import WeakIdKeyDictionary

from sparseprune.errors import UserError
from sparseprune.export.formats import sp24
from sparseprune.export.formats.base import TensorBundleMixin, apply_epilogue
from sparseprune.export.formats.extension import kernels_built, load_kernels
from sparseprune.export.formats.limits import limit
from sparseprune.export.formats.sp24 import CompressedSP24, SplitSP24, compress_split_24
from sparseprune.export.formats.tw import (
    ACTIVATIONS,
    KERNEL_DTYPES,
    FeatureMajorMatmul,
    PackedTW,
    check_epilogue,
    pack_tw,
)

log = logging.getLogger(__name__)

KERNELS = ("auto", "simt", "tw", "sp24", "reference")
KERNEL_MAX_M = limit("nm::kMaxM")  # largest group the kernels take
SMALL_M = limit("nm::kSmallM")  # rows of x up to which the SpMV runs
PANEL = limit("nm::kPanel")  # columns per panel of the element-wise layout
# Layout names in the metadata: files exported before the panels carry none and were row-major throughout.
LAYOUTS = {True: "column-panels", False: "row-major"}
TW_MIN_VECTOR = 16  # narrowest vector that goes to the tensor-core TW route
SP24_MAX_KEPT = 2  # N:M with N up to this keeps at most 2 of any 4 consecutive K rows: one 2:4 pass, not two
# Rows of x up to which the element-wise SpMV beats the sparse tensor cores on a pattern with N <= 2 other than 2:4:
# all it runs itself, below TENSOR_CORE_GEMV_MIN_ROWS (H200, 4096 x 11008, 3 and 4 rows, one run: 2:8 and 1:4 at
# 18.9-20.1 us, 1:8 at 14.1-15.5, against 31.5-32.2 on sp24; bench/results/nm_h200_rows_flat_expand.md).
SPMV_MAX_ROWS = 4
# Rows of x times N/M up to which a vector-wise SpMV (V < 16) does (H200, 4096 x 11008, element-wise before it fitted
# three CTAs per SM at 3 and 4 rows: 2:8 and 1:4 at 2 rows 1.44x against 0.84x dense, at 3 rows 0.74x against 0.88x;
# bench/results/nm_h200_sparser_on_sp24.md).
SPMV_MAX_ROW_DENSITY = 0.5
# Rows of x from which the two 2:4 parts of an N >= 3 pattern beat the SpMV (H200, 4096 x 11008: 0.43-0.44x dense at
# any row count; the SpMV 0.66-0.89x at 4 rows, 0.25-0.37x at 8; bench/results/nm_h200_two_pass.md). A packing the
# SpMV's tensor-core GEMV takes (element-wise, N/M <= 1/2, K and N multiples of 32: 4:16 at 0.84-0.91x dense from 5
# to 16 rows; bench/results/nm_h200_gemv_mma.md) keeps the "simt" route up to SMALL_M rows.
SPLIT_SP24_MIN_ROWS = 8
TENSOR_CORE_GEMV_STEP = limit("nm::kGemvMmaStep")  # K and N multiple the tensor-core GEMV needs
TENSOR_CORE_GEMV_MIN_ROWS = limit("nm::kGemvMmaMinM")  # rows of x from which the SpMV hands over to it
# Smallest group M at which that GEMV beats the sparse tensor cores on an N <= 2 pattern (H200, 4096 x 11008, 5 to 16
# rows, one run: 1:4 at 25.7 us against 31.4-31.6, 2:8 at 25.6-26.8 against 30.9-31.8, 1:8 at 21.5 against 31.2-31.3;
# bench/results/nm_h200_rows_flat_expand.md). 1:2 is untried.
TENSOR_CORE_GEMV_OVER_SP24_MIN_M = 4

# PackedTW twin of each vector-wise weight and CUTLASS-compressed form of each sp24 weight, keyed weakly by its values
# tensor: export modules rebuild PackedNM on every forward from the same buffers, and a repack per call is far too
# slow.
_TW_VIEWS: WeakIdKeyDictionary = WeakIdKeyDictionary()
_SP24_VIEWS: WeakIdKeyDictionary = WeakIdKeyDictionary()
View = TypeVar("View")


def index_bits(m: int, vector: int) -> int:
    """Bits per stored in-group position; must match index_bits in kernels_ext/nm_gemm.h."""
    return 4 if vector == 1 and m <= 16 else 8


def to_panels(by_row: torch.Tensor) -> torch.Tensor:
    """(rows, N) -> flat column panels of PANEL columns, each [row][column]."""
    rows, n = by_row.shape
    whole = n // PANEL * PANEL
    head = by_row[:, :whole].reshape(rows, -1, PANEL).transpose(0, 1).reshape(-1)
    return torch.cat([head, by_row[:, whole:].reshape(-1)])


def from_panels(flat: torch.Tensor, rows: int, n: int) -> torch.Tensor:
    """Inverse of to_panels."""
    whole = n // PANEL * PANEL
    head = flat[: rows * whole].reshape(-1, rows, PANEL).transpose(0, 1).reshape(rows, whole)
    return torch.cat([head, flat[rows * whole :].reshape(rows, n - whole)], dim=1)


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """Flat codes below 16 -> one byte per pair, the first in the low nibble (an odd count is padded with a 0)."""
    pairs = torch.cat([codes, codes.new_zeros(codes.numel() % 2)]).reshape(-1, 2)
    return pairs[:, 0] | (pairs[:, 1] << 4)


def unpack_nibbles(packed: torch.Tensor, count: int) -> torch.Tensor:
    """The first `count` codes of pack_nibbles' bytes."""
    return torch.stack([packed & 15, packed >> 4], dim=1).reshape(-1)[:count]


@dataclass
class PackedNM(TensorBundleMixin):
    """An N:M weight in the layout of the module docstring; `values` and `idx` are flat for element-wise ones."""

    format_name: ClassVar[str] = "nm"
    values: torch.Tensor
    idx: torch.Tensor
    shape: tuple[int, int]
    m: int
    kept: int
    vector: int

    def __post_init__(self) -> None:
        k, n = self.shape
        if self.m < 1 or not 0 <= self.kept <= self.m or self.vector < 1 or k % self.m or n % self.vector:
            raise UserError(f"N:M metadata is inconsistent: shape {self.shape}, {self.kept}:{self.m}, V={self.vector}")
        rows = self.rows
        if self.vector == 1:
            values_shape, idx_shape = (rows * n,), ((rows * n * index_bits(self.m, 1) + 7) // 8,)
        else:
            values_shape, idx_shape = (rows, n), (rows, n // self.vector)
        if tuple(self.values.shape) != values_shape or tuple(self.idx.shape) != idx_shape:
            raise UserError(
                f"packed N:M tensors have values {tuple(self.values.shape)} and idx {tuple(self.idx.shape)}, expected "
                f"{values_shape} and {idx_shape} for shape {self.shape}, {self.kept}:{self.m}, V={self.vector}"
            )
        if self.idx.dtype != torch.uint8:
            raise UserError(f"packed N:M positions must be uint8, got {self.idx.dtype}")

    @property
    def rows(self) -> int:
        """Packed rows: K / m * kept."""
        return self.shape[0] // self.m * self.kept

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"values": self.values, "idx": self.idx}

    def metadata(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape), "m": self.m, "kept": self.kept, "vector": self.vector,
            "layout": LAYOUTS[self.vector == 1],
        }  # fmt: skip

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> PackedNM:
        vector = metadata["vector"]
        layout, expected = metadata.get("layout", LAYOUTS[False]), LAYOUTS[vector == 1]
        if layout != expected:
            raise UserError(
                f"this N:M weight was packed {layout}, but element-wise N:M is now stored {LAYOUTS[True]}: "
                "export the checkpoint again with this version"
            )
        return cls(tensors["values"], tensors["idx"], tuple(metadata["shape"]), metadata["m"], metadata["kept"], vector)

    def values_by_row(self) -> torch.Tensor:
        """The kept values as (K/m * kept, N), row r from group r // kept."""
        return from_panels(self.values, self.rows, self.shape[1]) if self.vector == 1 else self.values

    def positions(self) -> torch.Tensor:
        """In-group positions as uint8 (K/m * kept, N/vector)."""
        if self.vector != 1:
            return self.idx
        codes = unpack_nibbles(self.idx, self.rows * self.shape[1]) if index_bits(self.m, 1) == 4 else self.idx
        return from_panels(codes, self.rows, self.shape[1])

    def row_indices(self) -> torch.Tensor:
        """Absolute K index of every stored value, (K/m * kept, N)."""
        groups = self.shape[0] // self.m
        base = (torch.arange(groups, device=self.idx.device) * self.m).repeat_interleave(self.kept)
        return (base[:, None] + self.positions().long()).repeat_interleave(self.vector, dim=1)

    def dense(self) -> torch.Tensor:
        dense = torch.zeros(self.shape, dtype=self.values.dtype, device=self.values.device)
        return dense.scatter_(0, self.row_indices(), self.values_by_row())

    def keep_mask(self) -> torch.Tensor:
        """Boolean (K, N): which entries of B the packing keeps (kept zeros included)."""
        mask = torch.zeros(self.shape, dtype=torch.bool, device=self.idx.device)
        return mask.scatter_(0, self.row_indices(), True)

    def kernel_unsupported(self) -> str | None:
        """Why the CUDA kernels cannot take this packing, or None when they can."""
        m, kept = self.m, self.kept
        if m < 2 or m > KERNEL_MAX_M or m & (m - 1):
            return f"M must be a power of two in [2, {KERNEL_MAX_M}], got M = {m}"
        if not 1 <= kept < m:
            return f"N must satisfy 1 <= N < M, got {kept}:{m}"
        if self.shape[1] % 8:
            return f"N columns must be a multiple of 8 (16-byte value rows), got {self.shape[1]}"
        return None

    def matmul(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, activation: str | None = None, tile: str = "auto"
    ) -> torch.Tensor:
        """y = act(x @ B + bias) for x (..., K): the CUDA kernels for fp16/bf16 CUDA inputs, else the reference.
        A `tile` other than "auto" runs it on the 2:4 sparse tensor cores with that CTA tile (see nm_matmul)."""
        return nm_matmul(x, self, bias, activation, tile=tile)

    def feature_major_twin(self, like: torch.Tensor, rows: int) -> NMOnTW | None:
        """The weight on the TW route where auto runs `rows` rows of an x on like's device and dtype there (it reads
        and writes either layout, as PackedTW does), or None where auto takes a route that reads x row-major."""
        return NMOnTW(self) if auto_route(like, self, rows) == "tw" else None


@dataclass(frozen=True)
class NMOnTW(FeatureMajorMatmul):
    """An N:M weight on the TW route, called as PackedTW is (x and y row-major or feature-major): one
    `sparseprune::nm_matmul` node whose op runs the memoised TW twin (`tw_view`), so a traced graph holds the N:M
    buffers themselves and no repack."""

    packed: PackedNM

    @property
    def shape(self) -> tuple[int, int]:  # type: ignore[override]
        return self.packed.shape

    def _run(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None,
        activation: str | None,
        x_feature_major: bool,
        y_feature_major: bool,
        kernel: str = "auto",
    ) -> torch.Tensor:
        if kernel != "auto":
            raise UserError(f"an N:M weight on the TW route takes kernel 'auto' only, got {kernel!r}")
        check_epilogue(bias, activation, self.shape[1])
        return _nm_op(x, self.packed, bias, activation, "tw", "auto", x_feature_major, y_feature_major)


def pack_nm(weight_kn: torch.Tensor, keep: torch.Tensor, m: int, vector: int = 1) -> PackedNM:
    """Pack B under an N:M keep mask; every group must keep the same count and share indices per block."""
    if weight_kn.dim() != 2 or not weight_kn.is_floating_point():
        raise UserError(f"weight_kn must be a floating 2-D GEMM matrix B (K x N), got {weight_kn.dtype} "
                        f"{tuple(weight_kn.shape)}")  # fmt: skip
    if keep.dtype != torch.bool:
        raise UserError(f"N:M keep mask must be boolean, got {keep.dtype}")
    k, n = weight_kn.shape
    if keep.shape != weight_kn.shape:
        raise UserError(f"mask shape {tuple(keep.shape)} differs from weight shape {(k, n)}")
    if m < 1 or vector < 1 or k % m or n % vector or m > 256:
        raise UserError(f"N:M packing needs M | K, vector | N and 1 <= M <= 256, got K={k}, N={n}, M={m}, V={vector}")
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
    if vector == 1:
        values, idx = to_panels(values), to_panels(idx)
        if index_bits(m, 1) == 4:
            idx = pack_nibbles(idx)
    return PackedNM(values.contiguous(), idx.contiguous(), (k, n), m, kept, vector)


def nm_matmul(
    x: torch.Tensor,
    packed: PackedNM,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    kernel: str = "auto",
    tile: str = "auto",
) -> torch.Tensor:
    """y = act(x @ B + bias) for the packed N:M weight B; x is (..., K) row-major.

    `kernel` "auto" takes the fastest route that can run and falls back to the reference; "simt" or "tw" force a
    route and raise UserError when it cannot run (tests and benchmarks compare them). A `tile` other than "auto" (one of
    sp24.TILES) runs the sp24 route with that CTA tile for the 2:4 GEMM, as kernel="sp24" would.
    """
    k, n = packed.shape
    if kernel not in KERNELS:
        raise UserError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if tile not in sp24.TILES:
        raise UserError(f"tile must be one of {tuple(sp24.TILES)}, got {tile!r}")
    if tile != "auto":
        if kernel not in ("auto", "sp24"):
            raise UserError(f"tile {tile!r} is a CTA tile of the sp24 route, not of kernel {kernel!r}")
        kernel = "sp24"
    if x.shape[-1] != k:
        raise UserError(f"x has {x.shape[-1]} features but the packed N:M weight expects K = {k}")
    if activation not in ACTIVATIONS:
        raise UserError(f"activation must be one of None, 'relu', 'gelu', got {activation!r}")
    if bias is not None and bias.numel() != n:
        raise UserError(f"bias has {bias.numel()} entries, expected N = {n}")
    rows = x.reshape(-1, k)
    if kernel not in ("auto", "reference"):
        why = route_unavailable(rows, packed, kernel)
        if why is not None:
            raise UserError(f"N:M kernel {kernel!r} cannot run: {why}")
    return _nm_op(rows, packed, bias, activation, kernel, tile, False, False).reshape(*x.shape[:-1], n)


def _nm_op(
    x: torch.Tensor,
    packed: PackedNM,
    bias: torch.Tensor | None,
    activation: str | None,
    route: str,
    tile: str,
    x_feature_major: bool,
    y_feature_major: bool,
) -> torch.Tensor:
    """The `sparseprune::nm_matmul` call (sparseprune.export.ops), whose op runs `run_route`."""
    k, n = packed.shape
    return torch.ops.sparseprune.nm_matmul(
        x, packed.values, packed.idx, bias, k, n, packed.m, packed.kept, packed.vector, ACTIVATIONS[activation],
        route, tile, x_feature_major, y_feature_major,
    )  # fmt: skip


def run_route(
    x: torch.Tensor,
    packed: PackedNM,
    bias: torch.Tensor | None,
    activation: str | None,
    route: str,
    tile: str,
    x_feature_major: bool,
    y_feature_major: bool,
) -> torch.Tensor:
    """y = act(x @ B + bias) on `route`, as the op runs it: x (M, K), or xT (K, M) when x_feature_major; y (M, N),
    or yT (N, M) when y_feature_major (both meant for the TW route, which reads and writes either). "auto" is
    decided here on the actual x (the tensor-core GEMV also needs its rows 16-byte aligned); a route that cannot run
    on this x (a program traced for another device) runs the reference, as every op does off its kernels."""
    rows = x.t() if x_feature_major else x
    if route == "auto":
        route = auto_route(rows, packed)
    elif route != "reference" and route_unavailable(rows, packed, route) is not None:
        route = "reference"
    if route == "tw":
        return tw_view(packed)._run(x, bias, activation, x_feature_major, y_feature_major)
    if route == "reference":
        y = nm_matmul_reference(rows, packed, bias, activation)
    elif route == "sp24":
        y = sp24_view(packed).matmul(rows, bias, activation, tile)
    else:
        k, n = packed.shape
        y = load_kernels().nm_matmul(
            rows.contiguous(), packed.values, packed.idx, None if bias is None else bias.to(x.dtype).contiguous(),
            k, n, packed.m, packed.kept, packed.vector, ACTIVATIONS[activation],
        )  # fmt: skip
    return y.t().contiguous() if y_feature_major else y


def nm_matmul_reference(
    x: torch.Tensor, packed: PackedNM, bias: torch.Tensor | None = None, activation: str | None = None
) -> torch.Tensor:
    """Scatter the kept values into B, one GEMM in x's dtype (fp32 accumulate on CPU), then the epilogue."""
    return apply_epilogue(x @ packed.dense().to(x.dtype), bias, activation)


def route_unavailable(x: torch.Tensor, packed: PackedNM, route: str) -> str | None:
    """Why `route` cannot run these rows of x on this packing, or None (benchmarks ask before forcing one)."""
    return _device_unavailable(x, packed, route) or _packing_unsupported(packed, route)


def _device_unavailable(x: torch.Tensor, packed: PackedNM, route: str) -> str | None:
    """Why this build, x's device or dtype rule the route out (the packing aside), or None."""
    if not kernels_built():
        return "the sparseprune._kernels extension is not built"
    if not x.is_cuda:
        return f"x is on {x.device}, the kernels need CUDA"
    if x.dtype not in KERNEL_DTYPES:
        return f"x is {x.dtype}, the kernels take float16 or bfloat16"
    if packed.values.dtype != x.dtype:
        return f"values are {packed.values.dtype} but x is {x.dtype}"
    return sp24.device_unavailable(x) if route == "sp24" else None


def _packing_unsupported(packed: PackedNM, route: str) -> str | None:
    """Why the route cannot take this packing, or None."""
    why = packed.kernel_unsupported()
    if why is not None:
        return why
    k, _ = packed.shape
    if route == "tw":
        if packed.vector < TW_MIN_VECTOR:
            return f"the TW route needs vector >= {TW_MIN_VECTOR}, got {packed.vector}"
        if k % 8:
            return f"the TW route needs K a multiple of 8, got {k}"
    if route == "sp24":
        return sp24.shape_unsupported(*packed.shape)
    return None


def auto_route(x: torch.Tensor, packed: PackedNM, rows: int | None = None) -> str:
    """The route "auto" takes for these rows of x, or for `rows` rows on x's device and dtype: "sp24", "tw", "simt"
    or "reference"."""
    if route_unavailable(x, packed, "simt") is not None:
        return "reference"
    # The sparse tensor cores read the 2:4 weight in about the time the SpMV does at M = 1 and stay flat with M,
    # while the SpMV's cost grows with every row (H100, 4096 x 11008: 0.92x against 1.0x dense at M = 1, 1.03x
    # against 0.09x at M = 16; bench/results/sp24_h100.md).
    # A vector-wise weight that fills whole TW tiles (V >= 32) runs the TW small-M kernels near the weight-bytes
    # bound, while the SpMV re-reads each shared index list per column (bench/results/nm_vw_decode_h100.md).
    # A sparser pattern (1:4, 2:8, ...) runs on the sparse tensor cores at 2:4's speed only: the TW route, which
    # skips all its pruned K, comes first wherever it can run, and the SpMV keeps the rows it is fastest for.
    actual_x = x if rows is None else None
    rows = x.shape[0] if rows is None else rows
    tw_small = ("tw",) if packed.vector >= 32 else ()
    tw_route = ("tw",) if rows > SMALL_M else tw_small
    if (packed.kept, packed.m) == (2, 4):
        routes: tuple[str, ...] = ("sp24", *tw_route) if rows > 1 else tw_route
    elif packed.kept <= SP24_MAX_KEPT:
        spmv_rows = SPMV_MAX_ROWS if packed.vector == 1 else SPMV_MAX_ROW_DENSITY * packed.m / packed.kept
        spmv_slower = rows > spmv_rows
        gemv_faster = rows <= SMALL_M and packed.m >= TENSOR_CORE_GEMV_OVER_SP24_MIN_M
        use_sp24 = spmv_slower and not (gemv_faster and takes_tensor_core_gemv(packed, actual_x))
        routes = (*tw_route, "sp24") if use_sp24 else tw_route
    else:
        min_rows = SMALL_M + 1 if takes_tensor_core_gemv(packed, actual_x) else SPLIT_SP24_MIN_ROWS
        routes = (*tw_route, "sp24") if rows >= min_rows else tw_route
    return next((route for route in routes if route_unavailable(x, packed, route) is None), "simt")


def sp24_tiles(like: torch.Tensor, packed: PackedNM, rows: int) -> tuple[str, ...]:
    """The 2:4 CTA tiles a call of `rows` rows on like's device and dtype can be forced onto (nm_matmul's `tile`):
    every one where the sparse tensor cores can take the weight and auto reads x row-major (its sp24 route, or the
    SpMV at one row), none where auto takes the TW route, whose feature-major x and y its neighbours follow."""
    if route_unavailable(like, packed, "sp24") is not None or auto_route(like, packed, rows) == "tw":
        return ()
    return sp24.FORCED_TILES


def takes_tensor_core_gemv(packed: PackedNM, x: torch.Tensor | None = None) -> bool:
    """Whether the SpMV runs this packing on tensor cores from a few rows of x (kernels_ext/nm_gemv_mma.cu), which
    also needs x's rows 16-byte aligned: the binding gets x.contiguous(), a contiguous x itself, whose address may
    be off (a view into a larger tensor), any other x a fresh copy. x None: a fresh x."""
    k, n = packed.shape
    step = TENSOR_CORE_GEMV_STEP
    aligned = x is None or not x.is_contiguous() or x.data_ptr() % 16 == 0
    return packed.vector == 1 and 2 * packed.kept <= packed.m and k % step == 0 and n % step == 0 and aligned


def tw_granularity(vector: int) -> int:
    """TW tile width for a vector-wise weight: the widest of 128, 64, 32 that V fills (32 for V = 16)."""
    return next((g for g in (128, 64) if vector % g == 0), 32)


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # inference tensors keep no version counter (and cannot change outside inference mode)
        return -1


def _memoised(cache: WeakIdKeyDictionary, packed: PackedNM, build: Callable[[PackedNM], View]) -> View:
    """build(packed), made once per values tensor and rebuilt if values or idx change."""
    key = (packed.idx.data_ptr(), _version(packed.values), _version(packed.idx), packed.m, packed.kept, packed.vector)
    hit = cache.get(packed.values)
    if hit is not None and hit[0] == key:
        return hit[1]
    view = build(packed)
    cache[packed.values] = (key, view)
    return view


def _repack_tw(packed: PackedNM) -> PackedTW:
    view = pack_tw(packed.dense(), packed.keep_mask(), tw_granularity(packed.vector))
    log.debug("repacked %s N:M (V=%d) as TW G=%d: %d tiles", packed.shape, packed.vector, view.granularity,
              view.num_tiles)  # fmt: skip
    return view


def _compress_sp24(packed: PackedNM) -> CompressedSP24 | SplitSP24:
    view = compress_split_24(packed.dense())
    log.debug("compressed %s %d:%d (V=%d) for the sparse tensor cores as %s", packed.shape, packed.kept, packed.m,
              packed.vector, type(view).__name__)  # fmt: skip
    return view


def tw_view(packed: PackedNM) -> PackedTW:
    """The weight as PackedTW, built once per values tensor (and rebuilt if values or idx change)."""
    return _memoised(_TW_VIEWS, packed, _repack_tw)


def sp24_view(packed: PackedNM) -> CompressedSP24 | SplitSP24:
    """The weight compressed for the sparse tensor cores (in two 2:4 parts for N >= 3), once per values tensor
    (as tw_view)."""
    return _memoised(_SP24_VIEWS, packed, _compress_sp24)
