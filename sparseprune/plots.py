"""Figures people would rather look at than read: the TW paper's per-layer sparsity (Fig. 5), accuracy vs
sparsity (Fig. 12), weight masks (Fig. 13) and speedup vs accuracy (Fig. 14)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def short_layer_names(names: list[str]) -> list[str]:
    """Layer names without the dotted prefix they all share and without `.weight`: what tells the bars apart."""
    parts = [name.removesuffix(".weight").split(".") for name in names]
    shared = 0
    while len(names) > 1 and all(len(p) > shared + 1 and p[shared] == parts[0][shared] for p in parts):
        shared += 1
    return [".".join(p[shared:]) for p in parts]


def layer_sparsity_figure(sparsity: Mapping[str, float], title: str, overall: float | None = None) -> Figure:
    """A row per pruned layer, in model order, split into its pruned and kept shares, so a 0% layer still shows.

    The line is `overall`, the sparsity over all pruned weights that a title such as "75.0% overall" states (large
    layers weigh more); without it, the plain mean of the layers, labelled unweighted so it is not read as overall."""
    labels = short_layer_names(list(sparsity))
    pruned = [100.0 * sparsity[name] for name in sparsity]
    rows = range(len(labels))
    # Rows, not columns: long layer names (BERT's) read across instead of taking the chart's height rotated.
    figure, axes = plt.subplots(figsize=(7.0, max(2.6, 0.17 * len(labels) + 1.3)), layout="constrained")
    axes.barh(rows, pruned, color="#4c72b0", label="pruned")
    axes.barh(rows, [100.0 - value for value in pruned], left=pruned, color="#dde3ee", label="kept")
    if pruned:
        line, label = (
            (100.0 * overall, f"overall {100.0 * overall:.1f}%")
            if overall is not None
            else (sum(pruned) / len(pruned), f"unweighted layer mean {sum(pruned) / len(pruned):.1f}%")
        )
        axes.axvline(line, color="#c44e52", linestyle="--", linewidth=1, label=label)
    axes.set_yticks(rows, labels, fontsize=7)
    axes.set_ylim(len(labels) - 0.5, -0.5)  # the first layer on top
    axes.set_xlim(0, 100)
    axes.set_xlabel("sparsity (%)")
    figure.legend(loc="outside lower center", ncols=3, fontsize=7)
    axes.set_title(title)
    return figure


def save_figure(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def accuracy_vs_sparsity_figure(points: Mapping[str, list[tuple[float, float]]], metric: str) -> Figure:
    """One line per pattern through its (sparsity, accuracy) points: the TW paper's Fig. 12."""
    figure, axes = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    for pattern, values in sorted(points.items()):
        ordered = sorted(values)
        axes.plot([100 * s for s, _ in ordered], [a for _, a in ordered], marker="o", label=pattern)
    axes.set_xlabel("sparsity (%)")
    axes.set_ylabel(metric)
    axes.grid(alpha=0.3)
    axes.legend()
    axes.set_title(f"{metric} vs sparsity")
    return figure


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (speedup, accuracy) points no other point beats on both, fastest first; NaN accuracies take no part."""
    front: list[tuple[float, float]] = []
    for speedup, accuracy in sorted(((s, a) for s, a in points if not math.isnan(a)), reverse=True):
        if not front or accuracy > front[-1][1]:
            front.append((speedup, accuracy))
    return front


def speedup_vs_accuracy_figure(
    points: Mapping[str, tuple[float, float]],
    metric: str,
    dense_accuracy: float | None = None,
    device: str | None = None,
) -> Figure:
    """Each run's export speedup against its accuracy, the Pareto front drawn through the best: Fig. 14.

    Points are keyed "pattern@sparsity": one colour per pattern (in the legend), the sparsity written beside it.
    The dense model sits at 1x (its accuracy marked when known); `device` says where the speedups were timed."""
    figure, axes = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
    colours: dict[str, Any] = {}
    for label, (speedup, accuracy) in points.items():
        pattern, _, sparsity = label.rpartition("@")
        pattern = pattern or label
        first = pattern not in colours
        dots = axes.scatter(speedup, accuracy, color=colours.get(pattern), label=pattern if first else None, zorder=3)
        colours.setdefault(pattern, dots.get_facecolor()[0])
        axes.annotate(sparsity, (speedup, accuracy), fontsize=6, xytext=(3, 3), textcoords="offset points")
    dense = [(1.0, dense_accuracy)] if dense_accuracy is not None else []
    front = pareto_front([*points.values(), *dense])
    # Markers too, so a front of one point (the fastest run is also the most accurate) still shows.
    axes.plot([s for s, _ in front], [a for _, a in front], color="#c44e52", linestyle="--", marker="o",
              markersize=11, markerfacecolor="none", label="Pareto front", zorder=2)  # fmt: skip
    axes.axvline(1.0, color="0.4", linestyle=":", linewidth=1, label="dense (1×)")
    if dense_accuracy is not None:
        axes.scatter(1.0, dense_accuracy, color="black", marker="*", s=90, label=f"dense {metric}", zorder=3)
    axes.set_xlabel("inference speedup over dense (×)")
    axes.set_ylabel(metric)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="best")
    if device == "cpu":
        axes.set_title("timed on the CPU: torch reference ops, not the GPU kernels", fontsize=8)
    elif device:
        axes.set_title(f"timed on {device}", fontsize=8)
    return figure


def mask_figure(masks: Mapping[str, torch.Tensor], layer: str) -> Figure:
    """The keep mask of one layer (K x N, top-left corner at most 256 x 256) under each pattern: Fig. 13."""
    figure, axes = plt.subplots(1, len(masks), figsize=(2.6 * len(masks), 2.9), layout="constrained", squeeze=False)
    for ax, (pattern, mask) in zip(axes[0], masks.items(), strict=True):
        ax.imshow(mask[:256, :256].float().numpy(), cmap="Greys", interpolation="nearest", vmin=0, vmax=1)
        ax.set_title(pattern, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    figure.suptitle(f"kept weights of {layer} (black = kept)", fontsize=9)
    return figure
