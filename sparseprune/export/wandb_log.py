"""Export's results in the training run's W&B run: the same id (found in the run folder, so also after a resume), the
same project and mode (offline stays offline), so `wandb sync` or the server shows training and export as one run.

Logged: the speedups and the correctness check as summary values, the per-layer timing and the per-stage results as
`wandb.Table`s, and the exported directory (`load_packed` reads it) as a `wandb.Artifact` of type model.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sparseprune.loggers import WANDB_DIR, checkpoint_run_dir, wandb_run_id

log = logging.getLogger(__name__)
LOGGER_TARGET = "sparseprune.loggers.QuietWandbLogger"


def training_wandb_run(run_config: dict[str, Any], ckpt: Path) -> dict[str, Any] | None:
    """{"id", "project", "offline", "dir"} of the W&B run the checkpoint's training logged to, or None where it used
    no W&B logger; a W&B logger without a run in the run folder is warned about (nothing to log to)."""
    logger = next((entry for entry in (run_config.get("logger") or {}).values()
                   if isinstance(entry, dict) and entry.get("_target_") == LOGGER_TARGET), None)  # fmt: skip
    if logger is None:
        return None
    run_dir = checkpoint_run_dir(ckpt)
    run_id = wandb_run_id(run_dir)
    if run_id is None:
        log.warning("the training run logged to W&B, but %s holds no W&B run: export is not logged to W&B",
                    run_dir / WANDB_DIR)  # fmt: skip
        return None
    return {"id": run_id, "project": logger.get("project"), "offline": bool(logger.get("offline", True)),
            "dir": str(run_dir)}  # fmt: skip


def _layer_table(wandb: Any, report: dict[str, Any]) -> Any:
    columns = ["layer", "format", "calls", "input", "dense_ms", "sparse_ms", "speedup"]
    rows = [[name, report["layers"].get(f"{name}.weight", {}).get("format", ""), row["calls"],
             " x ".join(str(size) for size in row["input_shape"]), row["dense_ms"], row["sparse_ms"], row["speedup"]]
            for name, row in report["layer_timing"].items()]  # fmt: skip
    return wandb.Table(columns=columns, data=rows)


def _stage_table(wandb: Any, report: dict[str, Any]) -> Any:
    stages = report["stages"]
    columns = sorted({key for row in stages for key in row}, key=lambda key: (key not in ("stage", "target"), key))
    return wandb.Table(columns=columns, data=[[row.get(key) for key in columns] for row in stages])


def log_export(run: dict[str, Any], report: dict[str, Any], out_dir: Path) -> None:
    """Resume the training run `run` (training_wandb_run), log the export into it, finish it."""
    import wandb

    mode = "offline" if run["offline"] else "online"
    experiment = wandb.init(id=run["id"], project=run["project"], dir=run["dir"], mode=mode, resume="allow",
                            settings=wandb.Settings(quiet=True))  # fmt: skip
    try:
        experiment.summary.update({
            "export/speedup": report["speedup"],
            "export/fp32_rel_error": report["check"]["fp32_rel_error"],
            **{f"export/against_best_dense/{name}": x for name, x in report["against_best_dense"]["speedup"].items()},
        })  # fmt: skip
        tables = {"export/layer_timing": _layer_table(wandb, report), "export/stages": _stage_table(wandb, report)}
        experiment.log(tables)
        artifact = wandb.Artifact(f"packed-{run['id']}", type="model",
                                  metadata={"pattern": report["pattern"], "speedup": report["speedup"]})  # fmt: skip
        artifact.add_dir(str(out_dir))
        experiment.log_artifact(artifact)
    finally:
        experiment.finish()
