"""Every GPU benchmark and probe module imports on a machine without a GPU, so a broken import shows in CI (CPU)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench"
BENCH_FILES = [*BENCH.glob("*.py"), *BENCH.glob("probes/*.py")]
BENCH_MODULES = sorted(".".join(p.relative_to(BENCH.parent).with_suffix("").parts) for p in BENCH_FILES)


@pytest.mark.parametrize("name", BENCH_MODULES)
def test_bench_module_imports_without_a_gpu(name: str) -> None:
    importlib.import_module(name.removesuffix(".__init__"))


def test_ncu_default_cases_are_named_cases() -> None:
    from bench.probes.ncu_kernels import CASES, DEFAULT_CASES

    assert set(DEFAULT_CASES) <= set(CASES)
