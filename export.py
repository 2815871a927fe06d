"""Pack a pruned checkpoint for the sparse kernels, check it, time it: `python export.py ckpt=PATH`."""

import logging
import os
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from sparseprune.app.cli import exit_on_user_error
from sparseprune.app.console import quiet_console
from sparseprune.timing_notes import busy_machine_warning

log = logging.getLogger("sparseprune.export")


def export_log_file(out_dir: str | None, ckpt: str | None) -> str:
    """export.py's log, beside the folder the export writes (out_dir, else <run>/export) as <folder>.log: outside it,
    so that an export replacing an earlier one leaves the log alone. Nowhere until there is a place to write."""
    if not out_dir and not ckpt:
        return os.devnull
    folder = Path(out_dir) if out_dir else Path(ckpt).parent.parent / "export"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return os.devnull  # the export itself names the folder it cannot write
    return str(folder.parent / f"{folder.name}.log")


# replace=True: tests run this script again in one process, after importing it
OmegaConf.register_new_resolver("export_log_file", export_log_file, replace=True)


@hydra.main(version_base="1.3", config_path="conf", config_name="export")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    quiet_console()
    from sparseprune.export.pipeline import export  # heavy imports after Hydra has parsed the command line

    if (warning := busy_machine_warning()) is not None:
        log.warning(warning)
    export(cfg)


if __name__ == "__main__":
    main()
