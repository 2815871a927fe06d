"""The package's layers: pruning stands on the shared modules alone, and only the commands import the application."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sparseprune"
SHARED = {"errors", "files", "checkpoints", "config_types"}
COMMANDS = {"sweeps", "report", "calibrate"}  # `python -m sparseprune.<command>`: application code like app/


def imported_modules(path: Path) -> set[str]:
    """The sparseprune modules one file imports, as dotted names below the package."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sparseprune"):
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names if alias.name.startswith("sparseprune"))
    return {name.removeprefix("sparseprune.") for name in names if name != "sparseprune"}


def package_files(under: str = "") -> list[Path]:
    return sorted((PACKAGE / under).rglob("*.py"))


@pytest.mark.parametrize("path", package_files("pruning"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pruning_imports_only_itself_and_the_shared_modules(path: Path) -> None:
    outside = {name for name in imported_modules(path) if name.split(".")[0] not in {"pruning", *SHARED}}
    assert not outside, f"{path.relative_to(PACKAGE)} imports {sorted(outside)}"


def test_only_the_commands_import_the_application() -> None:
    importers = {
        str(path.relative_to(PACKAGE))
        for path in package_files()
        if path.relative_to(PACKAGE).parts[0] != "app"
        and any(name.split(".")[0] == "app" for name in imported_modules(path))
    }
    assert importers <= {f"{command}.py" for command in COMMANDS}, sorted(importers)


def test_the_layer_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from sparseprune.export import swap\nimport sparseprune.app.cli\n")
    assert imported_modules(module) == {"export", "export.swap", "app.cli"}
