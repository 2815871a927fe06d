"""Packing of element- and vector-wise N:M weights, the torch reference op and the route checks (CPU)."""

from __future__ import annotations

import json

import pytest
import torch
from gemm_checks import dense_reference
from random_masks import random_nm_mask

from sparseprune.errors import UserError
from sparseprune.export.formats import nm
from sparseprune.export.formats.nm import (
    PackedNM,
    nm_matmul,
    pack_nm,
    tw_granularity,
    tw_view,
)
from sparseprune.export.formats.sp24 import FORCED_TILES
from sparseprune.export.formats.tw import pack_tw, tw_matmul_reference
from sparseprune.export.sparse_modules import SparseLinear


def test_hand_written_element_wise_layout() -> None:
    b = torch.arange(1, 17, dtype=torch.float32).reshape(8, 2)  # K = 8 (two groups of 4), N = 2
    mask = torch.zeros(8, 2, dtype=torch.bool)
    mask[[1, 3, 4, 6], 0] = True
    mask[[0, 2, 5, 7], 1] = True
    packed = pack_nm(b, mask, m=4)
    assert (packed.m, packed.kept, packed.vector) == (4, 2, 1)
    assert packed.positions().tolist() == [[1, 0], [3, 2], [0, 1], [2, 3]]
    assert packed.values_by_row().tolist() == [[3.0, 2.0], [7.0, 6.0], [9.0, 12.0], [13.0, 16.0]]
    # One panel (N < 32), [row][column]; positions 1 0 | 3 2 | 0 1 | 2 3 as nibbles, the even column low.
    assert packed.values.tolist() == [3.0, 2.0, 7.0, 6.0, 9.0, 12.0, 13.0, 16.0]
    assert packed.idx.dtype == torch.uint8
    assert packed.idx.tolist() == [0x01, 0x23, 0x10, 0x32]
    torch.testing.assert_close(packed.dense(), b * mask, rtol=0, atol=0)
    assert torch.equal(packed.keep_mask(), mask)


def test_hand_written_column_panels() -> None:
    """N = 40: a panel of 32 columns, then one of 8; each holds its rows in turn."""
    k, n = 8, 40
    b = torch.arange(k * n, dtype=torch.float32).reshape(k, n)
    cols = torch.arange(n)
    mask = torch.zeros(k, n, dtype=torch.bool)
    mask[cols % 4, cols] = True  # group 0 keeps K row c % 4 of column c
    mask[4 + (cols + 1) % 4, cols] = True  # group 1 keeps K row 4 + (c + 1) % 4
    packed = pack_nm(b, mask, m=4)
    row0 = [float(b[c % 4, c]) for c in range(n)]
    row1 = [float(b[4 + (c + 1) % 4, c]) for c in range(n)]
    assert packed.values.tolist() == row0[:32] + row1[:32] + row0[32:] + row1[32:]
    codes0, codes1 = [c % 4 for c in range(n)], [(c + 1) % 4 for c in range(n)]
    codes = codes0[:32] + codes1[:32] + codes0[32:] + codes1[32:]
    assert packed.idx.tolist() == [lo | hi << 4 for lo, hi in zip(codes[::2], codes[1::2], strict=True)]
    torch.testing.assert_close(packed.dense(), b * mask, rtol=0, atol=0)


@pytest.mark.parametrize("n", [1, 3, 37])
def test_odd_widths_round_trip(n: int) -> None:
    """An odd count of 4-bit positions ends in a padding nibble; the reference still matches the masked weight."""
    gen = torch.Generator().manual_seed(n)
    mask = random_nm_mask(8, n, 1, 4, 1, gen)
    b = torch.randn(8, n, generator=gen, dtype=torch.float64) * mask
    packed = pack_nm(b, mask, m=4)
    assert packed.idx.numel() == (2 * n + 1) // 2
    assert torch.equal(packed.keep_mask(), mask)
    x = torch.randn(3, 8, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(packed.matmul(x), x @ b, rtol=1e-12, atol=1e-12)


def test_byte_positions_past_m_16() -> None:
    """M = 32 needs 5 bits: one byte per position, in the same panels."""
    gen = torch.Generator().manual_seed(4)
    mask = random_nm_mask(64, 48, 3, 32, 1, gen)
    packed = pack_nm(torch.randn(64, 48, generator=gen), mask, m=32)
    assert packed.idx.shape == (2 * 3 * 48,)
    assert packed.idx.max() >= 16
    assert torch.equal(packed.idx[: 6 * 32].reshape(6, 32), packed.positions()[:, :32])
    assert torch.equal(packed.keep_mask(), mask)


def test_hand_written_vector_wise_layout() -> None:
    b = torch.arange(1, 33, dtype=torch.float32).reshape(4, 8)  # one group of 4, blocks of 4 columns
    mask = torch.zeros(4, 8, dtype=torch.bool)
    mask[[0, 3], :4] = True
    mask[[1, 2], 4:] = True
    packed = pack_nm(b, mask, m=4, vector=4)
    assert packed.idx.tolist() == [[0, 1], [3, 2]]
    assert packed.values[:, :4].tolist() == [[1.0, 2.0, 3.0, 4.0], [25.0, 26.0, 27.0, 28.0]]
    assert packed.values[:, 4:].tolist() == [[13.0, 14.0, 15.0, 16.0], [21.0, 22.0, 23.0, 24.0]]
    torch.testing.assert_close(packed.matmul(torch.eye(4)), b * mask, rtol=0, atol=0)


@pytest.mark.parametrize(("kept", "m", "vector"), [(2, 4, 1), (1, 8, 1), (4, 16, 2), (3, 32, 1), (1, 4, 16)])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_reference_matches_masked_dense(kept: int, m: int, vector: int, activation: str | None) -> None:
    gen = torch.Generator().manual_seed(kept * 100 + m + vector)
    k, n = 4 * m, 48
    mask = random_nm_mask(k, n, kept, m, vector, gen)
    b = torch.randn(k, n, generator=gen, dtype=torch.float64)
    x = torch.randn(5, 3, k, generator=gen, dtype=torch.float64)
    bias = torch.randn(n, generator=gen, dtype=torch.float64)
    packed = pack_nm(b * mask, mask, m, vector)
    assert packed.values_by_row().shape == (k // m * kept, n)
    assert packed.positions().shape == (k // m * kept, n // vector)
    y = packed.matmul(x, bias, activation)
    assert y.shape == (5, 3, n)
    torch.testing.assert_close(y, dense_reference(x, b * mask, bias, activation), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("vector", [1, 8])
def test_round_trip_through_tensors(vector: int) -> None:
    gen = torch.Generator().manual_seed(0)
    mask = random_nm_mask(64, 32, 1, 4, vector, gen)
    packed = pack_nm(torch.randn(64, 32, generator=gen), mask, 4, vector)
    again = PackedNM.from_tensors(packed.tensors(), json.loads(json.dumps(packed.metadata())))
    assert torch.equal(again.dense(), packed.dense())
    half = packed.to("cpu", torch.float16)
    assert half.values.dtype == torch.float16 and half.idx.dtype == torch.uint8


def test_loading_rejects_old_layout_and_bad_sizes() -> None:
    mask = random_nm_mask(16, 32, 1, 4, 1, torch.Generator().manual_seed(6))
    packed = pack_nm(torch.randn(16, 32), mask, 4)
    row_major = {key: value for key, value in packed.metadata().items() if key != "layout"}
    with pytest.raises(UserError, match="export the checkpoint again"):
        PackedNM.from_tensors(packed.tensors(), row_major)
    with pytest.raises(UserError, match="expected"):
        PackedNM.from_tensors({"values": packed.values[:-8], "idx": packed.idx}, packed.metadata())
    with pytest.raises(UserError, match="uint8"):
        PackedNM.from_tensors({"values": packed.values, "idx": packed.idx.int()}, packed.metadata())


def test_pack_rejects_bad_masks() -> None:
    b = torch.randn(8, 8)
    uneven = torch.zeros(8, 8, dtype=torch.bool)
    uneven[0, :] = True
    with pytest.raises(UserError, match="different counts"):
        pack_nm(b, uneven, 4)
    ragged_blocks = random_nm_mask(8, 8, 1, 4, 1, torch.Generator().manual_seed(1))
    ragged_blocks[:4, 0], ragged_blocks[:4, 1] = torch.tensor([1, 0, 0, 0]).bool(), torch.tensor([0, 1, 0, 0]).bool()
    with pytest.raises(UserError, match="vector-wise"):
        pack_nm(b, ragged_blocks, 4, vector=2)
    with pytest.raises(UserError, match="M \\| K"):
        pack_nm(b, torch.ones(8, 8, dtype=torch.bool), 3)
    with pytest.raises(UserError, match="boolean"):
        pack_nm(b, torch.ones(8, 8), 4)
    with pytest.raises(UserError, match="differs"):
        pack_nm(b, torch.ones(4, 8, dtype=torch.bool), 4)


@pytest.mark.parametrize(
    ("kept", "m", "n", "reason"),
    [(1, 64, 8, "power of two"), (3, 12, 8, "power of two"), (4, 4, 8, "1 <= N < M"), (1, 4, 12, "multiple of 8")],
)
def test_kernel_range_is_explained(kept: int, m: int, n: int, reason: str) -> None:
    k = 2 * m
    mask = random_nm_mask(k, n, kept, m, 1, torch.Generator().manual_seed(m))
    packed = pack_nm(torch.randn(k, n), mask, m)
    assert reason in packed.kernel_unsupported()
    torch.testing.assert_close(packed.matmul(torch.ones(2, k)), torch.ones(2, k) @ packed.dense())


def test_forced_kernel_without_cuda_raises() -> None:
    mask = random_nm_mask(32, 16, 2, 4, 16, torch.Generator().manual_seed(2))
    packed = pack_nm(torch.randn(32, 16), mask, 4, 16)
    x = torch.randn(3, 32)
    for kernel in ("simt", "tw"):
        with pytest.raises(UserError, match="cannot run"):
            nm_matmul(x, packed, kernel=kernel)
    with pytest.raises(UserError, match="kernel must be one of"):
        nm_matmul(x, packed, kernel="cusparse")
    with pytest.raises(UserError, match="activation"):
        nm_matmul(x, packed, activation="tanh")
    with pytest.raises(UserError, match="bias"):
        nm_matmul(x, packed, bias=torch.zeros(3))
    with pytest.raises(UserError, match="features"):
        nm_matmul(torch.randn(3, 16), packed)
    with pytest.raises(UserError, match="tile must be one of"):
        nm_matmul(x, packed, tile="square")
    with pytest.raises(UserError, match="'sp24' cannot run"):  # a tile forces the sparse tensor cores
        nm_matmul(x, packed, tile="narrow")
    with pytest.raises(UserError, match="CTA tile of the sp24 route, not of kernel 'simt'"):
        nm_matmul(x, packed, kernel="simt", tile="narrow")


@pytest.mark.parametrize(("auto", "offered"), [("sp24", True), ("simt", True), ("tw", False)])
def test_a_layer_offers_the_2_4_tiles_where_the_sparse_tensor_cores_can_replace_a_row_major_route(
    monkeypatch: pytest.MonkeyPatch, auto: str, offered: bool
) -> None:
    """SparseLinear.sp24_tiles: every tile where the sp24 route can run and auto reads x row-major for the layer's own
    GEMM rows, none on the TW route or where the sparse tensor cores are missing; a tile set on the layer reaches the
    N:M matmul of its forward pass."""
    mask = random_nm_mask(32, 16, 2, 4, 1, torch.Generator().manual_seed(3))
    layer = SparseLinear(pack_nm(torch.randn(32, 16), mask, 4), None)
    x = torch.randn(2, 5, 32)
    assert layer.sp24_tiles(x) == ()  # no CUDA: no sparse tensor cores
    routed: list[int] = []

    def auto_for_rows(like: torch.Tensor, packed: PackedNM, rows: int | None = None) -> str:
        routed.append(rows)
        return auto

    monkeypatch.setattr(nm, "auto_route", auto_for_rows)
    monkeypatch.setattr(nm, "route_unavailable", lambda x, packed, route: None)
    assert layer.sp24_tiles(x) == (FORCED_TILES if offered else ()) and routed[-1] == 10  # rows of the (10, 32) GEMM
    tw_layer = SparseLinear(pack_tw(torch.randn(32, 16), torch.rand(32, 16) > 0.5, 32), None)
    assert tw_layer.sp24_tiles(x) == ()
    tiles: list[str] = []
    monkeypatch.setattr(PackedNM, "matmul", lambda self, x, bias=None, tile="auto": tiles.append(tile) or x[..., :16])
    layer.sp24_tile = "narrow"
    layer(x)
    assert tiles == (["narrow"] if offered else [])  # the TW route reads its own layouts and has no tile


@pytest.mark.parametrize(("vector", "granularity"), [(16, 32), (32, 32), (64, 64), (128, 128), (256, 128)])
def test_vector_wise_is_tile_wise(vector: int, granularity: int) -> None:
    """The TW repack computes the same product, with one tile per V-column block (two for V = 256)."""
    gen = torch.Generator().manual_seed(vector)
    k, n = 64, 512
    mask = random_nm_mask(k, n, 2, 8, vector, gen)
    b = torch.randn(k, n, generator=gen) * mask
    packed = pack_nm(b, mask, 8, vector)
    view = tw_view(packed)
    assert tw_granularity(vector) == granularity == view.granularity
    assert view.num_tiles == n // min(vector, 128)
    x = torch.randn(9, k, generator=gen)
    torch.testing.assert_close(tw_matmul_reference(x, view), x @ b, rtol=1e-5, atol=1e-5)
    assert tw_view(packed) is view, "the repack is memoised per values tensor"
    packed.values.mul_(2)
    assert tw_view(packed) is not view, "an in-place change to the values invalidates the repack"
