"""A run that fails before it has written anything leaves no folder behind: Hydra makes the run folder (its config
copy and the job log) before the task starts, so a mistyped value would otherwise leave an empty-looking run among
the real ones under logs/."""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hydra.core.hydra_config import HydraConfig

Result = TypeVar("Result")


def holds_only_hydra_files(run_dir: Path, job_name: str) -> bool:
    """True when the folder holds nothing but Hydra's own: `.hydra/`, `<job>.log` and empty folders."""
    for path in run_dir.rglob("*"):
        relative = path.relative_to(run_dir)
        if path.is_file() and relative.parts[0] != ".hydra" and relative != Path(f"{job_name}.log"):
            return False
    return True


def discard_run_dir_on_failure(task: Callable[..., Result]) -> Callable[..., Result]:
    """Run `task`; when it fails (an exception or a non-zero exit) with nothing written, remove its run folder."""

    @functools.wraps(task)
    def wrapper(*args: Any, **kwargs: Any) -> Result:
        try:
            return task(*args, **kwargs)
        except BaseException as error:
            succeeded = isinstance(error, SystemExit) and error.code in (0, None)
            if not succeeded and HydraConfig.initialized():
                runtime = HydraConfig.get()
                run_dir = Path(runtime.runtime.output_dir)
                if run_dir.is_dir() and holds_only_hydra_files(run_dir, runtime.job.name):
                    shutil.rmtree(run_dir, ignore_errors=True)
            raise

    return wrapper
