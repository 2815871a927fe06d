"""Turn train.py run summaries into one results table (JSON + markdown) under bench/results/.

Usage: python bench/collect_runs.py --out bench/results/NAME --command "what produced the runs" \
           [--metric test/bleu] [LABEL=path/to/summary.json ...] [--sweep SWEEP_RESULTS_DIR ...]
The first run is the reference the others' deltas (in points of --metric) are taken against. A sweep directory
(written by `python -m sparseprune.sweeps ... --run DIR`) adds each of its runs, labelled by its overrides.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _row(label: str, summary: dict) -> dict:
    stages = summary["stages"]
    pattern = dict(summary["pattern"])
    name = pattern.pop("name")
    if all(stage["stage"] < 0 for stage in stages):  # a dense-only run
        name, pattern = "dense", {}
    final = stages[-1] if stages else {}
    monitor = next((k for k in final if k.startswith("val/")), "val/acc")
    return {
        "run": label,
        "pattern": name,
        "options": pattern,
        "sparsity": final.get("sparsity", 0.0),
        "monitor": monitor,
        "val_per_stage": [round(s.get(monitor, float("nan")), 4) for s in stages],
        "test": {k: v for k, v in summary["test"].items() if not k.endswith(("/loss", "/ppl"))},
    }


def _sweep_rows(results_dir: Path) -> list[dict]:
    runs = json.loads((results_dir / "results.json").read_text())
    return [_row(" ".join(o.split("=", 1)[1] for o in run["overrides"]), run) for run in runs]


def _number(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path, help="results path without suffix")
    parser.add_argument("--command", required=True, help="the command line that produced the runs")
    parser.add_argument("--device", default="", help="device the runs trained on")
    parser.add_argument("--metric", default="test/acc", help="test metric the deltas are taken in")
    parser.add_argument(
        "--scale", type=float, default=100, help="points per metric unit (100 for accuracy, 1 for BLEU)"
    )
    parser.add_argument("--sweep", type=Path, action="append", default=[], help="a local sweep's results directory")
    parser.add_argument("runs", nargs="*", help="LABEL=summary.json")
    args = parser.parse_args()
    rows = []
    for item in args.runs:
        label, _, path = item.partition("=")
        rows.append(_row(label, json.loads(Path(path).read_text())))
    for results_dir in args.sweep:
        rows += _sweep_rows(results_dir)
    if not rows:
        parser.error("no runs given")
    reference = rows[0]["test"].get(args.metric)
    for row in rows:
        value = row["test"].get(args.metric)
        known = reference is not None and value is not None
        row["delta_points"] = round(args.scale * (value - reference), 2) if known else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps({"command": args.command, "device": args.device, "metric": args.metric, "runs": rows}, indent=2)
    )
    tests = sorted({k for row in rows for k in row["test"]}, key=lambda k: (k != args.metric, k))
    monitor = rows[-1]["monitor"]
    delta = f"Δ {args.metric} vs first (points)"
    lines = [
        f"Command: `{args.command}`",
        "",
        f"Device: {args.device}" if args.device else "",
        "",
        "| " + " | ".join(["run", "pattern", "options", "sparsity", f"{monitor} per stage", *tests, delta]) + " |",
        "|---|---|---|---|---|" + "---|" * len(tests) + "---|",
    ]
    for row in rows:
        options = ", ".join(f"{k}={v}" for k, v in row["options"].items())
        per_stage = " → ".join(f"{v:.4f}" for v in row["val_per_stage"])
        values = [_number(row["test"].get(k), ".4f") for k in tests]
        cells = [row["run"], row["pattern"], options, f"{row['sparsity']:.4f}", per_stage, *values]
        lines.append("| " + " | ".join([*cells, _number(row["delta_points"], "+.2f")]) + " |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
