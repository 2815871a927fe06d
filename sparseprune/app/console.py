"""Console output of the entry points: the project's own lines and tables, without the libraries' chatter.

Each setting is a default that an environment variable set by the user still overrides.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
# Columns rich lays tables and lines out for when stdout is not a terminal (a pipe, a log file): rich's default of 80
# wraps rows and cuts checkpoint paths and layer names; tables stay as narrow as their content.
PIPED_COLUMNS = 240


class DropTips(logging.Filter):
    """Lightning's advertisements ("💡 Tip: ... try installing litlogger"), printed on every run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


class StripAnsi(logging.Filter):
    """transformers writes its load report's heading in raw bold codes even into a pipe or a log file."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = ANSI_ESCAPE.sub("", str(record.msg))
        return True


def quiet_console() -> None:
    """Set before anything is imported or run, so the first line a library prints already follows."""
    for name, kind in (("lightning.pytorch.utilities.rank_zero", DropTips), ("transformers.modeling_utils", StripAnsi)):
        logger = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in logger.filters):  # once, however often an entry point runs
            logger.addFilter(kind())
    # Lightning calls a torch API that torch deprecates; nothing a user can act on, and it repeats per dataloader.
    warnings.filterwarnings(
        "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
    )
    if not sys.stdout.isatty():
        os.environ.setdefault("COLUMNS", str(PIPED_COLUMNS))
    if not sys.stderr.isatty():  # a bar redrawn with carriage returns is noise in a pipe
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
