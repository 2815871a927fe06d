"""Turn a local sweep's results directory into report.md plus the figures researchers expect.

    python -m sparseprune.report sweeps/patterns [--wandb]

Reads `results.json` (written by `python -m sparseprune.sweeps ... --run DIR`), each run's checkpoint (for the
mask picture) and, where `export.py` was run into `runNNN/export/`, its timing report (for the speedup figure).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from sparseprune.app.cli import exit_on_user_error
from sparseprune.checkpoints import PRUNING_STATE_KEY, load_checkpoint
from sparseprune.errors import UserError
from sparseprune.plots import (
    accuracy_vs_sparsity_figure,
    layer_sparsity_figure,
    mask_figure,
    save_figure,
    speedup_vs_accuracy_figure,
)
from sparseprune.pruning.masking import MASK_FILE
from sparseprune.pruning.patterns import keep_mask
from sparseprune.timing_notes import timing_warnings

log = logging.getLogger(__name__)


def _label(run: dict[str, Any]) -> str:
    options = {k: v for k, v in run["pattern"].items() if k != "name"}
    shown = ",".join(f"{k}={v}" for k, v in options.items() if k in ("granularity", "vector", "delta", "n", "m"))
    return f"{run['pattern']['name']}({shown})" if shown else run["pattern"]["name"]


def _accuracy(run: dict[str, Any]) -> tuple[str, float]:
    """Test accuracy when the run was tested, else the last stage's validation metric."""
    if "test/acc" in run.get("test", {}):
        return "test/acc", run["test"]["test/acc"]
    last = run["stages"][-1]
    metric = next(k for k in last if k.startswith("val/"))
    return metric, last[metric]


def _export_report(results_dir: Path, run: dict[str, Any]) -> dict[str, Any] | None:
    report = results_dir / f"run{run['run']:03d}" / "export" / "export_report.json"
    return json.loads(report.read_text()) if report.exists() else None


def _dense_accuracy(runs: list[dict[str, Any]], metric: str) -> float | None:
    """The dense model's `metric` from a run that trained it first (stage -1), when it was measured as the runs' is."""
    return next((row[metric] for run in runs for row in run["stages"] if row["stage"] < 0 and metric in row), None)


def _largest_mask(results_dir: Path, run: dict[str, Any]) -> tuple[str, torch.Tensor] | None:
    """(layer, keep mask) of the run's largest pruned layer: from the mask file train.py writes beside the
    summary, else from the checkpoint; None when neither is there."""
    mask_file = results_dir / f"run{run['run']:03d}" / MASK_FILE
    if mask_file.exists():
        return next(iter(load_file(str(mask_file)).items()))
    if run.get("checkpoint") and Path(run["checkpoint"]).exists():
        codes = load_checkpoint(Path(run["checkpoint"]))["callbacks"][PRUNING_STATE_KEY]["codes"]
        layer = max(codes, key=lambda n: codes[n].numel())
        return layer, keep_mask(codes[layer])
    return None


def _final_masks(results_dir: Path, runs: list[dict[str, Any]]) -> tuple[str, dict[str, torch.Tensor]]:
    """Per pattern, the keep mask of the largest pruned layer in its highest-target run that kept one."""
    chosen: dict[str, tuple[float, tuple[str, torch.Tensor]]] = {}
    for run in sorted(runs, key=lambda r: -r["target"]):
        name = _label(run)
        if name not in chosen and (mask := _largest_mask(results_dir, run)) is not None:
            chosen[name] = (run["target"], mask)
    layers = {layer for _, (layer, _) in chosen.values()}
    layer = min(layers) if layers else ""
    return layer, {name: mask.bool() for name, (_, (mask_layer, mask)) in chosen.items() if mask_layer == layer}


def build_report(results_dir: Path, log_to_wandb: bool = False) -> Path:
    results_file = results_dir / "results.json"
    if not results_file.exists():
        raise UserError(f"{results_dir} has no results.json; run a sweep into it with `python -m sparseprune.sweeps`")
    runs = json.loads(results_file.read_text())
    if not runs:
        raise UserError(f"{results_file} lists no runs")
    figures_dir = results_dir / "figures"
    metric = _accuracy(runs[0])[0]
    lines = [
        f"# Sweep report: {results_dir.name}",
        "",
        f"| run | pattern | target | sparsity | {metric} | speedup |",
        "|---|---|---|---|---|---|",
    ]
    curves: dict[str, list[tuple[float, float]]] = {}
    speedups: dict[str, tuple[float, float]] = {}
    exports: dict[str, dict[str, Any]] = {}
    for run in runs:
        sparsity = run["stages"][-1]["sparsity"] if run["stages"] else 0.0
        accuracy = _accuracy(run)[1]
        export = _export_report(results_dir, run)
        curves.setdefault(_label(run), []).append((sparsity, accuracy))
        if export is not None:
            exports[str(run["run"])] = export
            speedups[f"{_label(run)}@{sparsity:.2f}"] = (export["speedup"], accuracy)
        shown = "–" if export is None else f"{export['speedup']:.2f}×"
        lines.append(f"| {run['run']} | {_label(run)} | {run['target']} | {sparsity:.4f} | {accuracy:.4f} | {shown} |")
    devices = sorted({export["device"] for export in exports.values()})
    if devices:
        lines += ["", f"Speedups timed on: {', '.join(devices)}."]
    if "cpu" in devices:
        lines.append("On the CPU the packed formats run torch reference ops, not the GPU kernels: no speedup is meant.")
    for note in timing_warnings(exports):
        log.warning("warning: %s", note)
        lines.append(f"- warning: {note}")
    paths = [save_figure(accuracy_vs_sparsity_figure(curves, metric), figures_dir / "accuracy_vs_sparsity.png")]
    if speedups:
        figure = speedup_vs_accuracy_figure(speedups, metric, _dense_accuracy(runs, metric), ", ".join(devices))
        paths.append(save_figure(figure, figures_dir / "speedup_vs_accuracy.png"))
    most_pruned = max(runs, key=lambda r: r["target"])
    if most_pruned.get("layer_sparsity"):
        title = f"{_label(most_pruned)} at {most_pruned['target']}: per-layer sparsity"
        overall = most_pruned["stages"][-1]["sparsity"] if most_pruned["stages"] else None
        figure = layer_sparsity_figure(most_pruned["layer_sparsity"], title, overall)
        paths.append(save_figure(figure, figures_dir / "layers.png"))
    layer, masks = _final_masks(results_dir, runs)
    if masks:
        paths.append(save_figure(mask_figure(masks, layer), figures_dir / "masks.png"))
    lines += ["", *[f"![{p.stem}](figures/{p.name})" for p in paths]]
    report = results_dir / "report.md"
    report.write_text("\n".join(lines) + "\n")
    if log_to_wandb:
        _log_to_wandb(results_dir, paths)
    return report


def _log_to_wandb(results_dir: Path, paths: list[Path]) -> None:
    import wandb  # optional: only this flag needs it

    run = wandb.init(  # its files beside the report, not in the working directory
        project="sparseprune",
        name=f"report-{results_dir.name}",
        job_type="report",
        mode="offline",
        dir=str(results_dir),
    )
    try:
        run.log({path.stem: wandb.Image(str(path)) for path in paths})
    finally:
        run.finish()


@exit_on_user_error
def main() -> None:
    parser = argparse.ArgumentParser(description="Markdown table and figures from a local sweep's results.")
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("--wandb", action="store_true", help="also log the figures to an offline W&B run")
    args = parser.parse_args()
    print(build_report(args.results_dir, args.wandb))


if __name__ == "__main__":
    main()
