"""The pattern interface and its registry.

A pattern turns importance scores (one K x N tensor per layer, GEMM view) into *keep codes* at a target
sparsity: uint8 tensors with 0 = pruned, 1 = kept by the pattern's structure, 2 = kept as an element-wise
residual (only TEW uses 2; its packer needs to tell the tile part from the residual).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

import torch

from sparseprune.config_types import check_fields, constructor_hints
from sparseprune.errors import UserError
from sparseprune.pruning.ranking import Scope

PRUNED, KEPT, RESIDUAL = 0, 1, 2
TW_TILE_WIDTHS = (32, 64, 128)  # the tile widths the TW kernels take: patterns whose blocks run as TW tiles use them
PATTERNS: dict[str, type[Pattern]] = {}


class Pattern(ABC):
    """Scores -> keep codes. Subclasses register themselves under `name`."""

    name: ClassVar[str]
    code_values: ClassVar[frozenset[int]] = frozenset({PRUNED, KEPT})  # the keep codes its masks may hold

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            PATTERNS[cls.name] = cls

    def check_kernel_options(self) -> None:  # noqa: B027 (optional hook)
        """Raise UserError for options the sparse kernels never take, whatever the layers (a sweep checks them
        before any model exists). The pattern math itself takes them, so tests can use tiny hand-made tiles."""

    def check_fits(self, shapes: Mapping[str, tuple[int, int]]) -> None:  # noqa: B027 (optional hook)
        """Raise UserError when the pattern's sizes do not fit a layer's (K, N); most patterns fit any."""

    def fixed_sparsity(self) -> float | None:
        """The sparsity the pattern itself dictates (N:M), or None when the schedule chooses it."""
        return None

    @abstractmethod
    def keep_codes(
        self,
        scores: Mapping[str, torch.Tensor],
        sparsity: float,
        scope: Scope | str = "global",
        final_sparsity: float | None = None,
    ) -> dict[str, torch.Tensor]:
        """Keep codes per layer at `sparsity`; `final_sparsity` is the run's end target (apriori tuning)."""


def build_pattern(name: str, **options: object) -> Pattern:
    """Look a pattern up by name; unknown names and options give one clear line."""
    if name not in PATTERNS:
        raise UserError(f"unknown pattern {name!r}; choose one of {sorted(PATTERNS)}")
    pattern_class = PATTERNS[name]
    accepted = set(inspect.signature(pattern_class.__init__).parameters) - {"self"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise UserError(f"pattern {name!r} has no option {unknown[0]!r}; its options: {sorted(accepted)}")
    check_fields(options, constructor_hints(pattern_class), "pattern.")
    return pattern_class(**options)


def pattern_defaults(name: str) -> dict[str, object]:
    """The default of every option of the pattern `name` (none for an unknown name): what a checkpoint written
    before an option existed was pruned with."""
    pattern_class = PATTERNS.get(name)
    if pattern_class is None:
        return {}
    parameters = inspect.signature(pattern_class.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def pattern_from_config(config: Mapping[str, object]) -> Pattern:
    """The pattern a `pattern` config group (or a checkpoint's copy of it) describes: its name and options."""
    options = {key: value for key, value in config.items() if key != "name"}
    return build_pattern(str(config.get("name", "")), **options)


def keep_mask(codes: torch.Tensor) -> torch.Tensor:
    """Boolean keep mask from keep codes."""
    return codes != PRUNED


def require_multiple(value: int, step: int, what: str, layer: str) -> None:
    if value % step:
        raise UserError(f"{what}={step} does not fit layer {layer!r}: its size {value} is not a multiple of it")


def require_positive(**values: int) -> None:
    for key, value in values.items():
        if not isinstance(value, int) or value <= 0:
            raise UserError(f"{key} must be a positive integer, got {value!r}")
