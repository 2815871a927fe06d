"""Figures people would rather look at than read: per-layer sparsity bars (the TW paper's Fig. 5)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

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
