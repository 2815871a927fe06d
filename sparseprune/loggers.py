"""Lightning's W&B logger with quiet defaults, so that a run's console shows the project's own tables; and where a
run's W&B run is found again (a resumed run, export) from its run folder."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import WandbLogger

WANDB_DIR = "wandb"  # wandb.init(dir=<run folder>) keeps its run directories here
RUN_DIR_NAME = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-([a-z0-9]+)$")  # wandb's <mode>run-<time>-<id>


def wandb_run_id(run_dir: Path) -> str | None:
    """The id of the latest W&B run a run folder holds (online or offline), or None where it holds none."""
    runs = [match.groups() for path in (run_dir / WANDB_DIR).glob("*run-*") if (match := RUN_DIR_NAME.match(path.name))]
    return max(runs)[1] if runs else None


def checkpoint_run_dir(ckpt: str | Path) -> Path:
    """The run folder of a checkpoint train.py wrote: <run>/checkpoints/<name>.ckpt."""
    return Path(ckpt).parent.parent


class QuietWandbLogger(WandbLogger):
    """WandbLogger offline whenever `offline` (also after another W&B run in this process), without wandb's warning
    that `anonymous` has no effect (Lightning passes it even when unset) and, with `quiet`, without the history and
    summary wandb prints when the run ends (the stage table says as much). Given `resume_ckpt` (train.py's
    ckpt_path), it continues the W&B run of that checkpoint's run folder under the same id, so a resumed run and its
    export are one W&B run."""

    def __init__(self, *args: Any, quiet: bool = True, resume_ckpt: str | None = None, **kwargs: Any) -> None:
        if resume_ckpt and not kwargs.get("id") and (run_id := wandb_run_id(checkpoint_run_dir(resume_ckpt))):
            kwargs |= {"id": run_id, "resume": "allow"}
        super().__init__(*args, **kwargs)
        self._wandb_init.pop("anonymous", None)
        if self._offline:  # Lightning sets WANDB_MODE, which wandb reads only when its first run of the process starts
            self._wandb_init["mode"] = "offline"
        if "settings" not in self._wandb_init:
            import wandb  # as Lightning does: only where a W&B run is made

            self._wandb_init["settings"] = wandb.Settings(quiet=quiet)
