"""export.py's task: checkpoint -> packed weights on disk -> sparse model -> correctness check -> timing."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table

from sparseprune.batches import to_dtype, transfer_batch
from sparseprune.checkpoints import load_checkpoint, load_weights, pruning_state, run_config
from sparseprune.config_types import check_export_config
from sparseprune.errors import UserError
from sparseprune.export.architectures import describe
from sparseprune.export.artifact import write_artifact
from sparseprune.export.baselines import check_baseline, tensorrt_call
from sparseprune.export.feature_major_bert import with_feature_major_encoders
from sparseprune.export.fold import fold_batch_norms, foldable_pairs
from sparseprune.export.formats.base import PackedWeight
from sparseprune.export.layer_choice import LAYER_CHOICES, LayerTiming, fastest_choice, time_layers
from sparseprune.export.packing import pack_layer
from sparseprune.export.swap import sparsify, swapped_modules, unpacked_layers
from sparseprune.export.timing import Timing, time_calls
from sparseprune.export.translation import TranslationSettings, test_sentences, time_translation
from sparseprune.export.wandb_log import log_export, training_wandb_run
from sparseprune.files import replaced_on_success
from sparseprune.models.lstm_nmt import TranslationTask
from sparseprune.progress import progress
from sparseprune.pruning.gemm_view import PrunableWeight, find_prunable, to_gemm
from sparseprune.pruning.masking import MaskedWeights, check_codes
from sparseprune.pruning.patterns.base import pattern_from_config

log = logging.getLogger(__name__)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={name} asked for, but no CUDA GPU is available; use device=cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise UserError(f"device must be auto, cpu, cuda or cuda:N, got {name!r}") from None


def _dtype(name: str, device: torch.device) -> torch.dtype:
    choices = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if name == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    if name not in choices:
        raise UserError(f"dtype must be auto or one of {sorted(choices)}, got {name!r}")
    return choices[name]


def rebuild(ckpt: Path, batch_size: int) -> tuple[Any, list[PrunableWeight], Any, dict[str, Any], dict[str, Any]]:
    """(masked dense module, its prunable weights, datamodule, pruning state, run config) from the checkpoint file
    alone."""
    checkpoint = load_checkpoint(ckpt)
    state = pruning_state(checkpoint, ckpt)
    config = run_config(checkpoint, ckpt)
    datamodule = instantiate(config["data"], batch_size=batch_size)
    model = instantiate(config["model"], **datamodule.model_kwargs())
    load_weights(model, checkpoint, ckpt, "ckpt")
    weights = find_prunable(model)
    check_codes(state["codes"], weights, pattern_from_config(state["pattern"]), str(ckpt))
    MaskedWeights(weights, state["codes"]).apply()
    return model.eval(), weights, datamodule, state, config


def fold_model(model: Any, weights: list[PrunableWeight]) -> tuple[Any, list[PrunableWeight], list[str]]:
    """(a copy of the model with its batch norms folded, the copy's prunable weights, the folded norms), or the model
    itself where nothing folds; the original stays the reference of the correctness check."""
    if not foldable_pairs(model):  # spares the copy (BERT, the LSTM translator)
        return model, weights, []
    folded_model = copy.deepcopy(model)
    folded = fold_batch_norms(folded_model)
    return folded_model, find_prunable(folded_model), folded


def pack_model(prunable: list[PrunableWeight], state: dict[str, Any]) -> dict[str, PackedWeight]:
    weights = {w.name: w for w in prunable}
    missing = sorted(set(state["codes"]) - set(weights))
    if missing:
        raise UserError(f"checkpoint masks name weights the model lacks: {missing[:3]}")
    kept_dense = set(state.get("dense_layers") or ())  # latency-aware allocation: their sparse call would lose
    return {
        name: pack_layer(to_gemm(weights[name].param.detach()), codes, state["pattern"])
        for name, codes in progress(state["codes"].items(), "packing layers")
        if name not in kept_dense
    }


@dataclass
class Twin:
    """What export builds from a rebuilt checkpoint: the (folded) masked dense model, its prunable weights and packed
    layers, the layer-by-layer sparse model and the twin export checks, times and writes as its artifact."""

    model: Any
    weights: list[PrunableWeight]
    folded: list[str]
    packed: dict[str, PackedWeight]
    sparse: Any
    twin: Any
    stream_encoders: list[str]


def build_twin(reference: Any, weights: list[PrunableWeight], state: dict[str, Any], fold: bool) -> Twin:
    """Fold (when `fold`), pack and swap: export's steps 1 and 2, the reference model left as trained."""
    model, weights, folded = fold_model(reference, weights) if fold else (reference, weights, [])
    packed = pack_model(weights, state)
    sparse = sparsify(model, weights, packed)  # layer by layer: what the per-layer timing and choice work on
    twin, stream_encoders = streamed(sparse)
    return Twin(model, weights, folded, packed, sparse, twin, stream_encoders)


def _relative_error(output: torch.Tensor, reference: torch.Tensor) -> float:
    scale = reference.abs().max().clamp(min=1e-12)
    return float((output.float() - reference.float()).abs().max() / scale)


@contextlib.contextmanager
def _exact_fp32() -> Iterator[None]:
    """True fp32 GEMMs and convolutions: cuDNN runs fp32 convolutions in TF32 by default, which alone puts the dense
    reference about 3e-4 away from an exact sparse GEMM on a GPU, far above the fp32 tolerance."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@torch.inference_mode()
def check_outputs(dense: Any, sparse: Any, batch: Any) -> float:
    """Relative max error of the sparse model's outputs against the masked dense model's (in exact fp32)."""
    with _exact_fp32():
        return _relative_error(sparse.predict_batch(batch), dense.predict_batch(batch))


def export(cfg: DictConfig) -> dict[str, Any]:
    """Everything is written into a temporary directory that replaces `out_dir` only when the export succeeds, so
    a failed export leaves the previous one as it was."""
    check_export_config(cfg)
    ckpt = Path(cfg.ckpt)
    out_dir = Path(cfg.out_dir) if cfg.out_dir else ckpt.parent.parent / "export"
    with replaced_on_success(out_dir, "out_dir") as staging:
        report = _export(cfg, staging, out_dir)
    if report["wandb_run"] is not None:
        try:
            log_export(report["wandb_run"], report, out_dir)
        except Exception as error:  # W&B's own failures (no API key online, a full disk) leave the export complete
            log.warning("export not logged to W&B run %s: %s", report["wandb_run"]["id"], str(error).splitlines()[0])
    return report


def predicted_speedup(state: dict[str, Any]) -> dict[str, Any] | None:
    """The whole-model speedup the latency model predicted for the checkpoint's last pruned stage, if any."""
    predictions = state.get("predictions") or {}
    if not predictions:
        return None
    stage = max(predictions)  # StagedPruning saves them by stage number
    prediction = predictions[stage]
    return {"stage": stage, "speedup": prediction["speedup"], "source": prediction.get("source", "latency model")}


def _wandb_run(setting: Any, run_config: dict[str, Any], ckpt: Path) -> dict[str, Any] | None:
    """export.yaml's `wandb`: auto logs into the training run's W&B run where it had one."""
    if setting not in ("auto", False):
        raise UserError(f"wandb must be auto or false, got {setting!r}")
    return training_wandb_run(run_config, ckpt) if setting == "auto" else None


def _export(cfg: DictConfig, staging: Path, out_dir: Path) -> dict[str, Any]:
    ckpt = Path(cfg.ckpt)
    if cfg.layer_choice not in LAYER_CHOICES:
        raise UserError(f"layer_choice must be one of {list(LAYER_CHOICES)}, got {cfg.layer_choice!r}")
    device = _device(cfg.device)
    dtype = _dtype(cfg.dtype, device)
    compiles = _compiles(cfg.compile, device)
    check_baseline(cfg.baseline, device)
    translation = TranslationSettings.of(cfg.get("translation"))
    reference, weights, datamodule, state, config = rebuild(ckpt, cfg.batch_size)
    wandb_run = _wandb_run(cfg.wandb, config, ckpt)
    built = build_twin(reference, weights, state, cfg.fold_batch_norm)
    model, weights, folded, packed = built.model, built.weights, built.folded, built.packed
    sparse, twin, stream_encoders = built.sparse, built.twin, built.stream_encoders
    architecture = describe(model)
    saved = out_dir / write_artifact(staging, model, packed, state["pattern"], folded, architecture).name
    datamodule.setup("validate")
    batch = next(iter(datamodule.val_dataloader()))

    batch = transfer_batch(batch, model.to(device), None)
    fp32_error = check_outputs(reference.to(device), twin.to(device), batch)  # the norms as trained, if folded
    del reference
    model, sparse, twin = model.to(dtype), sparse.to(device, dtype), twin.to(dtype)
    timed_batch = to_dtype(batch, dtype)
    timed_error = check_outputs(model, twin, timed_batch)

    def timed(calls: Mapping[str, Callable[[], object]]) -> dict[str, Timing]:  # side by side, as configured
        return time_calls(calls, device, cfg.warmup, cfg.repeats, cfg.cuda_graph, cfg.timing_rounds,
                          idle_ms=cfg.timing_idle_ms)  # fmt: skip

    def layer_ms(calls: Mapping[str, Callable[[], object]]) -> dict[str, float]:
        return {name: timing.median_ms for name, timing in timed(calls).items()}

    swapped = swapped_modules(weights, packed)
    layer_times = time_layers(model, sparse, swapped, lambda: sparse.predict_batch(timed_batch), layer_ms)
    twins = {"dense": model, "sparse": twin}
    if cfg.layer_choice == "fastest":
        choice = fastest_choice(sparse, model, layer_times, lambda net: net.predict_batch(timed_batch), layer_ms)
        twins["fastest"] = streamed(choice.twin)[0]
    calls = {name: lambda net=net: net.predict_batch(timed_batch) for name, net in twins.items()}
    if compiles:
        calls |= compiled_calls({"dense compiled": model, "sparse compiled": twin}, timed_batch)
    if cfg.baseline == "tensorrt":
        calls["dense tensorrt"] = tensorrt_call(model, timed_batch, dtype)
    timings = timed(calls)
    dense_time, sparse_time = timings["dense"], timings["sparse"]
    report = {
        "checkpoint": str(ckpt),
        "packed_file": str(saved),
        "pattern": state["pattern"],
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(dtype).removeprefix("torch."),
        "batch_size": cfg.batch_size,
        "layers": {
            name: {
                "format": p.format_name,
                "dense_bytes": _dense_bytes(p, dtype),
                "packed_bytes": p.to("cpu", dtype).nbytes(),
            }
            for name, p in packed.items()
        },
        "not_swapped": unpacked_layers(weights, packed),
        "kept_dense": list(state.get("dense_layers") or []),
        "predicted": predicted_speedup(state),
        "feature_major_encoders": stream_encoders,
        "folded_batch_norms": folded,
        "check": {"fp32_rel_error": fp32_error, "fp32_tolerance": cfg.tolerance, "timed_dtype_rel_error": timed_error},
        "layer_timing": {name: _layer_row(t) for name, t in layer_times.items()},
        "timing": {"dense": asdict(dense_time), "sparse": asdict(sparse_time)},
        "speedup": dense_time.median_ms / sparse_time.median_ms,
        "layer_choice": cfg.layer_choice,
        "against_best_dense": against_best_dense({name: t.median_ms for name, t in timings.items()}),
        "stages": state.get("stage_results", []),
        "wandb_run": wandb_run,
    }
    report["timing"] |= {name: asdict(timing) for name, timing in timings.items() if name != "fastest"}
    if cfg.layer_choice == "fastest":
        report["fastest"] = {
            "dense_layers": choice.dense_layers,
            "sp24_tiles": choice.sp24_tiles,
            "retimed_layers": {name: _layer_row(t) for name, t in choice.retimed.items()},
            "timed_dtype_rel_error": check_outputs(model, twins["fastest"], timed_batch),
            "timing": asdict(timings["fastest"]),
            "speedup": dense_time.median_ms / timings["fastest"].median_ms,
        }
    if isinstance(model, TranslationTask) and translation.sentences:
        datamodule.setup("test")
        sentences = test_sentences(datamodule.test_dataloader(), translation.sentences, device)
        report["translation"] = time_translation({"dense": model, "sparse": twin}, sentences, translation)
    (staging / "export_report.json").write_text(json.dumps(report, indent=2))
    _print_report(report, out_dir)
    if fp32_error > cfg.tolerance:
        raise UserError(
            f"sparse outputs differ from the masked dense model: rel error {fp32_error:.2e} > {cfg.tolerance}"
        )
    return report


# torch.compile modes of the compiled rows: the dense model as fast as inductor makes it (GEMMs autotuned; the CUDA
# graph is the timing's own, as for every row), the sparse twin with its kernels as custom ops and the torch code
# between them fused.
COMPILE_MODES = {"dense compiled": "max-autotune-no-cudagraphs", "sparse compiled": None}


def _compiles(setting: Any, device: torch.device) -> bool:
    """export.yaml's `compile`: auto times the compiled rows on CUDA only (on a CPU inductor's build takes minutes
    for timings no sparse kernel takes part in)."""
    if setting == "auto":
        return device.type == "cuda"
    if not isinstance(setting, bool):
        raise UserError(f"compile must be auto, true or false, got {setting!r}")
    return setting


def compiled_calls(nets: Mapping[str, Any], batch: Any) -> dict[str, Callable[[], object]]:
    """Each net's predict_batch under torch.compile (COMPILE_MODES), compiled here by a first call, so that no
    compilation runs inside a timing's CUDA-graph capture; a model that does not compile is left out with a warning."""
    calls = {}
    for name, net in nets.items():
        compiled = torch.compile(net.predict_batch, mode=COMPILE_MODES[name], dynamic=False)
        log.info("compiling %s (torch.compile mode %s)", name, COMPILE_MODES[name] or "default")
        try:
            compiled(batch)
        except Exception as err:  # any compiler failure leaves the eager rows standing
            log.warning("%s left out of the timing: torch.compile failed (%s)", name, str(err).splitlines()[0])
            continue
        calls[name] = lambda compiled=compiled: compiled(batch)
    return calls


def against_best_dense(medians_ms: Mapping[str, float]) -> dict[str, Any]:
    """Every sparse row's speedup over the faster of the dense rows (eager-graph, compiled): the baseline a user
    would deploy."""
    dense = {name: ms for name, ms in medians_ms.items() if name.startswith("dense")}
    best = min(dense, key=dense.__getitem__)
    return {"baseline": best, "baseline_ms": dense[best],
            "speedup": {name: dense[best] / ms for name, ms in medians_ms.items() if name not in dense}}  # fmt: skip


def streamed(sparse: Any) -> tuple[Any, list[str]]:
    """(a copy of the layer-by-layer twin with its BERT encoders on the feature-major stream where the TW kernels run
    them, the encoders replaced): the model export checks and times."""
    return with_feature_major_encoders(copy.deepcopy(sparse))


def _layer_row(timing: LayerTiming) -> dict[str, Any]:
    """A layer's timing in the report, with its speedup under auto and with its fastest 2:4 tile."""
    fastest_speedup = timing.dense_ms / timing.fastest_sparse_ms
    return {**asdict(timing), "speedup": timing.speedup, "fastest_tile": timing.fastest_tile,
            "fastest_speedup": fastest_speedup}  # fmt: skip


def _dense_bytes(packed: PackedWeight, dtype: torch.dtype) -> int:
    k, n = packed.shape
    return k * n * torch.tensor([], dtype=dtype).element_size()


def _print_report(report: dict[str, Any], out_dir: Path) -> None:
    console = Console()
    console.print(_sizes_table(report))
    if report["folded_batch_norms"]:
        console.print(f"folded {len(report['folded_batch_norms'])} batch norms into their convolutions (both models)")
    check = report["check"]
    verdict = "PASS" if check["fp32_rel_error"] <= check["fp32_tolerance"] else "FAIL"
    console.print(
        f"correctness vs masked dense: fp32 rel error {check['fp32_rel_error']:.2e} "
        f"(tolerance {check['fp32_tolerance']:.0e}) {verdict}; "
        f"{report['dtype']} rel error {check['timed_dtype_rel_error']:.2e}"
    )
    console.print(_layer_timing_table(report))
    console.print(_timing_table(report))
    console.print(f"speedup (dense / sparse median): {report['speedup']:.2f}x")
    if report["predicted"] is not None:
        predicted = report["predicted"]
        console.print(f"predicted at training ({predicted['source']}, stage {predicted['stage']}): "
                      f"{predicted['speedup']:.2f}x dense")  # fmt: skip
    if report["kept_dense"]:
        console.print(f"kept dense by latency-aware allocation (their sparse calls would lose): {report['kept_dense']}")
    if report["device"] == "cpu":
        console.print(
            "[yellow]on a CPU no sparse kernel runs: the sparse rows time the torch reference ops (a gather and a "
            "GEMM per tile or group), which check the packed model, not its speed; export on a GPU for speedups"
        )
    best = report["against_best_dense"]
    if len(best["speedup"]) > 1 or best["baseline"] != "dense":
        each = ", ".join(f"{name} {x:.2f}x" for name, x in best["speedup"].items())
        console.print(f"against the best dense baseline ({best['baseline']}, {best['baseline_ms']:.3f} ms): {each}")
    if "fastest" in report:
        fastest = report["fastest"]
        console.print(
            f"fastest layer choice: {fastest['speedup']:.2f}x dense, with {len(fastest['dense_layers'])} of "
            f"{len(report['layer_timing'])} swapped layers kept dense: {fastest['dense_layers']}"
        )
        if fastest["retimed_layers"]:
            console.print(f"timed again on their inputs in that model: {list(fastest['retimed_layers'])}")
        if fastest["sp24_tiles"]:
            console.print(f"2:4 layers on a forced CTA tile, faster than auto's: {fastest['sp24_tiles']}")
    if report["feature_major_encoders"]:
        console.print(f"hidden states feature-major through {report['feature_major_encoders']} (Q, K, V fused)")
    if report["not_swapped"]:
        console.print(f"[yellow]pruned but computed dense (no sparse module yet): {report['not_swapped']}")
    if report.get("translation"):
        console.print(_translation_table(report["translation"]))
    console.print(f"report: {out_dir / 'export_report.json'}")


def _translation_table(rows: list[dict[str, Any]]) -> Table:
    first = rows[0]
    how = "CUDA-graph replays" if first["cuda_graph"] else "eager"
    table = Table(title=f"translation of {first['sentences']} test sentences ({how})")
    for column in ("decoding", "batch", "model", "ms / sentence", "sentences / s", "BLEU", "same as dense"):
        table.add_column(column, justify="right" if column not in ("decoding", "model") else "left")
    for row in rows:
        table.add_row(row["decoding"], str(row["batch_size"]), row["model"], f"{row['ms_per_sentence']:.3f}",
                      f"{row['sentences_per_s']:.1f}", f"{row['bleu']:.2f}", f"{row['same_as_dense']:.0%}")  # fmt: skip
    return table


def _sizes_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"packed layers ({report['pattern']['name']}, {report['dtype']})")
    for column in ("layer", "format", "dense KiB", "packed KiB", "ratio"):
        table.add_column(column, justify="right" if column != "layer" else "left")
    for name, layer in report["layers"].items():
        ratio = layer["dense_bytes"] / max(layer["packed_bytes"], 1)
        table.add_row(
            name,
            layer["format"],
            f"{layer['dense_bytes'] / 1024:.1f}",
            f"{layer['packed_bytes'] / 1024:.1f}",
            f"{ratio:.2f}x",
        )
    return table


def _layer_timing_table(report: dict[str, Any]) -> Table:
    """Each swapped layer on its own input inside the model: where the sparse kernel wins and where it loses."""
    table = Table(title="swapped layers, one call each (median)")
    rows = report["layer_timing"]
    tile_column = ("fastest 2:4 tile",) if any(row["sp24_tile_ms"] for row in rows.values()) else ()
    for column in ("layer", "calls", "input", "dense ms", "sparse ms", "x dense", *tile_column):
        table.add_column(column, justify="right" if column != "layer" else "left")
    for name, row in rows.items():
        shape = " x ".join(str(size) for size in row["input_shape"])
        tile = f"{row['fastest_tile']} {row['fastest_speedup']:.2f}x" if row["sp24_tile_ms"] else "-"
        table.add_row(name, str(row["calls"]), shape, f"{row['dense_ms']:.3f}", f"{row['sparse_ms']:.3f}",
                      f"{row['speedup']:.2f}x", *((tile,) if tile_column else ()))  # fmt: skip
    return table


def _timing_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"inference, batch {report['batch_size']}, {report['device']}")
    for column in ("model", "median ms", "p10 ms", "p90 ms", "timed as"):
        table.add_column(column, justify="right")
    rows = dict(report["timing"])
    if "fastest" in report:
        rows["fastest layer choice"] = report["fastest"]["timing"]
    for name, t in rows.items():
        how = "CUDA graph" if t["cuda_graph"] else "eager calls"
        table.add_row(name, f"{t['median_ms']:.3f}", f"{t['p10_ms']:.3f}", f"{t['p90_ms']:.3f}", how)
    return table
