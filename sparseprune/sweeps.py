"""W&B sweep files (conf/sweep/*.yaml): read, check against the real config, expand into runs.

A sweep is refused before any run starts when a parameter is not a config key or a value is out of range:
every grid point (and both ends of every distribution) is composed with Hydra and passed through the same
validators train.py uses, so the error names the key exactly as a run would.

    python -m sparseprune.sweeps conf/sweep/patterns.yaml                       # check it, list its runs
    python -m sparseprune.sweeps conf/sweep/patterns.yaml --run sweeps/patterns  # run it locally, resumable
    python -m sparseprune.sweeps conf/sweep/vgg16_fmnist.yaml --run sweeps/vgg16 --export --jobs 3 init_ckpt=...
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import logging
import math
import os
import queue
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException, InstantiationException
from hydra.utils import instantiate

from sparseprune.app.cli import exit_on_user_error, user_error_in
from sparseprune.config_types import check_train_config
from sparseprune.errors import UserError
from sparseprune.files import writable_dir

log = logging.getLogger(__name__)
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
METHODS = ("grid", "random", "bayes")
ONLINE = "logger.wandb.offline=false"  # W&B has no offline sweeps: under `wandb agent` a run must stream its metric
DISTRIBUTIONS = ("uniform", "log_uniform_values", "int_uniform", "q_uniform", "normal")


def load_sweep(path: Path) -> dict[str, Any]:
    try:
        sweep = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise UserError(f"cannot read sweep file {path}: {error}") from None
    if not isinstance(sweep, dict) or not isinstance(sweep.get("parameters"), dict):
        raise UserError(f"sweep file {path} needs a `parameters` mapping")
    if sweep.get("method") not in METHODS:
        raise UserError(f"sweep file {path}: method must be one of {list(METHODS)}, got {sweep.get('method')!r}")
    command = sweep.get("command") or []
    if "${args_no_hyphens}" not in command:
        raise UserError(f"sweep file {path}: command must pass Hydra overrides with ${{args_no_hyphens}}")
    if ONLINE not in command:  # a local run never reads the command, so only `wandb agent` would miss it
        log.warning("sweep file %s: the command lacks %s, so under wandb agent the W&B logger stays offline and the "
                    "controller never sees the metric (W&B has no offline sweeps)", path, ONLINE)  # fmt: skip
    logger_keys = [key for key in sweep["parameters"] if key.lstrip("+~").split(".")[0] == "logger"]
    if logger_keys:
        raise UserError(f"sweep file {path}: parameter {logger_keys[0]} sets the logger, which each run chooses "
                        f"(logger=csv or none locally, W&B online under wandb agent through {ONLINE})")  # fmt: skip
    return sweep


def _choices(key: str, spec: Any) -> list[Any]:
    """Values to check for one parameter: its value(s), or both ends of its distribution."""
    if not isinstance(spec, dict):
        raise UserError(f"sweep parameter {key}: expected a mapping with value, values or distribution")
    if "value" in spec:
        return [spec["value"]]
    if "values" in spec and spec["values"]:
        return list(spec["values"])
    if spec.get("distribution") in DISTRIBUTIONS and "min" in spec and "max" in spec:
        if spec["min"] > spec["max"]:
            raise UserError(f"sweep parameter {key}: min {spec['min']} is above max {spec['max']}")
        return [spec["min"], spec["max"]]
    raise UserError(f"sweep parameter {key}: needs value, values, or a known distribution with min and max")


def grid_runs(sweep: dict[str, Any]) -> list[list[str]]:
    """Hydra overrides of every run a grid sweep makes (for other methods: every checked corner)."""
    keys = list(sweep["parameters"])
    options = [_choices(key, sweep["parameters"][key]) for key in keys]
    return [
        [f"{k}={_override_value(v)}" for k, v in zip(keys, combo, strict=True)] for combo in itertools.product(*options)
    ]


def _override_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def logged_stage_metric(cfg: Any) -> str:
    """The per-stage metric a run logs (`stage/<monitor>`): the callback's monitor, else the task's, else val/acc."""
    from hydra.utils import get_object

    monitor = cfg.callbacks.staged_pruning.get("monitor") or getattr(get_object(cfg.model._target_), "monitor", None)
    return f"stage/{monitor or 'val/acc'}"


def check_run(overrides: list[str], metric: str | None = None) -> None:
    """Compose one run's config and build its pruning callback (pattern, schedule, importance, and their
    agreement, exactly as train.py would), and check that the run logs the sweep's `metric`; any problem names the
    key."""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides)
    except HydraException as error:
        raise UserError(f"sweep run {' '.join(overrides)}: {str(error).splitlines()[0]}") from None
    try:
        check_train_config(cfg)
        instantiate(cfg.callbacks.staged_pruning)
    except (UserError, InstantiationException) as error:
        error = user_error_in(error) or error
        raise UserError(f"sweep run {' '.join(overrides)}: {error}") from None
    if metric is not None and metric != (logged := logged_stage_metric(cfg)):
        raise UserError(f"sweep run {' '.join(overrides)} logs {logged}, not the sweep's metric {metric}: the "
                        "controller would never see it")  # fmt: skip


def check_sweep(path: Path, extra: tuple[str, ...] = ()) -> list[list[str]]:
    """The sweep's grid (or checked corners), each composed together with the `extra` overrides of every run."""
    sweep = load_sweep(path)
    for override in extra:
        key = override.partition("=")[0].lstrip("+~")
        if key in sweep["parameters"]:
            raise UserError(
                f"the extra override {override} sets {key}, which sweep file {path} varies (results.json would record "
                "the swept value); drop the override or change the sweep's parameters"
            )
    runs = grid_runs(sweep)
    metric = (sweep.get("metric") or {}).get("name")
    for overrides in runs:
        check_run([*overrides, *extra], metric)
    return runs


def sample_runs(sweep: dict[str, Any], seed: int = 0) -> list[list[str]]:
    """The runs a local search makes: the grid itself, or `run_cap` seeded draws for random and bayes
    (locally, bayes draws at random too: the W&B server is what makes it Bayesian)."""
    if sweep["method"] == "grid":
        return grid_runs(sweep)
    generator = random.Random(seed)
    runs = []
    for _ in range(int(sweep.get("run_cap", 10))):
        runs.append([f"{key}={_override_value(_draw(spec, generator))}" for key, spec in sweep["parameters"].items()])
    return runs


def _draw(spec: dict[str, Any], generator: random.Random) -> Any:
    if "value" in spec:
        return spec["value"]
    if "values" in spec:
        return generator.choice(spec["values"])
    low, high = spec["min"], spec["max"]
    if spec["distribution"] == "log_uniform_values":
        return float(f"{math.exp(generator.uniform(math.log(low), math.log(high))):.6g}")
    if spec["distribution"] == "int_uniform":
        return generator.randint(low, high)
    return float(f"{generator.uniform(low, high):.6g}")


@dataclass(frozen=True)
class LocalRun:
    """How `run_locally` runs the points: `jobs` at once (round-robin over `devices`, GPU ids, when given),
    each trained with `extra` overrides and, with `export`, packed and timed by export.py."""

    extra: tuple[str, ...] = ()
    export: bool = False
    jobs: int = 1
    devices: tuple[str, ...] = ()


def run_locally(path: Path, out_dir: Path, options: LocalRun = LocalRun()) -> list[dict[str, Any]]:
    """Run every point of the sweep with train.py (and export.py); a point with a summary (and export report) is
    skipped, so an interrupted sweep resumes. The results directory belongs to one sweep file: another is refused."""
    if options.jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {options.jobs}")
    check_sweep(path, options.extra)  # refuses a bad sweep (or extra override) before anything runs
    runs = sample_runs(load_sweep(path))
    identity = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    writable_dir(out_dir, "--run")
    marker = out_dir / "sweep.json"
    if marker.exists() and json.loads(marker.read_text())["sweep_hash"] != identity:
        raise UserError(f"{out_dir} holds results of another sweep file; choose a new --run directory")
    marker.write_text(json.dumps({"sweep": str(path), "sweep_hash": identity, "extra": list(options.extra)}, indent=2))
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(options.jobs):
        slots.put(slot)

    def run_point(index: int) -> str | None:
        slot = slots.get()
        try:
            device = options.devices[slot % len(options.devices)] if options.devices else None
            return _run_point(index, runs[index], len(runs), out_dir / f"run{index:03d}", options, device)
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        failures = [failure for failure in pool.map(run_point, range(len(runs))) if failure]
    # Every trained point goes into results.json even when others failed, so a report can still be built.
    results = [
        {"run": index, "overrides": overrides, **json.loads(summary.read_text())}
        for index, overrides in enumerate(runs)
        if (summary := out_dir / f"run{index:03d}" / "summary.json").exists()
    ]
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    if failures:
        raise UserError(
            f"{len(failures)} of {len(runs)} sweep runs failed (finished ones are kept): " + "; ".join(failures)
        )
    return results


def _run_point(
    index: int, overrides: list[str], total: int, run_dir: Path, options: LocalRun, device: str | None
) -> str | None:
    """Train (and export) one point unless done; returns None, or what failed and where its log is."""
    root = CONF_DIR.parent
    steps = []
    if not (run_dir / "summary.json").exists():
        train = [str(root / "train.py"), *overrides, *options.extra, f"hydra.run.dir={run_dir}"]
        steps.append(("train", train, run_dir / "train.console.log"))
    if options.export and not (run_dir / "export" / "export_report.json").exists():
        export = [
            str(root / "export.py"),
            f"ckpt={run_dir / 'checkpoints' / 'last.ckpt'}",
            f"out_dir={run_dir / 'export'}",
        ]
        steps.append(("export", export, run_dir / "export.console.log"))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": device} if device is not None else None
    for step, arguments, log_path in steps:
        log.info("sweep run %d/%d %s: %s", index + 1, total, step, " ".join(overrides))
        run_dir.mkdir(parents=True, exist_ok=True)
        # One job at a time keeps the terminal (progress bars); parallel jobs write their own logs.
        with open(log_path, "w") if options.jobs > 1 else contextlib.nullcontext() as output:
            stream = {"stdout": output, "stderr": subprocess.STDOUT} if output else {}
            returncode = subprocess.run([sys.executable, *arguments], env=env, check=False, **stream).returncode
        if returncode != 0:
            return f"run {index} {step} ({' '.join(overrides)}, see {log_path if options.jobs > 1 else run_dir})"
    return None


@exit_on_user_error
def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description="Check a W&B sweep file against the config, list or run it.")
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--run", type=Path, help="run the sweep locally into this results directory (resumable)")
    parser.add_argument("--export", action="store_true", help="also pack and time every run with export.py")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (several fit on one GPU; logs per run)")
    parser.add_argument("--devices", default="", help="comma-separated GPU ids the jobs take in turn, e.g. 0,1")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run, e.g. logger=csv")
    args = parser.parse_intermixed_args()  # overrides may follow the options
    if args.run:
        devices = tuple(d for d in args.devices.split(",") if d)
        options = LocalRun(tuple(args.overrides), args.export, args.jobs, devices)
        results = run_locally(args.sweep, args.run, options)
        print(f"{len(results)} runs; results in {args.run / 'results.json'}")
        return
    runs = check_sweep(args.sweep, tuple(args.overrides))
    for overrides in runs:
        print("python train.py " + " ".join(overrides))


if __name__ == "__main__":
    main()
