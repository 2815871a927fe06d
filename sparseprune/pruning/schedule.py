"""The gradual pruning schedule: dense epochs, then stages of (prune to a target, fine-tune)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sparseprune.config_types import check_dataclass
from sparseprune.errors import UserError
from sparseprune.pruning.ranking import check_sparsity


@dataclass(frozen=True)
class Schedule:
    """Stage i prunes at the start of epoch `dense_epochs + i * finetune_epochs` to `stage_targets[i]`.

    `kind` "linear" spreads the target evenly, "cubic" prunes fast early and slowly late (Zhu & Gupta, 2017),
    "list" takes `targets` as given. With `target_speedup` the stages aim at predicted speedups instead, spread from
    1 to it the same way (`stage_speedups`), and latency-aware allocation finds the sparsity that reaches each.
    """

    target: float = 0.75
    stages: int = 3
    kind: str = "cubic"
    targets: Sequence[float] = field(default_factory=tuple)
    dense_epochs: int = 1
    finetune_epochs: int = 1
    target_speedup: float | None = None

    def __post_init__(self) -> None:
        check_dataclass(self, "schedule.")
        check_sparsity(self.target)
        if self.kind not in ("linear", "cubic", "list"):
            raise UserError(f"schedule kind must be 'linear', 'cubic' or 'list', got {self.kind!r}")
        if self.kind != "list" and self.stages < 0:
            raise UserError(f"schedule.stages must be >= 0 (0 = dense training only), got {self.stages}")
        if self.dense_epochs < 0 or self.finetune_epochs < 1:
            raise UserError(
                f"need dense_epochs >= 0 and finetune_epochs >= 1, got {self.dense_epochs}, {self.finetune_epochs}"
            )
        if self.kind == "list":
            self._check_list()
        if self.target_speedup is not None:
            self._check_speedup()

    def _check_list(self) -> None:
        if not self.targets:
            raise UserError("schedule kind 'list' needs a non-empty `targets` list")
        for value in self.targets:
            check_sparsity(value)
        if any(b < a for a, b in zip(self.targets, self.targets[1:], strict=False)):
            raise UserError(f"schedule targets must not decrease, got {list(self.targets)}")
        if abs(self.targets[-1] - self.target) > 1e-9:
            raise UserError(f"the last of schedule.targets ({self.targets[-1]}) must equal target ({self.target})")

    def _check_speedup(self) -> None:
        if self.kind == "list":
            raise UserError(
                "schedule.target_speedup spreads its stages linearly or cubically; use kind linear or cubic"
            )
        if not self.target_speedup > 1.0:
            raise UserError(f"schedule.target_speedup must be above 1 (1 = the dense model), got {self.target_speedup}")

    def _fractions(self) -> list[float]:
        fractions = [(i + 1) / self.stages for i in range(self.stages)]
        if self.kind == "cubic":
            fractions = [1.0 - (1.0 - f) ** 3 for f in fractions]
        return fractions

    @property
    def stage_targets(self) -> list[float]:
        if self.kind == "list":
            return [float(t) for t in self.targets]
        return [self.target * f for f in self._fractions()]

    @property
    def stage_speedups(self) -> list[float] | None:
        """Each stage's predicted speedup target, or None when the stages aim at sparsities."""
        if self.target_speedup is None:
            return None
        return [1.0 + (self.target_speedup - 1.0) * f for f in self._fractions()]

    @property
    def total_epochs(self) -> int:
        return self.dense_epochs + len(self.stage_targets) * self.finetune_epochs

    def stage_starting_at(self, epoch: int) -> int | None:
        """The stage that prunes at the start of `epoch`, if any."""
        offset = epoch - self.dense_epochs
        if offset < 0 or offset % self.finetune_epochs:
            return None
        stage = offset // self.finetune_epochs
        return stage if stage < len(self.stage_targets) else None

    def is_phase_end(self, epoch: int) -> bool:
        """True for the last epoch of the dense phase or of a stage: where per-stage accuracy is read."""
        return self.stage_starting_at(epoch + 1) is not None or epoch + 1 == self.total_epochs
