"""Exact masks on hand-written scores for every pattern, exact target sparsity, structure, and bad input."""

from __future__ import annotations

import pytest
import torch

from sparseprune.errors import UserError
from sparseprune.pruning.apriori import apriori_tune
from sparseprune.pruning.patterns import KEPT, RESIDUAL, build_pattern, keep_mask
from sparseprune.pruning.ranking import Scope, Units, prune_by_scope


def codes_of(name: str, scores: dict[str, torch.Tensor], sparsity: float, scope: str = "global", **options):
    return build_pattern(name, **options).keep_codes(scores, sparsity, scope)


def as_int(mask: torch.Tensor) -> list[list[int]]:
    return keep_mask(mask).int().tolist()


def test_ew_keeps_the_largest_scores() -> None:
    scores = {"a": torch.tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]])}
    assert as_int(codes_of("ew", scores, 0.5)["a"]) == [[0, 0, 0, 0], [1, 1, 1, 1]]
    assert as_int(codes_of("ew", scores, 0.25)["a"]) == [[0, 0, 1, 1], [1, 1, 1, 1]]


def test_vw_keeps_the_same_count_per_vector() -> None:
    # columns [1,8,3,6] and [5,2,7,4]; vectors of 2 along K: each drops its smaller entry at 50%
    scores = {"a": torch.tensor([[1.0, 5], [8, 2], [3, 7], [6, 4]])}
    assert as_int(codes_of("vw", scores, 0.5, scope="layer", vector=2)["a"]) == [[0, 1], [1, 0], [0, 1], [1, 0]]


def test_vw_ranks_levels_across_layers() -> None:
    low = torch.tensor([[1.0, 5], [8, 2], [3, 7], [6, 4]])
    codes = codes_of("vw", {"low": low, "high": 10 * low}, 0.5, vector=2)
    assert keep_mask(codes["low"]).sum() == 0 and keep_mask(codes["high"]).all()


def test_global_floor_keeps_each_layers_best_units() -> None:
    # "low" holds the four lowest scores; at 50% of 8 units it would be emptied without the floor
    units = {
        "low": Units(torch.tensor([1.0, 2, 3, 4]), torch.ones(4)),
        "high": Units(torch.tensor([9.0, 5, 8, 6]), torch.ones(4)),
    }
    unfloored = prune_by_scope(units, {"low": 4, "high": 4}, 0.5, "global")
    assert unfloored["low"].tolist() == [True] * 4 and not unfloored["high"].any()
    floored = prune_by_scope(units, {"low": 4, "high": 4}, 0.5, Scope("global", max_layer_sparsity=0.5))
    assert floored["low"].tolist() == [True, True, False, False]  # its best half stays
    assert floored["high"].tolist() == [False, True, False, True]  # the budget moves to the next-lowest units
    # a second phase: "low" already lost 4 of its 8 elements, so at a 0.75 floor only 2 more of its units may go
    done = {"low": 4, "high": 4}
    again = prune_by_scope(units, {"low": 8, "high": 8}, 0.75, Scope("global", 0.75), already_pruned=done)
    assert again["low"].tolist() == [True, True, False, False] and again["high"].tolist() == [False, True, False, True]


@pytest.mark.parametrize("name", ["ew", "bw", "tw", "tew", "vw", "shflbw"])
def test_global_floor_bounds_every_layer_across_phases(name: str) -> None:
    # "quiet" scores far below "loud": without the floor global ranking would empty it at 75%
    generator = torch.Generator().manual_seed(3)
    scores = {"quiet": torch.rand(64, 64, generator=generator) * 1e-3, "loud": torch.rand(64, 64, generator=generator)}
    options = {"bw": {"block_k": 8, "block_n": 8}, "tw": {"granularity": 8}, "tew": {"granularity": 8},
               "vw": {"vector": 8}, "shflbw": {"block": 8}}.get(name, {})  # fmt: skip
    unfloored = codes_of(name, scores, 0.75, **options)
    assert keep_mask(unfloored["quiet"]).float().mean() < 0.01
    floored = codes_of(name, scores, 0.75, scope=Scope("global", 0.9), **options)
    assert 1 - keep_mask(floored["quiet"]).float().mean() <= 0.9 + 1e-6


def test_global_floor_through_a_pattern_and_bad_values() -> None:
    low = torch.tensor([[1.0, 5], [8, 2], [3, 7], [6, 4]])
    codes = codes_of("vw", {"low": low, "high": 10 * low}, 0.5, scope=Scope("global", 0.5), vector=2)
    assert int(keep_mask(codes["low"]).sum()) == 4 and int(keep_mask(codes["high"]).sum()) == 4
    for bad in (0.0, 1.5):
        with pytest.raises(UserError, match="max_layer_sparsity"):
            Scope("global", bad)
    with pytest.raises(UserError, match="scope"):
        Scope("everywhere")  # type: ignore[arg-type]


def test_bw_prunes_the_lowest_block() -> None:
    scores = {"a": torch.arange(1.0, 17).view(4, 4)}
    expected = [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]
    assert as_int(codes_of("bw", scores, 0.25, block_k=2, block_n=2)["a"]) == expected


TW_SCORES = torch.tensor(
    [
        [8.0, 1, 6, 3, 4],
        [7.0, 1, 5, 9, 9],
        [1.0, 1, 2, 8, 8],
        [6.0, 1, 3, 9, 9],
    ]
)
# Column 1 goes first (mean 1); kept columns 0,2 | 3,4 form two tiles of G=2; then the four lowest tile rows go:
# tile0 r2 (1.5), tile1 r0 (3.5), tile0 r3 (4.5), tile0 r1 (6).
TW_EXPECTED = [
    [1, 0, 1, 0, 0],
    [0, 0, 0, 1, 1],
    [0, 0, 0, 1, 1],
    [0, 0, 0, 1, 1],
]


def test_tw_prunes_columns_then_tile_rows() -> None:
    codes = codes_of("tw", {"a": TW_SCORES}, 0.6, granularity=2, column_share=1 / 3)
    assert as_int(codes["a"]) == TW_EXPECTED


def test_tew_restores_the_most_important_pruned_element() -> None:
    codes = codes_of("tew", {"a": TW_SCORES}, 0.55, granularity=2, column_share=1 / 3, delta=0.05)["a"]
    expected = torch.tensor(TW_EXPECTED, dtype=torch.uint8)
    expected[1, 0] = RESIDUAL  # score 7, the highest the TW step pruned
    assert torch.equal(codes, expected)


def test_nm_element_and_vector_wise() -> None:
    scores = {"a": torch.tensor([[4.0, 1], [1, 2], [3, 3], [2, 4]])}
    assert as_int(codes_of("nm", scores, 0.5, n=2, m=4)["a"]) == [[1, 0], [0, 0], [1, 1], [0, 1]]
    # vector of 2 columns: group sums 5,3,6,6 -> rows 2 and 3 for both columns
    assert as_int(codes_of("nm", scores, 0.5, n=2, m=4, vector=2)["a"]) == [[0, 0], [0, 0], [1, 1], [1, 1]]


def test_nm_intermediate_stage_keeps_more_per_group() -> None:
    pattern = build_pattern("nm", n=1, m=4)
    assert pattern.kept_per_group(0.5) == 2 and pattern.kept_per_group(0.75) == 1 and pattern.kept_per_group(0.0) == 4
    with pytest.raises(UserError, match="cannot go past"):
        pattern.kept_per_group(0.8)


def test_apriori_forces_the_ew_sparsest_column_first() -> None:
    # column 3 has the lowest mean, but column 1 is the sparsest under EW at 25% (its three zeros go first)
    scores = torch.tensor([[20.0, 0, 30, 9], [20, 0, 30, 9], [20, 0, 30, 9], [20, 40, 30, 9]])
    plain = codes_of("tw", {"a": scores}, 0.25, granularity=8, column_share=1.0)["a"]
    tuned = build_pattern("tw", granularity=8, column_share=1.0, apriori_top=0.25).keep_codes(
        {"a": scores}, 0.25, "global", final_sparsity=0.25
    )["a"]
    assert keep_mask(plain)[:, 3].sum() == 0 and keep_mask(plain)[:, 1].all()
    assert keep_mask(tuned)[:, 1].sum() == 0 and keep_mask(tuned)[:, 3].all()


def test_apriori_tune_sets_extremes() -> None:
    units = {"a": Units(torch.tensor([5.0, 4, 3, 2, 1, 6]), torch.full((6,), 4))}
    density = torch.tensor([[0.0, 1, 0.5, 0.5, 0.5, 0.5]]).repeat(4, 1) > 0.25
    density[0, 2:] = False  # columns 2..5: 3/4 dense; column 0 empty; column 1 full
    tuned = apriori_tune(units, {"a": density}, top_fraction=1 / 6, last_fraction=1 / 6)["a"].scores
    assert tuned[0] == -torch.inf and tuned[1] == torch.inf
    assert torch.equal(tuned[2:], torch.tensor([3.0, 2, 1, 6], dtype=torch.float64))


def random_layers(seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shapes = {"conv": (144, 64), "fc": (256, 128), "out": (128, 96)}
    return {name: torch.rand(shape, generator=generator) for name, shape in shapes.items()}


UNIT_SIZE = {  # largest pruning unit, in elements, for the layers above
    ("ew", ()): 1,
    ("vw", (("vector", 16),)): 256 * 128 // 16,
    ("bw", (("block_k", 16), ("block_n", 16))): 256,
    ("tw", (("granularity", 32),)): 256,
    ("shflbw", (("block", 32),)): 32,
}


@pytest.mark.parametrize("scope", ["global", "layer"])
@pytest.mark.parametrize("sparsity", [0.3, 0.5, 0.75, 0.9])
@pytest.mark.parametrize("key", list(UNIT_SIZE))
def test_target_sparsity_is_reached_within_one_unit(key, sparsity: float, scope: str) -> None:
    name, options = key
    scores = random_layers()
    codes = codes_of(name, scores, sparsity, scope, **dict(options))
    if scope == "global":
        pruned = sum(int((~keep_mask(c)).sum()) for c in codes.values())
        assert abs(pruned - round(sparsity * sum(s.numel() for s in scores.values()))) <= UNIT_SIZE[key]
    else:
        for layer, c in codes.items():
            assert abs(int((~keep_mask(c)).sum()) - round(sparsity * scores[layer].numel())) <= UNIT_SIZE[key]


def tiles_of(keep: torch.Tensor, granularity: int) -> list[torch.Tensor]:
    kept_columns = torch.nonzero(keep.any(0)).flatten()
    return list(torch.split(kept_columns, granularity))


@pytest.mark.parametrize("sparsity", [0.5, 0.75, 0.9])
def test_tw_structure_whole_columns_and_whole_tile_rows(sparsity: float) -> None:
    codes = codes_of("tw", random_layers(1), sparsity, granularity=32, apriori_top=0.05, apriori_last=0.05)
    for layer_codes in codes.values():
        keep = keep_mask(layer_codes)
        assert set(layer_codes.unique().tolist()) <= {0, KEPT}
        for tile in tiles_of(keep, 32):
            block = keep[:, tile]
            assert torch.equal(block, block[:, :1].expand_as(block)), "a row is cut inside a tile"


def test_tew_residual_is_exactly_delta() -> None:
    scores = random_layers(2)
    codes = codes_of("tew", scores, 0.7, granularity=32, delta=0.02)
    restored = sum(int((c == RESIDUAL).sum()) for c in codes.values())
    assert restored == round(0.02 * sum(s.numel() for s in scores.values()))


@pytest.mark.parametrize(("n", "m", "vector"), [(1, 4, 1), (2, 8, 1), (2, 4, 16), (4, 16, 8)])
def test_nm_counts_per_group(n: int, m: int, vector: int) -> None:
    codes = codes_of("nm", random_layers(3), 1 - n / m, n=n, m=m, vector=vector)
    for c in codes.values():
        k, cols = c.shape
        groups = keep_mask(c).view(k // m, m, cols)
        assert (groups.sum(1) == n).all()
        blocks = groups.view(k // m, m, cols // vector, vector)
        assert (blocks == blocks[..., :1]).all()


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("nm", {"n": 4, "m": 4}, "N < M"),
        ("nm", {"n": 0, "m": 4}, "positive"),
        ("tw", {"granularity": 0}, "positive"),
        ("tw", {"column_share": 1.5}, "column_share"),
        ("tew", {"delta": 1.0}, "delta"),
        ("bogus", {}, "unknown pattern"),
        ("ew", {"granularity": 32}, "no option .granularity."),
        ("shflbw", {"block": 0}, "positive"),
    ],
)
def test_bad_pattern_options(name: str, options: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        build_pattern(name, **options)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("vw", {"vector": 16}, "vector=16 does not fit"),
        ("bw", {"block_k": 32, "block_n": 32}, "block_k=32 does not fit"),
        ("nm", {"n": 1, "m": 32}, "M=32 does not fit"),
        ("tw", {"granularity": 12}, "multiple of 8"),
        ("tw", {"granularity": 256}, "wider than every"),
        ("shflbw", {"block": 128}, "block=128 does not fit"),
    ],
)
def test_sizes_that_do_not_fit_a_layer(name: str, options: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        build_pattern(name, **options).check_fits({"features.3.weight": (72, 64)})


@pytest.mark.parametrize("sparsity", [-0.1, 1.0, 1.5])
def test_sparsity_outside_range(sparsity: float) -> None:
    with pytest.raises(UserError, match=r"\[0, 1\)"):
        codes_of("ew", random_layers(), sparsity)
