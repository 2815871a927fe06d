"""Progress bars of long loops: every item passes through in order, and stdout, where reports go, stays clean."""

from __future__ import annotations

import pytest

from sparseprune.progress import progress


def test_progress_yields_every_item_and_leaves_stdout_alone(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress({"a": 1, "b": 2}.items(), "timing layers")) == [("a", 1), ("b", 2)]
    assert list(progress(iter(range(3)), "packing layers")) == [0, 1, 2]  # no length: a bar without a total
    assert capsys.readouterr().out == ""
