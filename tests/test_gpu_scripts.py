"""bench/sweep_gpu.sh, study_gpu.sh, the export, 2:4, text-export and sanitizer checks: the commands
they issue, checked with a stand-in `python` that records its arguments (the real runs need a GPU and take minutes)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Records each call's arguments, one line per call, and leaves what a finished training run or export leaves behind.
FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$CALLS"
for arg in "$@"; do
  case $arg in hydra.run.dir=*) dir=${arg#hydra.run.dir=}; mkdir -p "$dir/checkpoints"; echo '{}' > "$dir/summary.json";
    touch "$dir/train.log";;
  out_dir=*) mkdir -p "${arg#out_dir=}"; echo "{\\"args\\": \\"$*\\"}" > "${arg#out_dir=}/export_report.json";; esac
done
"""
# Stand-ins for the GPU machine's other binaries (bench/gpu_check.sh and the export check call them).
FAKE_BINARIES = {
    "nvidia-smi": "#!/bin/sh\n",
    "compute-sanitizer": '#!/bin/sh\nprintf "sanitizer %s\\n" "$*" >> "$CALLS"\n',
}


def run_script(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in {"python": FAKE_PYTHON, **FAKE_BINARIES}.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.log"
    full_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls),
                "RUNS": str(tmp_path / "runs"), "CUDA_HOME": str(tmp_path / "no-cuda"), **env}  # fmt: skip
    # The study writes its table under bench/results/: run from a copy of bench/ so the checkout stays clean.
    work = tmp_path / "work"
    (work / "bench").mkdir(parents=True, exist_ok=True)
    for script in ("sweep_gpu.sh", "study_gpu.sh", "workloads.sh", "export_gpu_check.sh", "sp24_export_check.sh",
                   "gpu_check.sh", "sanitize_gpu_check.sh", "text_export_gpu_check.sh"):  # fmt: skip
        (work / "bench" / script).write_text((ROOT / "bench" / script).read_text())
    result = subprocess.run(["bash", *args], cwd=work, env=full_env, capture_output=True, text=True, check=False)
    return result, calls.read_text().splitlines() if calls.exists() else []


def trainings(calls: list[str]) -> list[str]:
    return [call for call in calls if call.startswith("train.py")]


def test_sweep_trains_the_dense_reference_then_prunes_from_it(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, "bench/sweep_gpu.sh", "bert", TRAIN_ONLY="1", EXTRA="trainer.max_time=1")
    assert result.returncode == 0, result.stderr
    dense, sweep = trainings(calls), [c for c in calls if c.startswith("-m sparseprune.sweeps")]
    assert len(dense) == 1 and "experiment=bert_tweets" in dense[0] and "schedule.stages=0" in dense[0]
    assert "trainer.max_time=1" in dense[0]
    assert len(sweep) == 1
    args = sweep[0].split()
    assert "conf/sweep/bert_patterns.yaml" in args and "trainer.max_time=1" in args
    assert "schedule.stages=2" in args and "schedule.finetune_epochs=1" in args and "schedule.dense_epochs=0" in args
    assert f"init_ckpt={tmp_path}/runs/bert_dense/checkpoints/last.ckpt" in args


def test_sweep_reuses_a_finished_dense_reference(tmp_path: Path) -> None:
    dense_dir = tmp_path / "runs" / "vgg16_dense"
    dense_dir.mkdir(parents=True)
    (dense_dir / "summary.json").write_text("{}")
    result, calls = run_script(tmp_path, "bench/sweep_gpu.sh", "vgg16", TRAIN_ONLY="1")
    assert result.returncode == 0, result.stderr
    assert trainings(calls) == []


def test_study_prunes_each_point_from_the_dense_model(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, "bench/study_gpu.sh", "bert_layer_floor")
    assert result.returncode == 0, result.stderr
    dense, *points = trainings(calls)
    assert "experiment=bert_tweets" in dense
    floors = sorted(next(a for a in p.split() if a.startswith("callbacks.staged_pruning.max_layer_sparsity="))
                    for p in points)  # fmt: skip
    assert floors == [f"callbacks.staged_pruning.max_layer_sparsity={v}" for v in ("0.8", "0.9", "1.0")]
    for point in points:
        args = point.split()
        assert "experiment=paper/bert_tw128" in args and "schedule.target=0.75" in args
        assert f"init_ckpt={tmp_path}/runs/bert_dense/checkpoints/last.ckpt" in args
    collect = next(c for c in calls if c.startswith("bench/collect_runs.py"))
    assert "--out bench/results/bert_layer_floor" in collect and "tw128-75-floor-0.8=" in collect


def test_distill_study_compares_each_pattern_with_and_without_the_teacher(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, "bench/study_gpu.sh", "bert_distill")
    assert result.returncode == 0, result.stderr
    _, *points = trainings(calls)
    by_label = {p.split("hydra.run.dir=")[1].split("/")[-1].removeprefix("bert_distill_"): p.split() for p in points}
    assert sorted(by_label) == sorted(
        ["ew-75", "tw128-75", "ew-75-kd", "tw128-75-kd", "tw128-75-kd-hidden", "tw128-75-lr2e-4-kd"]
    )
    for label, args in by_label.items():
        pattern = "experiment=paper/bert_ew" if label.startswith("ew") else "experiment=paper/bert_tw128"
        assert pattern in args and "schedule.target=0.75" in args and "schedule.dense_epochs=0" in args
        distilled = [a for a in args if a.startswith("model.distill.")]
        expected = ["model.distill.weight=0.5", "model.distill.temperature=2"] if "-kd" in label else []
        assert distilled == expected + (["model.distill.hidden_weight=3"] if label.endswith("hidden") else [])
        assert ("model.optimizer.lr=2e-4" in args) == ("lr2e-4" in label)
    collect = next(c for c in calls if c.startswith("bench/collect_runs.py"))
    assert "--out bench/results/bert_distill" in collect and "tw128-75-kd-hidden=" in collect


def test_unknown_names_are_refused(tmp_path: Path) -> None:
    for script, name in (("bench/sweep_gpu.sh", "resnet"), ("bench/study_gpu.sh", "no_such_study")):
        result, calls = run_script(tmp_path, script, name)
        assert result.returncode == 2 and name in result.stderr
        assert trainings(calls) == []


def test_combined_distill_study_gives_every_tile_pattern_both_gains(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, "bench/study_gpu.sh", "bert_distill_combined")
    assert result.returncode == 0, result.stderr
    _, *points = trainings(calls)
    prefix = "bert_distill_combined_"
    by_label = {p.split("hydra.run.dir=")[1].split("/")[-1].removeprefix(prefix): p.split() for p in points}
    tiled = ["tw128-75-kd-hidden-lr2e-4", "tw64-75-kd-hidden-lr2e-4", "tew-75-kd-hidden-lr2e-4"]
    assert sorted(by_label) == sorted(["ew-75", "ew-75-kd-hidden", *tiled])
    for label, args in by_label.items():
        assert f"experiment=paper/bert_{label.split('-')[0]}" in args and "schedule.dense_epochs=0" in args
        assert ("model.distill.hidden_weight=3" in args) == ("kd-hidden" in label)
        assert ("model.optimizer.lr=2e-4" in args) == (label in tiled)


def test_tagged_study_repeats_with_its_own_dense_model_and_result_names(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, "bench/study_gpu.sh", "bert_distill_combined", TAG="seed1", EXTRA="seed=1")
    assert result.returncode == 0, result.stderr
    dense, *points = trainings(calls)
    assert "seed=1" in dense.split() and dense.split()[-1].endswith("/bert_dense_seed1")
    assert all("/bert_dense_seed1/checkpoints/last.ckpt" in p and "seed=1" in p.split() for p in points)
    assert all("/bert_distill_combined_seed1_" in p for p in points)
    collect = next(c for c in calls if c.startswith("bench/collect_runs.py"))
    assert "--out bench/results/bert_distill_combined_seed1" in collect
    assert "TAG=seed1 EXTRA='seed=1' bash bench/study_gpu.sh bert_distill_combined" in collect


def test_export_check_trains_once_and_exports_each_batch_with_and_without_folding(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result, lines = run_script(tmp_path, "bench/export_gpu_check.sh", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines[0] == "setup.py build_ext --inplace"
    assert any(line.startswith("sanitizer --tool memcheck") for line in lines)
    assert any(line.startswith("-m bench.im2col_bench --batches 1 16 256 --out") for line in lines)
    assert any(line.startswith("-m bench.conv_bench --out") for line in lines)
    train = [line for line in lines if line.startswith("train.py")]
    assert len(train) == 1 and "model.width_multiplier=1.0" in train[0] and "trainer=gpu" in train[0]
    exports = [line.split() for line in lines if line.startswith("export.py")]
    assert len(exports) == 6
    for batch in (1, 16, 256):
        for norms, fold in (("folded", "true"), ("kept", "false")):
            report = json.loads((out / f"report_{norms}_b{batch}.json").read_text())["args"].split()
            assert f"batch_size={batch}" in report and f"fold_batch_norm={fold}" in report
            assert "layer_choice=fastest" in report


def test_sp24_export_check_prunes_bert_to_2_4_and_exports_it_with_the_tile_choice(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result, lines = run_script(tmp_path, "bench/sp24_export_check.sh", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines[0] == "setup.py build_ext --inplace"
    (train,) = [line.split() for line in lines if line.startswith("train.py")]
    pruning = {"pattern=nm", "pattern.n=2", "pattern.m=4", "schedule.target=0.5"}
    assert {"model=bert", "trainer=gpu", *pruning} <= set(train)
    assert len([line for line in lines if line.startswith("export.py")]) == 2
    for batch in (1, 32):
        report = json.loads((out / f"report_b{batch}.json").read_text())["args"].split()
        assert f"batch_size={batch}" in report and "layer_choice=fastest" in report


def test_sanitizer_runs_both_tools_over_every_kernel_family(tmp_path: Path) -> None:
    result, calls = run_script(tmp_path, "bench/sanitize_gpu_check.sh", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert calls[0] == "setup.py build_ext --inplace"  # no carried build in the copy
    runs = [call.split() for call in calls if call.startswith("sanitizer")]
    families = ["test_feature_major_x_of_twelve_rows", "test_small_m_matches_fp32_reference", "test_each_path_once",
                "test_each_call_once", "test_sparse_conv_feature_major", "test_layer_norm_kernel",
                "test_transpose_op"]  # fmt: skip
    for tool in ("memcheck", "racecheck"):
        mine = [run for run in runs if run[1:3] == ["--tool", tool]]
        assert len(mine) == len(families) and all("--error-exitcode" in run and "gpu" in run for run in mine)
        assert all(any(family in " ".join(run) for run in mine) for family in families)


def test_sanitizer_refuses_an_unknown_family(tmp_path: Path) -> None:
    result, _ = run_script(tmp_path, "bench/sanitize_gpu_check.sh", str(tmp_path / "out"), FAMILIES="tw conv9000")
    assert result.returncode == 2 and "unknown family conv9000" in result.stderr


def test_text_export_trains_each_text_model_and_exports_it_at_its_batch_sizes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result, calls = run_script(tmp_path, "bench/text_export_gpu_check.sh", str(out), BERT_EXTRA="trainer.max_time=1")
    assert result.returncode == 0, result.stderr
    bert, nmt = trainings(calls)
    assert "experiment=bert_tweets" in bert and "pattern=tw" in bert and "trainer.max_time=1" in bert
    assert "model=lstm_nmt" in nmt and "trainer=gpu" in nmt and "trainer.max_time=1" not in nmt
    exports = [call.split() for call in calls if call.startswith("export.py")]
    points = [("bert", 1), ("bert", 32), ("nmt", 1), ("nmt", 64)]
    assert [next(a for a in e if a.startswith("batch_size=")) for e in exports] == [
        f"batch_size={b}" for _, b in points
    ]
    assert sorted(p.name for p in out.glob("report_*.json")) == [f"report_{m}_b{b}.json" for m, b in points]
