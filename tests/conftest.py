"""Test kinds told apart by marker: `e2e` for the modules that train or export through the real Hydra configs
(most of the suite's time), `gpu` for those that need CUDA; `make test-fast` runs the rest."""

from __future__ import annotations

import pytest

E2E_MODULES = {"test_train_e2e", "test_text_e2e", "test_export", "test_sweeps"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__.rpartition(".")[2] in E2E_MODULES:
            item.add_marker(pytest.mark.e2e)
