"""Block N:M (nmSPARSE's BW N:M): b x b blocks share one N:M choice, exact on hand-written scores, packed as TW tiles
that compute exactly the masked dense layer, and sizes that do not fit."""

from __future__ import annotations

import pytest
import torch

from sparseprune.errors import UserError
from sparseprune.export.formats.tw import PackedTW
from sparseprune.export.packing import pack_layer
from sparseprune.pruning.patterns import build_pattern, keep_mask


def test_each_block_column_keeps_its_best_blocks() -> None:
    # 2 x 2 blocks of 2 x 2; block sums: column 0 has 4 above 40 below, column 1 has 40 above 4 below
    scores = torch.tensor([[1.0, 1, 10, 10], [1, 1, 10, 10], [10, 10, 1, 1], [10, 10, 1, 1]])
    codes = build_pattern("nm", n=1, m=2, block=2).keep_codes({"a": scores}, 0.5)["a"]
    assert keep_mask(codes).int().tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]


@pytest.mark.parametrize(("sparsity", "kept"), [(0.5, 2), (0.75, 1)])
def test_every_group_of_m_blocks_keeps_the_same_count(sparsity: float, kept: int) -> None:
    scores = torch.rand(32, 8, generator=torch.Generator().manual_seed(0))
    keep = keep_mask(build_pattern("nm", n=1, m=4, block=2).keep_codes({"a": scores}, sparsity)["a"])
    blocks = keep.view(4, 4, 2, 4, 2)  # (group, block in group, row in block, block column, column in block)
    assert (blocks == blocks[:, :, :1, :, :1]).all()
    assert (blocks[:, :, 0, :, 0].sum(1) == kept).all()


def test_packed_blocks_compute_the_masked_dense_layer() -> None:
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(256, 64, generator=generator)
    config = {"name": "nm", "n": 1, "m": 4, "block": 32}
    codes = build_pattern("nm", n=1, m=4, block=32).keep_codes({"w": weight.abs()}, 0.75)["w"]
    masked = weight * keep_mask(codes)
    packed = pack_layer(masked, codes, config)
    assert isinstance(packed, PackedTW) and packed.granularity == 32 and packed.num_tiles == 2
    assert packed.tile_ptr.tolist() == [0, 64, 128]  # each block column keeps 1 of 4 blocks in 2 groups: 64 rows
    x, bias = torch.randn(4, 256, generator=generator), torch.randn(64, generator=generator)
    expected = x.double() @ masked.double() + bias.double()
    torch.testing.assert_close(packed.matmul(x, bias).double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"block": 16}, "block=16 must be 1 or one of"),
        ({"m": 4, "block": 32}, "M x block=128 does not fit layer 'fc': its size 192"),
        ({"m": 3, "block": 64}, "block=64 does not fit layer 'fc': its size 96"),
    ],
)
def test_sizes_that_do_not_fit(options: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        build_pattern("nm", n=1, **options).check_fits({"fc": (192, 96)})


def test_vector_and_block_together_are_refused() -> None:
    with pytest.raises(UserError, match="vector or block, not both"):
        build_pattern("nm", vector=16, block=32)
