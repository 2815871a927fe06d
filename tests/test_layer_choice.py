"""Per-layer timing of a sparse twin: which inputs each layer is timed on, which layers "fastest" keeps dense, and
that taking a layer back from the dense model leaves the rest of the twin as it was."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from sparseprune.export.layer_choice import (
    LayerTiming,
    fastest_choice,
    fastest_twin,
    first_inputs,
    forced_tiles,
    slower_sparse_layers,
    time_layers,
)
from sparseprune.export.swap import with_dense_layers
from sparseprune.export.timing import time_calls


class Twice(nn.Module):
    """Calls its `shared` layer twice per forward, as a decoder calls its projection once per step."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 6)
        self.shared = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.first(x))
        y = self.shared(h)
        h.zero_()  # in place on the shared layer's first input, after its call
        return self.shared(y)


def test_first_inputs_are_clones_of_each_layers_first_input_with_call_counts() -> None:
    torch.manual_seed(0)
    model, x = Twice(), torch.randn(3, 4)
    inputs = first_inputs(model, ["first", "shared"], lambda: model(x))
    assert inputs["first"][1] == 1 and inputs["shared"][1] == 2
    assert torch.equal(inputs["first"][0], x) and inputs["first"][0] is not x
    assert torch.equal(inputs["shared"][0], torch.relu(model.first(x)))
    assert not model.first._forward_pre_hooks and not model.shared._forward_pre_hooks  # hooks removed


def test_first_inputs_leaves_out_layers_the_forward_never_calls_with_an_input() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))
    x = torch.randn(2, 4)
    assert list(first_inputs(model, ["0", "1", "2"], lambda: (model[0](x), model[2](input=x)))) == ["0"]


def test_slower_sparse_layers_are_exactly_those_slower_than_dense() -> None:
    timings = {
        "fast": LayerTiming(1, (8, 4), dense_ms=2.0, sparse_ms=1.0),
        "slow": LayerTiming(1, (8, 4), dense_ms=1.0, sparse_ms=3.0),
        "tie": LayerTiming(2, (8, 4), dense_ms=1.0, sparse_ms=1.0),
        "slightly_slow": LayerTiming(1, (8, 4), dense_ms=1.0, sparse_ms=1.01),
    }
    assert timings["fast"].speedup == 2.0
    assert slower_sparse_layers(timings) == ["slow", "slightly_slow"]


def test_time_layers_times_both_twins_on_the_same_recorded_input() -> None:
    torch.manual_seed(0)
    dense, x = Twice(), torch.randn(5, 4)
    twin = Twice()
    twin.load_state_dict(dense.state_dict())
    timed: list[object] = []

    def time_ms(calls: dict) -> dict[str, float]:
        timed.extend(fn() for fn in calls.values())
        return {name: t.median_ms for name, t in time_calls(calls, torch.device("cpu"), 0, 2).items()}

    timings = time_layers(dense, twin, ["first", "shared"], lambda: twin(x), time_ms)
    assert timings["first"].input_shape == (5, 4) and timings["shared"].input_shape == (5, 6)
    assert timings["shared"].calls == 2
    assert all(t.dense_ms > 0 and t.sparse_ms > 0 for t in timings.values())
    with torch.inference_mode():
        expected = [dense.first(x), twin.first(x), dense.shared(torch.relu(dense.first(x)))]
    assert all(torch.equal(got, want) for got, want in zip(timed[:3], expected, strict=True))  # dense, twin, dense


def test_with_dense_layers_takes_back_only_the_named_layers() -> None:
    dense = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    sparse = nn.Sequential(nn.Identity(), nn.Sequential(nn.Identity(), nn.ReLU()))
    mixed = with_dense_layers(sparse, dense, ["1.0"])
    assert isinstance(mixed[0], nn.Identity) and isinstance(mixed[1][0], nn.Linear)
    assert torch.equal(mixed[1][0].weight, dense[1][0].weight) and mixed[1][0] is not dense[1][0]
    assert isinstance(sparse[1][0], nn.Identity)  # the twin itself is unchanged


def test_fastest_twin_takes_back_exactly_the_slower_layers() -> None:
    dense = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    sparse = nn.Sequential(nn.Identity(), nn.Identity())
    timings = {"0": LayerTiming(1, (2, 4), dense_ms=1.0, sparse_ms=2.0), "1": LayerTiming(1, (2, 4), 2.0, 1.0)}
    twin, kept_dense = fastest_twin(sparse, dense, timings)
    assert kept_dense == ["0"] and isinstance(twin[0], nn.Linear) and isinstance(twin[1], nn.Identity)


class ChannelMajor(nn.Module):
    """A convolution returning (B, C, H, W) stored channel-major, as a sparse convolution over several images does."""

    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).transpose(0, 1).contiguous().transpose(0, 1)


@pytest.mark.parametrize("images", [1, 2])
def test_fastest_choice_times_again_only_inputs_stored_differently(images: int) -> None:
    torch.manual_seed(0)
    dense = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 3))
    sparse = nn.Sequential(ChannelMajor(copy.deepcopy(dense[0])), copy.deepcopy(dense[1]))
    x = torch.randn(images, 3, 8, 8)
    timings = {"0": LayerTiming(1, (images, 3, 8, 8), 1.0, 2.0), "1": LayerTiming(1, (images, 4, 6, 6), 2.0, 1.0)}
    timed = []

    def time_ms(calls: dict) -> dict[str, float]:
        timed.extend(fn() for fn in calls.values())
        return dict.fromkeys(calls, 1.5)

    choice = fastest_choice(sparse, dense, timings, lambda net: net(x), time_ms)
    assert choice.dense_layers == ["0"]
    # layer 1's input, channel-major behind the sparse layer 0, is NCHW behind the dense one: the same bytes for one
    # image, whose batch stride moves nothing
    assert list(choice.retimed) == ([] if images == 1 else ["1"]) and len(timed) == (0 if images == 1 else 2)


class Tiled(nn.Module):
    """A stand-in for a sparse layer on the 2:4 sparse tensor cores: offers two CTA tiles and records the tile each
    call ran with."""

    def __init__(self) -> None:
        super().__init__()
        self.sp24_tile = "auto"
        self.ran_with: list[str] = []

    def sp24_tiles(self, x: torch.Tensor) -> tuple[str, ...]:
        return ("wide", "narrow")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ran_with.append(self.sp24_tile)
        return 2 * x


def test_the_fastest_tile_is_the_quickest_forced_one_only_when_it_beats_auto() -> None:
    beaten = LayerTiming(1, (8, 4), dense_ms=2.0, sparse_ms=1.0, sp24_tile_ms={"wide": 0.5, "narrow": 0.7})
    assert (beaten.fastest_tile, beaten.fastest_sparse_ms, beaten.speedup) == ("wide", 0.5, 2.0)
    tied = LayerTiming(1, (8, 4), dense_ms=2.0, sparse_ms=1.0, sp24_tile_ms={"wide": 1.0})
    assert (tied.fastest_tile, tied.fastest_sparse_ms) == ("auto", 1.0)
    untiled = LayerTiming(1, (8, 4), dense_ms=2.0, sparse_ms=1.0)
    assert (untiled.fastest_tile, untiled.fastest_sparse_ms) == ("auto", 1.0)


def test_a_layer_slower_than_dense_under_auto_stays_sparse_where_a_tile_beats_dense() -> None:
    timings = {
        "rescued": LayerTiming(1, (8, 4), dense_ms=1.0, sparse_ms=1.5, sp24_tile_ms={"wide": 0.8, "narrow": 2.0}),
        "lost": LayerTiming(1, (8, 4), dense_ms=1.0, sparse_ms=1.5, sp24_tile_ms={"wide": 1.2}),
    }
    assert slower_sparse_layers(timings) == ["lost"]
    assert forced_tiles(timings, ["lost"]) == {"rescued": "wide"}


def test_time_layers_times_auto_and_each_tile_with_the_tile_set_for_its_call_only() -> None:
    dense, sparse = nn.Sequential(nn.Identity()), nn.Sequential(Tiled())
    sparse[0].sp24_tile = "narrow"  # as a twin of an earlier choice would have it: "sparse" still times auto
    names: list[list[str]] = []

    def time_ms(calls: dict) -> dict[str, float]:
        names.append(list(calls))
        for fn in calls.values():
            fn()
        return {"dense": 1.0, "sparse": 2.0, "sparse:wide": 0.5, "sparse:narrow": 3.0}

    timings = time_layers(dense, sparse, ["0"], lambda: sparse(torch.ones(2, 4)), time_ms)
    assert names == [["dense", "sparse", "sparse:wide", "sparse:narrow"]]
    assert sparse[0].ran_with == ["narrow", "auto", "wide", "narrow"]  # the recording pass, then the timed calls
    assert sparse[0].sp24_tile == "narrow"  # restored after each call
    assert timings["0"] == LayerTiming(1, (2, 4), 1.0, 2.0, {"wide": 0.5, "narrow": 3.0})


def test_fastest_choice_sets_each_layers_fastest_tile_on_the_twin_alone() -> None:
    dense = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))
    sparse = nn.Sequential(Tiled(), Tiled(), Tiled())
    timings = {
        "0": LayerTiming(1, (2, 4), dense_ms=1.0, sparse_ms=2.0, sp24_tile_ms={"wide": 3.0, "narrow": 0.5}),
        "1": LayerTiming(1, (2, 4), dense_ms=1.0, sparse_ms=2.0, sp24_tile_ms={"wide": 1.5, "narrow": 1.5}),
        "2": LayerTiming(1, (2, 4), dense_ms=1.0, sparse_ms=0.5, sp24_tile_ms={"wide": 0.6, "narrow": 0.9}),
    }
    choice = fastest_choice(sparse, dense, timings, lambda net: net(torch.ones(2, 4)), lambda calls: pytest.fail())
    assert choice.dense_layers == ["1"] and choice.sp24_tiles == {"0": "narrow"}
    assert choice.twin[0].sp24_tile == "narrow" and choice.twin[2].sp24_tile == "auto"
    assert isinstance(choice.twin[1], nn.Linear)
    assert [layer.sp24_tile for layer in sparse] == ["auto"] * 3  # the all-sparse twin keeps auto's tiles
