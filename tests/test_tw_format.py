"""Packing of TW/TEW weights and the torch reference op (CPU)."""

from __future__ import annotations

import pytest
import torch
from gemm_checks import dense_reference
from random_masks import random_tw_mask

from sparseprune.errors import UserError
from sparseprune.export.formats.tw import (
    K_STEP,
    PackedTW,
    host_copy,
    keep_host_copy,
    pack_tw,
    tw_matmul,
    tw_matmul_reference,
)


@pytest.mark.parametrize("granularity", [32, 64, 128])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_reference_matches_masked_dense(granularity: int, dtype: torch.dtype, activation: str | None) -> None:
    gen = torch.Generator().manual_seed(granularity + len(str(activation)))
    k, n, m = 200, 328, 37
    mask = random_tw_mask(k, n, granularity, 0.7, (0.1, 0.9), gen, empty_tiles=1)
    b = torch.randn(k, n, generator=gen, dtype=dtype)
    x = torch.randn(m, k, generator=gen, dtype=dtype)
    bias = torch.randn(n, generator=gen, dtype=dtype)
    packed = pack_tw(b, mask, granularity)
    y = packed.matmul(x, bias, activation)
    ref = dense_reference(x, b * mask, bias, activation)
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_hand_written_layout() -> None:
    b = torch.arange(1, 65, dtype=torch.float32).reshape(8, 8)
    mask = torch.zeros(8, 8, dtype=torch.bool)
    mask[[0, 3], 0:3] = True  # columns 0-2 keep rows {0, 3}
    mask[1, 5:7] = True  # columns 5-6 keep row {1}
    mask[[2, 4, 6], 7] = True  # column 7 keeps three rows: the heaviest tile, stored first
    packed = pack_tw(b, mask, 32)
    assert packed.tile_ptr.tolist() == [0, 32, 64, 96]
    assert packed.max_tile_k == 32
    assert packed.rows[:4].tolist() == [2, 4, 6, -1]
    assert packed.rows[32:35].tolist() == [0, 3, -1]
    assert packed.rows[64:66].tolist() == [1, -1]
    assert packed.cols[:2].tolist() == [7, -1]
    assert packed.cols[32:36].tolist() == [0, 1, 2, -1]
    assert packed.cols[64:67].tolist() == [5, 6, -1]
    assert packed.values[:3, 0].tolist() == [24.0, 40.0, 56.0]
    assert packed.values[32:34, :3].tolist() == [[1.0, 2.0, 3.0], [25.0, 26.0, 27.0]]
    assert packed.values[64, :2].tolist() == [14.0, 15.0]
    assert packed.col_pos.tolist() == [32, 33, 34, -1, -1, 64, 65, 0]
    assert packed.pruned_cols.tolist() == [3, 4]
    torch.testing.assert_close(packed.matmul(torch.eye(8)), b * mask, rtol=0, atol=0)


def test_padding_is_zero_and_tiles_are_sorted() -> None:
    gen = torch.Generator().manual_seed(3)
    k, n, g = 256, 512, 64
    mask = random_tw_mask(k, n, g, 0.8, (0.05, 0.95), gen)
    packed = pack_tw(torch.randn(k, n, generator=gen), mask, g)
    ptr = packed.tile_ptr.tolist()
    counts = [ptr[t + 1] - ptr[t] for t in range(packed.num_tiles)]
    assert all(c % K_STEP == 0 and c > 0 for c in counts)
    assert counts == sorted(counts, reverse=True)
    assert len(set(counts)) > 1, "tiles should differ in kept K"
    pad = packed.rows < 0
    assert bool((packed.values[pad] == 0).all())
    for t in range(packed.num_tiles):
        rows = packed.rows[ptr[t] : ptr[t + 1]]
        kept = rows[rows >= 0]
        assert bool((kept[1:] > kept[:-1]).all()), "kept rows ascend"
        assert bool((rows[kept.numel() :] == -1).all()), "padding only at the end"
        cols = packed.cols[t * g : (t + 1) * g]
        assert bool((packed.values[ptr[t] : ptr[t + 1], cols < 0] == 0).all())


def test_empty_tile_and_pruned_columns_give_bias_only() -> None:
    gen = torch.Generator().manual_seed(5)
    k, n, g = 64, 256, 32
    mask = random_tw_mask(k, n, g, 0.5, (0.3, 0.6), gen, empty_tiles=2)
    packed = pack_tw(torch.randn(k, n, generator=gen), mask, g)
    dead = ~mask.any(dim=0)
    assert sorted(packed.pruned_cols.tolist()) == torch.nonzero(dead).flatten().tolist()
    assert int(dead.sum()) == n // 2 + 2 * g, "pruned columns plus the two empty tiles"
    x = torch.randn(9, k, generator=gen)
    bias = torch.randn(n, generator=gen)
    y = packed.matmul(x, bias, "relu")
    torch.testing.assert_close(y[:, dead], torch.relu(bias[dead]).expand(9, -1), rtol=0, atol=0)


def test_all_columns_pruned() -> None:
    packed = pack_tw(torch.randn(16, 16), torch.zeros(16, 16, dtype=torch.bool), 32)
    assert packed.num_tiles == 0 and packed.max_tile_k == 0
    bias = torch.randn(16)
    torch.testing.assert_close(packed.matmul(torch.randn(3, 16), bias), bias.expand(3, -1))


def test_irregular_groups_split_by_granularity() -> None:
    """Columns sharing a row set across more than G columns become several tiles; a lone column its own."""
    k, n = 16, 80
    mask = torch.zeros(k, n, dtype=torch.bool)
    mask[:5, :72] = True
    mask[7, 75] = True
    packed = pack_tw(torch.randn(k, n), mask, 32)
    tiles = [packed.cols[t * 32 : (t + 1) * 32] for t in range(packed.num_tiles)]
    assert [int((c >= 0).sum()) for c in tiles] == [32, 32, 8, 1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tew_residual(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(11)
    k, n, g = 128, 192, 64
    mask = random_tw_mask(k, n, g, 0.6, (0.2, 0.5), gen)
    residual = (torch.rand(k, n, generator=gen) < 0.02) & ~mask
    b = torch.randn(k, n, generator=gen, dtype=dtype)
    packed = pack_tw(b, mask, g, residual_mask=residual)
    assert packed.has_residual and packed.res_rows.numel() == int(residual.sum())
    x = torch.randn(21, k, generator=gen, dtype=dtype)
    bias = torch.randn(n, generator=gen, dtype=dtype)
    y = packed.matmul(x, bias, "gelu")
    ref = dense_reference(x, b * (mask | residual), bias, "gelu")
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)


def test_serialisation_and_conversion_round_trip() -> None:
    gen = torch.Generator().manual_seed(2)
    mask = random_tw_mask(64, 128, 32, 0.7, (0.2, 0.8), gen)
    residual = (torch.rand(64, 128, generator=gen) < 0.05) & ~mask
    packed = pack_tw(torch.randn(64, 128, generator=gen), mask, 32, residual_mask=residual)
    again = PackedTW.from_tensors(packed.tensors(), packed.metadata())
    x = torch.randn(5, 64, generator=gen)
    torch.testing.assert_close(again.matmul(x), packed.matmul(x), rtol=0, atol=0)
    half = packed.to("cpu", torch.float16)
    assert half.values.dtype == torch.float16 and half.res_vals.dtype == torch.float16
    assert half.rows.dtype == torch.int32
    assert half.nbytes() < packed.nbytes()


def test_host_copy_is_kept_on_the_tensor_until_it_changes() -> None:
    """The host copy of a device tile_ptr lives on the tensor (modules rebuild PackedTW per call) and is made again
    after an in-place change. A meta tensor stands in for the device one: copying out of it raises, so a lookup that
    tried to copy would show."""
    on_device = torch.empty(3, dtype=torch.int32, device="meta")
    host = torch.tensor([0, 32, 96], dtype=torch.int32)
    keep_host_copy(on_device, host)
    assert host_copy(on_device) is host
    assert host_copy(on_device) is host
    on_device.add_(1)
    with pytest.raises(NotImplementedError):
        host_copy(on_device)
    cpu = torch.tensor([0, 32], dtype=torch.int64)
    assert host_copy(cpu).dtype == torch.int32 and host_copy(cpu).tolist() == [0, 32]


def test_moving_a_packed_weight_hands_its_host_copy_over() -> None:
    """PackedTW.to leaves the host copy on the moved tile_ptr, so the first call (maybe under a CUDA-graph capture)
    copies nothing; the meta device stands in for the GPU."""
    gen = torch.Generator().manual_seed(0)
    packed = pack_tw(torch.randn(64, 256, generator=gen), random_tw_mask(64, 256, 64, 0.5, (0.2, 0.8), gen), 64)
    moved = packed.to("meta")
    assert moved.tile_ptr.is_meta
    assert moved.host_tile_ptr.tolist() == packed.tile_ptr.tolist()


def test_leading_dims_and_feature_major_entry() -> None:
    gen = torch.Generator().manual_seed(4)
    b = torch.randn(96, 64, generator=gen)
    mask = random_tw_mask(96, 64, 32, 0.8, (0.3, 0.7), gen)
    packed = pack_tw(b, mask, 32)
    x = torch.randn(2, 3, 96, generator=gen)
    y = tw_matmul(x, packed)
    assert y.shape == (2, 3, 64)
    torch.testing.assert_close(y, x @ (b * mask), rtol=1e-5, atol=1e-5)
    flat = x.reshape(-1, 96)
    torch.testing.assert_close(packed.matmul_feature_major(flat.t().contiguous()), packed.matmul(flat).t())
    torch.testing.assert_close(tw_matmul_reference(flat, packed), packed.matmul(flat))


@pytest.mark.parametrize(
    ("k", "n", "granularity", "mask_shape", "match"),
    [
        (64, 64, 48, None, "granularity"),
        (60, 64, 32, None, "multiples of 8"),
        (64, 66, 32, None, "multiples of 8"),
        (64, 64, 32, (64, 32), "differs"),
    ],
)
def test_bad_input_is_a_user_error(
    k: int, n: int, granularity: int, mask_shape: tuple[int, int] | None, match: str
) -> None:
    mask = torch.ones(mask_shape or (k, n), dtype=torch.bool)
    with pytest.raises(UserError, match=match):
        pack_tw(torch.randn(k, n), mask, granularity)


def test_bad_masks_and_calls_are_user_errors() -> None:
    b = torch.randn(32, 32)
    with pytest.raises(UserError, match="boolean"):
        pack_tw(b, torch.ones(32, 32), 32)
    with pytest.raises(UserError, match="2-D"):
        pack_tw(b.flatten(), torch.ones(1024, dtype=torch.bool), 32)
    keep = torch.ones(32, 32, dtype=torch.bool)
    with pytest.raises(UserError, match="disjoint"):
        pack_tw(b, keep, 32, residual_mask=keep.clone())
    packed = pack_tw(b, keep, 32)
    with pytest.raises(UserError, match="features"):
        packed.matmul(torch.randn(4, 16))
    with pytest.raises(UserError, match="activation"):
        packed.matmul(torch.randn(4, 32), activation="tanh")
    with pytest.raises(UserError, match="bias"):
        packed.matmul(torch.randn(4, 32), bias=torch.randn(8))
    with pytest.raises(UserError, match="gemv.mma"):  # the message lists the kernel names
        tw_matmul(torch.randn(4, 32), packed, kernel="gemv")
