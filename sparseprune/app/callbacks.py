"""The Lightning side of pruning: when to prune, keeping masks enforced, logging, checkpoint state.

All pattern logic lives in `sparseprune.pruning.patterns`; this callback only drives it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger

from sparseprune.batches import transfer_batch
from sparseprune.checkpoints import PRUNING_STATE_KEY
from sparseprune.errors import UserError
from sparseprune.latency.allocation import LatencyAllocator, best_case, check_allocation, unreachable_message
from sparseprune.latency.geometry import preserved_random_state
from sparseprune.latency.options import LatencyOptions, stage_prediction
from sparseprune.latency.predictor import LatencyModel
from sparseprune.plots import layer_sparsity_figure, save_figure
from sparseprune.pruning.gemm_view import PrunableWeight, find_prunable
from sparseprune.pruning.importance import KINDS, magnitude_scores, reduce_scores, taylor_scores
from sparseprune.pruning.masking import MaskedWeights, check_codes, layer_sparsity, overall_sparsity
from sparseprune.pruning.patterns.base import pattern_defaults, pattern_from_config
from sparseprune.pruning.ranking import Scope
from sparseprune.pruning.schedule import Schedule

log = logging.getLogger(__name__)


class StagedPruning(L.Callback):
    """Multi-stage pruning (Algorithm 1 of the TW paper) for any `PrunableTask`.

    At the start of each stage's first epoch: score weights, build the pattern's masks at the stage target
    (ranked across layers unless `scope="layer"`), zero pruned weights. After every optimizer step the
    masks are re-applied, so pruned weights stay exactly zero. Masks, the stage reached and per-stage
    results live in the checkpoint: a resumed run continues the same stage with bit-identical masks.

    With `allocation="latency"` units are ranked by importance per predicted microsecond saved
    (`sparseprune.latency.allocation`), layers whose sparse call would lose to dense stay dense (`dense_layers`),
    and `schedule.target_speedup` makes each stage aim at a predicted speedup. Every stage's predicted speedup, whole
    model and per layer, is reported wherever the pattern has a latency model.
    """

    def __init__(
        self,
        pattern: Mapping[str, Any],
        schedule: Mapping[str, Any],
        importance: Mapping[str, Any],
        scope: str = "global",
        max_layer_sparsity: float = 1.0,
        exclude: list[str] | None = None,
        monitor: str | None = None,
        plot_dir: str | None = None,
        allocation: str = "importance",
        latency: Mapping[str, Any] | None = None,
    ) -> None:
        self.pattern_config = dict(pattern)
        self.pattern = pattern_from_config(self.pattern_config)
        self.pattern.check_kernel_options()
        self.schedule = Schedule(**dict(schedule))
        self.importance = dict(importance)
        if self.importance.get("kind") not in KINDS:
            raise UserError(f"importance.kind must be one of {list(KINDS)}, got {self.importance.get('kind')!r}")
        fixed = self.pattern.fixed_sparsity()
        if fixed is not None and abs(fixed - self.schedule.target) > 1e-9:
            raise UserError(f"pattern {self.pattern.name} fixes sparsity at {fixed:g}; set schedule.target={fixed:g}")
        self.scope = Scope(scope, max_layer_sparsity)  # type: ignore[arg-type]
        check_allocation(allocation, self.pattern.name, self.scope, self.schedule.target_speedup)
        self.allocation = allocation
        self.latency = LatencyOptions(**dict(latency or {}))
        self.latency_model: LatencyModel | None = None  # built at the first need, from one training batch
        self.dense_layers: list[str] = []  # pruned layers kept dense: their sparse call would be slower
        self.predictions: dict[int, dict[str, Any]] = {}  # predicted speedups of each stage
        self.exclude = exclude
        self.monitor = monitor
        self.plot_dir = Path(plot_dir) if plot_dir else None
        self.completed_stage = -1
        self.codes: dict[str, torch.Tensor] = {}
        self.stage_results: list[dict[str, Any]] = []
        self.weights: list[PrunableWeight] = []
        self.masked: MaskedWeights | None = None
        self._hooks: list[Any] = []

    @property
    def state_key(self) -> str:
        return PRUNING_STATE_KEY

    # --- set-up -------------------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        exclude = self.exclude if self.exclude is not None else getattr(pl_module, "prune_exclude", [])
        self.weights = find_prunable(pl_module, exclude)
        if not self.weights:
            raise UserError("no prunable weights left after `exclude`; check the exclude patterns")
        self.pattern.check_fits({w.name: w.gemm_shape for w in self.weights})
        self.monitor = self.monitor or getattr(pl_module, "monitor", "val/acc")
        too_short = trainer.max_epochs is not None and trainer.max_epochs < self.schedule.total_epochs
        if stage == "fit" and too_short and not trainer.fast_dev_run:
            log.warning(
                "the schedule needs %d epochs but trainer.max_epochs=%d: training stops before the final target",
                self.schedule.total_epochs,
                trainer.max_epochs,
            )

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.codes:  # resumed: the checkpoint's masks, exactly
            self._install_masks()
        speedups = self.schedule.stage_speedups
        if speedups and self.completed_stage < len(speedups) - 1:  # out of reach: say so before training
            model = self._latency_model(trainer, pl_module)
            shapes = {w.name: w.gemm_shape for w in self.weights}
            bound = best_case(model, shapes, self.scope.max_layer_sparsity)  # type: ignore[arg-type]
            if bound.speedup < speedups[-1]:
                raise UserError(unreachable_message(model, speedups[-1], bound))  # type: ignore[arg-type]
        for optimizer in trainer.optimizers:
            self._hooks.append(optimizer.register_step_post_hook(lambda *_: self._apply()))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    # --- pruning ------------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.fast_dev_run:  # one epoch only: run every stage now so the whole path is exercised
            for stage in range(self.completed_stage + 1, len(self.schedule.stage_targets)):
                self._prune_stage(trainer, pl_module, stage)
            return
        stage = self.schedule.stage_starting_at(trainer.current_epoch)
        if stage is not None and stage > self.completed_stage:
            self._prune_stage(trainer, pl_module, stage)

    def _prune_stage(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: int) -> None:
        if self.completed_stage < 0:  # still dense; a resumed run that pruned before restores completed_stage
            pl_module.on_pruning_start()
        target = self.schedule.stage_targets[stage]
        scores = self._scores(trainer, pl_module)
        model = self._latency_model(trainer, pl_module)
        if self.allocation == "latency" and model is not None:
            allocator = LatencyAllocator(self.pattern, model, self.scope)
            speedups = self.schedule.stage_speedups
            if speedups:  # the sparsity each stage needs is what the search finds; apriori tunes at that
                allocation = allocator.for_speedup(scores, speedups[stage], None)
            else:
                allocation = allocator.allocate(scores, target, self.schedule.target)
            self.codes, self.dense_layers = allocation.codes, allocation.dense_layers
        else:
            self.codes = self.pattern.keep_codes(scores, target, self.scope, self.schedule.target)
        self._install_masks()
        self.completed_stage = stage
        if model is not None:
            self.predictions[stage] = stage_prediction(model, layer_sparsity(self.codes), self.dense_layers)
        achieved = overall_sparsity(self.codes)
        log.info("stage %d: pruned to %.4f (target %.4f) with %s", stage, achieved, target, self.pattern.name)
        self._log_sparsity(trainer, pl_module, stage)

    def _latency_model(self, trainer: L.Trainer, pl_module: L.LightningModule) -> LatencyModel | None:
        """The run's latency model, built once from one training batch's forward pass (drawn without moving any
        generator); None where the pattern has none and allocation does not need one."""
        if self.latency_model is None:
            datamodule = getattr(trainer, "datamodule", None)
            loader_batch = getattr(datamodule, "batch_size", None)
            with preserved_random_state():  # the transfer augments images from the global generators too
                batch = transfer_batch(next(iter(trainer.train_dataloader)), pl_module, datamodule)
            self.latency_model = self.latency.build(
                pl_module, batch, loader_batch, self.weights, self.pattern_config, required=self.allocation == "latency"
            )
        return self.latency_model

    def _scores(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, torch.Tensor]:
        if self.importance["kind"] == "magnitude":
            return magnitude_scores(self.weights)
        datamodule = getattr(trainer, "datamodule", None)
        batches = (transfer_batch(batch, pl_module, datamodule) for batch in trainer.train_dataloader)
        with trainer.precision_plugin.forward_context():
            scores = taylor_scores(self.weights, pl_module.compute_loss, batches, int(self.importance["num_batches"]))
        return reduce_scores(scores, lambda t: trainer.strategy.reduce(t.to(pl_module.device), reduce_op="mean"))

    def _install_masks(self) -> None:
        self.masked = MaskedWeights(self.weights, self.codes)
        self._apply()

    def _apply(self) -> None:
        if self.masked is not None:
            self.masked.apply()

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any) -> None:
        if self.masked is not None:
            self.masked.mask_gradients()

    # --- reporting ----------------------------------------------------------------------------------
    def _log_sparsity(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: int) -> None:
        per_layer = layer_sparsity(self.codes)
        metrics = {f"sparsity/{name}": value for name, value in per_layer.items()}
        metrics["sparsity/overall"] = overall_sparsity(self.codes)
        metrics["prune/stage"] = float(stage)
        if stage in self.predictions:
            metrics["predicted/speedup"] = self.predictions[stage]["speedup"]
            layers = self.predictions[stage]["layers"]
            metrics |= {f"predicted/speedup/{name}": value for name, value in layers.items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
        if trainer.is_global_zero:
            self._plot_layers(trainer, per_layer, stage)

    def _plot_layers(self, trainer: L.Trainer, per_layer: Mapping[str, float], stage: int) -> None:
        overall = overall_sparsity(self.codes)
        title = f"{self.pattern.name} stage {stage}: {100 * overall:.1f}% overall"
        figure = layer_sparsity_figure(per_layer, title, overall)
        directory = self.plot_dir or Path(trainer.default_root_dir) / "plots"
        path = save_figure(figure, directory / f"layer_sparsity_stage{stage}.png")
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_image(key="sparsity/per_layer", images=[str(path)], step=trainer.global_step)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        phase_end = trainer.fast_dev_run or self.schedule.is_phase_end(trainer.current_epoch)
        if trainer.sanity_checking or not phase_end:
            return
        metric = trainer.callback_metrics.get(self.monitor)
        stage = self.completed_stage
        result = {
            "stage": stage,
            "target": 0.0 if stage < 0 else self.schedule.stage_targets[stage],
            "sparsity": overall_sparsity(self.codes),
            self.monitor: float(metric) if metric is not None else float("nan"),
        }
        speedups = self.schedule.stage_speedups
        if speedups:
            result["target_speedup"] = 1.0 if stage < 0 else speedups[stage]
        if stage in self.predictions or (stage < 0 and self.latency_model is not None):
            prediction = self.predictions.get(stage) or {"speedup": 1.0, "layers": {}}
            result["predicted_speedup"] = prediction["speedup"]
            result["predicted_layer_speedup"] = prediction["layers"]
        if self.allocation == "latency":
            result["dense_layers"] = list(self.dense_layers) if stage >= 0 else []
        self.stage_results = [r for r in self.stage_results if r["stage"] != stage] + [result]
        logged = {"stage/sparsity": result["sparsity"], f"stage/{self.monitor}": result[self.monitor]}
        if "predicted_speedup" in result:
            logged["stage/predicted_speedup"] = result["predicted_speedup"]
        pl_module.log_dict(logged)
        log.info(
            "stage %d done: sparsity %.4f, %s %.4f%s", stage, result["sparsity"], self.monitor, result[self.monitor],
            f", predicted {result['predicted_speedup']:.2f}x dense" if "predicted_speedup" in result else "",
        )  # fmt: skip

    # --- checkpoint ---------------------------------------------------------------------------------
    def run_settings(self) -> dict[str, dict[str, Any]]:
        """What fixes the masks a run makes: resuming under other settings would mix two pruning runs. Importance-only
        allocation adds no group, so checkpoints written before allocation existed resume as they were."""
        settings = {
            "pattern": dict(self.pattern_config),
            "schedule": {**asdict(self.schedule), "targets": list(self.schedule.targets)},
            "scope": asdict(self.scope),
        }
        if self.allocation != "importance":
            settings["allocation"] = {"kind": self.allocation, **asdict(self.latency)}
        return settings

    def state_dict(self) -> dict[str, Any]:
        return {
            "completed_stage": self.completed_stage,
            "codes": {name: codes.clone() for name, codes in self.codes.items()},
            "stage_results": list(self.stage_results),
            "dense_layers": list(self.dense_layers),
            "predictions": dict(self.predictions),
            **self.run_settings(),
        }

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        """Before `load_state_dict`: the checkpoint continues this run, and its masks fit this model and pattern."""
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if state is not None:
            check_same_settings(state, self.run_settings(), str(trainer.ckpt_path))
            check_codes(state["codes"], self.weights, self.pattern, f"ckpt_path {trainer.ckpt_path}")

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.completed_stage = int(state_dict["completed_stage"])
        self.codes = dict(state_dict["codes"])
        self.stage_results = list(state_dict["stage_results"])
        self.dense_layers = list(state_dict.get("dense_layers", []))
        self.predictions = {int(stage): p for stage, p in state_dict.get("predictions", {}).items()}


SETTING_KEYS = {  # how each saved setting is spelled on the command line
    "pattern": "pattern.{}",
    "schedule": "schedule.{}",
    "scope": "callbacks.staged_pruning.{}",
    "allocation": "callbacks.staged_pruning.{}",
}
GROUP_KEYS = {  # a saved setting's name -> its key under the group's prefix, where they differ
    "scope": {"kind": "scope"},
    "allocation": {"kind": "allocation", "table": "latency.table", "batch_size": "latency.batch_size"},
}


def check_same_settings(saved: Mapping[str, Any], current: Mapping[str, Mapping[str, Any]], path: str) -> None:
    """Refuse to resume checkpoint `path` under another pattern, pattern option, schedule or scope than its own."""
    differences = []
    for group in (g for g in SETTING_KEYS if g in current or g in saved):
        values, before = current.get(group) or {}, saved.get(group) or {}
        names = sorted(set(values) | set(before), key=str)
        if group == "pattern" and before.get("name") != values.get("name"):
            names = ["name"]  # another pattern: its options are another matter
        elif group == "pattern":  # an option added since the checkpoint was written had its default then
            before = {**pattern_defaults(str(before.get("name"))), **before}
        for name in names:
            if before.get(name) != values.get(name):
                key = SETTING_KEYS[group].format(GROUP_KEYS.get(group, {}).get(name, name))
                differences.append(f"{key}={before.get(name)!r} in the checkpoint, {values.get(name)!r} now")
    if differences:
        raise UserError(
            f"ckpt_path {path} was pruned under other settings: {'; '.join(differences)}. Resume with the checkpoint's "
            f"settings, or start a new pruning run from its weights with init_ckpt={path}"
        )
