"""Bad input on the command line gives one clear `error:` line and exit status 2, never a traceback.

Each case runs the entry point's real `main` (Hydra's command-line parsing included) inside the test process, so
a case costs what it checks, not an interpreter start. `{name}` in an argument is a path from `bad_files`.
"""

from __future__ import annotations

import logging
import runpy
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from hydra.core.global_hydra import GlobalHydra
from hydra_runs import PATTERN_OVERRIDES, TINY_VGG, compose_config
from omegaconf import OmegaConf
from omegaconf.basecontainer import BaseContainer

from sparseprune.app.training import train

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model.width_multiplier=0.25", "logger=none", "trainer=debug", "data.train_subset=64"]
# Resuming the checkpoint of `bad_files`: one more epoch of one batch, under the settings it was trained with.
RESUME = [*TINY_VGG, *PATTERN_OVERRIDES["tw"], "importance=magnitude", "schedule.dense_epochs=0", "schedule.stages=1",
          "trainer.max_epochs=2", "trainer.limit_train_batches=1", "trainer.limit_val_batches=1"]  # fmt: skip
SWEEP = "conf/sweep/patterns.yaml"

Runner = Callable[..., tuple[int, str]]


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> Runner:
    """Run `python <entry> <args>` in this process: (exit status, everything printed)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPARSEPRUNE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")

    def run(entry: str, *args: str) -> tuple[int, str]:
        chosen = entry.startswith("sparseprune") or any(arg.startswith(("hydra.run.dir=", "paths.")) for arg in args)
        hydra_args = [] if chosen else [f"hydra.run.dir={tmp_path / 'run'}"]
        monkeypatch.setattr(sys, "argv", [str(ROOT / entry), *args, *hydra_args])
        GlobalHydra.instance().clear()
        resolvers = set(BaseContainer._resolvers)  # a script registers its own at import, once per process
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level  # Hydra's job logging adds handlers on this run's streams
        try:
            if entry.endswith(".py"):  # as `python train.py`: Hydra finds conf/ beside the script
                runpy.run_path(str(ROOT / entry), run_name="__main__")
            else:
                runpy.run_module(entry, run_name="__main__")
            status = 0
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else 1
        for name in set(BaseContainer._resolvers) - resolvers:
            OmegaConf.clear_resolver(name)
        for handler in [h for h in root.handlers if h not in handlers]:  # later runs would write to closed streams
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
        captured = capfd.readouterr()
        return status, captured.out + captured.err

    return run


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real one-epoch TW checkpoint and files spoiled in every way the error cases name."""
    directory = tmp_path_factory.mktemp("bad_files")
    overrides = [o for o in RESUME if not o.startswith("trainer.max_epochs")] + ["trainer.max_epochs=1"]
    good = Path(train(compose_config("train", overrides, directory / "run"))["checkpoint"])
    checkpoint = torch.load(good, weights_only=False)
    files = {name: directory / name for name in ("a_file", "empty", "truncated", "random", "bare", "weights")}
    files["a_file"].write_text("not a directory")
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(good.read_bytes()[:100_000])
    files["random"].write_bytes(torch.randint(0, 256, (5000,), generator=torch.Generator().manual_seed(0)).byte()
                                .numpy().tobytes())  # fmt: skip
    torch.save(checkpoint["state_dict"], files["bare"])
    torch.save({"state_dict": checkpoint["state_dict"]}, files["weights"])
    pruning = checkpoint["callbacks"]["StagedPruning"]
    layer = next(iter(pruning["codes"]))
    codes = pruning["codes"][layer]
    for name, spoiled in (("reshaped", codes.flatten()[:-1]), ("recoded", codes + 7)):
        spoiled_pruning = {**pruning, "codes": {**pruning["codes"], layer: spoiled}}
        files[name] = directory / f"{name}.ckpt"
        callbacks = {**checkpoint["callbacks"], "StagedPruning": spoiled_pruning}
        torch.save({**checkpoint, "callbacks": callbacks}, files[name])
    command = ["${env}", "python", "${program}", "${args_no_hyphens}", "logger.wandb.offline=false"]
    sweep = {"method": "grid", "parameters": {"pattern.granularity": {"values": [12]}}, "command": command}
    files["g12_sweep"] = directory / "g12.yaml"
    files["g12_sweep"].write_text(yaml.safe_dump(sweep))
    return files | {"good": good, "file": files["a_file"]}


def assert_clear_error(status: int, output: str, message: str) -> None:
    assert status == 2, output
    assert message in output, output
    assert "Traceback" not in output, output
    assert len([line for line in output.splitlines() if line.startswith("error:")]) <= 1, output


def expand(args: list[str], files: dict[str, Path]) -> list[str]:
    return [arg.format(**files) for arg in args]


def with_overrides(base: list[str], args: list[str], files: dict[str, Path]) -> list[str]:
    """`base` without what `args` sets again (a group chosen in `args` drops the base's keys in it), then `args`."""
    keys = {arg.partition("=")[0] for arg in args}
    kept = [o for o in base if o.partition("=")[0] not in keys and o.partition("=")[0].split(".")[0] not in keys]
    return expand([*kept, *args], files)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model=resnet9000"], "Could not find 'model/resnet9000'"),
        (["pattern=diagonal"], "Could not find 'pattern/diagonal'"),
        (["data=mnist3d"], "Could not find 'data/mnist3d'"),
        (["schedule.target=1.5"], "error: sparsity must lie in [0, 1), got 1.5"),
        (["pattern.granularity=12"], "error: granularity G=12 must be a multiple of 8"),
        (["pattern=vw", "pattern.vector=7"], "error: vector=7 does not fit layer"),
        (["pattern=bw"], "error: block_k=32 does not fit layer"),
        (["pattern=shflbw"], "error: block=64 does not fit layer 'net.features.3.weight': its size 16"),
        (["pattern=shflbw", "pattern.block=48"], "error: shflbw block=48 must be one of (32, 64, 128)"),
        (
            ["pattern=shflbw", "pattern.block=32", "model.prune_exclude=[net.classifier.3.weight]"],
            "error: shflbw runs layer 'net.features.0.weight' on the TW kernels, which need K a multiple of 8",
        ),
        (["pattern=nm", "pattern.n=4", "pattern.m=4"], "error: N:M needs N < M, got 4:4"),
        (["pattern=nm", "schedule.target=0.5"], "error: pattern nm fixes sparsity at 0.75"),
        (["importance.kind=hessian"], "error: importance.kind must be one of"),
        (["data=cifar10", "data.download=false"], "error: CIFAR-10"),
        (["ckpt_path=/nonexistent/last.ckpt"], "error: checkpoint /nonexistent/last.ckpt does not exist"),
        (["schedule.target=abc"], "error: schedule.target must be a number, got 'abc'"),
        (["schedule.stages=2.5"], "error: schedule.stages must be an integer, got 2.5"),
        (["seed=abc"], "error: seed must be an integer, got 'abc'"),
        (["data.augment=maybe"], "error: data.augment must be true or false, got 'maybe'"),
        (["data.augment=no"], "error: data.augment must be true or false, got 'no'"),
        (["pattern.column_share=most"], "error: pattern.column_share must be a number, got 'most'"),
        (["trainer.max_epochs=-3"], "error: trainer: `max_epochs` must be a non-negative integer or -1"),
        (["paths.output_dir={file}/run"], "error: paths.output_dir: cannot write into"),
        (["callbacks.model_checkpoint.dirpath=/proc/checkpoints"], "error: callbacks.model_checkpoint.dirpath: cannot"),
        (["ckpt_path={truncated}"], "error: checkpoint {truncated} is corrupt or not a torch checkpoint"),
        (["ckpt_path={random}"], "error: checkpoint {random} is corrupt or not a torch checkpoint"),
        (["ckpt_path={empty}"], "error: checkpoint {empty} is corrupt or not a torch checkpoint"),
        (["ckpt_path={bare}"], "error: {bare} is not a Lightning checkpoint (no state_dict)"),
        (["ckpt_path={weights}"], "error: ckpt_path {weights} holds weights but no training state to resume"),
        (["ckpt_path={good}", "model.width_multiplier=0.5"], "error: ckpt_path {good} does not match the model"),
        (["ckpt_path={good}"], "error: trainer=debug (fast_dev_run) runs one batch per stage from scratch"),
    ],
)
def test_train_bad_input(cli: Runner, bad_files: dict[str, Path], args: list[str], message: str) -> None:
    assert_clear_error(*cli("train.py", *with_overrides(TINY, args, bad_files)), message.format(**bad_files))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["hydra.run.dir=/proc/run"], "error: cannot create the run directory /proc/run"),
        (["paths.log_dir={file}/logs"], "error: cannot create the run directory {file}/logs/train/runs/"),
        (["trainer=gpu"], "error: trainer.accelerator=gpu needs a CUDA GPU and none is visible; use trainer=cpu"),
        (["trainer.accelerator=cuda"], "error: trainer.accelerator=cuda needs a CUDA GPU and none is visible"),
    ],
)
def test_train_bad_place_or_device(cli: Runner, bad_files: dict[str, Path], args: list[str], message: str) -> None:
    if "accelerator" in message and torch.cuda.is_available():
        pytest.skip("checks the message shown on machines without a GPU")
    assert_clear_error(*cli("train.py", *with_overrides(TINY, args, bad_files)), message.format(**bad_files))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pattern=ew"], "error: ckpt_path {good} was pruned under other settings: pattern.name='tw' in the"),
        (["pattern=nm", "schedule.target=0.75"], "pattern.name='tw' in the checkpoint, 'nm' now"),
        (["pattern.granularity=64"], "pattern.granularity=32 in the checkpoint, 64 now"),
        (["schedule.target=0.5"], "schedule.target=0.75 in the checkpoint, 0.5 now"),
        (["callbacks.staged_pruning.scope=layer"], "callbacks.staged_pruning.scope='global' in the checkpoint"),
        (["schedule.target=0.5"], "start a new pruning run from its weights with init_ckpt={good}"),
        (["ckpt_path={reshaped}"], "error: ckpt_path {reshaped}: the mask of net.features.3.weight has shape"),
        (["ckpt_path={recoded}"], "which pattern tw never makes (it makes [0, 1])"),
        (["trainer.max_epochs=1"], "error: ckpt_path {good} has finished 1 epochs and trainer.max_epochs=1"),
    ],
)
def test_resume_refuses_other_settings(cli: Runner, bad_files: dict[str, Path], args: list[str], message: str) -> None:
    arguments = with_overrides([*RESUME, "ckpt_path={good}"], args, bad_files)
    assert_clear_error(*cli("train.py", *arguments), message.format(**bad_files))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "error: ckpt is required: add ckpt=... to the command line"),
        (["ckpt={random}"], "error: checkpoint {random} is corrupt"),
        (["ckpt={good}", "device=tpu"], "error: device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
        (["ckpt={good}", "repeats=0"], "error: repeats must be at least 1, got 0"),
        (["ckpt={good}", "warmup=-1"], "error: warmup must be at least 0, got -1"),
        (["ckpt={good}", "batch_size=many"], "error: batch_size must be an integer, got 'many'"),
        (["ckpt={good}", "out_dir={file}/export"], "error: out_dir: cannot write into {file}"),
        (["ckpt={reshaped}", "device=cpu"], "error: {reshaped}: the mask of net.features.3.weight has shape"),
    ],
)
def test_export_bad_input(cli: Runner, bad_files: dict[str, Path], args: list[str], message: str) -> None:
    assert_clear_error(*cli("export.py", *expand(args, bad_files)), message.format(**bad_files))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown on machines without a GPU")
def test_export_asks_for_a_missing_gpu(cli: Runner, bad_files: dict[str, Path]) -> None:
    assert_clear_error(*cli("export.py", f"ckpt={bad_files['good']}", "device=cuda"), "no CUDA GPU")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([SWEEP, "--run", "/proc/sweep"], "error: --run: cannot write into /proc/sweep"),
        ([SWEEP, "schedule.target=0.5"], "error: the extra override schedule.target=0.5 sets schedule.target, which"),
        (["{g12_sweep}"], "granularity G=12 must be a multiple of 8"),
    ],
)
def test_sweep_bad_input(cli: Runner, bad_files: dict[str, Path], args: list[str], message: str) -> None:
    arguments = [str(ROOT / arg) if arg == SWEEP else arg for arg in expand(args, bad_files)]
    assert_clear_error(*cli("sparseprune.sweeps", *arguments), message)
