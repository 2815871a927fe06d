"""Figures people would rather look at than read: the TW paper's per-layer sparsity (Fig. 5), accuracy vs
sparsity (Fig. 12), weight masks (Fig. 13) and speedup vs accuracy (Fig. 14)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def layer_sparsity_figure(sparsity: Mapping[str, float], title: str) -> Figure:
    """A bar per pruned layer, in model order, with the overall mean as a line."""
    names = list(sparsity)
    values = [100.0 * sparsity[n] for n in names]
    figure, axes = plt.subplots(figsize=(max(6.0, 0.35 * len(names) + 2), 3.6), layout="constrained")
    axes.bar(range(len(names)), values, color="#4c72b0")
    if values:
        axes.axhline(sum(values) / len(values), color="#c44e52", linestyle="--", linewidth=1, label="layer mean")
        axes.legend(loc="lower right")
    axes.set_xticks(range(len(names)), [n.removesuffix(".weight") for n in names], rotation=70, fontsize=7)
    axes.set_ylabel("sparsity (%)")
    axes.set_ylim(0, 100)
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


def speedup_vs_accuracy_figure(points: Mapping[str, tuple[float, float]], metric: str) -> Figure:
    """Each run's export speedup against its accuracy, the Pareto front drawn through the best: Fig. 14.

    Points are keyed "pattern@sparsity": one colour per pattern (in the legend), the sparsity written beside it."""
    figure, axes = plt.subplots(figsize=(6.5, 4.2), layout="constrained")
    colours: dict[str, Any] = {}
    for label, (speedup, accuracy) in points.items():
        pattern, _, sparsity = label.rpartition("@")
        pattern = pattern or label
        first = pattern not in colours
        dots = axes.scatter(speedup, accuracy, color=colours.get(pattern), label=pattern if first else None)
        colours.setdefault(pattern, dots.get_facecolor()[0])
        axes.annotate(sparsity, (speedup, accuracy), fontsize=6, xytext=(3, 3), textcoords="offset points")
    front, best = [], float("-inf")
    for speedup, accuracy in sorted(points.values(), reverse=True):
        if accuracy > best:
            front.append((speedup, accuracy))
            best = accuracy
    axes.plot([s for s, _ in front], [a for _, a in front], color="#c44e52", linestyle="--", label="Pareto front")
    axes.set_xlabel("inference speedup over dense (×)")
    axes.set_ylabel(metric)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="best")
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
