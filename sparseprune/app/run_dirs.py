"""Each run in a directory of its own: Hydra's timestamped default is taken by an atomic mkdir, suffixed when
another run (started in the same second) has it, and a directory that cannot be made is one clear line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, read_write

from sparseprune.app.cli import exit_with_error


def claim_new_dir(path: Path) -> Path:
    """`path`, or `path_1`, `path_2`, ...: the first that did not exist, created by this call alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    number = 0
    while True:
        candidate = path if number == 0 else path.with_name(f"{path.name}_{number}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            number += 1


class ClaimRunDir(Callback):
    """Set `hydra.run.dir` to a directory this run owns before Hydra writes into it. A directory given on the
    command line (a sweep point, a DDP rank joining rank zero) is the caller's choice and is only created."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run = config.hydra.run
        chosen = any(override.startswith("hydra.run.dir=") for override in config.hydra.overrides.hydra)
        try:
            directory = Path(run.dir)
            if chosen:
                directory.mkdir(parents=True, exist_ok=True)
            else:
                directory = claim_new_dir(directory)
        except OSError as error:
            exit_with_error(
                f"cannot create the run directory {run.dir} ({error.strerror or error}): set paths.log_dir or "
                "hydra.run.dir to a writable place"
            )
        with read_write(run):
            run.dir = str(directory.resolve())
