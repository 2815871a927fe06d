"""The CUDA N:M kernels (SIMT SpMV/SpMM and the TW route) against an fp32 reference from the dense B, on fresh
random inputs over many shapes (skipped without CUDA or the extension)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from gemm_checks import KERNEL_TOLERANCE, dense_reference, rel_err
from random_masks import random_nm_mask

from sparseprune.export.formats.extension import load_kernels
from sparseprune.export.formats.nm import PackedNM, nm_matmul, pack_nm

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(load_kernels() is None, reason="sparseprune._kernels extension not built"),
]

CONFIGS = [(1, 2), (1, 4), (2, 4), (1, 8), (2, 8), (3, 8), (1, 16), (4, 16), (15, 16), (3, 32), (8, 32), (31, 32)]
# M: SpMV sizes 1..16 (every MaxM instantiation, ragged), then SpMM with ragged 64-row blocks.
ROWS = [1, 2, 3, 4, 5, 8, 11, 16, 17, 64, 100, 257]


def _case(
    m_rows: int, groups: int, n: int, kept: int, m: int, vector: int, dtype: torch.dtype, seed: int
) -> tuple[PackedNM, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Packed weight on the GPU, x, bias and the dense masked B in fp32 (K = groups * m)."""
    gen = torch.Generator().manual_seed(seed)
    k = groups * m
    mask = random_nm_mask(k, n, kept, m, vector, gen)
    b = (torch.randn(k, n, generator=gen) / math.sqrt(k * kept / m)).to(dtype).float() * mask
    packed = pack_nm(b, mask, m, vector).to("cuda", dtype)
    x = torch.randn(m_rows, k, generator=gen).to("cuda", dtype)
    bias = torch.randn(n, generator=gen).to("cuda", dtype)
    return packed, x, bias, b.cuda()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vector", [1, 2, 8, 16])
def test_simt_sweep_matches_fp32_reference(dtype: torch.dtype, vector: int) -> None:
    """Every supported M (2..32), ragged M and N against the 32-column SpMV and 64-column SpMM blocks."""
    activations = itertools.cycle([None, "relu", "gelu"])
    widths = itertools.cycle([8, 16, 40, 96, 200, 264, 1032])
    for i, ((kept, m), rows) in enumerate(itertools.product(CONFIGS, ROWS[::2] if vector > 1 else ROWS)):
        n = next(w for w in widths if w % vector == 0)
        groups = 1 + (i * 7) % 23
        act = next(activations)
        packed, x, bias, b = _case(rows, groups, n, kept, m, vector, dtype, seed=i)
        y = nm_matmul(x, packed, bias, act, kernel="simt")
        assert y.dtype == dtype and y.shape == (rows, n)
        err = rel_err(y, dense_reference(x, b, bias, act, dtype=torch.float32))
        assert err <= KERNEL_TOLERANCE[dtype], f"{kept}:{m} V={vector} M={rows} K={groups * m} N={n} {act}: {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    ("rows", "k", "n", "kept", "m"), [(1, 4096, 64, 1, 4), (3, 16384, 40, 2, 4), (16, 32768, 8, 3, 32)]
)
def test_split_k_spmv(dtype: torch.dtype, rows: int, k: int, n: int, kept: int, m: int) -> None:
    """Few columns and long K: the SpMV splits K over CTAs and a finalize pass sums the slices."""
    packed, x, bias, b = _case(rows, k // m, n, kept, m, 1, dtype, seed=k + n)
    y = nm_matmul(x, packed, bias, "gelu", kernel="simt")
    assert rel_err(y, dense_reference(x, b, bias, "gelu", dtype=torch.float32)) <= KERNEL_TOLERANCE[dtype]
    torch.testing.assert_close(nm_matmul(x, packed, bias, "gelu", kernel="simt"), y, rtol=0, atol=0)


@pytest.mark.parametrize(("rows", "kept", "m"), [(1, 2, 8), (1, 8, 32), (2, 1, 4), (3, 2, 16)])
def test_spmv_over_several_chunks(rows: int, kept: int, m: int) -> None:
    """K past one chunk of staged x (8192 / max rows of x) on enough panels that K is not split, with a narrow last
    panel: each chunk reads its packed rows from its own first row (per-chunk pointers up to two rows of x)."""
    k, n = 3 * 8192 // (1 if rows == 1 else 2 if rows == 2 else 4) + 8 * m, 2112 + 8
    packed, x, bias, b = _case(rows, k // m, n, kept, m, 1, torch.float16, seed=k + kept)
    y = nm_matmul(x, packed, bias, "relu", kernel="simt")
    err = rel_err(y, dense_reference(x, b, bias, "relu", dtype=torch.float32))
    assert err <= KERNEL_TOLERANCE[torch.float16], f"{kept}:{m} M={rows} K={k} N={n}: {err:.2e}"


# The tensor-core GEMV takes element-wise packings with kept / m <= 1/2, K a multiple of 32 and N of 32 from 5 rows of
# x: every group size, steps of several groups (m < 32) or one (m = 32), few steps per warp, and
# a K split (N = 64, long K) whose finalize pass sums the slices.
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tensor_core_gemv_matches_fp32_reference(dtype: torch.dtype) -> None:
    configs = [(1, 2), (2, 4), (1, 8), (2, 8), (4, 16), (8, 16), (3, 32), (8, 32), (16, 32)]
    shapes = [(5, 1024, 352), (8, 96, 32), (16, 4096, 1056), (11, 8192, 64)]
    for i, ((kept, m), (rows, k, n)) in enumerate(itertools.product(configs, shapes)):
        act = [None, "relu", "gelu"][i % 3]
        packed, x, bias, b = _case(rows, k // m, n, kept, m, 1, dtype, seed=100 + i)
        y = nm_matmul(x, packed, bias, act, kernel="simt")
        err = rel_err(y, dense_reference(x, b, bias, act, dtype=torch.float32))
        assert err <= KERNEL_TOLERANCE[dtype], f"{kept}:{m} M={rows} K={k} N={n} {act}: {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vector", [16, 32, 64, 128, 256])
def test_tw_route_matches_fp32_reference(dtype: torch.dtype, vector: int) -> None:
    for i, (rows, (kept, m)) in enumerate(
        itertools.product([1, 16, 17, 130, 1000], [(1, 4), (2, 8), (4, 16), (8, 32)])
    ):
        act = [None, "relu", "gelu"][i % 3]
        groups, n = 8 + 2 * (i % 5), 512 + vector % 256  # K a multiple of 8 for every m, N ragged against 128
        packed, x, bias, b = _case(rows, groups, n, kept, m, vector, dtype, seed=i)
        ref = dense_reference(x, b, bias, act, dtype=torch.float32)
        y_tw = nm_matmul(x, packed, bias, act, kernel="tw")
        y_auto = packed.matmul(x, bias, act)
        twin = packed.feature_major_twin(x, rows)  # what SparseConv2d computes feature-major on
        assert (twin is not None) == (rows > 16 or vector >= 32), f"{kept}:{m} V={vector} M={rows}"
        ys = [y_tw, y_auto] + ([] if twin is None else [twin.matmul_feature_major(x.t().contiguous(), bias, act).t()])
        for y in ys:
            err = rel_err(y, ref)
            assert err <= KERNEL_TOLERANCE[dtype], f"{kept}:{m} V={vector} M={rows} K={packed.shape[0]}: {err:.2e}"


def test_auto_route_falls_back_outside_the_kernel_range() -> None:
    packed, x, bias, b = _case(5, 3, 16, 1, 64, 1, torch.float16, seed=1)  # M = 64: reference only
    assert packed.kernel_unsupported() is not None
    assert (
        rel_err(packed.matmul(x, bias), dense_reference(x, b, bias, None, dtype=torch.float32))
        <= KERNEL_TOLERANCE[torch.float16]
    )


def test_every_output_written() -> None:
    """The output block is first filled with NaN (the caching allocator hands the same block back), so any
    element a kernel skips shows up as non-finite."""
    for rows, kernel in [(1, "simt"), (7, "simt"), (300, "simt"), (300, "tw")]:
        packed, x, bias, b = _case(rows, 24, 512, 2, 8, 32, torch.float16, seed=rows)
        poison = torch.full((rows, 512), float("nan"), device="cuda", dtype=torch.float16)
        del poison
        y = nm_matmul(x, packed, bias, kernel=kernel)
        assert rel_err(y, dense_reference(x, b, bias, None, dtype=torch.float32)) <= KERNEL_TOLERANCE[torch.float16]


def test_each_path_once() -> None:
    """One small call per kernel path (SpMV, split-K SpMV, tensor-core GEMV with 4-bit and byte positions, SpMM, TW
    route) in both dtypes: the compute-sanitizer run of bench/nm_gpu_check.sh uses this test."""
    for dtype in (torch.float16, torch.bfloat16):
        for rows, groups, n, kept, m, vector, kernel in [
            (1, 64, 96, 1, 4, 1, "simt"),
            (4, 2048, 16, 1, 4, 1, "simt"),
            (8, 24, 64, 1, 4, 1, "simt"),
            (8, 6, 64, 8, 32, 1, "simt"),
            (33, 40, 72, 1, 4, 8, "simt"),
            (70, 40, 128, 1, 4, 32, "tw"),
        ]:
            packed, x, bias, b = _case(rows, groups, n, kept, m, vector, dtype, seed=rows)
            y = nm_matmul(x, packed, bias, "relu", kernel=kernel)
            assert rel_err(y, dense_reference(x, b, bias, "relu", dtype=torch.float32)) <= KERNEL_TOLERANCE[dtype]


@pytest.mark.slow
def test_int64_offsets_past_2_to_31_elements() -> None:
    """x holds more than 2^31 elements, so row offsets overflow 32-bit arithmetic; checks the last rows."""
    rows, k, n = (1 << 31) // 1024 + 300, 1024, 64
    gen = torch.Generator().manual_seed(5)
    mask = random_nm_mask(k, n, 1, 4, 1, gen)
    b = (torch.randn(k, n, generator=gen) / 16).half().float() * mask
    packed = pack_nm(b, mask, 4).to("cuda", torch.float16)
    x = torch.empty(rows, k, device="cuda", dtype=torch.float16).normal_()
    y = nm_matmul(x, packed, kernel="simt")
    tail = slice(rows - 200, rows)
    assert (
        rel_err(y[tail], dense_reference(x[tail], b.cuda(), None, None, dtype=torch.float32))
        <= KERNEL_TOLERANCE[torch.float16]
    )


def test_binding_rejects_bad_input() -> None:
    packed, x, _, _ = _case(4, 8, 64, 1, 4, 1, torch.float16, seed=3)
    kernels = load_kernels()
    k, n = packed.shape

    def call(x: torch.Tensor = x, idx: torch.Tensor = packed.idx, m: int = 4, kept: int = 1, vector: int = 1) -> None:
        kernels.nm_matmul(x, packed.values, idx, None, k, n, m, kept, vector, 0)

    with pytest.raises(RuntimeError, match="values are"):
        call(x=x.to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="contiguous"):
        call(x=torch.empty(k * 2, 4, device="cuda", dtype=torch.float16)[::2].t())
    with pytest.raises(RuntimeError, match="CUDA"):
        call(x=x.cpu())
    with pytest.raises(RuntimeError, match="uint8"):
        call(idx=packed.idx.int())
    with pytest.raises(RuntimeError, match="power of two"):
        call(m=64)
    with pytest.raises(RuntimeError, match="N < M"):
        call(kept=4)
    with pytest.raises(RuntimeError, match="values must be"):
        call(kept=2)
    with pytest.raises(RuntimeError, match="vector"):
        call(vector=3)
