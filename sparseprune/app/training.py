"""The training task behind train.py: compose objects from the Hydra config, fit, prune, report."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from sparseprune.app.callbacks import StagedPruning
from sparseprune.checkpoints import (
    AtomicCheckpointIO,
    completed_epochs,
    load_initial_weights,
    load_resumable,
    load_weights,
)
from sparseprune.config_types import check_train_config
from sparseprune.epoch_seeds import EpochSeeding
from sparseprune.errors import UserError
from sparseprune.files import remove_stale_temporaries, writable_dir, write_text
from sparseprune.pruning.masking import MASK_FILE, layer_sparsity, save_largest_mask
from sparseprune.pruning.schedule import Schedule

log = logging.getLogger(__name__)


def _instantiate_group(group: DictConfig | None) -> list[Any]:
    """Every `_target_` entry of a config group mapping (callbacks, loggers), in order."""
    if not group:
        return []
    return [instantiate(entry) for entry in group.values() if entry is not None and "_target_" in entry]


def _stage_table(results: list[dict[str, Any]], monitor: str) -> Table:
    table = Table(title=f"{monitor} per pruning stage")
    # the predictions of latency-aware runs (summary.json holds every run's, H200-fitted where no table was given)
    targets = any("target_speedup" in row for row in results)
    latency_aware = targets or any("dense_layers" in row for row in results)
    predicted = latency_aware and any("predicted_speedup" in row for row in results)
    columns = ["stage", "target", "sparsity", monitor]
    columns += ["target ×dense"] * targets + ["predicted ×dense"] * predicted
    for column in columns:
        table.add_column(column, justify="right")
    for row in results:
        stage = "dense" if row["stage"] < 0 else str(int(row["stage"]))
        cells = [stage, f"{row['target']:.3f}", f"{row['sparsity']:.4f}", f"{row[monitor]:.4f}"]
        cells += [f"{row['target_speedup']:.2f}" if "target_speedup" in row else ""] * targets
        cells += [f"{row['predicted_speedup']:.2f}" if "predicted_speedup" in row else ""] * predicted
        table.add_row(*cells)
    return table


def _finish_loggers(loggers: list[Any]) -> None:
    """Close W&B runs even after a crash so offline files are complete."""
    for logger in loggers:
        experiment = getattr(logger, "_experiment", None)
        if experiment is not None and hasattr(experiment, "finish"):
            experiment.finish()


def _route_lightning_logs_through_hydra() -> None:
    """Lightning adds its own console handlers; Hydra's root handler already prints and files every record."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit with staged pruning; returns the per-stage results and the final checkpoint path."""
    check_train_config(cfg)
    _route_lightning_logs_through_hydra()
    L.seed_everything(cfg.seed, workers=True)
    torch.set_float32_matmul_precision("high")
    if cfg.trainer.get("max_epochs") is None:  # exactly the epochs the schedule needs
        cfg.trainer.max_epochs = Schedule(**cfg.schedule).total_epochs
    resume = load_resumable(Path(cfg.ckpt_path)) if cfg.get("ckpt_path") else None
    if resume is not None:  # what a run killed while saving left beside the checkpoint
        remove_stale_temporaries(Path(cfg.ckpt_path).parent)
    datamodule = instantiate(cfg.data)
    model = instantiate(cfg.model, **datamodule.model_kwargs())
    model.run_config = OmegaConf.to_container(cfg, resolve=True)
    if resume is not None:  # Lightning loads them again; this names a checkpoint of another model in one line
        load_weights(model, resume, Path(cfg.ckpt_path), "ckpt_path")
    elif cfg.get("init_ckpt"):
        load_initial_weights(model, Path(cfg.init_ckpt))
    callbacks = [EpochSeeding(cfg.seed), *_instantiate_group(cfg.get("callbacks"))]  # first: see epoch_seeds
    loggers = _instantiate_group(cfg.get("logger"))
    pruning = next((c for c in callbacks if isinstance(c, StagedPruning)), None)
    if pruning is None:
        raise UserError("callbacks must include staged_pruning (sparseprune.app.callbacks.StagedPruning)")
    _check_output_dirs(cfg)
    try:
        trainer = _build_trainer(cfg, callbacks, loggers)
        if resume is not None:
            _check_can_continue(trainer, resume, Path(cfg.ckpt_path))
        for logger in loggers:
            logger.log_hyperparams(model.run_config)
        trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
        if cfg.get("test") and not trainer.fast_dev_run:
            trainer.test(model, datamodule=datamodule, ckpt_path=None)
    finally:
        _finish_loggers(loggers)
    return _report(cfg, trainer, pruning)


def _check_output_dirs(cfg: DictConfig) -> None:
    """The run's and every checkpoint callback's directory can be written, before the first epoch rather than at
    the first save; temporary files of checkpoint writes a killed run left there go."""
    writable_dir(Path(cfg.paths.output_dir), "paths.output_dir")
    for name, entry in (cfg.get("callbacks") or {}).items():
        if entry is not None and entry.get("dirpath"):
            remove_stale_temporaries(writable_dir(Path(entry.dirpath), f"callbacks.{name}.dirpath"))


def _build_trainer(cfg: DictConfig, callbacks: list[Any], loggers: list[Any]) -> L.Trainer:
    """The configured Trainer writing checkpoints atomically; Lightning's refusals of a setting are one line."""
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise UserError(f"trainer.accelerator={accelerator} needs a CUDA GPU and none is visible; use trainer=cpu")
    try:
        return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, plugins=[AtomicCheckpointIO()])
    except InstantiationException as error:
        cause = error.__cause__
        if not isinstance(cause, (MisconfigurationException, TypeError, ValueError)):
            raise
        raise UserError(f"trainer: {str(cause).strip().splitlines()[0]}") from None


def _check_can_continue(trainer: L.Trainer, checkpoint: dict[str, Any], path: Path) -> None:
    """Lightning would return at once, exit 0 and train nothing in both cases."""
    if trainer.fast_dev_run:
        raise UserError(
            f"trainer=debug (fast_dev_run) runs one batch per stage from scratch and cannot resume ckpt_path {path}; "
            "resume with the trainer preset the run was trained with (trainer=cpu or trainer=gpu)"
        )
    done = completed_epochs(checkpoint, path)
    if trainer.max_epochs is not None and 0 <= trainer.max_epochs <= done:
        raise UserError(
            f"ckpt_path {path} has finished {done} epochs and trainer.max_epochs={trainer.max_epochs}: nothing is "
            f"left to train; export it (python export.py ckpt={path}) or raise trainer.max_epochs"
        )


def _report(cfg: DictConfig, trainer: L.Trainer, pruning: StagedPruning) -> dict[str, Any]:
    checkpoint = next((c for c in trainer.checkpoint_callbacks if c.last_model_path), None)
    summary = {
        "pattern": dict(pruning.pattern_config),
        "target": pruning.schedule.target,
        "stages": pruning.stage_results,
        "layer_sparsity": layer_sparsity(pruning.codes),
        "test": {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")},
        "checkpoint": checkpoint.last_model_path if checkpoint else None,
    }
    if not trainer.is_global_zero:  # every rank holds the same masks and results; one writes and prints them
        return summary
    output_dir = Path(cfg.paths.output_dir)
    write_text(output_dir / "summary.json", json.dumps(summary, indent=2))
    save_largest_mask(pruning.codes, output_dir / MASK_FILE)
    console = Console()
    console.print(_stage_table(pruning.stage_results, pruning.monitor or "val/acc"))
    if summary["test"]:
        console.print("test: " + ", ".join(f"{k} {v:.4f}" for k, v in summary["test"].items()))
    console.print(f"checkpoint: {summary['checkpoint']}")
    console.print(f"summary: {output_dir / 'summary.json'}")
    return summary
