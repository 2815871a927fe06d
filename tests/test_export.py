"""Export round trips: every pattern's packed form computes exactly what the masked dense weight computes,
survives saving, and export.py checks a whole pruned model against its masked dense twin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hydra_runs import PATTERN_OVERRIDES, TINY_VGG, compose_config
from safetensors.torch import load_file

from sparseprune.app.training import train
from sparseprune.errors import UserError
from sparseprune.export.packing import pack_layer, packed_from_tensors
from sparseprune.export.pipeline import against_best_dense, export, pack_model, predicted_speedup
from sparseprune.export.sparse_modules import SparseConv2d, StorageOrderMaxPool2d, im2col
from sparseprune.pruning.gemm_view import find_prunable
from sparseprune.pruning.patterns import build_pattern, keep_mask

PATTERN_CONFIGS = {
    "ew": {"name": "ew"},
    "vw": {"name": "vw", "vector": 16},
    "bw": {"name": "bw", "block_k": 16, "block_n": 16},
    "tw": {"name": "tw", "granularity": 32},
    "tew": {"name": "tew", "granularity": 32, "delta": 0.03},
    "nm": {"name": "nm", "n": 2, "m": 8},
    "nm-vector": {"name": "nm", "n": 1, "m": 4, "vector": 16},
    "bw-tw": {"name": "bw", "block_k": 8, "block_n": 32},
    "shflbw": {"name": "shflbw", "block": 32},
    "nm-block": {"name": "nm", "n": 1, "m": 2, "block": 32},
}


def fits(config: dict, shape: tuple[int, int]) -> bool:
    """Whether the pattern's sizes fit a layer of `shape` (blocks 32 wide do not divide N = 48)."""
    try:
        build_pattern(config["name"], **{k: v for k, v in config.items() if k != "name"}).check_fits({"w": shape})
    except UserError:
        return False
    return True


def masked_layer(config: dict, shape: tuple[int, int], sparsity: float, seed: int):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(shape, generator=generator)
    options = {k: v for k, v in config.items() if k != "name"}
    pattern = build_pattern(config["name"], **options)
    target = pattern.fixed_sparsity() or sparsity
    codes = pattern.keep_codes({"w": weight.abs()}, target)["w"]
    return weight * keep_mask(codes), codes


@pytest.mark.parametrize("sparsity", [0.5, 0.9])
@pytest.mark.parametrize("shape", [(64, 48), (144, 96), (256, 32)])
@pytest.mark.parametrize("name", sorted(PATTERN_CONFIGS))
def test_packed_matmul_equals_masked_dense(name: str, shape: tuple[int, int], sparsity: float) -> None:
    config = PATTERN_CONFIGS[name]
    if not fits(config, shape):
        pytest.skip(f"{name} does not fit {shape}")
    weight, codes = masked_layer(config, shape, sparsity, seed=hash((name, shape)) % 1000)
    packed = pack_layer(weight, codes, config)
    x = torch.randn(7, shape[0])
    bias = torch.randn(shape[1])
    expected = x.double() @ weight.double() + bias.double()
    torch.testing.assert_close(packed.matmul(x, bias).double(), expected, rtol=1e-5, atol=1e-5)
    reloaded = packed_from_tensors(packed.format_name, packed.tensors(), json.loads(json.dumps(packed.metadata())))
    torch.testing.assert_close(reloaded.matmul(x, bias), packed.matmul(x, bias), rtol=0, atol=0)
    half = packed.to("cpu", torch.float16)
    assert {k: t.dtype for k, t in half.tensors().items() if not t.is_floating_point()} == {
        k: t.dtype for k, t in packed.tensors().items() if not t.is_floating_point()
    }


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", ["tw", "tew", "nm", "nm-vector", "ew", "bw-tw", "shflbw"])
def test_sparse_conv_equals_masked_dense_conv(name: str, batch: int) -> None:
    """SparseConv2d against F.conv2d on the masked weight: the feature-major route (TW, TEW, N:M) and the row-major
    one (EW), one image and several, with stride and padding that make the output grid ragged."""
    conv = torch.nn.Conv2d(8, 32, kernel_size=3, stride=2, padding=1)
    config = PATTERN_CONFIGS[name]
    weight_kn, codes = masked_layer(config, (8 * 9, 32), 0.5, seed=5)
    packed = pack_layer(weight_kn, codes, config)
    sparse = SparseConv2d(packed, conv.bias, conv)
    x = torch.randn(batch, 8, 11, 9)
    masked = weight_kn.t().reshape(conv.weight.shape)
    expected = F.conv2d(x.double(), masked.double(), conv.bias.double(), stride=2, padding=1)
    y = sparse(x)
    assert y.shape == expected.shape
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("feature_major", [True, False])
@pytest.mark.parametrize(
    ("kernel_size", "dilation", "padding", "stride"),
    [((3, 3), (1, 1), (1, 1), (1, 1)), ((3, 2), (2, 1), (0, 2), (2, 3)), ((1, 1), (1, 1), (0, 0), (1, 1))],
)
def test_im2col_matches_unfold(kernel_size, dilation, padding, stride, feature_major: bool) -> None:
    """One strided copy gives F.unfold's matrix exactly, also from a non-contiguous input (a strided NCHW view, as
    SparseConv2d returns for several images)."""
    x = torch.randn(3, 12, 9, 10).transpose(2, 3)[:, 1:]  # (3, 11, 10, 9)
    assert not x.is_contiguous()
    columns, out_h, out_w = im2col(x, kernel_size, dilation, padding, stride, feature_major)
    expected = F.unfold(x, kernel_size, dilation, padding, stride)  # (B, K, L)
    assert out_h * out_w == expected.shape[2]
    expected = (
        expected.transpose(0, 1).reshape(expected.shape[1], -1)
        if feature_major
        else expected.transpose(1, 2).reshape(-1, expected.shape[1])
    )
    assert torch.equal(columns, expected)


def test_storage_order_max_pool_matches_max_pool() -> None:
    """Same values as nn.MaxPool2d on NCHW and on the channel-major view; the latter stays channel-major."""
    channel_major = torch.randn(5, 3, 9, 8).transpose(0, 1)  # (B, C, H, W) = (3, 5, 9, 8) stored as (C, B, H, W)
    for args in ((2, 2), (3, 2, 1, 1, False, True)):
        pool, reference = StorageOrderMaxPool2d(*args), torch.nn.MaxPool2d(*args)
        for x in (channel_major, channel_major.contiguous()):
            assert torch.equal(pool(x), reference(x))
        assert pool(channel_major).transpose(0, 1).is_contiguous()


def test_sparse_conv_refuses_what_has_no_im2col_view() -> None:
    packed = pack_layer(*masked_layer(PATTERN_CONFIGS["tw"], (72, 32), 0.5, seed=1), PATTERN_CONFIGS["tw"])
    for conv in (torch.nn.Conv2d(8, 32, 3, padding="same"), torch.nn.Conv2d(8, 32, 3, padding_mode="reflect")):
        with pytest.raises(ValueError, match="explicit zero padding"):
            SparseConv2d(packed, None, conv)
    with pytest.raises(ValueError, match="smaller than the 3 x 3 kernel"):
        im2col(torch.randn(1, 2, 2, 5), (3, 3), (1, 1), (0, 0), (1, 1), feature_major=True)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny but real pruned run per pattern (1 epoch, 2 batches), checkpoint on disk."""
    paths = {}
    for pattern, overrides in PATTERN_OVERRIDES.items():
        out = tmp_path_factory.mktemp(f"run-{pattern}")
        extra = ["schedule.dense_epochs=0", "schedule.stages=1", "trainer.limit_train_batches=2",
                 "trainer.limit_val_batches=1", "importance=magnitude"]  # fmt: skip
        summary = train(compose_config("train", TINY_VGG + overrides + extra, out))
        paths[pattern] = Path(summary["checkpoint"])
    return paths


@pytest.mark.parametrize("pattern", sorted(PATTERN_OVERRIDES))
def test_export_round_trip_whole_model(pattern: str, checkpoints: dict[str, Path], tmp_path: Path) -> None:
    cfg = compose_config(
        "export",
        [f"ckpt={checkpoints[pattern]}", f"out_dir={tmp_path}", "repeats=2", "warmup=1", "batch_size=8",
         "layer_choice=fastest"],
        tmp_path,
    )  # fmt: skip
    report = export(cfg)
    assert report["check"]["fp32_rel_error"] <= 1e-5
    assert report["not_swapped"] == []
    assert report["timing"]["sparse"]["median_ms"] > 0
    swapped = {name.removesuffix(".weight") for name in report["layers"]}
    assert set(report["layer_timing"]) == swapped
    first = [name for name, row in report["layer_timing"].items() if row["fastest_speedup"] < 1.0]
    retimed = report["fastest"]["retimed_layers"]  # layers whose input storage the first choice changed
    assert not set(retimed) & set(first)
    timings = {**report["layer_timing"], **retimed}
    dense_layers = [name for name, row in timings.items() if row["fastest_speedup"] < 1.0]
    assert report["fastest"]["dense_layers"] == dense_layers
    assert report["fastest"]["sp24_tiles"] == {
        name: row["fastest_tile"]
        for name, row in timings.items()
        if name not in dense_layers and row["fastest_tile"] != "auto"
    }
    timed_tolerance = 1e-5 if report["dtype"] == "float32" else 2e-3  # fp16 on a GPU
    assert report["fastest"]["timed_dtype_rel_error"] <= timed_tolerance
    assert report["fastest"]["timing"]["median_ms"] > 0
    meta = json.loads((tmp_path / "packed.json").read_text())
    tensors = load_file(tmp_path / "packed.safetensors")
    assert meta["pattern"]["name"] == pattern.partition("-")[0] and meta["layers"]
    if pattern in ("bw-tw", "shflbw"):  # blocks as wide as a TW tile run on the TW kernel path
        assert {layer["format"] for layer in meta["layers"].values()} == {"tw"}
    assert report["folded_batch_norms"] and meta["folded_batch_norms"] == report["folded_batch_norms"]
    assert not any(key.startswith(f"dense::{name}.") for name in meta["folded_batch_norms"] for key in tensors)
    for name, layer in meta["layers"].items():
        parts = {key.split("::")[2]: t for key, t in tensors.items() if key.startswith(f"packed::{name}::")}
        packed = packed_from_tensors(layer["format"], parts, layer["metadata"])
        assert packed.nbytes() == layer["packed_bytes"]


def test_export_without_folding(
    checkpoints: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fold_batch_norm=false times the norms as trained; the check holds either way. On a CPU the table says that
    its sparse rows are the reference ops."""
    cfg = compose_config("export", [f"ckpt={checkpoints['tw']}", f"out_dir={tmp_path}", "repeats=1", "warmup=0",
                                    "batch_size=4", "fold_batch_norm=false"], tmp_path)  # fmt: skip
    report = export(cfg)
    assert report["folded_batch_norms"] == []
    assert report["check"]["fp32_rel_error"] <= 1e-5
    assert "on a CPU no sparse kernel runs" in " ".join(capsys.readouterr().out.split())


def test_export_times_compiled_rows_against_the_best_dense(
    checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compile=true adds the dense model under max-autotune and the compiled twin, each compiled before any timing,
    and scores every sparse row against the faster dense one (dynamo's eager backend stands in for inductor here)."""
    real_compile, modes = torch.compile, []

    def eager_backend(fn, mode=None, dynamic=None):
        modes.append(mode)
        return real_compile(fn, backend="eager", dynamic=dynamic)

    monkeypatch.setattr(torch, "compile", eager_backend)
    cfg = compose_config("export", [f"ckpt={checkpoints['tw']}", f"out_dir={tmp_path}", "repeats=2", "warmup=0",
                                    "batch_size=4", "compile=true"], tmp_path)  # fmt: skip
    report = export(cfg)
    assert modes == ["max-autotune-no-cudagraphs", None]
    medians = {name: row["median_ms"] for name, row in report["timing"].items()}
    assert set(medians) == {"dense", "sparse", "dense compiled", "sparse compiled"}
    best = report["against_best_dense"]
    assert best["baseline"] == min(("dense", "dense compiled"), key=medians.__getitem__)
    assert best["speedup"] == {name: best["baseline_ms"] / medians[name] for name in ("sparse", "sparse compiled")}
    with pytest.raises(UserError, match="compile must be auto, true or false"):
        export(compose_config("export", [f"ckpt={checkpoints['tw']}", "compile=maybe"], tmp_path))


def test_against_best_dense_takes_the_faster_dense_row() -> None:
    medians = {"dense": 2.0, "dense compiled": 1.6, "sparse": 1.0, "sparse compiled": 0.8}
    assert against_best_dense(medians) == {"baseline": "dense compiled", "baseline_ms": 1.6,
                                           "speedup": {"sparse": 1.6, "sparse compiled": 2.0}}  # fmt: skip


def test_export_bad_checkpoints(tmp_path: Path) -> None:
    def run(ckpt: Path) -> None:
        export(compose_config("export", [f"ckpt={ckpt}", f"out_dir={tmp_path}"], tmp_path))

    with pytest.raises(UserError, match="does not exist"):
        run(tmp_path / "missing.ckpt")
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"not a checkpoint at all")
    with pytest.raises(UserError, match="corrupt"):
        run(corrupt)
    unpruned = tmp_path / "dense.ckpt"
    torch.save({"state_dict": {}, "callbacks": {}}, unpruned)
    with pytest.raises(UserError, match="no pruning masks"):
        run(unpruned)
    with pytest.raises(UserError, match="layer_choice must be one of"):
        export(compose_config("export", [f"ckpt={unpruned}", "layer_choice=dense"], tmp_path))


def test_layers_kept_dense_by_latency_allocation_stay_unpacked_and_the_last_prediction_is_reported() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    weights = find_prunable(net, ())
    scores = {w.name: torch.rand(w.param.shape[1], w.param.shape[0]) for w in weights}
    codes = build_pattern("ew").keep_codes(scores, 0.5)
    predictions = {0: {"speedup": 1.3, "layers": {}, "source": "analytic"}, 1: {"speedup": 1.7, "layers": {}}}
    state = {"codes": codes, "pattern": {"name": "ew"}, "dense_layers": ["2.weight"], "predictions": predictions}
    assert sorted(pack_model(weights, state)) == ["0.weight"]
    assert predicted_speedup(state) == {"stage": 1, "speedup": 1.7, "source": "latency model"}
    assert predicted_speedup({"codes": codes}) is None
