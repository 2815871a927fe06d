"""W&B that works, offline only: every sweep file goes online under `wandb agent` and logs the metric its controller
reads, composes with logger=csv and logger=none, and runs a point locally without an API key; export logs into the
training run's W&B run (same id, also after a resume)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra_runs import PATTERN_OVERRIDES, TINY_VGG, compose_config
from text_fixtures import make_tiny_bert, write_parallel_corpus, write_tweets_csv

from sparseprune.app.training import train
from sparseprune.errors import UserError
from sparseprune.export.pipeline import export
from sparseprune.loggers import QuietWandbLogger, wandb_run_id
from sparseprune.sweeps import CONF_DIR, ONLINE, LocalRun, check_sweep, load_sweep, run_locally

SWEEPS = sorted((CONF_DIR / "sweep").glob("*.yaml"))


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No network, no API key, and W&B's own cache and staging under tmp_path."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for name in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))


def _offline_runs(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "wandb").glob("offline-run-*"))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_sweep_file_goes_online_under_the_agent_and_composes_with_any_logger(path: Path) -> None:
    """The command (read by `wandb agent` only) streams the run; the parameters leave the logger to each run, and
    every run logs the sweep's metric (check_sweep compares it with the run's stage/<monitor>)."""
    sweep = load_sweep(path)
    assert sweep["command"][-1] == ONLINE
    assert not [key for key in sweep["parameters"] if key.startswith("logger")]
    for logger in ("logger=csv", "logger=none", "logger=wandb"):
        assert check_sweep(path, (logger,))


def test_a_sweep_whose_metric_no_run_logs_is_refused(tmp_path: Path) -> None:
    sweep = load_sweep(CONF_DIR / "sweep" / "lstm_nmt_patterns.yaml") | {"metric": {"name": "stage/val/acc"}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    with pytest.raises(UserError, match="logs stage/val/bleu, not the sweep's metric stage/val/acc"):
        check_sweep(path)
    path.write_text(yaml.safe_dump(sweep | {"parameters": {"logger.wandb.offline": {"value": False}}}))
    with pytest.raises(UserError, match="parameter logger.wandb.offline sets the logger"):
        load_sweep(path)


def _tiny_overrides(stem: str, root: Path) -> tuple[str, ...]:
    """Extra overrides that shrink a sweep file's runs to seconds on a CPU, none of them a swept key."""
    if stem == "bert_patterns":
        return (f"model.pretrained={make_tiny_bert(root / 'bert')}", f"data.csv_path={write_tweets_csv(root / 'csv')}",
                "data.max_length=16", "data.batch_size=4", "data.val_fraction=0.2", "data.test_fraction=0.2",
                f"paths.data_dir={root / 'data'}")  # fmt: skip
    if stem == "lstm_nmt_patterns":
        return ("data=iwslt15", f"data.data_dir={write_parallel_corpus(root / 'corpus')}", "data.batch_size=3",
                "model.hidden_size=32", "model.test_beam_size=2")  # fmt: skip
    return ("model.width_multiplier=0.25", "data.train_subset=64", "data.batch_size=16", "data.num_workers=0")


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_sweep_file_runs_one_point_locally_offline(path: Path, tmp_path: Path) -> None:
    """The sweep's first point (its first values; one draw of a random search), trained by the local runner with the
    debug trainer and the default W&B logger, offline, with no API key."""
    sweep = load_sweep(path)
    parameters = {key: {"value": spec["values"][0]} if "values" in spec else spec
                  for key, spec in sweep["parameters"].items()}  # fmt: skip
    one_point = tmp_path / path.name
    one_point.write_text(yaml.safe_dump(sweep | {"parameters": parameters, "run_cap": 1}))
    extra = ("trainer=debug", "~callbacks.progress_bar", *_tiny_overrides(path.stem, tmp_path))
    results = run_locally(one_point, tmp_path / "results", LocalRun(extra))
    assert len(results) == 1 and results[0]["stages"]
    assert _offline_runs(tmp_path / "results" / "run000"), "the run made no offline W&B run"


def test_export_logs_into_the_training_runs_wandb_run(tmp_path: Path) -> None:
    tiny = [override for override in TINY_VGG if override != "logger=none"]
    run = ["schedule.dense_epochs=0", "schedule.stages=1", "trainer.limit_train_batches=2",
           "trainer.limit_val_batches=1", "importance=magnitude", "logger=wandb"]  # fmt: skip
    summary = train(compose_config("train", tiny + PATTERN_OVERRIDES["tw"] + run, tmp_path / "run"))
    run_dir = tmp_path / "run"
    (training,) = _offline_runs(run_dir)
    run_id = wandb_run_id(run_dir)
    assert training.name.endswith(run_id) and b"stage/val/acc" in (training / f"run-{run_id}.wandb").read_bytes()

    out_dir = tmp_path / "export"
    report = export(compose_config("export", [f"ckpt={summary['checkpoint']}", f"out_dir={out_dir}", "repeats=1",
                                              "warmup=0", "batch_size=4"], tmp_path))  # fmt: skip
    assert report["wandb_run"]["id"] == run_id and report["stages"]
    exported = [path for path in _offline_runs(run_dir) if path != training]
    assert [path.name.rpartition("-")[2] for path in exported] == [run_id], "export made another W&B run"
    records = (exported[0] / f"run-{run_id}.wandb").read_bytes()
    assert b"export/speedup" in records and f"packed-{run_id}".encode() in records
    tables = {path.name.partition("_0_")[0] for path in (exported[0] / "files" / "media" / "table").rglob("*.json")}
    assert tables == {"layer_timing", "stages"}
    assert json.loads((out_dir / "export_report.json").read_text())["wandb_run"]["id"] == run_id

    export(compose_config("export", [f"ckpt={summary['checkpoint']}", f"out_dir={out_dir}", "repeats=1",
                                     "warmup=0", "batch_size=4", "wandb=false"], tmp_path))  # fmt: skip
    assert len(_offline_runs(run_dir)) == 2, "wandb=false logged all the same"


def test_a_resumed_run_continues_the_wandb_run_of_its_checkpoint(tmp_path: Path) -> None:
    """ckpt_path's run folder names the W&B run (the latest of several); a resumed run and its export take that id."""
    run_dir = tmp_path / "run"
    for name in ("offline-run-20260101_000000-first1", "run-20260102_000000-second2", "latest-run"):
        (run_dir / "wandb" / name).mkdir(parents=True)
    assert wandb_run_id(run_dir) == "second2" and wandb_run_id(tmp_path / "nowhere") is None
    resumed = QuietWandbLogger(save_dir=str(tmp_path / "new"), offline=True,
                               resume_ckpt=str(run_dir / "checkpoints" / "last.ckpt"))  # fmt: skip
    assert resumed._wandb_init["id"] == "second2" and resumed._wandb_init["resume"] == "allow"
    fresh = QuietWandbLogger(save_dir=str(tmp_path / "new"), offline=True, resume_ckpt=None)
    assert fresh._wandb_init["id"] is None
