"""The extension's kernels as `torch.library` custom ops, so torch.compile and torch.export see one opaque node each.

Every extension entry point on a sparse model's forward path is registered here, and only here: `tw_matmul`,
`nm_matmul`, `sp24_matmul`, `im2col_feature_major`, `add_layer_norm_feature_major` and `transpose`. Each has a fake
kernel (output shape only, contiguous, as the kernel writes it) and runs its kernel where it can, its torch reference
elsewhere (every op but `sp24_matmul`, whose CUTLASS-compressed operands exist on Hopper GPUs only), so one traced
graph runs on a CPU in tests. An op never returns a view of an input, as torch.library requires.

`torch.ops.sparseprune.tw_matmul` (the TW GEMM) takes the packed arrays as tensors and the layout as ints, has a
fake kernel (output shape only, no data), and runs the CUDA kernel where it can (fp16/bf16 CUDA x with the extension
built) and the torch reference op everywhere else, so the same traced graph runs on a CPU in tests. Dynamo then
compiles the torch code between sparse calls (residual adds, GELU, the attention's layout copies) into fused kernels
instead of breaking its graph at every call, as it does at a plain pybind function.
`torch.ops.sparseprune.add_layer_norm_feature_major` is the feature-major encoder's residual add and LayerNorm in one
pass over memory, where torch and inductor reduce over dim 0 of that layout in two; `torch.ops.sparseprune.transpose`
its copies around attention on the extension's tiled transpose.
"""

from __future__ import annotations

import torch

from sparseprune.export.formats.extension import load_kernels
from sparseprune.export.formats.limits import limit
from sparseprune.export.formats.nm import PackedNM, run_route
from sparseprune.export.formats.sp24 import aligned
from sparseprune.export.formats.tw import ACTIVATIONS, KERNEL_DTYPES, PackedTW, host_copy, tw_matmul_reference
from sparseprune.export.sparse_modules import conv_output_size, im2col_reference

ROW_FLEXIBLE_PATHS = (0, 7)  # "auto" and "wgmma.rows" plan their work items on the host from tile_ptr
NORM_H_STEP, NORM_MAX_H = limit("norm::kHStep"), limit("norm::kMaxH")  # hidden sizes the LayerNorm kernel takes
ACTIVATION_NAMES = {code: name for name, code in ACTIVATIONS.items()}


@torch.library.custom_op("sparseprune::tw_matmul", mutates_args=())
def tw_matmul_op(
    x: torch.Tensor,
    values: torch.Tensor,
    rows: torch.Tensor,
    tile_ptr: torch.Tensor,
    cols: torch.Tensor,
    col_pos: torch.Tensor,
    pruned_cols: torch.Tensor,
    bias: torch.Tensor | None,
    res_ptr: torch.Tensor | None,
    res_rows: torch.Tensor | None,
    res_vals: torch.Tensor | None,
    k: int,
    n: int,
    granularity: int,
    max_tile_k: int,
    activation: int,
    x_feature_major: bool,
    y_feature_major: bool,
    path: int,
) -> torch.Tensor:
    """act(x @ B + bias) for x (M, K), or xT (K, M) when x_feature_major; (M, N), or (N, M) when y_feature_major.
    Codes as `formats.tw.ACTIVATIONS` and `formats.tw.KERNELS`; M a multiple of 8 or at most 16 when feature-major."""
    kernels = load_kernels()
    if kernels is None or not x.is_cuda or x.dtype not in KERNEL_DTYPES:
        packed = PackedTW((k, n), granularity, max_tile_k, values, rows, tile_ptr, cols, col_pos, pruned_cols,
                          res_ptr, res_rows, res_vals)  # fmt: skip
        y = tw_matmul_reference(x.t() if x_feature_major else x, packed, bias, ACTIVATION_NAMES[activation])
        return y.t().contiguous() if y_feature_major else y
    return kernels.tw_matmul(
        x.contiguous(), values, rows, tile_ptr, cols, col_pos, pruned_cols,
        None if bias is None else bias.to(x.dtype).contiguous(), res_ptr, res_rows, res_vals,
        k, n, granularity, max_tile_k, activation, x_feature_major, y_feature_major, path,
        host_copy(tile_ptr) if path in ROW_FLEXIBLE_PATHS else None,
    )  # fmt: skip


@tw_matmul_op.register_fake
def _tw_matmul_fake(
    x: torch.Tensor,
    values: torch.Tensor,
    rows: torch.Tensor,
    tile_ptr: torch.Tensor,
    cols: torch.Tensor,
    col_pos: torch.Tensor,
    pruned_cols: torch.Tensor,
    bias: torch.Tensor | None,
    res_ptr: torch.Tensor | None,
    res_rows: torch.Tensor | None,
    res_vals: torch.Tensor | None,
    k: int,
    n: int,
    granularity: int,
    max_tile_k: int,
    activation: int,
    x_feature_major: bool,
    y_feature_major: bool,
    path: int,
) -> torch.Tensor:
    return _matmul_output(x, n, x_feature_major, y_feature_major)


def _matmul_output(x: torch.Tensor, n: int, x_feature_major: bool, y_feature_major: bool) -> torch.Tensor:
    """The output a TW or N:M call of x makes: (M, N), or (N, M) when y_feature_major, M from x's storage."""
    rows = x.shape[1] if x_feature_major else x.shape[0]
    return x.new_empty((n, rows) if y_feature_major else (rows, n))


@torch.library.custom_op("sparseprune::nm_matmul", mutates_args=())
def nm_matmul_op(
    x: torch.Tensor,
    values: torch.Tensor,
    idx: torch.Tensor,
    bias: torch.Tensor | None,
    k: int,
    n: int,
    m: int,
    kept: int,
    vector: int,
    activation: int,
    route: str,
    tile: str,
    x_feature_major: bool,
    y_feature_major: bool,
) -> torch.Tensor:
    """act(x @ B + bias) for the packed N:M weight B on `route` (`formats.nm.KERNELS`; "auto" is decided per call
    by `formats.nm.auto_route`, the one place that chooses): x (M, K), or xT (K, M) when x_feature_major; (M, N),
    or (N, M) when y_feature_major. `tile` is the 2:4 CTA tile (`formats.sp24.TILES`)."""
    packed = PackedNM(values, idx, (k, n), m, kept, vector)
    return run_route(x, packed, bias, ACTIVATION_NAMES[activation], route, tile, x_feature_major, y_feature_major)


@nm_matmul_op.register_fake
def _nm_matmul_fake(
    x: torch.Tensor,
    values: torch.Tensor,
    idx: torch.Tensor,
    bias: torch.Tensor | None,
    k: int,
    n: int,
    m: int,
    kept: int,
    vector: int,
    activation: int,
    route: str,
    tile: str,
    x_feature_major: bool,
    y_feature_major: bool,
) -> torch.Tensor:
    return _matmul_output(x, n, x_feature_major, y_feature_major)


@torch.library.custom_op("sparseprune::sp24_matmul", mutates_args=(), device_types="cuda")
def sp24_matmul_op(
    x: torch.Tensor,
    values: torch.Tensor,
    meta: torch.Tensor,
    bias: torch.Tensor | None,
    k: int,
    n: int,
    activation: int,
    tile: int,
    source: torch.Tensor | None,
) -> torch.Tensor:
    """act(x @ B + source + bias) on the Hopper sparse tensor cores for x (M, K), y (M, N); B compressed by CUTLASS
    (`formats.sp24.compress_24`). CUDA only: the compressed form is built on, and read by, the GPU alone, and a CPU
    reaches 2:4 weights through `nm_matmul`'s reference."""
    bias = None if bias is None else aligned(bias.to(x.dtype).contiguous())
    source = None if source is None else aligned(source.contiguous())
    return load_kernels().sp24_matmul(aligned(x.contiguous()), values, meta, bias, k, n, activation, tile, source)


@sp24_matmul_op.register_fake
def _sp24_matmul_fake(
    x: torch.Tensor,
    values: torch.Tensor,
    meta: torch.Tensor,
    bias: torch.Tensor | None,
    k: int,
    n: int,
    activation: int,
    tile: int,
    source: torch.Tensor | None,
) -> torch.Tensor:
    return x.new_empty((x.shape[0], n))


@torch.library.custom_op("sparseprune::im2col_feature_major", mutates_args=())
def im2col_op(x: torch.Tensor, kh: int, kw: int, dh: int, dw: int, ph: int, pw: int, sh: int, sw: int) -> torch.Tensor:
    """The im2col matrix (C*kh*kw, B*oh*ow) of x (B, C, H, W), ordered as F.unfold: the extension's kernel for
    fp16/bf16 CUDA x, one strided copy of the padded input elsewhere."""
    kernels = load_kernels()
    if kernels is None or not x.is_cuda or x.dtype not in KERNEL_DTYPES:
        return im2col_reference(x, (kh, kw), (dh, dw), (ph, pw), (sh, sw))
    return kernels.im2col_feature_major(x, kh, kw, dh, dw, ph, pw, sh, sw)


@im2col_op.register_fake
def _im2col_fake(
    x: torch.Tensor, kh: int, kw: int, dh: int, dw: int, ph: int, pw: int, sh: int, sw: int
) -> torch.Tensor:
    batch, channels = x.shape[:2]
    out_h, out_w = conv_output_size(x, (kh, kw), (dh, dw), (ph, pw), (sh, sw))
    return x.new_empty((channels * kh * kw, batch * out_h * out_w))


def add_layer_norm_reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """LayerNorm(x + residual) over dim 0 of (H, T) tensors: the sum in x's dtype, the rest in fp32, as torch's
    `LayerNorm(x + residual)` on row-major activations."""
    total = (x + residual).float()
    var, mean = torch.var_mean(total, dim=0, correction=0, keepdim=True)
    normed = (total - mean) * torch.rsqrt(var + eps)
    return (normed * weight.float()[:, None] + bias.float()[:, None]).to(x.dtype)


@torch.library.custom_op("sparseprune::add_layer_norm_feature_major", mutates_args=())
def add_layer_norm_op(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """LayerNorm(x + residual) over dim 0 of feature-major (H, T) activations; the CUDA kernel for fp16/bf16 CUDA
    inputs with H a multiple of 64 up to 1024, the reference elsewhere."""
    kernels = load_kernels()
    hidden = x.shape[0]
    if kernels is None or not x.is_cuda or x.dtype not in KERNEL_DTYPES or hidden % NORM_H_STEP or hidden > NORM_MAX_H:
        return add_layer_norm_reference(x, residual, weight, bias, eps)
    cast = [t.to(x.dtype).contiguous() for t in (residual, weight, bias)]
    return kernels.add_layer_norm_feature_major(x.contiguous(), *cast, eps)


@add_layer_norm_op.register_fake
def _add_layer_norm_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("sparseprune::transpose", mutates_args=())
def transpose_op(x: torch.Tensor) -> torch.Tensor:
    """x.t().contiguous() for a 2-D x: the extension's tiled transpose for fp16/bf16 CUDA x with contiguous rows,
    torch's copy elsewhere."""
    kernels = load_kernels()
    if kernels is None or not x.is_cuda or x.dtype not in KERNEL_DTYPES or (x.shape[1] > 1 and x.stride(1) != 1):
        return x.t().clone(memory_format=torch.contiguous_format)  # a copy even where x.t() is contiguous
    return kernels.transpose_rows(x)


@transpose_op.register_fake
def _transpose_fake(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[1], x.shape[0]))
