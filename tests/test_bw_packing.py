"""Block-wise masks at export: blocks 32, 64 or 128 wide pack as TW tiles (the TW kernels' path, the reference op on
the CPU) and compute exactly the masked dense layer; other widths keep the BSR einsum, a CPU reference only."""

from __future__ import annotations

import pytest
import torch

from sparseprune.errors import UserError
from sparseprune.export.formats.bsr import PackedBSR
from sparseprune.export.formats.tw import PackedTW
from sparseprune.export.packing import pack_layer
from sparseprune.pruning.patterns import build_pattern, keep_mask


def bw_layer(shape: tuple[int, int], block_k: int, block_n: int, sparsity: float, seed: int):
    weight = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    codes = build_pattern("bw", block_k=block_k, block_n=block_n).keep_codes({"w": weight.abs()}, sparsity)["w"]
    config = {"name": "bw", "block_k": block_k, "block_n": block_n}
    return weight * keep_mask(codes), codes, config


@pytest.mark.parametrize("sparsity", [0.5, 0.9])
@pytest.mark.parametrize(("block_k", "block_n"), [(32, 32), (8, 64), (16, 128), (1, 32)])
def test_wide_blocks_pack_as_tw_tiles_exactly(block_k: int, block_n: int, sparsity: float) -> None:
    masked, codes, config = bw_layer((128, 256), block_k, block_n, sparsity, seed=block_k + block_n)
    packed = pack_layer(masked, codes, config)
    assert isinstance(packed, PackedTW) and packed.granularity == block_n
    for t in range(packed.num_tiles):  # every tile is one whole block column: its columns run from a block edge
        cols = packed.cols[t * block_n : (t + 1) * block_n].tolist()
        assert cols[0] % block_n == 0 and cols == list(range(cols[0], cols[0] + block_n))
    x, bias = torch.randn(6, 128), torch.randn(256)
    expected = x.double() @ masked.double() + bias.double()
    torch.testing.assert_close(packed.matmul(x, bias).double(), expected, rtol=1e-5, atol=1e-5)


def test_a_hand_written_block_mask_keeps_its_blocks_rows() -> None:
    # 2 x 2 grid of 4 x 32 blocks: the first block column keeps its lower block, the second both
    keep = torch.zeros(8, 64, dtype=torch.bool)
    keep[4:, :32] = True
    keep[:, 32:] = True
    weight = torch.arange(1.0, 8 * 64 + 1).view(8, 64) * keep
    packed = pack_layer(weight, keep.to(torch.uint8), {"name": "bw", "block_k": 4, "block_n": 32})
    kept_rows = [packed.rows[packed.tile_ptr[t] : packed.tile_ptr[t + 1]].tolist() for t in range(packed.num_tiles)]
    assert kept_rows == [[*range(8), *[-1] * 24], [*range(4, 8), *[-1] * 28]]  # heaviest tile first, padded to 32
    assert packed.cols.tolist() == [*range(32, 64), *range(32)]


@pytest.mark.parametrize(("shape", "block_k", "block_n"), [((64, 96), 16, 16), ((12, 64), 4, 32)])
def test_other_widths_or_unaligned_k_stay_bsr(shape: tuple[int, int], block_k: int, block_n: int) -> None:
    masked, codes, config = bw_layer(shape, block_k, block_n, 0.5, seed=3)
    packed = pack_layer(masked, codes, config)
    assert isinstance(packed, PackedBSR)
    x = torch.randn(3, shape[0])
    torch.testing.assert_close(packed.matmul(x).double(), x.double() @ masked.double(), rtol=1e-5, atol=1e-5)


def test_a_mask_that_is_not_block_wise_is_refused_for_either_format() -> None:
    for block_n in (32, 16):
        _, codes, config = bw_layer((64, 64), 16, block_n, 0.5, seed=1)
        spoiled = codes.clone()
        spoiled[0, 0] = 1 - spoiled[0, 0]
        with pytest.raises(UserError, match="not block-wise"):
            pack_layer(torch.randn(64, 64), spoiled, config)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bsr_refuses_to_run_on_the_gpu() -> None:
    masked, codes, config = bw_layer((64, 96), 16, 16, 0.5, seed=2)
    packed = pack_layer(masked, codes, config).to("cuda")
    with pytest.raises(UserError, match="no GPU kernel"):
        packed.matmul(torch.randn(2, 64, device="cuda"))
