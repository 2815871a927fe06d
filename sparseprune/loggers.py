"""Lightning's W&B logger with quiet defaults, so that a run's console shows the project's own tables."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.loggers import WandbLogger


class QuietWandbLogger(WandbLogger):
    """WandbLogger offline whenever `offline` (also after another W&B run in this process), without wandb's warning
    that `anonymous` has no effect (Lightning passes it even when unset) and, with `quiet`, without the history and
    summary wandb prints when the run ends (the stage table says as much)."""

    def __init__(self, *args: Any, quiet: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wandb_init.pop("anonymous", None)
        if self._offline:  # Lightning sets WANDB_MODE, which wandb reads only when its first run of the process starts
            self._wandb_init["mode"] = "offline"
        if "settings" not in self._wandb_init:
            import wandb  # as Lightning does: only where a W&B run is made

            self._wandb_init["settings"] = wandb.Settings(quiet=quiet)
