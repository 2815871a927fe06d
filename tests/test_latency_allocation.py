"""Latency-aware allocation on hand-written layers and latency models: exact masks, kept-dense layers, speed
targets, and the settings it refuses."""

from __future__ import annotations

import pytest
import torch
from latency_fixtures import linear_model

from sparseprune.errors import UserError
from sparseprune.latency.allocation import LatencyAllocator, best_case, check_allocation
from sparseprune.pruning.patterns import build_pattern
from sparseprune.pruning.ranking import Scope

# Layer a holds the least important weights but pruning it saves 1 us per unit of density; b saves 100.
SCORES = {"a": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "b": torch.tensor([[5.0, 6.0], [7.0, 8.0]])}
MODEL = linear_model({"a": (10.0, 9.0, 1.0), "b": (100.0, 1.0, 100.0)})  # (dense, fixed, slope)
ELEMENTS = build_pattern("bw", block_k=1, block_n=1)  # one-element blocks: the ranking shows unit by unit


def test_importance_and_latency_prune_different_layers() -> None:
    importance = ELEMENTS.keep_codes(SCORES, 0.25, Scope())
    assert importance["a"].tolist() == [[0, 0], [1, 1]] and importance["b"].tolist() == [[1, 1], [1, 1]]
    allocation = LatencyAllocator(ELEMENTS, MODEL, Scope()).allocate(SCORES, 0.25, None)
    assert allocation.codes["a"].tolist() == [[1, 1], [1, 1]]
    assert allocation.codes["b"].tolist() == [[0, 0], [1, 1]]
    assert allocation.dense_layers == ["a"]  # unpruned, its sparse call (10 us) does not beat dense (10 us)
    assert allocation.speedup == pytest.approx(110.0 / (10.0 + 51.0))


def test_a_layer_that_loses_is_restored_and_the_others_reach_the_target() -> None:
    """a's sparse call never beats dense: what the ranking pruned there comes back and b takes the whole target."""
    model = linear_model({"a": (5.0, 9.0, 1.0), "b": (100.0, 1.0, 1.0)})  # equal slopes: ranked by importance
    allocation = LatencyAllocator(ELEMENTS, model, Scope()).allocate(SCORES, 0.25, None)
    assert allocation.dense_layers == ["a"]
    assert allocation.codes["a"].tolist() == [[1, 1], [1, 1]]
    assert allocation.codes["b"].tolist() == [[0, 0], [1, 1]]  # 2 of 8 elements, all in b
    assert allocation.layer_sparsity == {"a": 0.0, "b": 0.5}


def test_tile_wise_latency_ranking_moves_columns() -> None:
    """TW (G = 1, no row phase worth noting) through the scaled scores: its columns go from b, not a."""
    tw = build_pattern("tw", granularity=1, column_share=1.0)
    allocation = LatencyAllocator(tw, MODEL, Scope()).allocate(SCORES, 0.5, None)
    assert allocation.codes["a"].tolist() == [[1, 1], [1, 1]]
    assert allocation.codes["b"].tolist() == [[0, 0], [0, 0]]
    assert tw.keep_codes(SCORES, 0.5, Scope())["a"].tolist() == [[0, 0], [0, 0]]


def test_speed_target_takes_the_lowest_sparsity_that_reaches_it() -> None:
    allocation = LatencyAllocator(ELEMENTS, MODEL, Scope()).for_speedup(SCORES, 1.5, None)
    assert allocation.codes["b"].tolist() == [[0, 0], [1, 1]]  # one element of b: 110 / 86 = 1.28x, short of 1.5
    assert allocation.codes["a"].tolist() == [[1, 1], [1, 1]]
    assert allocation.speedup == pytest.approx(110.0 / 61.0)


def test_an_unreachable_speed_target_names_the_layers_that_cap_it() -> None:
    allocator = LatencyAllocator(ELEMENTS, MODEL, Scope(max_layer_sparsity=0.75))
    message = (
        "schedule.target_speedup=4 cannot be reached: pruned as far as max_layer_sparsity 0.75 allows, the "
        "predicted speedup is 3.12x (hand-written); the time left is mostly in b 74%, a 26%"
    )  # a at 75% (9.25 us) now beats its dense call (10 us)
    with pytest.raises(UserError) as error:
        allocator.for_speedup(SCORES, 4.0, None)
    assert str(error.value) == message
    bound = best_case(MODEL, {"a": (2, 2), "b": (2, 2)}, 0.75)
    assert bound.dense_layers == [] and bound.speedup == pytest.approx(110.0 / 35.25)
    assert best_case(MODEL, {"a": (2, 2), "b": (2, 2)}, 0.0).dense_layers == ["a", "b"]


def test_n_m_keeps_its_groups_and_drops_losing_layers() -> None:
    nm = build_pattern("nm", n=1, m=2)
    model = linear_model({"a": (5.0, 9.0, 1.0), "b": (100.0, 1.0, 100.0)})
    allocation = LatencyAllocator(nm, model, Scope()).allocate(SCORES, 0.5, 0.5)
    assert allocation.dense_layers == ["a"]
    assert allocation.codes["b"].tolist() == [[0, 0], [1, 1]]


@pytest.mark.parametrize(
    ("allocation", "pattern", "scope", "speedup", "message"),
    [
        ("latency", "ew", "global", None, "allocation=latency needs a pattern with a fast sparse kernel"),
        ("latency", "tw", "layer", None, "set callbacks.staged_pruning.scope=global"),
        ("latency", "nm", "global", 2.0, "schedule.target_speedup needs a pattern whose sparsity the ranking"),
        ("importance", "tw", "global", 2.0, "schedule.target_speedup needs callbacks.staged_pruning.allocation"),
        ("speed", "tw", "global", None, "allocation must be one of ['importance', 'latency'], got 'speed'"),
    ],
)
def test_refused_settings(allocation: str, pattern: str, scope: str, speedup: float | None, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_allocation(allocation, pattern, Scope(scope), speedup)  # type: ignore[arg-type]
