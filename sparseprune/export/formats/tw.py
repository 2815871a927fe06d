"""Packed tile-wise (TW) weights, optionally with the element-wise TEW residual, and their matmul.

Layout (B is K x N, y = x @ B): kept columns that share one kept-row set form a group; each group is cut into
tiles of up to G columns (`cols`, -1 pads a tile). Tile t keeps rows `rows[tile_ptr[t]:tile_ptr[t+1]]`,
ascending, padded with -1 to a multiple of `K_STEP`, and its values are the dense block
`values[tile_ptr[t]:tile_ptr[t+1]]` (kept K x G, zeros in the padding). Tiles are stored heaviest first so the
kernel's block scheduler balances them over the SMs. Columns in no tile (pruned, or every row pruned) output
the bias only. TEW adds a CSC residual (`res_ptr`, `res_rows`, `res_vals`) into the same output.
Grouping by identical row sets instead of re-deriving the pruner's chunking keeps packing exact for any mask,
including tiles that lost all their rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from sparseprune.errors import UserError
from sparseprune.export.formats.limits import LIMITS, codes, limit

log = logging.getLogger(__name__)

K_STEP = limit("tw::kKStep")  # kernel K step
CUDA_CORE_MAX_M = limit("tw::kGemvMaxM")  # rows up to which the GEMV runs on CUDA cores
SMALL_M = limit("tw::kSmallM")  # rows up to which `auto` runs a GEMV
FEATURE_MAJOR_M_ALIGN = 8  # past CUDA_CORE_MAX_M the tensor-core kernels read a feature-major x in 16-byte runs of M
GRANULARITIES = LIMITS["tw::kGranularities"][1]
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2}
# Tensor-core family for M > 16: "auto" picks the tensor-core GEMV "gemv.mma" up to MMA_GEMV_MAX_M rows where its
# CTAs are few, else the warp-specialized "wgmma.ws" on Hopper (G 64/128), else mma.sync; "wgmma" is the earlier
# Hopper kernel, kept for comparison; "wgmma.rows" the Hopper kernel whose items take 64-128 rows of x, per tile,
# which "auto" takes over wgmma.ws's 128-row items where its planned schedule is much evener.
KERNELS = codes("tw::Path", {"auto": "kAuto", "mma.sync": "kMmaSync", "wgmma": "kWgmma", "wgmma.ws": "kWgmmaWs",
                             "gemv.mma": "kGemvMma", "wgmma.rows": "kWgmmaRows"})  # fmt: skip
MMA_GEMV_MAX_M = limit("tw::kMmaGemvMaxM")
KERNEL_DTYPES = (torch.float16, torch.bfloat16)


class FeatureMajorMatmul:
    """`matmul` and `matmul_feature_major` over a `_run` that reads x row-major or feature-major and writes y either
    way, the TW kernels' calling convention: shared by PackedTW and by N:M weights on the TW route (nm.NMOnTW)."""

    shape: tuple[int, int]

    def matmul(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None = None,
        activation: str | None = None,
        feature_major_out: bool = False,
        kernel: str = "auto",
    ) -> torch.Tensor:
        """y = act(x @ B + bias) for x (..., K); the CUDA kernel for fp16/bf16 CUDA inputs (`kernel` forces the
        tensor-core family, see KERNELS; the reference ignores it).

        x may be stored row-major or feature-major (the (..., K) view of a K-major tensor, as `feature_major_out`
        returns y): the kernels read either without a copy. With `feature_major_out` y (..., N) is that view of a
        contiguous (N, rows) tensor, which the next sparse layer reads without a transpose; elementwise torch ops
        between the two (an activation, dropout) keep that storage.
        """
        k, n = self.shape
        if x.shape[-1] != k:
            raise UserError(f"x has {x.shape[-1]} features but the packed weight expects K = {k}")
        lead = x.shape[:-1]
        rows = x.reshape(-1, k)
        if stored_feature_major(rows):
            y = self._run_feature_major(rows.t(), bias, activation, feature_major_out, kernel)
        else:
            y = self._run(rows, bias, activation, False, feature_major_out, kernel)
        return (y.t() if feature_major_out else y).reshape(*lead, n)

    def matmul_feature_major(
        self,
        xt: torch.Tensor,
        bias: torch.Tensor | None = None,
        activation: str | None = None,
        kernel: str = "auto",
    ) -> torch.Tensor:
        """yT = act(x @ B + bias)^T from xT (K, M): chained sparse layers stay feature-major, skipping transposes.

        Any M: an M the tensor-core kernels cannot read feature-major (above CUDA_CORE_MAX_M and not a multiple of
        8) is padded with zero columns, and the result is then a view of the first M columns (but for 9-15 rows
        under `auto`, whose kernels pad x alone).
        """
        if xt.dim() != 2 or xt.shape[0] != self.shape[0]:
            raise UserError(f"feature-major x must be (K={self.shape[0]}, M), got {tuple(xt.shape)}")
        return self._run_feature_major(xt, bias, activation, True, kernel)

    def _run_feature_major(
        self,
        xt: torch.Tensor,
        bias: torch.Tensor | None,
        activation: str | None,
        y_feature_major: bool,
        kernel: str,
    ) -> torch.Tensor:
        """_run on a feature-major xT (K, M), padding an M the tensor-core kernels cannot read that way (above
        CUDA_CORE_MAX_M and not a multiple of 8) with zero columns; y then is a view of the first M outputs. From 9
        to 15 rows the CUDA-core GEMV would otherwise take the call and multiply 16 rows on CUDA cores: 58 us at 12
        rows on 4096 x 11008 at 50% sparsity, 21.5 padded for the tensor-core GEMV
        (bench/results/tw_h200_gemv_pad.md). There `auto` leaves it to the binding, which pads x alone for the GEMV:
        13-25% faster again (bench/results/tw_h200_pad_rows.md)."""
        m = xt.shape[1]
        pads_in_kernel = m <= SMALL_M and kernel == "auto"
        if xt.is_cuda and m > CUDA_CORE_MAX_M and m % FEATURE_MAJOR_M_ALIGN and not pads_in_kernel:
            padded = F.pad(xt, (0, -m % FEATURE_MAJOR_M_ALIGN))
            y = self._run(padded, bias, activation, True, y_feature_major, kernel)
            return y[:, :m] if y_feature_major else y[:m]
        return self._run(xt, bias, activation, True, y_feature_major, kernel)

    def _run(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None,
        activation: str | None,
        x_feature_major: bool,
        y_feature_major: bool,
        kernel: str = "auto",
    ) -> torch.Tensor:
        """The call on x (M, K), or xT (K, M) when x_feature_major; y (M, N), or yT (N, M) when y_feature_major."""
        raise NotImplementedError


@dataclass(frozen=True)
class PackedTW(FeatureMajorMatmul):
    """A TW (or TEW, when the residual is present) weight in the layout the CUDA kernel reads."""

    format_name: ClassVar[str] = "tw"
    shape: tuple[int, int]
    granularity: int
    max_tile_k: int
    values: torch.Tensor
    rows: torch.Tensor
    tile_ptr: torch.Tensor
    cols: torch.Tensor
    col_pos: torch.Tensor
    pruned_cols: torch.Tensor
    res_ptr: torch.Tensor | None = None
    res_rows: torch.Tensor | None = None
    res_vals: torch.Tensor | None = None

    @property
    def num_tiles(self) -> int:
        return self.tile_ptr.numel() - 1

    @property
    def host_tile_ptr(self) -> torch.Tensor:
        """tile_ptr in host memory: the host plans the row-flexible kernel's items from it, and `auto` decides from
        that plan whether to take the kernel (`host_copy`)."""
        return host_copy(self.tile_ptr)

    @property
    def has_residual(self) -> bool:
        return self.res_ptr is not None

    def tensors(self) -> dict[str, torch.Tensor]:
        names = ["values", "rows", "tile_ptr", "cols", "col_pos", "pruned_cols"]
        if self.has_residual:
            names += ["res_ptr", "res_rows", "res_vals"]
        return {name: getattr(self, name) for name in names}

    def metadata(self) -> dict[str, Any]:
        return {
            "format": self.format_name,
            "shape": list(self.shape),
            "granularity": self.granularity,
            "max_tile_k": self.max_tile_k,
        }

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> PackedTW:
        k, n = metadata["shape"]
        return cls(
            shape=(int(k), int(n)),
            granularity=int(metadata["granularity"]),
            max_tile_k=int(metadata["max_tile_k"]),
            **{name: tensors.get(name) for name in cls._tensor_names()},
        )

    @staticmethod
    def _tensor_names() -> tuple[str, ...]:
        return ("values", "rows", "tile_ptr", "cols", "col_pos", "pruned_cols", "res_ptr", "res_rows", "res_vals")

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> PackedTW:
        moved = {}
        for name in self._tensor_names():
            tensor = getattr(self, name)
            if tensor is None:
                continue
            is_value = name in ("values", "res_vals")
            moved[name] = tensor.to(device=device, dtype=dtype if is_value and dtype is not None else None)
        packed = replace(self, **moved)
        # The host copy is taken now, not on the first call, which may run while a CUDA graph is being captured.
        keep_host_copy(packed.tile_ptr, self.host_tile_ptr)
        return packed

    def _run(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None,
        activation: str | None,
        x_feature_major: bool,
        y_feature_major: bool,
        kernel: str = "auto",
    ) -> torch.Tensor:
        if kernel not in KERNELS:
            raise UserError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
        check_epilogue(bias, activation, self.shape[1])
        k, n = self.shape
        return torch.ops.sparseprune.tw_matmul(  # sparseprune.export.ops: the kernel, or the reference off CUDA
            x,
            self.values,
            self.rows,
            self.tile_ptr,
            self.cols,
            self.col_pos,
            self.pruned_cols,
            bias,
            self.res_ptr,
            self.res_rows,
            self.res_vals,
            k,
            n,
            self.granularity,
            self.max_tile_k,
            ACTIVATIONS[activation],
            x_feature_major,
            y_feature_major,
            KERNELS[kernel],
        )


def check_epilogue(bias: torch.Tensor | None, activation: str | None, n: int) -> None:
    """Raise UserError unless `activation` is one the kernels fuse and `bias` has N entries."""
    if activation not in ACTIVATIONS:
        raise UserError(f"activation must be one of None, 'relu', 'gelu', got {activation!r}")
    if bias is not None and bias.numel() != n:
        raise UserError(f"bias has {bias.numel()} entries, expected N = {n}")


def host_copy(index: torch.Tensor) -> torch.Tensor:
    """A contiguous int32 host copy of a device index tensor, made once and kept on the tensor itself: modules
    rebuild their PackedTW from the same buffers on every call, and a copy per call would synchronize each one with
    the GPU. An in-place change of the tensor (load_state_dict) bumps its version and brings a fresh copy."""
    if index.device.type == "cpu":
        return index.to(torch.int32).contiguous()
    kept = getattr(index, "_sparseprune_host_copy", None)
    if kept is None or kept[0] != _version(index):
        keep_host_copy(index, index.to("cpu", torch.int32).contiguous())
    return index._sparseprune_host_copy[1]


def keep_host_copy(index: torch.Tensor, host: torch.Tensor) -> None:
    """Store `host` as the host copy `host_copy` returns for this version of `index`."""
    if index.device.type != "cpu":
        index._sparseprune_host_copy = (_version(index), host)


def _version(tensor: torch.Tensor) -> int:
    """The tensor's in-place change count; tensors made under torch.inference_mode count none (-1)."""
    return -1 if tensor.is_inference() else tensor._version


def stored_feature_major(x: torch.Tensor) -> bool:
    """Whether the (M, K) matrix x is the transposed view of a contiguous (K, M) tensor (and not also contiguous)."""
    return x.dim() == 2 and not x.is_contiguous() and x.t().is_contiguous()


def tw_matmul(
    x: torch.Tensor,
    packed: PackedTW,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    kernel: str = "auto",
) -> torch.Tensor:
    """y = act(x @ B + bias) for the packed TW weight B and x (..., K), y row-major: `PackedTW.matmul`."""
    return packed.matmul(x, bias, activation, kernel=kernel)


def tw_matmul_reference(
    x: torch.Tensor, packed: PackedTW, bias: torch.Tensor | None = None, activation: str | None = None
) -> torch.Tensor:
    """Pure-torch twin of the kernel: same layout walk, fp32 (fp64 for fp64 x) accumulation, same epilogue."""
    acc_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc_dtype)
    m, n = x.shape[0], packed.shape[1]
    y = torch.zeros(m, n, dtype=acc_dtype, device=x.device)
    g = packed.granularity
    tile_ptr = packed.tile_ptr.tolist()
    for t in range(packed.num_tiles):
        rows = packed.rows[tile_ptr[t] : tile_ptr[t + 1]].long()
        kept = rows >= 0
        block = packed.values[tile_ptr[t] : tile_ptr[t + 1]][kept].to(acc_dtype)
        out = xf[:, rows[kept]] @ block
        cols = packed.cols[t * g : (t + 1) * g].long()
        used = cols >= 0
        y[:, cols[used]] = out[:, used]
    if packed.has_residual:
        counts = packed.res_ptr[1:] - packed.res_ptr[:-1]
        res_cols = torch.repeat_interleave(torch.arange(n, device=x.device), counts.long())
        contrib = xf[:, packed.res_rows.long()] * packed.res_vals.to(acc_dtype)
        y.index_add_(1, res_cols, contrib)
    if bias is not None:
        y = y + bias.to(acc_dtype)
    if activation == "relu":
        y = torch.relu(y)
    elif activation == "gelu":
        y = F.gelu(y)
    return y.to(x.dtype)


def _validate(
    weight_kn: torch.Tensor, keep_mask: torch.Tensor, granularity: int, residual_mask: torch.Tensor | None
) -> None:
    if weight_kn.dim() != 2:
        raise UserError(f"weight_kn must be the 2-D GEMM matrix B (K x N), got shape {tuple(weight_kn.shape)}")
    if keep_mask.shape != weight_kn.shape:
        raise UserError(f"keep_mask shape {tuple(keep_mask.shape)} differs from weight {tuple(weight_kn.shape)}")
    if keep_mask.dtype != torch.bool:
        raise UserError(f"keep_mask must be boolean, got {keep_mask.dtype}")
    if granularity not in GRANULARITIES:
        raise UserError(f"TW granularity G must be one of {GRANULARITIES}, got {granularity}")
    k, n = weight_kn.shape
    if k % 8 or n % 8:
        raise UserError(f"TW packing needs K and N multiples of 8 (16-byte rows), got K = {k}, N = {n}")
    if not weight_kn.is_floating_point():
        raise UserError(f"weight_kn must be floating point, got {weight_kn.dtype}")
    if residual_mask is not None:
        if residual_mask.shape != weight_kn.shape or residual_mask.dtype != torch.bool:
            raise UserError("residual_mask must be a boolean tensor of the weight's shape")
        if bool((residual_mask & keep_mask).any()):
            raise UserError("residual_mask must be disjoint from keep_mask (TEW restores pruned elements only)")


def _tiles(keep_mask: torch.Tensor, granularity: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(kept rows, columns) per tile: columns with identical kept-row sets, chunked by G, heaviest first."""
    kept_cols = torch.nonzero(keep_mask.any(dim=0)).flatten()
    if kept_cols.numel() == 0:
        return []
    patterns, group_of = torch.unique(keep_mask[:, kept_cols].t(), dim=0, return_inverse=True)
    groups = [kept_cols[group_of == i] for i in range(patterns.shape[0])]
    order = sorted(range(len(groups)), key=lambda i: int(groups[i][0]))
    tiles = []
    for i in order:
        rows = torch.nonzero(patterns[i]).flatten()
        tiles += [(rows, cols) for cols in groups[i].split(granularity)]
    tiles.sort(key=lambda tile: -tile[0].numel())  # stable: equal K keeps column order
    return tiles


def pack_tw(
    weight_kn: torch.Tensor,
    keep_mask: torch.Tensor,
    granularity: int,
    residual_mask: torch.Tensor | None = None,
) -> PackedTW:
    """Pack B (K x N) under its TW `keep_mask` (and TEW `residual_mask`) into the kernel layout on B's device."""
    _validate(weight_kn, keep_mask, granularity, residual_mask)
    k, n = weight_kn.shape
    device, g = weight_kn.device, granularity
    keep_mask = keep_mask.to(device)
    tiles = _tiles(keep_mask, g)
    padded = [-(-rows.numel() // K_STEP) * K_STEP for rows, _ in tiles]
    tile_ptr = torch.tensor([0, *padded], dtype=torch.int64).cumsum(0)
    total = int(tile_ptr[-1])
    rows_all = torch.full((total,), -1, dtype=torch.int32, device=device)
    values = torch.zeros(total, g, dtype=weight_kn.dtype, device=device)
    cols_all = torch.full((len(tiles) * g,), -1, dtype=torch.int32, device=device)
    for t, (rows, cols) in enumerate(tiles):
        start = int(tile_ptr[t])
        rows_all[start : start + rows.numel()] = rows.to(torch.int32)
        values[start : start + rows.numel(), : cols.numel()] = weight_kn[rows][:, cols]
        cols_all[t * g : t * g + cols.numel()] = cols.to(torch.int32)
    col_pos = torch.full((n,), -1, dtype=torch.int32, device=device)
    placed = torch.nonzero(cols_all >= 0).flatten()
    col_pos[cols_all[placed].long()] = placed.to(torch.int32)
    pruned_cols = torch.nonzero(col_pos < 0).flatten().to(torch.int32)
    residual = {}
    if residual_mask is not None:
        res_n, res_k = torch.nonzero(residual_mask.to(device).t(), as_tuple=True)  # by column, then row
        counts = torch.bincount(res_n, minlength=n)
        residual = {
            "res_ptr": torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32),
            "res_rows": res_k.to(torch.int32),
            "res_vals": weight_kn[res_k, res_n].contiguous(),
        }
    if tiles:
        fill = sum(cols.numel() for _, cols in tiles) / (len(tiles) * g)
        log.debug("packed TW %dx%d: %d tiles, %.0f%% column fill", k, n, len(tiles), 100 * fill)
    return PackedTW(
        shape=(k, n),
        granularity=g,
        max_tile_k=max(padded, default=0),
        values=values,
        rows=rows_all,
        tile_ptr=tile_ptr.to(device=device, dtype=torch.int32),
        cols=cols_all,
        col_pos=col_pos,
        pruned_cols=pruned_cols,
        **residual,
    )


def unpack_tw(packed: PackedTW) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(B as dense K x N, its TW keep mask, its TEW residual mask or None): the inverse of `pack_tw`."""
    k, n = packed.shape
    device, g = packed.values.device, packed.granularity
    weight = torch.zeros(k, n, dtype=packed.values.dtype, device=device)
    keep = torch.zeros(k, n, dtype=torch.bool, device=device)
    tile_ptr = packed.tile_ptr.tolist()
    for t in range(packed.num_tiles):
        rows = packed.rows[tile_ptr[t] : tile_ptr[t + 1]].long()
        cols = packed.cols[t * g : (t + 1) * g].long()
        kept_rows, used = rows >= 0, cols >= 0
        block = packed.values[tile_ptr[t] : tile_ptr[t + 1]][kept_rows][:, used]
        index = (rows[kept_rows][:, None], cols[used][None, :])
        weight[index] = block
        keep[index] = True
    residual = None
    if packed.has_residual:
        counts = (packed.res_ptr[1:] - packed.res_ptr[:-1]).long()
        res_cols = torch.repeat_interleave(torch.arange(n, device=device), counts)
        res_rows = packed.res_rows.long()
        weight[res_rows, res_cols] = packed.res_vals
        residual = torch.zeros_like(keep)
        residual[res_rows, res_cols] = True
    return weight, keep, residual


def concat_tw(parts: list[PackedTW]) -> PackedTW:
    """One TW weight [B1 | B2 | ...] (K x sum N) computing every part in one call: Q, K and V read x once and fill one
    grid. Columns of any part that keep the same rows may share a tile, so the result is packed afresh."""
    if not parts or len({p.granularity for p in parts}) != 1 or len({p.shape[0] for p in parts}) != 1:
        raise UserError("concat_tw needs TW weights of one granularity and one K")
    unpacked = [unpack_tw(p) for p in parts]
    residuals = [r if r is not None else torch.zeros_like(m) for _, m, r in unpacked]
    residual = torch.cat(residuals, dim=1) if any(p.has_residual for p in parts) else None
    return pack_tw(torch.cat([w for w, _, _ in unpacked], dim=1), torch.cat([m for _, m, _ in unpacked], dim=1),
                   parts[0].granularity, residual)  # fmt: skip
