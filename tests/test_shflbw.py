"""Shfl-BW: exact permutations and masks on hand-written scores, the permutation search's parts, the packed layer
computing exactly the masked dense one, and sizes that do not fit."""

from __future__ import annotations

import pytest
import torch

from sparseprune.errors import UserError
from sparseprune.export.formats.tw import PackedTW
from sparseprune.export.packing import pack_layer
from sparseprune.pruning.patterns import build_pattern, keep_mask
from sparseprune.pruning.patterns.column_groups import balanced_assign, group_columns
from sparseprune.pruning.ranking import Scope

# Columns 0 and 2 matter on rows 0 and 2, columns 1 and 3 on rows 1 and 3: adjacent pairs share no important row.
INTERLEAVED = torch.tensor([[9.0, 1, 8, 2], [1, 9, 2, 8], [9, 1, 8, 2], [1, 9, 2, 8]])


def codes_of(scores: dict[str, torch.Tensor], sparsity: float, scope: Scope | str = "global", **options):
    return build_pattern("shflbw", **options).keep_codes(scores, sparsity, scope)


def as_int(codes: torch.Tensor) -> list[list[int]]:
    return keep_mask(codes).int().tolist()


def test_groups_columns_that_matter_on_the_same_rows() -> None:
    assert group_columns(INTERLEAVED, 2, iterations=10).tolist() == [[0, 2], [1, 3]]
    assert group_columns(INTERLEAVED, 2, iterations=0).tolist() == [[0, 1], [2, 3]]  # no permutation
    assert group_columns(INTERLEAVED, 4, iterations=10).tolist() == [[0, 1, 2, 3]]


def test_prunes_whole_rows_of_the_permuted_blocks() -> None:
    # groups {0, 2} and {1, 3}: row means 8.5 / 1.5 alternate; at 50% the four 1.5 rows go
    codes = codes_of({"a": INTERLEAVED}, 0.5, block=2)["a"]
    assert as_int(codes) == [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1]]
    # adjacent pairs: every row mean is 5, and ties go by position, so the first block loses every row
    unshuffled = codes_of({"a": INTERLEAVED}, 0.5, block=2, iterations=0)["a"]
    assert as_int(unshuffled) == [[0, 0, 1, 1]] * 4
    kept = float((INTERLEAVED * keep_mask(codes)).sum())
    assert kept == 68.0 and float((INTERLEAVED * keep_mask(unshuffled)).sum()) == 40.0


def test_block_rows_rank_across_layers_and_respect_the_floor() -> None:
    scores = {"low": INTERLEAVED, "high": 10 * INTERLEAVED}
    codes = codes_of(scores, 0.5, block=2)
    assert as_int(codes["low"]) == [[0] * 4] * 4 and as_int(codes["high"]) == [[1] * 4] * 4
    floored = codes_of(scores, 0.5, Scope("global", 0.5), block=2)
    alternate = [[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1]]
    assert as_int(floored["low"]) == alternate and as_int(floored["high"]) == alternate


def test_balanced_assign_fills_each_cluster_exactly() -> None:
    # three points want cluster 0, which takes the two nearest (a tie goes to the lower index); the third moves on
    distance = torch.tensor([[0.0, 1], [0, 2], [0, 3], [5, 0]])
    assert balanced_assign(distance, 2).tolist() == [0, 0, 1, 1]
    # points 0, 1 and 3 ask for cluster 0 at distance 1: 3 loses the tie and takes cluster 1, the only one with room
    distance = torch.tensor([[1.0, 4, 9], [1, 4, 9], [2, 0, 9], [1, 9, 9], [3, 2, 1], [9, 9, 0]])
    assert balanced_assign(distance, 2).tolist() == [0, 0, 1, 1, 2, 2]


def test_every_group_is_block_wide_and_every_column_in_one() -> None:
    score = torch.rand(48, 128, generator=torch.Generator().manual_seed(4))
    groups = group_columns(score, 32, iterations=10)
    assert groups.shape == (4, 32) and sorted(groups.flatten().tolist()) == list(range(128))


def test_packed_shuffled_blocks_compute_the_masked_dense_layer() -> None:
    """The permutation lives in the TW format's column index only: outputs equal x @ (W * mask) on the reference."""
    generator = torch.Generator().manual_seed(7)
    weight = torch.randn(64, 128, generator=generator)
    pattern = build_pattern("shflbw", block=32)
    codes = pattern.keep_codes({"w": weight.abs()}, 0.6)["w"]
    groups = pattern.groups(weight.abs())
    assert not torch.equal(groups, torch.arange(128).view(4, 32)), "the search kept adjacent columns"
    masked = weight * keep_mask(codes)
    packed = pack_layer(masked, codes, {"name": "shflbw", "block": 32})
    assert isinstance(packed, PackedTW) and packed.granularity == 32
    tiles = {tuple(sorted(packed.cols[t * 32 : (t + 1) * 32].tolist())) for t in range(packed.num_tiles)}
    assert tiles == {tuple(group) for group in groups.tolist() if keep_mask(codes)[:, group].any()}
    x, bias = torch.randn(5, 64, generator=generator), torch.randn(128, generator=generator)
    expected = x.double() @ masked.double() + bias.double()
    torch.testing.assert_close(packed.matmul(x, bias).double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("options", "shape", "message"),
    [
        ({"block": 48}, (64, 96), "block=48 must be one of (32, 64, 128)"),
        ({"block": 64}, (64, 96), "block=64 does not fit layer 'net.fc.weight': its size 96 is not a multiple"),
        ({"block": 32}, (27, 64), "need K a multiple of 8, and its K is 27"),
    ],
)
def test_sizes_that_do_not_fit(options: dict, shape: tuple[int, int], message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_pattern("shflbw", **options).check_fits({"net.fc.weight": shape})


@pytest.mark.parametrize(("options", "message"), [({"block": 0}, "positive"), ({"iterations": -1}, "iterations")])
def test_bad_options(options: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        build_pattern("shflbw", **options)
