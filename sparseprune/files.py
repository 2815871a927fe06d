"""Writing results so that a crash or a bad path never leaves half of one behind.

A file is written to a temporary file beside its target, flushed to disk and renamed over the target: a rename
within one directory is atomic on every local filesystem, where Lightning's default (a temporary file under
TMPDIR, then a move) turns into a copy across filesystems and can leave a truncated `last.ckpt`. A directory of
results (an export) is filled under a temporary name and swapped in only when complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from sparseprune.errors import UserError

TEMP_SUFFIX = ".partial"  # every temporary file or directory of this module ends so, for the clean-up


def writable_dir(path: Path, key: str) -> Path:
    """`path`, created if needed and checked by writing a probe file; the error names the config key."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        reason = error.strerror or str(error)
        raise UserError(f"{key}: cannot write into {path} ({reason}); choose a writable directory") from None
    return path


def _fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (POSIX); where directories cannot be opened, nothing to do."""
    with contextlib.suppress(OSError):
        handle = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def atomic_write(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Call `write` on a temporary file beside `path`, fsync it, rename it over `path`: readers see the old file
    or the new one, never a part. The temporary file is removed when `write` fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    os.close(handle)  # reopened by name, so the file object names the temporary file
    try:
        with open(temp_name, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    _fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda file: file.write(text.encode()))


def remove_stale_temporaries(directory: Path, name: str = "") -> list[Path]:
    """Remove the temporary files and directories that a killed process left in `directory` for the target
    `name` (every target when empty); only this module's names match."""
    stale = sorted(directory.glob(f".{name}*{TEMP_SUFFIX}")) if directory.is_dir() else []
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return stale


@contextlib.contextmanager
def replaced_on_success(target: Path, key: str) -> Iterator[Path]:
    """A fresh temporary directory beside `target` to fill; when the block succeeds it replaces `target` (the old
    contents go), when it fails it is removed and `target` stays as it was."""
    parent = writable_dir(target.parent, key)
    remove_stale_temporaries(parent, f"{target.name}.")
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=TEMP_SUFFIX))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.old.", suffix=TEMP_SUFFIX))
        os.replace(target, old / target.name)
    os.replace(staging, target)
    _fsync_dir(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
