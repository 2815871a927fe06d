"""bench/collect_runs.py: the results table from run summaries and a sweep directory, deltas in the right units."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def summary(pattern: str, stages: list[tuple[int, float, float]], test: dict[str, float]) -> dict:
    return {
        "pattern": {"name": pattern},
        "target": stages[-1][1],
        "stages": [{"stage": s, "target": t, "sparsity": t, "val/bleu": v} for s, t, v in stages],
        "test": test,
    }


def test_bleu_table_from_a_reference_and_a_sweep(tmp_path: Path) -> None:
    dense = tmp_path / "dense.json"
    dense.write_text(json.dumps(summary("tw", [(-1, 0.0, 26.0)], {"test/bleu": 28.4, "test/loss": 2.2})))
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    runs = [
        {"run": 0, "overrides": ["experiment=paper/lstm_nmt_ew", "schedule.target=0.75"],
         **summary("ew", [(0, 0.5, 25.0), (1, 0.75, 25.5)], {"test/bleu": 28.0})},
    ]  # fmt: skip
    (sweep / "results.json").write_text(json.dumps(runs))
    out = tmp_path / "table"
    command = [sys.executable, str(ROOT / "bench" / "collect_runs.py"), "--out", str(out), "--command", "c"]
    command += ["--metric", "test/bleu", "--scale", "1", f"dense={dense}", "--sweep", str(sweep)]
    subprocess.run(command, check=True, capture_output=True)
    rows = json.loads(out.with_suffix(".json").read_text())["runs"]
    assert [r["run"] for r in rows] == ["dense", "paper/lstm_nmt_ew 0.75"]
    assert rows[0]["pattern"] == "dense" and rows[1]["val_per_stage"] == [25.0, 25.5]
    assert rows[1]["delta_points"] == -0.4  # BLEU is already in points
    assert "test/loss" not in rows[0]["test"]
    table = out.with_suffix(".md").read_text()
    assert "| paper/lstm_nmt_ew 0.75 | ew |  | 0.7500 | 25.0000 → 25.5000 | 28.0000 | -0.40 |" in table
