"""2:4 on Hopper sparse tensor cores: the route decisions and validation errors on the CPU, then the CUTLASS kernel
against an fp32 reference from the dense B on fresh random inputs over many shapes (skipped without an sm_90 GPU and
a build that holds the kernel)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
import torch
from gemm_checks import KERNEL_TOLERANCE, dense_reference, rel_err
from random_masks import random_nm_mask

from sparseprune.errors import UserError
from sparseprune.export.formats import nm, sp24
from sparseprune.export.formats.base import apply_epilogue
from sparseprune.export.formats.extension import load_kernels
from sparseprune.export.formats.nm import PackedNM, auto_route, nm_matmul, pack_nm, sp24_view
from sparseprune.export.formats.sp24 import (
    FORCED_TILES,
    CompressedSP24,
    TwoPassSP24,
    check_24,
    compress_24,
    shape_unsupported,
    split_24,
    two_part_form,
)
from sparseprune.export.sparse_modules import SparseLinear


def _sp24_missing() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA device"
    return sp24.device_unavailable(torch.empty(0, device="cuda"))


SP24_MISSING = _sp24_missing()


def requires_sp24(test: Callable[..., None]) -> Callable[..., None]:
    """GPU test of the kernel: marked gpu, skipped with the reason when this machine or build cannot run it."""
    return pytest.mark.gpu(pytest.mark.skipif(SP24_MISSING is not None, reason=str(SP24_MISSING))(test))


def _packed(
    k: int, n: int, kept: int = 2, m: int = 4, vector: int = 1, seed: int = 0, dtype: torch.dtype = torch.float16
) -> tuple[PackedNM, torch.Tensor]:
    """An N:M packing of a random B (K x N), representable in `dtype`, and the masked B in fp32."""
    gen = torch.Generator().manual_seed(seed)
    mask = random_nm_mask(k, n, kept, m, vector, gen)
    b = (torch.randn(k, n, generator=gen) / math.sqrt(k / 2)).to(dtype).float() * mask
    return pack_nm(b, mask, m, vector), b


# CPU: validation and routing.


def test_check_24_accepts_two_per_group_and_names_the_first_bad_group() -> None:
    b = torch.zeros(8, 2)
    b[[0, 3, 5, 6], 0] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    b[[1, 2, 4], 1] = 1.0  # two in the first group, one in the second: fewer than 2 is fine
    check_24(b)
    b[7, 1] = 5.0
    b[0, 1] = 5.0  # column 1, first group: three non-zeros
    with pytest.raises(UserError, match=r"column 1, K 0\.\.3 holds 3 non-zeros"):
        check_24(b)
    with pytest.raises(UserError, match="multiple of 4"):
        check_24(torch.ones(6, 2))


def test_split_24_keeps_the_first_two_non_zeros_of_each_group() -> None:
    b = torch.tensor(
        [
            [1.0, 0.0, 5.0],
            [2.0, 0.0, 0.0],
            [3.0, 7.0, 6.0],
            [4.0, 0.0, 0.0],
            [0.0, 8.0, 9.0],
            [0.0, 0.0, 10.0],
            [0.0, 0.0, 11.0],
            [0.0, 0.0, 0.0],
        ]
    )
    main, rest = split_24(b)
    expected_rest = torch.zeros_like(b)
    expected_rest[[2, 3], 0] = torch.tensor([3.0, 4.0])  # the third and fourth non-zeros of column 0's first group
    expected_rest[6, 2] = 11.0  # the third of column 2's second group
    expected_main = b - expected_rest
    assert torch.equal(main, expected_main)
    assert torch.equal(rest, expected_rest)
    check_24(main)
    check_24(rest)  # both parts run on the 2:4 hardware
    with pytest.raises(UserError, match="multiple of 4"):
        split_24(torch.ones(6, 2))


@pytest.mark.parametrize(
    ("k", "n", "form"),
    [
        (768, 3072, "stacked"),
        (768, 2304, "stacked"),
        (3072, 768, "two-pass"),
        (4096, 4096, "two-pass"),
        (4096, 6144, "two-pass"),
        (4096, 6152, "stacked"),
    ],
)
def test_two_part_form_copies_the_smaller_operand(k: int, n: int, form: str) -> None:
    """Stacking copies x twice (3K values a row), two passes write and read back y (2N): the cheaper one wins."""
    assert two_part_form(k, n) == form


def test_shape_limits() -> None:
    assert shape_unsupported(768, 2304) is None
    assert "K a multiple of 16" in shape_unsupported(24, 64)
    assert "N a multiple of 8" in shape_unsupported(64, 20)


def test_compress_refuses_bad_input_before_any_launch() -> None:
    with pytest.raises(UserError, match="float16/bfloat16"):
        compress_24(torch.zeros(64, 64))
    with pytest.raises(UserError, match="K a multiple of 16"):
        compress_24(torch.zeros(24, 64, dtype=torch.float16))
    with pytest.raises(UserError, match="cannot compress for the 2:4 kernel"):
        compress_24(torch.zeros(64, 64, dtype=torch.float16))  # CPU tensor (or no kernel in this build)


def test_unknown_tile_is_refused_before_any_launch() -> None:
    weight = CompressedSP24(torch.zeros(8, 32), torch.zeros(16, dtype=torch.uint8), (64, 8))
    with pytest.raises(UserError, match="tile must be one of"):
        weight.matmul(torch.zeros(4, 64), tile="square")


def test_forced_route_explains_why_it_cannot_run() -> None:
    packed, _ = _packed(64, 32)
    with pytest.raises(UserError, match="N:M kernel 'sp24' cannot run"):
        nm_matmul(torch.randn(20, 64), packed, kernel="sp24")


@pytest.mark.parametrize(
    ("rows", "k", "kept", "m", "vector", "route"),
    [
        (17, 64, 2, 4, 1, "sp24"),
        (16, 64, 2, 4, 1, "sp24"),  # past one row the sparse tensor cores beat the SpMV
        (1, 64, 2, 4, 1, "simt"),  # a single row keeps the memory-bound SpMV
        (4, 64, 1, 2, 1, "simt"),  # sparser patterns keep the SpMV up to 4 rows
        (5, 64, 1, 2, 1, "sp24"),  # then 1:2 is 2:4 by construction and takes the sparse tensor cores
        (5, 64, 1, 4, 1, "simt"),  # from 5 rows the SpMV's tensor-core GEMV takes N <= 2 with M >= 4
        (5, 64, 2, 8, 1, "simt"),
        (2, 64, 2, 8, 2, "simt"),  # vector-wise, while rows x N/M <= 0.5
        (3, 64, 2, 8, 2, "sp24"),
        (4, 64, 1, 8, 1, "simt"),
        (5, 64, 1, 8, 1, "simt"),
        (16, 64, 1, 8, 1, "simt"),
        (17, 64, 1, 8, 1, "sp24"),
        (5, 48, 1, 8, 1, "sp24"),  # K = 48: no tensor-core GEMV
        (8, 64, 1, 8, 2, "sp24"),  # vector-wise: none either
        (16, 64, 2, 8, 1, "simt"),
        (17, 64, 2, 8, 1, "sp24"),
        (16, 64, 2, 8, 16, "sp24"),  # V = 16 half-fills the TW tiles
        (16, 64, 2, 8, 32, "tw"),  # wider vectors take the TW small-M kernels, which skip all the pruned K
        (1, 64, 2, 8, 128, "tw"),
        (1, 64, 2, 4, 128, "tw"),
        (16, 64, 2, 4, 128, "sp24"),
        (4096, 64, 2, 4, 128, "sp24"),  # vector-wise 2:4 is 2:4 too, and beats the TW repack
        (4096, 40, 2, 4, 1, "simt"),  # K = 40 is no multiple of 16
        (4096, 64, 1, 4, 1, "sp24"),  # at most one of any 4 K rows kept: 2:4 too
        (4096, 64, 1, 2, 1, "sp24"),  # 1:2 keeps two of any 4
        (4096, 64, 3, 32, 1, "sp24"),  # 3:32 may keep three of 4 adjacent rows: two 2:4 passes
        (4096, 64, 8, 32, 8, "sp24"),  # so may 8:32 and 4:16
        (7, 48, 3, 8, 1, "simt"),  # the two 2:4 parts beat the CUDA-core SpMV from 8 rows, whatever N/M
        (8, 48, 3, 8, 1, "sp24"),  # K = 48: no tensor-core GEMV
        (8, 48, 4, 16, 1, "sp24"),
        (8, 64, 3, 32, 1, "simt"),  # its tensor-core GEMV beats them up to 16 rows
        (16, 64, 4, 16, 1, "simt"),
        (17, 64, 4, 16, 1, "sp24"),
        (8, 64, 4, 16, 8, "sp24"),  # vector-wise: no tensor-core GEMV
        (4096, 64, 4, 16, 16, "tw"),
        (4096, 64, 1, 4, 16, "tw"),  # the TW route skips all the pruned K, the 2:4 hardware only half
    ],
)
def test_auto_route_on_a_capable_device(
    monkeypatch: pytest.MonkeyPatch, rows: int, k: int, kept: int, m: int, vector: int, route: str
) -> None:
    """With the device checks passed (as on a Hopper GPU with the kernel built), the packing and M decide."""
    monkeypatch.setattr(nm, "_device_unavailable", lambda x, packed, route: None)
    packed, _ = _packed(k, 256, kept, m, vector)
    assert auto_route(torch.empty(rows, k), packed) == route


def test_auto_route_leaves_the_gemv_for_an_unaligned_x(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tensor-core GEMV needs x's rows 16-byte aligned; without, the kernel would run the SpMV, which is far
    slower than the sparse tensor cores at 8 rows, so auto takes those."""
    monkeypatch.setattr(nm, "_device_unavailable", lambda x, packed, route: None)
    packed, _ = _packed(256, 256, 2, 8, 1)
    storage = torch.empty(8 * 256 + 8, dtype=torch.float16)
    assert auto_route(storage[8:].view(8, 256), packed) == "simt"
    assert auto_route(storage[1 : 1 + 8 * 256].view(8, 256), packed) == "sp24"  # 2 bytes off
    assert auto_route(torch.empty(8, 264, dtype=torch.float16)[:, 1:257], packed) == "simt"  # copied: aligned


def test_compressed_form_is_memoised_per_values_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(nm, "compress_split_24", lambda b: calls.append(b) or object())
    packed, _ = _packed(64, 32)
    view = sp24_view(packed)
    assert sp24_view(packed) is view and len(calls) == 1
    packed.values.mul_(2)
    assert sp24_view(packed) is not view and len(calls) == 2, "an in-place change invalidates the compressed form"


# GPU: the CUTLASS kernel.

# (rows of x, K, N): ragged rows against the 128-row tiles, K with and without a 128 tail (metadata atoms are
# 64 x 128), N not a multiple of 64 (padded metadata rows), the BERT shapes.
SHAPES = [
    (17, 64, 8),
    (33, 16, 40),
    (64, 128, 128),
    (100, 272, 264),
    (129, 1040, 72),
    (257, 768, 2304),
    (300, 3072, 768),
    (1000, 512, 1032),
    (4096, 768, 3072),
]


def _gpu_case(
    i: int, rows: int, k: int, n: int, seed: int, kept: int = 2, m: int = 4, vector: int = 1
) -> tuple[PackedNM, torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator]:
    """Shape i of SHAPES on the GPU, fp16 and bf16 by turns: the packing, the masked B, x, a bias, and the generator
    that drew them (for any further input)."""
    dtype = (torch.float16, torch.bfloat16)[i % 2]
    packed, b = _packed(k, n, kept, m, vector, seed=seed, dtype=dtype)
    gen = torch.Generator(device="cuda").manual_seed(i)
    x = torch.randn(rows, k, generator=gen, device="cuda").to(dtype)
    bias = torch.randn(n, generator=gen, device="cuda").to(dtype)
    return packed.to("cuda", dtype), b.cuda(), x, bias, gen


@requires_sp24
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vector", [1, 8])
def test_matches_fp32_reference(dtype: torch.dtype, vector: int) -> None:
    activations = itertools.cycle([None, "relu", "gelu"])
    for i, (rows, k, n) in enumerate(SHAPES):
        packed, b = _packed(k, n, vector=vector, seed=i, dtype=dtype)
        packed = packed.to("cuda", dtype)
        gen = torch.Generator(device="cuda").manual_seed(i)
        x = torch.randn(rows, k, generator=gen, device="cuda").to(dtype)
        bias = None if i % 4 == 3 else torch.randn(n, generator=gen, device="cuda").to(dtype)
        act = next(activations)
        y = nm_matmul(x, packed, bias, act, kernel="sp24")
        assert y.dtype == dtype and y.shape == (rows, n)
        err = rel_err(y, dense_reference(x, b.cuda(), bias, act, dtype=torch.float32))
        assert err <= KERNEL_TOLERANCE[dtype], f"V={vector} M={rows} K={k} N={n} {act}: {err:.2e}"


@requires_sp24
@pytest.mark.parametrize("tile", FORCED_TILES)
def test_each_tile_matches_fp32_reference(tile: str) -> None:
    """Every CTA tile reads the one compressed weight, whichever the shape rule would pick."""
    activations = itertools.cycle([None, "relu", "gelu"])
    for i, (rows, k, n) in enumerate(SHAPES):
        packed, b, x, bias, _ = _gpu_case(i, rows, k, n, seed=10 + i)
        act = next(activations)
        y = sp24_view(packed).matmul(x, bias, act, tile=tile)
        err = rel_err(y, dense_reference(x, b, bias, act, dtype=torch.float32))
        assert err <= KERNEL_TOLERANCE[x.dtype], f"{tile} M={rows} K={k} N={n} {act}: {err:.2e}"


@requires_sp24
@pytest.mark.parametrize(
    ("kept", "m", "vector"),
    [
        (1, 4, 1),
        (2, 8, 1),
        (1, 8, 8),
        (2, 16, 1),
        (1, 2, 1),
        (2, 32, 8),
        (3, 32, 1),
        (4, 32, 8),
        (4, 16, 1),
        (8, 32, 1),
        (3, 4, 1),
    ],  # fmt: skip
)
def test_other_patterns_match_fp32_reference(kept: int, m: int, vector: int) -> None:
    """Other N:M patterns on the 2:4 hardware: N <= 2 (groups of 4 K rows holding 0, 1 or 2 kept entries) in one
    pass, N >= 3 in two; both dtypes, forced and through auto, against fp32."""
    activations = itertools.cycle([None, "relu", "gelu"])
    for i, (rows, k, n) in enumerate(SHAPES):
        if k % m:
            continue
        packed, b, x, bias, _ = _gpu_case(i, rows, k, n, seed=20 + i, kept=kept, m=m, vector=vector)
        act = next(activations)
        ref = dense_reference(x, b, bias, act, dtype=torch.float32)
        for kernel in ("sp24", "auto"):
            err = rel_err(nm_matmul(x, packed, bias, act, kernel=kernel), ref)
            assert err <= KERNEL_TOLERANCE[x.dtype], f"{kept}:{m} V={vector} {kernel} M={rows} K={k} N={n}: {err:.2e}"
    packed, _ = _packed(256, 128, kept, m, vector)
    packed = packed.to("cuda", torch.float16)
    assert auto_route(torch.empty(17, 256, device="cuda", dtype=torch.float16), packed) == "sp24"
    assert isinstance(sp24_view(packed), TwoPassSP24 if kept > 2 else CompressedSP24)  # K = 256 is long beside N


@requires_sp24
@pytest.mark.parametrize("tile", FORCED_TILES)
def test_source_is_added_by_each_tile(tile: str) -> None:
    """The kernels that add a source (the second of two passes), each tile against fp32, with bias and activation
    applied after the sum."""
    activations = itertools.cycle(["gelu", None, "relu"])
    for i, (rows, k, n) in enumerate(SHAPES):
        packed, b, x, bias, gen = _gpu_case(i, rows, k, n, seed=30 + i)
        source = torch.randn(rows, n, generator=gen, device="cuda").to(x.dtype)
        act = next(activations)
        y = sp24_view(packed).matmul(x, bias, act, tile=tile, source=source)
        ref = apply_epilogue(x.float() @ b + source.float(), bias.float(), act)
        err = rel_err(y, ref)
        assert err <= KERNEL_TOLERANCE[x.dtype], f"{tile} M={rows} K={k} N={n} {act}: {err:.2e}"


@requires_sp24
def test_a_sparse_layer_runs_each_tile_it_offers() -> None:
    """SparseLinear offers every tile where the sparse tensor cores can replace auto's row-major route (its sp24 route,
    and the SpMV at one row), and each tile it is set to gives the masked dense layer's output (export's layer choice
    times them all), with a leading batch dimension."""
    for i, (rows, k, n) in enumerate([(300, 3072, 768), (16, 768, 2304), (1, 4096, 1024)]):
        packed, b, x, bias, _ = _gpu_case(i, rows, k, n, seed=40 + i)
        layer = SparseLinear(packed, bias)
        x = x.unsqueeze(0)
        assert layer.sp24_tiles(x) == FORCED_TILES
        ref = dense_reference(x[0], b, bias, None, dtype=torch.float32)
        for tile in FORCED_TILES:
            layer.sp24_tile = tile
            y = layer(x)
            err = rel_err(y[0], ref)
            assert y.shape == (1, rows, n) and err <= KERNEL_TOLERANCE[x.dtype], f"{tile} M={rows}: {err:.2e}"


@requires_sp24
def test_auto_route_takes_the_kernel_past_one_row() -> None:
    packed, _ = _packed(256, 128)
    packed = packed.to("cuda", torch.float16)
    assert auto_route(torch.empty(17, 256, device="cuda", dtype=torch.float16), packed) == "sp24"
    assert auto_route(torch.empty(1, 256, device="cuda", dtype=torch.float16), packed) == "simt"


@requires_sp24
def test_direct_compression_and_decode_sizes() -> None:
    """compress_24 on a B that was never packed (kept zeros included), and M = 1 and 16, below the auto range."""
    gen = torch.Generator().manual_seed(7)
    k, n = 512, 96
    mask = random_nm_mask(k, n, 2, 4, 1, gen)
    b = torch.randn(k, n, generator=gen).half().float() * mask
    b[:4] = 0  # whole groups of zeros compress too
    weight = compress_24(b.to("cuda", torch.float16))
    for rows in (1, 16):
        x = torch.randn(rows, k, generator=gen).to("cuda", torch.float16)
        y = weight.matmul(x, None, "relu")
        ref = dense_reference(x, b.cuda(), None, "relu", dtype=torch.float32)
        assert rel_err(y, ref) <= KERNEL_TOLERANCE[torch.float16]


@requires_sp24
def test_unaligned_views_are_handled() -> None:
    """x and bias views that start off a 16-byte boundary are copied to aligned memory, not rejected."""
    packed, b = _packed(64, 64)
    packed = packed.to("cuda", torch.float16)
    x = torch.randn(40 * 64 + 1, device="cuda", dtype=torch.float16)[1:].view(40, 64)
    bias = torch.randn(65, device="cuda", dtype=torch.float16)[1:]
    y = nm_matmul(x, packed, bias, kernel="sp24")
    assert rel_err(y, dense_reference(x, b.cuda(), bias, None, dtype=torch.float32)) <= KERNEL_TOLERANCE[torch.float16]


@requires_sp24
def test_each_call_once() -> None:
    """One small compression and GEMM per dtype: the compute-sanitizer run of bench/sp24_gpu_check.sh uses this."""
    for dtype in (torch.float16, torch.bfloat16):
        packed, b = _packed(272, 72, seed=3, dtype=dtype)
        packed = packed.to("cuda", dtype)
        x = torch.randn(70, 272, device="cuda").to(dtype)
        bias = torch.randn(72, device="cuda").to(dtype)
        y = nm_matmul(x, packed, bias, "gelu", kernel="sp24")
        ref = dense_reference(x, b.cuda(), bias, "gelu", dtype=torch.float32)
        assert rel_err(y, ref) <= KERNEL_TOLERANCE[dtype]


@requires_sp24
def test_binding_rejects_bad_input() -> None:
    kernels = load_kernels()
    packed, _ = _packed(64, 32)
    weight = sp24_view(packed.to("cuda", torch.float16))
    x = torch.randn(20, 64, device="cuda", dtype=torch.float16)

    def call(
        x: torch.Tensor = x, values: torch.Tensor = weight.values, k: int = 64, n: int = 32, tile: int = 0
    ) -> None:
        kernels.sp24_matmul(x, values, weight.meta, None, k, n, 0, tile)

    with pytest.raises(RuntimeError, match="values are"):
        call(x=x.to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="K a multiple of 16"):
        call(x=x[:, :56].contiguous(), k=56)
    with pytest.raises(RuntimeError, match="values must be"):
        call(values=weight.values[:16].contiguous())
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        call(x=torch.randn(20 * 64 + 1, device="cuda", dtype=torch.float16)[1:].view(20, 64))
    with pytest.raises(RuntimeError, match="tile code"):
        call(tile=len(sp24.TILES))
    with pytest.raises(RuntimeError, match=r"source must be \(M, N\)"):
        kernels.sp24_matmul(x, weight.values, weight.meta, None, 64, 32, 0, 0, torch.zeros_like(x[:, :16]))
    with pytest.raises(RuntimeError, match="source is"):
        kernels.sp24_matmul(x, weight.values, weight.meta, None, 64, 32, 0, 0, x.new_zeros(20, 32, dtype=torch.float32))
    with pytest.raises(RuntimeError, match="not 2:4"):
        kernels.sp24_compress(torch.ones(32, 64, device="cuda", dtype=torch.float16))
