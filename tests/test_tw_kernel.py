"""The CUDA TW kernel against the fp32 reference on a randomized sweep (skipped without CUDA or the extension)."""

from __future__ import annotations

import itertools
import math
import re

import pytest
import torch
import torch.nn.functional as F
from gemm_checks import KERNEL_TOLERANCE, rel_err
from random_masks import random_nm_mask, random_tw_mask

from bench.common import kernel_times
from sparseprune.export.formats.extension import load_kernels
from sparseprune.export.formats.nm import pack_nm
from sparseprune.export.formats.tw import (
    MMA_GEMV_MAX_M,
    PackedTW,
    host_copy,
    pack_tw,
    tw_matmul,
    tw_matmul_reference,
)
from sparseprune.export.sparse_modules import SparseConv2d, SparseLinear, im2col

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(load_kernels() is None, reason="sparseprune._kernels extension not built"),
]

# M covers the GEMV path (<= 16), split-K (few CTAs), ragged M blocks and the direct path; K, N odd multiples of 8.
SHAPES = [
    (1, 64, 64),
    (3, 136, 200),
    (16, 512, 264),
    (17, 256, 128),
    (100, 392, 520),
    (129, 1024, 328),
    (640, 264, 1032),
    (2056, 520, 776),
]


def _case(
    m: int,
    k: int,
    n: int,
    g: int,
    dtype: torch.dtype,
    seed: int,
    residual: bool,
    activation: str | None,
    row_keep: tuple[float, float] = (0.05, 0.8),
):
    gen = torch.Generator().manual_seed(seed)
    mask = random_tw_mask(k, n, g, 0.75, row_keep, gen, empty_tiles=seed % 2)
    b = torch.randn(k, n, generator=gen) / math.sqrt(k)
    res_mask = ((torch.rand(k, n, generator=gen) < 0.01) & ~mask) if residual else None
    packed32 = pack_tw(b, mask, g, residual_mask=res_mask).to("cuda")
    packed = packed32.to("cuda", dtype)
    x = torch.randn(m, k, generator=gen).to("cuda", dtype)
    bias = torch.randn(n, generator=gen).to("cuda", dtype)
    ref = tw_matmul_reference(x.float(), packed.to("cuda", torch.float32), bias.float(), activation)
    return packed, x, bias, ref


HOPPER_KERNELS = ("wgmma", "wgmma.ws")


def _is_hopper() -> bool:
    return torch.cuda.get_device_capability() == (9, 0)


def _skip_unavailable(kernel: str, granularity: int) -> None:
    if kernel in HOPPER_KERNELS and (not _is_hopper() or granularity == 32):
        pytest.skip("the wgmma kernels need a Hopper GPU and G 64 or 128")


# The tensor-core GEMV forced meets every M of the sweep, up to 2056.
@pytest.mark.parametrize("kernel", ["auto", "mma.sync", *HOPPER_KERNELS, "gemv.mma"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("granularity", [32, 64, 128])
def test_sweep_matches_fp32_reference(kernel: str, dtype: torch.dtype, granularity: int) -> None:
    _skip_unavailable(kernel, granularity)
    activations = itertools.cycle([None, "relu", "gelu"])
    for i, (m, k, n) in enumerate(SHAPES):
        act = next(activations)
        packed, x, bias, ref = _case(m, k, n, granularity, dtype, seed=i, residual=i % 3 == 0, activation=act)
        y = tw_matmul(x, packed, bias, act, kernel=kernel)
        assert y.dtype == dtype and y.shape == (m, n)
        err = rel_err(y, ref)
        assert err <= KERNEL_TOLERANCE[dtype], f"M={m} K={k} N={n} G={granularity} act={act}: rel err {err:.2e}"
        # Every M feature-major too: M 17, 100 and 129 lack 16-byte rows and take the row-major route inside.
        yt = packed.matmul_feature_major(x.t().contiguous(), bias, act, kernel=kernel)
        err_fm = rel_err(yt.t(), ref)
        assert err_fm <= KERNEL_TOLERANCE[dtype], f"feature-major M={m} K={k} N={n}: rel err {err_fm:.2e}"


# Small M at (M, K, N): the CUDA-core GEMV up to M 8 and for a feature-major x without 16-byte rows (M 10, 13), the
# tensor-core GEMV above (a row-major x is transposed into rows of 16, zero-filled past M). N 4104 and 16392 give
# enough tiles that every CTA owns its tiles' whole kept K and finishes its columns itself; N 520 gives so few that
# K is split over CTAs and a finalize pass. Kept K above 512 spans several gathered chunks of x in the GEMV at M 8,
# and several batches of every warp in the tensor-core GEMV at K 6152; at K 264 most of its warps have no K step.
GEMV_SHAPES = [
    (1, 1544, 4104),
    (1, 6152, 1032),  # tiles of several chunks of kept rows
    (2, 1032, 520),
    (4, 264, 16392),
    (5, 1544, 4104),
    (8, 264, 4104),
    (10, 264, 4104),
    (13, 1544, 520),
    (16, 1544, 4104),
    (16, 6152, 1032),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("granularity", [32, 64, 128])
def test_small_m_matches_fp32_reference(dtype: torch.dtype, granularity: int) -> None:
    activations = itertools.cycle([None, "relu", "gelu"])
    for i, (m, k, n) in enumerate(GEMV_SHAPES):
        act = next(activations)
        packed, x, bias, ref = _case(m, k, n, granularity, dtype, seed=20 + i, residual=i % 2 == 0, activation=act)
        err = rel_err(tw_matmul(x, packed, bias, act), ref)
        assert err <= KERNEL_TOLERANCE[dtype], f"M={m} K={k} N={n} G={granularity} act={act}: rel err {err:.2e}"
        yt = packed.matmul_feature_major(x.t().contiguous(), bias, act)
        err_fm = rel_err(yt.t(), ref)
        assert err_fm <= KERNEL_TOLERANCE[dtype], f"feature-major M={m} K={k} N={n}: rel err {err_fm:.2e}"


# Past 16 rows up to MMA_GEMV_MAX_M, auto runs the tensor-core GEMV (32 rows of x per CTA) at up to 32 rows, and
# where its CTAs run in one round (three per SM): every shape here on 108 SMs or more, with ragged last blocks (M 24,
# 40, 72, 120, 200). A row-major x is transposed in, but y leaves row-major straight from the kernel, pruned columns
# and all.
MID_M_SHAPES = [(24, 1032, 2056), (40, 264, 4104), (72, 2056, 1032), (120, 1544, 2056), (200, 776, 1032)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("granularity", [32, 64, 128])
def test_mid_m_gemv_matches_fp32_reference(dtype: torch.dtype, granularity: int) -> None:
    activations = itertools.cycle([None, "relu", "gelu"])
    for i, (m, k, n) in enumerate(MID_M_SHAPES):
        assert 16 < m <= MMA_GEMV_MAX_M
        act = next(activations)
        packed, x, bias, ref = _case(m, k, n, granularity, dtype, seed=60 + i, residual=i % 2 == 0, activation=act)
        assert packed.pruned_cols.numel() > 0
        err = rel_err(tw_matmul(x, packed, bias, act), ref)
        assert err <= KERNEL_TOLERANCE[dtype], f"M={m} K={k} N={n} G={granularity} act={act}: rel err {err:.2e}"
        yt = packed.matmul_feature_major(x.t().contiguous(), bias, act)
        err_fm = rel_err(yt.t(), ref)
        assert err_fm <= KERNEL_TOLERANCE[dtype], f"feature-major M={m} K={k} N={n}: rel err {err_fm:.2e}"


def _sixteen_row_gemv(packed: PackedTW, xt: torch.Tensor, bias: torch.Tensor) -> re.Match[str]:
    """The batches per warp and the columns per K step of the tensor-core GEMV that `auto` runs at up to 16 rows."""
    names = " ".join(kernel_times(lambda: packed.matmul_feature_major(xt, bias, "gelu")))
    launched = re.search(r"tw_gemv_mma_kernel<[^<>]*, 1, (\d+), (\d+)>", names)
    assert launched is not None, names
    return launched


@pytest.mark.parametrize("n", [4104, 16392])
def test_sixteen_row_gemv_ring_follows_ctas_per_sm(n: int) -> None:
    """At 16 rows on tiles of 32 columns the tensor-core GEMV gives each warp a ring of four batches where no SM
    holds more than one CTA, else of two: N 4104 and 16392 take one each on a GPU of 96 to 383 SMs."""
    packed, x, bias, ref = _case(16, 1032, n, 32, torch.float16, seed=47, residual=True, activation="gelu")
    ring, cols = _sixteen_row_gemv(packed, x.t().contiguous(), bias).groups()
    assert int(cols) == 32
    assert int(ring) == (4 if packed.num_tiles <= torch.cuda.get_device_properties(0).multi_processor_count else 2)
    err = rel_err(packed.matmul_feature_major(x.t().contiguous(), bias, "gelu").t(), ref)
    assert err <= KERNEL_TOLERANCE[torch.float16], f"N={n}: rel err {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("granularity", [64, 128])
@pytest.mark.parametrize(("m", "k", "n", "cols"), [(16, 4104, 11008, 64), (9, 1032, 4104, 64), (13, 2056, 520, 32)])
def test_sixteen_row_gemv_steps_span_two_slices(
    dtype: torch.dtype, granularity: int, m: int, k: int, n: int, cols: int
) -> None:
    """On tiles of 64 or 128 columns each K step of the 16-row GEMV spans 64 columns, and the two CTAs of a cluster
    add their shares of those columns' kept rows; a few tiles whose K is split over CTAs (N = 520) keep 32-column
    steps. Empty tiles (odd seeds), the TEW residual, bias and GELU, x and y either way, against fp32."""
    for seed in (50, 51):
        packed, x, bias, ref = _case(m, k, n, granularity, dtype, seed, residual=True, activation="gelu")
        xt = x.t().contiguous()  # M = 9 and 13 are padded to 16-byte rows
        assert int(_sixteen_row_gemv(packed, xt, bias).group(2)) == cols
        for out in (packed.matmul_feature_major(xt, bias, "gelu").t(), packed.matmul(x, bias, "gelu")):
            err = rel_err(out, ref)
            assert err <= KERNEL_TOLERANCE[dtype], f"M={m} K={k} N={n} G={granularity} seed={seed}: {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("granularity", [64, 128])
def test_gemv_row_shares_match_fp32_reference(dtype: torch.dtype, granularity: int) -> None:
    """One row of x on tiles that keep most of K (over kRowShareMinMeanK = 2560 rows each on average), enough of them
    for one round of CTAs: the GEMV splits each tile's kept rows between its slices' CTAs, a cluster that adds the
    shares."""
    for seed, act in ((40, "gelu"), (41, None)):  # seed 41 leaves the first tile without rows
        packed, x, bias, ref = _case(1, 4096, 8200, granularity, dtype, seed, seed == 40, act, row_keep=(0.7, 0.95))
        assert packed.rows.numel() >= 2560 * packed.num_tiles
        err = rel_err(packed.matmul_feature_major(x.t().contiguous(), bias, act).t(), ref)
        assert err <= KERNEL_TOLERANCE[dtype], f"G={granularity} seed={seed}: rel err {err:.2e}"


@pytest.mark.parametrize("row_keep", [(0.05, 0.8), (0.7, 0.95)])  # 32-column slices; row shares in clusters
def test_one_row_gemv_takes_tile_pointers_from_parameters_or_memory(
    monkeypatch: pytest.MonkeyPatch, row_keep: tuple[float, float]
) -> None:
    """At one row `auto` hands the whole-x GEMV the tile pointers as a kernel parameter, from the host copy; without
    a host copy it reads them from global memory. The same kernel adds the same products: identical outputs."""
    packed, x, bias, ref = _case(1, 4096, 8200, 128, torch.float16, 43, False, "relu", row_keep=row_keep)
    xt = x.t().contiguous()
    from_parameters = packed.matmul_feature_major(xt, bias, "relu")
    assert any("tw_gemv_whole_x_kernel" in name for name in kernel_times(lambda: packed.matmul_feature_major(xt)))
    monkeypatch.setattr(PackedTW, "host_tile_ptr", property(lambda self: None))
    from_memory = packed.matmul_feature_major(xt, bias, "relu")
    torch.testing.assert_close(from_parameters, from_memory, rtol=0, atol=0)
    assert rel_err(from_parameters.t(), ref) <= KERNEL_TOLERANCE[torch.float16]


def test_repeated_calls_are_deterministic_without_split() -> None:
    packed, x, bias, _ = _case(512, 256, 512, 128, torch.float16, seed=7, residual=True, activation="gelu")
    first = packed.matmul(x, bias, "gelu")
    for _ in range(3):
        torch.testing.assert_close(packed.matmul(x, bias, "gelu"), first, rtol=0, atol=0)


def test_every_output_written() -> None:
    """The output block is first filled with NaN (the caching allocator hands the same block back), so any
    element the kernels skip shows up as non-finite."""
    cases = [
        (4096, 1024, 64),
        (2056, 136, 128),
        (8, 1024, 128),
        (1, 4096, 128),
        (16, 4096, 128),
        (16, 4096, 32),
        (160, 1024, 32),
        (40, 1024, 32),
        (128, 2048, 128),
    ]
    for m, n, g in cases:
        packed, x, bias, ref = _case(m, 768, n, g, torch.float16, seed=3, residual=True, activation=None)
        poison = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        del poison
        assert rel_err(packed.matmul(x, bias), ref) <= KERNEL_TOLERANCE[torch.float16]


# Hopper cases (M, K, N): split-K (few items), 64-row items (M >= 1024 with few tiles), one or several rounds of the
# persistent schedule (each CTA walking many items, so the stage ring wraps across items), 256-row CTA tiles (many
# items of long K; with G = 64 from one item per SM; taken only without a TEW residual, which even-indexed cases
# have), ragged M (row-major x only).
HOPPER_SHAPES = [
    (24, 520, 264),
    (136, 1032, 776),
    (200, 2056, 392),
    (1000, 776, 1032),
    (2056, 776, 136),
    (2056, 1544, 2056),
    (4096, 1032, 3080),
    (4096, 1544, 4104),
    (8192, 264, 8192),
]


@pytest.mark.parametrize("kernel", HOPPER_KERNELS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("granularity", [64, 128])
def test_hopper_kernels_match_fp32_reference(kernel: str, dtype: torch.dtype, granularity: int) -> None:
    """Both wgmma kernels, forced, on fresh inputs: tiles of different kept K (some empty), TEW residual, every
    activation, row-major and feature-major x and y."""
    _skip_unavailable(kernel, granularity)
    activations = itertools.cycle([None, "relu", "gelu"])
    for i, (m, k, n) in enumerate(HOPPER_SHAPES):
        act = next(activations)
        packed, x, bias, ref = _case(m, k, n, granularity, dtype, seed=100 + i, residual=i % 2 == 0, activation=act)
        _check_both_orientations(packed, x, bias, act, ref, kernel)


def _check_both_orientations(
    packed: PackedTW, x: torch.Tensor, bias: torch.Tensor, act: str | None, ref: torch.Tensor, kernel: str
) -> torch.Tensor:
    """The forced kernel against the fp32 reference with x and y row-major, and (M a multiple of 8) feature-major;
    returns the row-major y."""
    (m, k), n, g = x.shape, packed.shape[1], packed.granularity
    y = tw_matmul(x, packed, bias, act, kernel=kernel)
    err = rel_err(y, ref)
    assert err <= KERNEL_TOLERANCE[x.dtype], f"{kernel} M={m} K={k} N={n} G={g} act={act}: rel err {err:.2e}"
    if m % 8 == 0:
        yt = packed.matmul_feature_major(x.t().contiguous(), bias, act, kernel=kernel)
        err_fm = rel_err(yt.t(), ref)
        assert err_fm <= KERNEL_TOLERANCE[x.dtype], f"{kernel} feature-major M={m} K={k} N={n}: rel err {err_fm:.2e}"
    return y


@pytest.mark.parametrize("granularity", [64, 128])
@pytest.mark.parametrize("adjacent", [True, False])
def test_row_major_y_when_every_column_is_kept(granularity: int, adjacent: bool) -> None:
    """A weight that keeps every column gets its row-major y straight from the warp-specialized kernel: tiles of G
    adjacent columns through the direct epilogue (one bulk copy per tile row), tiles of scattered columns through
    the fp32 staging; M = 200 leaves a ragged last block."""
    if not _is_hopper():
        pytest.skip("wgmma needs a Hopper GPU")
    g, k = granularity, 520
    n = 4 * g
    gen = torch.Generator().manual_seed(g + adjacent)
    mask = torch.zeros(k, n, dtype=torch.bool)
    if adjacent:  # each block of G columns keeps its own rows: one tile per block
        for t in range(n // g):
            mask[torch.randperm(k, generator=gen)[: 64 * (t + 1)], t * g : (t + 1) * g] = True
    else:  # even and odd columns keep different rows: every tile takes every other column
        mask[torch.randperm(k, generator=gen)[:200], 0::2] = True
        mask[torch.randperm(k, generator=gen)[:136], 1::2] = True
    packed = pack_tw(torch.randn(k, n, generator=gen) / math.sqrt(k), mask, g).to("cuda", torch.float16)
    assert packed.pruned_cols.numel() == 0
    cols = packed.cols.view(-1, g).long()
    steps = cols - cols[:, :1] == torch.arange(g, device="cuda")
    assert bool(steps.all(dim=1).all()) == adjacent and bool(steps.all(dim=1).any()) == adjacent
    for m in (200, 4096):
        x = torch.randn(m, k, generator=gen).to("cuda", torch.float16)
        bias = torch.randn(n, generator=gen).to("cuda", torch.float16)
        ref = tw_matmul_reference(x.float(), packed.to("cuda", torch.float32), bias.float(), "gelu")
        err = rel_err(tw_matmul(x, packed, bias, "gelu", kernel="wgmma.ws"), ref)
        assert err <= KERNEL_TOLERANCE[torch.float16], f"M={m} G={g} adjacent={adjacent}: rel err {err:.2e}"


@pytest.mark.parametrize("granularity", [64, 128])
def test_uneven_cooperative_items(granularity: int) -> None:
    """Every column kept, one kept-K count for all tiles (vector-wise N:M's form), and six tiles over M = 4000: 192
    128-row items would need two rounds on 132 SMs, so the warp-specialized kernel takes one round of 192-row items
    whose warpgroups own 128 and 64 rows; the last block is ragged (160 rows). Both orientations of x and y."""
    if not _is_hopper():
        pytest.skip("wgmma needs a Hopper GPU")
    g, k, m = granularity, 1032, 4000
    n = 6 * g
    gen = torch.Generator().manual_seed(g)
    mask = torch.zeros(k, n, dtype=torch.bool)
    for t in range(n // g):
        mask[torch.randperm(k, generator=gen)[:512], t * g : (t + 1) * g] = True
    packed = pack_tw(torch.randn(k, n, generator=gen) / math.sqrt(k), mask, g).to("cuda", torch.float16)
    x = torch.randn(m, k, generator=gen).to("cuda", torch.float16)
    bias = torch.randn(n, generator=gen).to("cuda", torch.float16)
    ref = tw_matmul_reference(x.float(), packed.to("cuda", torch.float32), bias.float(), "relu")
    err = rel_err(tw_matmul(x, packed, bias, "relu", kernel="wgmma.ws"), ref)
    assert err <= KERNEL_TOLERANCE[torch.float16], f"row-major G={g}: rel err {err:.2e}"
    yt = packed.matmul_feature_major(x.t().contiguous(), bias, "relu", kernel="wgmma.ws")
    err_fm = rel_err(yt.t(), ref)
    assert err_fm <= KERNEL_TOLERANCE[torch.float16], f"feature-major G={g}: rel err {err_fm:.2e}"


# Row-flexible kernel cases (M, K, N): few tiles of uneven kept K (items of several heights), one round or many,
# ragged M (row-major x only), a partial last block of every height.
ROWS_SHAPES = [
    (24, 520, 264),
    (136, 1032, 776),
    (1001, 776, 1032),
    (2056, 776, 136),
    (2056, 1544, 2056),
    (4000, 3080, 776),
    (4096, 1032, 3080),
    (6272, 4608, 512),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("granularity", [64, 128])
def test_row_flexible_kernel_matches_fp32_reference(dtype: torch.dtype, granularity: int) -> None:
    """wgmma.rows, forced, on fresh inputs: tiles of different kept K (some empty) get items of different heights;
    every activation; x and y in both orientations; repeated calls are bit-identical."""
    if not _is_hopper():
        pytest.skip("wgmma needs a Hopper GPU")
    activations = itertools.cycle([None, "relu", "gelu"])
    for i, (m, k, n) in enumerate(ROWS_SHAPES):
        act = next(activations)
        packed, x, bias, ref = _case(m, k, n, granularity, dtype, seed=300 + i, residual=False, activation=act)
        assert packed.num_tiles <= 64, "the case must fit the kernel's schedule"
        y = _check_both_orientations(packed, x, bias, act, ref, "wgmma.rows")
        torch.testing.assert_close(tw_matmul(x, packed, bias, act, kernel="wgmma.rows"), y, rtol=0, atol=0)


def test_row_flexible_kernel_refuses_what_it_cannot_run() -> None:
    """A TEW residual, G = 32 and more than 64 tiles get a clear error, not a wrong result."""
    if not _is_hopper():
        pytest.skip("wgmma needs a Hopper GPU")
    packed, x, bias, _ = _case(256, 520, 264, 128, torch.float16, seed=1, residual=True, activation=None)
    with pytest.raises(RuntimeError, match="TEW residual"):
        tw_matmul(x, packed, bias, kernel="wgmma.rows")
    packed32, x32, _, _ = _case(256, 128, 128, 32, torch.float16, seed=2, residual=False, activation=None)
    with pytest.raises(RuntimeError, match="unavailable"):
        tw_matmul(x32, packed32, kernel="wgmma.rows")
    gen = torch.Generator().manual_seed(3)
    k, n = 256, 64 * 80
    mask = torch.zeros(k, n, dtype=torch.bool)
    for t in range(n // 64):  # 80 tiles of their own rows
        mask[torch.randperm(k, generator=gen)[:64], t * 64 : (t + 1) * 64] = True
    many = pack_tw(torch.randn(k, n, generator=gen), mask, 64).to("cuda", torch.float16)
    assert many.num_tiles == 80
    with pytest.raises(RuntimeError, match="at most 64 tiles"):
        tw_matmul(torch.randn(256, k, device="cuda", dtype=torch.float16), many, kernel="wgmma.rows")


def _tiles_keeping(kept: list[int], k: int, n: int, g: int, seed: int) -> PackedTW:
    """A K x N weight whose tile t (columns t * g onwards) keeps kept[t] random rows of K; the other columns are
    pruned."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(k, n, dtype=torch.bool)
    for t, rows in enumerate(kept):
        mask[torch.randperm(k, generator=gen)[:rows], t * g : (t + 1) * g] = True
    return pack_tw(torch.randn(k, n, generator=gen) / math.sqrt(k), mask, g)


@pytest.mark.parametrize("feature_major", [False, True])
@pytest.mark.parametrize(("kept", "kernel"), [([1920, 1536, 1024], "rows"), ([384] * 12, "ws")])
def test_auto_takes_row_flexible_kernel_on_few_uneven_tiles(kept: list[int], kernel: str, feature_major: bool) -> None:
    """auto runs wgmma.rows where few tiles of very different kept K make 128-row items uneven (three tiles of
    1024-1920 rows at M = 4096, like BERT FFN out at 75%), and wgmma.ws's 128-row items where the tiles are alike (12
    of 384 rows, like BERT FFN in at 75%); both match fp32.
    With pruned columns both write a feature-major y, transposed back for a row-major call (the kernel writes no
    row-major y, so without pruned columns a row-major call stays with wgmma.ws)."""
    if not _is_hopper():
        pytest.skip("wgmma needs a Hopper GPU")
    m, k = 4096, 3072
    packed = _tiles_keeping(kept, k, 128 * len(kept) + 256, 128, seed=len(kept)).to("cuda", torch.float16)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    ref = tw_matmul_reference(x.float(), packed.to("cuda", torch.float32))
    xt = x.t().contiguous()

    def call() -> torch.Tensor:
        return packed.matmul_feature_major(xt).t() if feature_major else packed.matmul(x)

    assert rel_err(call(), ref) <= KERNEL_TOLERANCE[torch.float16]
    names = " ".join(kernel_times(call))
    assert f"tw_wgmma_{kernel}_kernel" in names, f"auto on tiles keeping {kept} launched {names}"


def test_host_copy_of_tile_pointers_lasts_until_they_change() -> None:
    """A device tile_ptr is copied to the host once; an in-place change (as load_state_dict makes) brings a new copy."""
    tile_ptr = torch.tensor([0, 32, 96], dtype=torch.int32, device="cuda")
    first = host_copy(tile_ptr)
    assert host_copy(tile_ptr) is first and first.tolist() == [0, 32, 96]
    tile_ptr.copy_(torch.tensor([0, 64, 96], dtype=torch.int32))
    assert host_copy(tile_ptr).tolist() == [0, 64, 96]
    with torch.inference_mode():  # no version counter: copied once all the same
        made_in_inference = tile_ptr.clone()
    assert host_copy(made_in_inference) is host_copy(made_in_inference)


def test_sparse_linear_copies_nothing_to_the_host_per_call() -> None:
    """SparseLinear rebuilds its PackedTW from its buffers on every call; after the first call, auto's plan reads the
    kept host copy of tile_ptr, so a call launches no device-to-host copy (each would wait for the GPU)."""
    packed = _tiles_keeping([1920, 1536, 1024], 3072, 640, 128, seed=4)
    layer = SparseLinear(packed, torch.randn(640)).to("cuda", torch.float16)
    x = torch.randn(4096, 3072, device="cuda", dtype=torch.float16)
    ref = tw_matmul_reference(x.float(), packed.to("cuda", torch.float32), layer.bias.float())
    assert rel_err(layer(x), ref) <= KERNEL_TOLERANCE[torch.float16]
    names = list(kernel_times(lambda: layer(x)))
    assert not [name for name in names if "DtoH" in name or "Device -> Pageable" in name], names


def test_hopper_kernels_agree_and_repeat() -> None:
    """The warp-specialized kernel matches the earlier wgmma one and mma.sync, and gives bit-identical results on
    repeated calls (no split-K here, so no atomics)."""
    if not _is_hopper():
        pytest.skip("wgmma needs a Hopper GPU")
    for g, m, n in [(128, 4096, 776), (128, 2056, 264), (128, 200, 776), (64, 3000, 776), (64, 136, 776)]:
        packed, x, bias, ref = _case(m, 1032, n, g, torch.float16, seed=g + m, residual=True, activation="relu")
        for kernel in ("mma.sync", *HOPPER_KERNELS):
            y = tw_matmul(x, packed, bias, "relu", kernel=kernel)
            assert rel_err(y, ref) <= KERNEL_TOLERANCE[torch.float16], f"{kernel} G={g} M={m}"
    packed, x, bias, _ = _case(4096, 1032, 2056, 128, torch.float16, seed=5, residual=True, activation="gelu")
    first = tw_matmul(x, packed, bias, "gelu", kernel="wgmma.ws")
    for _ in range(3):
        torch.testing.assert_close(tw_matmul(x, packed, bias, "gelu", kernel="wgmma.ws"), first, rtol=0, atol=0)
    packed32, x32, _, _ = _case(64, 128, 128, 32, torch.float16, seed=2, residual=False, activation=None)
    for kernel in HOPPER_KERNELS:
        with pytest.raises(RuntimeError, match="unavailable"):
            tw_matmul(x32, packed32, kernel=kernel)


# Each storage of x with each of y: the GEMVs (M <= 16), the tensor-core GEMV, the GEMM kernels with and without the
# transpose of y back, and an M that is no multiple of 8 (padded when read feature-major).
@pytest.mark.parametrize("m", [1, 8, 12, 16, 100, 130, 1030])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_either_storage_of_x_and_y_matches_fp32_reference(m: int, dtype: torch.dtype) -> None:
    packed, x, bias, ref = _case(m, 264, 520, 64, dtype, seed=m, residual=False, activation="gelu")
    x_feature_major = x.t().contiguous().t()
    for x_in, y_feature_major in itertools.product((x, x_feature_major), (False, True)):
        y = packed.matmul(x_in, bias, "gelu", feature_major_out=y_feature_major)
        assert y.shape == (m, 520)
        if m % 8 == 0 or m <= 16:  # else a feature-major y is a view of the padded call's first m outputs
            assert y.t().is_contiguous() if y_feature_major else y.is_contiguous()
        assert rel_err(y, ref) <= KERNEL_TOLERANCE[dtype], (m, x_in.stride(), y_feature_major)


@pytest.mark.parametrize("kernel", ["auto", "mma.sync", "gemv.mma", *HOPPER_KERNELS])
def test_feature_major_x_of_twelve_rows(kernel: str) -> None:
    """A feature-major x of 12 rows has no 16-byte rows: under `auto` the binding copies x into padded rows and the
    16-row GEMV writes y unpadded; a forced kernel gets x and y padded by PackedTW (y a view). Against fp32."""
    _skip_unavailable(kernel, 64)
    packed, x, bias, ref = _case(12, 1032, 4104, 64, torch.float16, seed=5, residual=True, activation="gelu")
    xt = x.t().contiguous()
    yt = packed.matmul_feature_major(xt, bias, "gelu", kernel=kernel)
    assert yt.shape == (4104, 12) and yt.is_contiguous() == (kernel == "auto")
    assert rel_err(yt.t(), ref) <= KERNEL_TOLERANCE[torch.float16], kernel
    if kernel == "auto":
        names = " ".join(kernel_times(lambda: packed.matmul_feature_major(xt, bias, "gelu")))
        assert "pad_rows_kernel" in names and "tw_gemv_mma_kernel" in names, names


def test_binding_rejects_bad_input() -> None:
    packed, x, _, _ = _case(64, 128, 128, 32, torch.float16, seed=1, residual=False, activation=None)
    kernels = load_kernels()
    args = [
        packed.values,
        packed.rows,
        packed.tile_ptr,
        packed.cols,
        packed.col_pos,
        packed.pruned_cols,
        None,
        None,
        None,
        None,
        128,
        128,
        32,
        packed.max_tile_k,
        0,
        False,
        False,
    ]
    with pytest.raises(RuntimeError, match="values are"):
        kernels.tw_matmul(x.to(torch.bfloat16), *args)
    with pytest.raises(RuntimeError, match="contiguous"):
        kernels.tw_matmul(torch.empty(128, 64, device="cuda", dtype=torch.float16).t(), *args)
    with pytest.raises(RuntimeError, match="CUDA"):
        kernels.tw_matmul(x.cpu(), *args)
    with pytest.raises(RuntimeError, match="path must be"):
        kernels.tw_matmul(x, *args, 4)


@pytest.mark.parametrize("weight", ["tw", "nm-vector"])
def test_sparse_conv_feature_major_matches_fp32_conv(weight: str) -> None:
    """SparseConv2d on the kernels that read the im2col matrix feature-major (TW, and vector-wise N:M on the TW
    route), one image and several, output grids with and without 16-byte rows (12 x 12 and 7 x 7 per image)."""
    gen = torch.Generator().manual_seed(3)
    conv = torch.nn.Conv2d(16, 256, 3, padding=1)
    k, n = 16 * 9, 256
    b = (torch.randn(k, n, generator=gen) / math.sqrt(k)).half().float()
    if weight == "tw":
        mask = random_tw_mask(k, n, 128, 0.75, (0.05, 0.8), gen, empty_tiles=True)
        packed = pack_tw(b, mask, 128)
    else:
        mask = random_nm_mask(k, n, 2, 8, 128, gen)
        packed = pack_nm(b, mask, 8, 128)
    sparse = SparseConv2d(packed.to("cuda", torch.float16), conv.bias.detach(), conv).cuda().half()
    masked = (b * mask).t().reshape(conv.weight.shape).cuda()
    for batch, side in ((1, 12), (3, 12), (1, 7), (5, 7)):
        x = torch.randn(batch, 16, side, side, generator=gen).to("cuda", torch.float16)
        ref = F.conv2d(x.float(), masked, conv.bias.detach().float().cuda(), padding=1)
        err = rel_err(sparse(x), ref)
        assert err <= KERNEL_TOLERANCE[torch.float16], f"{weight} batch {batch} {side} x {side}: {err:.2e}"


IM2COL_GEOMETRIES = [
    ((3, 3), (1, 1), (1, 1), (1, 1)),  # VGG: kw shifted copies where the output rows are a multiple of 8 wide
    ((1, 3), (1, 2), (0, 2), (1, 1)),  # shifted copies 2 columns apart (dilation)
    ((3, 2), (2, 1), (0, 2), (2, 3)),  # strided: one staged copy, each output gathered
    ((7, 7), (1, 1), (3, 3), (2, 2)),  # a ResNet stem: too wide for shifted copies
    ((1, 1), (1, 1), (0, 0), (1, 1)),
]
# (B, C, H, W): 14 x 14 stores 4 outputs at a time, 7 x 7 one, 5 x 6 two; 64 x 64 and 600 x 14 need several bands of
# output rows per plane; 3 x 4096 stages over 48 KB of shared memory for one output row; 70 x 2 x 8 x 8 and 300 x 2 x
# 4 x 4 give the direct kernel more than one block of outputs per channel.
IM2COL_INPUTS = [(1, 8, 14, 14), (3, 5, 11, 9), (4, 16, 28, 28), (2, 3, 7, 7), (3, 2, 5, 6), (2, 3, 64, 64),
                 (1, 2, 600, 14), (1, 1, 3, 4096), (70, 2, 8, 8), (300, 2, 4, 4), (40, 3, 2, 2)]  # fmt: skip
# "auto" picks by size; the others force one kernel, so that each meets every geometry.
IM2COL_KERNELS = ["auto", "staged", "direct", "spread"]


@pytest.mark.parametrize("kernel", IM2COL_KERNELS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("kernel_size", "dilation", "padding", "stride"), IM2COL_GEOMETRIES)
def test_im2col_kernel_matches_unfold(dtype: torch.dtype, kernel_size, dilation, padding, stride, kernel) -> None:
    """The extension's feature-major im2col against F.unfold, bit for bit: contiguous NCHW and the channel-major view
    SparseConv2d returns for several images, directly with each kernel and through im2col()."""
    kernels = load_kernels()
    if kernel == "spread" and kernel_size[0] * kernel_size[1] > 16:
        with pytest.raises(RuntimeError, match="too many taps"):
            kernels.im2col_feature_major(torch.zeros(1, 1, 8, 8, device="cuda", dtype=dtype), *kernel_size, *dilation,
                                         *padding, *stride, kernel=kernel)  # fmt: skip
        return
    gen = torch.Generator(device="cuda").manual_seed(0)
    for batch, channels, height, width in IM2COL_INPUTS:
        if (
            min(
                height + 2 * padding[0] - dilation[0] * (kernel_size[0] - 1),
                width + 2 * padding[1] - dilation[1] * (kernel_size[1] - 1),
            )
            < 1
        ):
            continue
        channel_major = torch.randn(channels, batch, height, width, generator=gen, device="cuda").to(dtype)
        for x in (channel_major.transpose(0, 1).contiguous(), channel_major.transpose(0, 1)):
            expected = F.unfold(x.float(), kernel_size, dilation, padding, stride)
            expected = expected.transpose(0, 1).reshape(expected.shape[1], -1).to(dtype)
            results = [kernels.im2col_feature_major(x, *kernel_size, *dilation, *padding, *stride, kernel=kernel)]
            if kernel == "auto":
                results.append(im2col(x, kernel_size, dilation, padding, stride, feature_major=True)[0])
            for got in results:
                assert got.is_contiguous() and torch.equal(got, expected), f"{tuple(x.shape)} {x.stride()}"


def test_im2col_kernel_rejects_bad_input() -> None:
    kernels = load_kernels()
    x = torch.randn(1, 2, 5, 5, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="4-D"):
        kernels.im2col_feature_major(x[0], 3, 3, 1, 1, 1, 1, 1, 1)
    with pytest.raises(RuntimeError, match="float16 or bfloat16"):
        kernels.im2col_feature_major(x.float(), 3, 3, 1, 1, 1, 1, 1, 1)
    with pytest.raises(RuntimeError, match="smaller than the dilated kernel"):
        kernels.im2col_feature_major(x, 7, 7, 1, 1, 0, 0, 1, 1)
    with pytest.raises(RuntimeError, match="must be positive"):
        kernels.im2col_feature_major(x, 3, 3, 1, 1, 1, 1, 0, 1)
    with pytest.raises(RuntimeError, match="kernel must be"):
        kernels.im2col_feature_major(x, 3, 3, 1, 1, 1, 1, 1, 1, kernel="fast")
    wide = torch.randn(1, 1, 3, 40_000, device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="exceed the shared memory"):
        kernels.im2col_feature_major(wide, 3, 3, 1, 1, 1, 1, 1, 1, kernel="staged")
    expected = F.unfold(wide, 3, 1, 1, 1)[0]  # a row too wide to stage: "auto" falls back to the direct kernel
    assert torch.equal(kernels.im2col_feature_major(wide, 3, 3, 1, 1, 1, 1, 1, 1), expected)
