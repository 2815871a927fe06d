"""Turn train.py run summaries into one results table (JSON + markdown) under bench/results/.

Usage: python bench/collect_runs.py --out bench/results/NAME --command "what produced the runs" \
           LABEL=path/to/summary.json [LABEL=...]
The first run is the reference the others' accuracy deltas are taken against.
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
        "val_per_stage": [round(s.get(monitor, float("nan")), 4) for s in stages],
        "val": final.get(monitor),
        "test": summary["test"].get("test/acc"),
    }


def _number(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, type=Path, help="results path without suffix")
    parser.add_argument("--command", required=True, help="the command line that produced the runs")
    parser.add_argument("--device", default="", help="device the runs trained on")
    parser.add_argument("runs", nargs="+", help="LABEL=summary.json")
    args = parser.parse_args()
    rows = []
    for item in args.runs:
        label, _, path = item.partition("=")
        rows.append(_row(label, json.loads(Path(path).read_text())))
    reference = rows[0]["test"]
    for row in rows:
        known = reference is not None and row["test"] is not None
        row["test_delta_points"] = round(100 * (row["test"] - reference), 2) if known else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps({"command": args.command, "device": args.device, "runs": rows}, indent=2)
    )
    lines = [
        f"Command: `{args.command}`",
        "",
        f"Device: {args.device}" if args.device else "",
        "",
        "| run | pattern | options | sparsity | val acc per stage | test acc | Δ test vs first (points) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        options = ", ".join(f"{k}={v}" for k, v in row["options"].items())
        per_stage = " → ".join(f"{v:.4f}" for v in row["val_per_stage"])
        lines.append(
            f"| {row['run']} | {row['pattern']} | {options} | {row['sparsity']:.4f} | {per_stage} | "
            f"{_number(row['test'], '.4f')} | {_number(row['test_delta_points'], '+.2f')} |"
        )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
