"""The figures say what they show: the overall line where the title puts it, every layer visible, the Pareto front
drawn, the dense baseline and the timing device named."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sparseprune.plots import (
    layer_sparsity_figure,
    pareto_front,
    short_layer_names,
    speedup_vs_accuracy_figure,
)


def line_labelled(figure: Figure, prefix: str) -> Line2D:
    axes = figure.axes[0]
    handles, labels = axes.get_legend_handles_labels()
    if not handles:
        handles, labels = figure.legends[0].legend_handles, [t.get_text() for t in figure.legends[0].texts]
    return next(h for h, label in zip(handles, labels, strict=True) if label.startswith(prefix))


def test_layer_line_is_the_overall_sparsity_when_given() -> None:
    figure = layer_sparsity_figure({"big.weight": 0.9, "small.weight": 0.1}, "ew: 80.0% overall", overall=0.8)
    line = line_labelled(figure, "overall 80.0%")
    assert list(line.get_xdata()) == [80.0, 80.0]


def test_layer_line_without_overall_says_it_is_unweighted() -> None:
    figure = layer_sparsity_figure({"a.weight": 0.9, "b.weight": 0.1}, "per-layer sparsity")
    assert list(line_labelled(figure, "unweighted layer mean 50.0%").get_xdata()) == [50.0, 50.0]


def test_a_dense_layer_still_has_a_visible_row() -> None:
    figure = layer_sparsity_figure({"a.weight": 0.0, "b.weight": 0.75}, "t", overall=0.5)
    bars = [p for p in figure.axes[0].patches if p.get_width() > 0]
    rows_with_bars = {round(p.get_y() + p.get_height() / 2) for p in bars}
    assert rows_with_bars == {0, 1}


def test_long_layer_names_leave_the_chart_most_of_the_figure() -> None:
    names = [
        f"model.bert.encoder.layer.{i}.{part}.weight"
        for i in range(6)
        for part in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense", "intermediate.dense", "output.dense")
    ]  # fmt: skip
    figure = layer_sparsity_figure(dict.fromkeys(names, 0.5), "BERT", overall=0.5)
    figure.canvas.draw()
    box = figure.axes[0].get_position()
    assert box.height > 0.7 and box.width > 0.5


def test_short_names_drop_the_shared_prefix_and_weight() -> None:
    assert short_layer_names(["net.features.0.weight", "net.classifier.1.weight"]) == ["features.0", "classifier.1"]
    assert short_layer_names(["fc.weight"]) == ["fc"]


def test_pareto_front_keeps_the_points_none_beats() -> None:
    points = [(2.0, 0.90), (1.5, 0.92), (1.8, 0.89), (1.2, 0.92), (1.1, 0.95), (3.0, float("nan"))]
    assert pareto_front(points) == [(2.0, 0.90), (1.5, 0.92), (1.1, 0.95)]


def test_speedup_figure_draws_the_front_the_dense_baseline_and_the_device() -> None:
    points = {"tw@0.75": (2.0, 0.95), "ew@0.75": (1.2, 0.90)}  # the fastest is also the best: a front of one point
    figure = speedup_vs_accuracy_figure(points, "val/acc", dense_accuracy=0.94, device="cpu")
    front = line_labelled(figure, "Pareto front")
    assert list(zip(front.get_xdata(), front.get_ydata(), strict=True)) == [(2.0, 0.95)]
    assert front.get_marker() not in (None, "None", "")
    assert list(line_labelled(figure, "dense (1×)").get_xdata()) == [1.0, 1.0]
    assert "CPU" in figure.axes[0].get_title()


def test_the_dense_model_takes_part_in_the_front() -> None:
    points = {"ew@0.5": (0.8, 0.92), "tw@0.75": (2.0, 0.90)}
    front = line_labelled(speedup_vs_accuracy_figure(points, "val/acc", dense_accuracy=0.93), "Pareto front")
    assert list(zip(front.get_xdata(), front.get_ydata(), strict=True)) == [(2.0, 0.90), (1.0, 0.93)]


@pytest.mark.parametrize("device", [None, ""])
def test_speedup_figure_without_a_device_has_no_note(device: str | None) -> None:
    figure = speedup_vs_accuracy_figure({"tw@0.5": (1.5, 0.9)}, "val/acc", device=device)
    assert figure.axes[0].get_title() == ""
