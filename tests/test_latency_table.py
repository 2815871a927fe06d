"""Calibrated latency tables: interpolation, file names, the JSON format and every refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparseprune.errors import UserError
from sparseprune.latency.geometry import LayerGeometry
from sparseprune.latency.predictor import table_model
from sparseprune.latency.table import LatencyTable, LayerTimes, interpolate, kernel_build, read_table, table_name

TW = {"name": "tw", "granularity": 64, "column_share": 0.25, "apriori_top": 0.0, "apriori_last": 0.0}


def _table(gpu: str = "NVIDIA H200", build: str = "0123456789ab") -> LatencyTable:
    layers = {
        "conv.weight": LayerTimes(LayerGeometry(1024, 144, 32, 1, 9), 10.0, [0.0, 0.5, 0.9], [14.0, 8.0, 4.0]),
        "fc.weight": LayerTimes(LayerGeometry(64, 512, 256, 2, 0), 3.0, [0.0, 0.5], [5.0, 4.0]),
    }
    return LatencyTable(gpu, build, dict(TW), 64, "float16", 7.5, layers)


def test_interpolation_is_linear_between_and_beyond_the_measured_sparsities() -> None:
    sparsities, times = [0.0, 0.5, 0.9], [14.0, 8.0, 4.0]
    assert interpolate(sparsities, times, 0.25) == pytest.approx(11.0)
    assert interpolate(sparsities, times, 0.7) == pytest.approx(6.0)
    assert interpolate(sparsities, times, 0.95) == pytest.approx(3.5)  # the last segment, extended
    assert interpolate(sparsities, times, 0.5) == pytest.approx(8.0)
    assert interpolate([0.5, 0.9], [8.0, 1.0], 0.99) == pytest.approx(0.01)  # never below 1% of the fastest
    assert interpolate([0.75], [3.0], 0.1) == 3.0


def test_json_round_trip_and_model_times(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(_table().to_json())
    table = read_table(path)
    assert table == _table()
    model = table_model(table, ["conv.weight"], str(path))
    assert model.dense == {"conv.weight": 10.0}
    assert model.sparse_us("conv.weight", 0.7) == pytest.approx(6.0)
    assert model.other_us == pytest.approx(7.5 + 2 * 3.0)  # fc stays dense in this run: it counts as the rest
    assert model.speedup({"conv.weight": 0.7}) == pytest.approx((13.5 + 10.0) / (13.5 + 6.0))


def test_table_name_slugs_the_gpu() -> None:
    assert table_name("imageclassifier", "NVIDIA H200", "0123456789ab", 64) == (
        "imageclassifier_nvidia-h200_0123456789ab_b64.json"
    )


def test_kernel_build_follows_the_sources(tmp_path: Path) -> None:
    (tmp_path / "a.cu").write_text("kernel one")
    (tmp_path / "notes.md").write_text("not a source")
    first = kernel_build(tmp_path)
    (tmp_path / "notes.md").write_text("edited notes")
    assert kernel_build(tmp_path) == first and len(first) == 12
    (tmp_path / "a.cu").write_text("kernel two")
    assert kernel_build(tmp_path) != first


def test_refuses_another_gpu_build_or_pattern() -> None:
    table = _table()
    table.check_for("NVIDIA H200", "0123456789ab", {**TW, "column_share": 0.5}, "t.json")  # ranking options: fine
    table.check_for(None, "0123456789ab", TW, "t.json")  # no GPU here: the table stands for its own
    with pytest.raises(UserError, match=r"^the latency table was measured on NVIDIA H200, this GPU is NVIDIA H100"):
        table.check_for("NVIDIA H100", "0123456789ab", TW, "t.json")
    with pytest.raises(UserError, match=r"kernel build 0123456789ab, the kernels here are build ffffffffffff"):
        table.check_for("NVIDIA H200", "ffffffffffff", TW, "t.json")
    with pytest.raises(UserError, match=r"'granularity': 64}, this run prunes \{'name': 'tw', 'granularity': 128\}"):
        table.check_for("NVIDIA H200", "0123456789ab", {**TW, "granularity": 128}, "t.json")


def test_refuses_other_layers_and_files(tmp_path: Path) -> None:
    table = _table()
    with pytest.raises(UserError, match=r"has no times for \['head.weight'\]"):
        table.check_layers({"head.weight": LayerGeometry(64, 512, 10)}, "t.json")
    with pytest.raises(UserError, match=r"as a 1024 x 144 x 32 GEMM \(batch 64\), this run's is 2048 x"):
        table.check_layers({"conv.weight": LayerGeometry(2048, 144, 32, 1, 9)}, "t.json")
    (tmp_path / "other.json").write_text('{"rows": []}')
    with pytest.raises(UserError, match="is not a latency table"):
        read_table(tmp_path / "other.json")
    (tmp_path / "broken.json").write_text('{"format": "sparseprune-latency/1", "gpu": "x"}')
    with pytest.raises(UserError, match=r"is not a readable latency table \(KeyError"):
        read_table(tmp_path / "broken.json")
    with pytest.raises(UserError, match="does not exist"):
        read_table(tmp_path / "missing.json")
