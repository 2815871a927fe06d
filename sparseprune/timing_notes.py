"""Warnings that timings cannot be trusted: taken on a busy machine, or too spread out to compare.

A loaded machine slows every timed pass (a dense median went from 26 ms to 1327 ms under load), so a speedup from
such a run says little; these notes say so next to the numbers instead of leaving them to be read as real.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

BUSY_LOAD_PER_CORE = 0.5  # 1-minute load average per core above which other work competes with the timed passes
MAX_SPREAD = 1.5  # p90 / p10 of one model's passes, or the slowest / fastest dense median across runs of a sweep


def busy_machine_warning(load_per_core: float | None = None) -> str | None:
    """A warning when other processes keep the CPUs busy right now (the 1-minute load average), else None."""
    cores = os.cpu_count() or 1
    if load_per_core is None:
        load_per_core = os.getloadavg()[0] / cores
    if load_per_core <= BUSY_LOAD_PER_CORE:
        return None
    return (
        f"the machine is busy (load {load_per_core * cores:.1f} on {cores} cores): timings will be slower and noisier "
        "than on an idle machine, and speedups less reliable"
    )


def timing_warnings(export_reports: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What in a sweep's export reports (keyed by run) points at a loaded machine: a model's passes spread wide
    within a run, or the same dense model timed very differently from run to run."""
    warnings = []
    for run, report in export_reports.items():
        spread = {
            model: timing["p90_ms"] / timing["p10_ms"]
            for model, timing in report["timing"].items()
            if timing["p10_ms"] > 0 and timing["p90_ms"] / timing["p10_ms"] > MAX_SPREAD
        }
        if spread:
            shown = ", ".join(f"{model} p90/p10 {ratio:.1f}" for model, ratio in spread.items())
            warnings.append(f"run {run}: timings spread wide ({shown}): was the machine loaded?")
    dense = {run: report["timing"]["dense"]["median_ms"] for run, report in export_reports.items()}
    if len(dense) > 1 and min(dense.values()) > 0 and max(dense.values()) / min(dense.values()) > MAX_SPREAD:
        slowest, fastest = max(dense, key=dense.get), min(dense, key=dense.get)
        warnings.append(
            f"the dense model's median ranges from {dense[fastest]:.2f} ms (run {fastest}) to {dense[slowest]:.2f} ms "
            f"(run {slowest}): timings were taken under varying load, so speedups do not compare across runs"
        )
    return warnings
