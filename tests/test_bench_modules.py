"""Every GPU benchmark module imports on a machine without a GPU, so a broken import shows in CI (CPU)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH_MODULES = sorted(p.stem for p in (Path(__file__).parents[1] / "bench").glob("*.py"))


@pytest.mark.parametrize("name", BENCH_MODULES)
def test_bench_module_imports_without_a_gpu(name: str) -> None:
    importlib.import_module(f"bench.{name}")


def test_ncu_default_cases_are_named_cases() -> None:
    from bench.ncu_kernels import CASES, DEFAULT_CASES

    assert set(DEFAULT_CASES) <= set(CASES)
