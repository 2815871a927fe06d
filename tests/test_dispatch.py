"""Python's copy of the kernels' constants (formats/limits.py) against the C++ side: the headers parsed here, so CI
fails on a disagreement without building the extension; the binding's `limits()` exports every one; a build whose
values differ is refused with one error line."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparseprune.errors import UserError
from sparseprune.export.formats import limits
from sparseprune.export.formats.extension import load_kernels
from sparseprune.export.formats.limits import LIMITS, check_build, disagreements

KERNELS_EXT = Path(__file__).resolve().parents[1] / "kernels_ext"


def header_value(header: str, name: str) -> int | tuple[int, ...]:
    """The value of `ns::kName` (a constexpr scalar or array) or `ns::Enum::kName` (an enumerator) in the header."""
    text = (KERNELS_EXT / header).read_text()
    parts = name.split("::")[1:]
    if len(parts) == 2:
        enum = re.search(rf"enum class {parts[0]}\b[^{{]*\{{([^}}]*)\}}", text)
        assert enum, f"no enum {parts[0]} in {header}"
        found = re.search(rf"\b{parts[1]}\s*=\s*(\d+)", enum.group(1))
    else:
        found = re.search(rf"constexpr\s+[\w:]+\s+{parts[0]}(?:\[\])?\s*=\s*(\{{[^}}]*\}}|\d+)\s*;", text)
    assert found, f"no {name} in {header}"
    numbers = tuple(int(v) for v in re.findall(r"\d+", found.group(1)))
    return numbers if found.group(1).startswith("{") else numbers[0]


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_python_limits_match_the_headers(name: str) -> None:
    header, value = LIMITS[name]
    assert header_value(header, name) == value, f"{name} in kernels_ext/{header} differs from formats/limits.py"


def test_the_binding_exports_every_limit() -> None:
    exported = set(re.findall(r'out\["([\w:]+)"\]', (KERNELS_EXT / "bindings.cpp").read_text()))
    assert exported == set(LIMITS)


def test_a_disagreeing_build_is_refused() -> None:
    exported = {name: value for name, (_, value) in LIMITS.items()}
    assert disagreements(exported) == []
    stale = SimpleNamespace(limits=lambda: exported | {"tw::kSmallM": 8})
    with pytest.raises(UserError, match=r"tw::kSmallM is 8 there, 16 here.*rebuild"):
        check_build(stale)
    with pytest.raises(UserError, match="exports no limits"):
        check_build(SimpleNamespace())
    without_sp24 = {name: value for name, value in exported.items() if not name.startswith("sp24::")}
    assert disagreements(without_sp24) == []  # a build without CUTLASS exports no 2:4 constants
    assert disagreements({k: v for k, v in without_sp24.items() if k != "nm::kPanel"}) == [
        "nm::kPanel is missing there"
    ]


def test_formats_read_the_table() -> None:
    """The formats' constants are the table's values, not restatements of them."""
    from sparseprune.export import ops
    from sparseprune.export.formats import nm, sp24, tw

    assert tuple(limits.limit(f"tw::{k}") for k in ("kKStep", "kSmallM", "kGemvMaxM", "kMmaGemvMaxM")) == (
        tw.K_STEP,
        tw.SMALL_M,
        tw.CUDA_CORE_MAX_M,
        tw.MMA_GEMV_MAX_M,
    )
    assert tw.KERNELS["wgmma.rows"] == limits.limit("tw::Path::kWgmmaRows")
    assert (nm.SMALL_M, nm.PANEL, nm.KERNEL_MAX_M) == (16, 32, 32)
    assert sp24.TILES["narrow"] == limits.limit("sp24::Tile::kNarrow")
    assert (limits.limit("norm::kHStep"), limits.limit("norm::kMaxH")) == (ops.NORM_H_STEP, ops.NORM_MAX_H)


@pytest.mark.skipif(load_kernels() is None, reason="sparseprune._kernels extension not built")
def test_the_built_extension_agrees() -> None:
    assert disagreements(dict(load_kernels().limits())) == []
