"""Progress bars for long loops (packing and timing every layer of a model): on stderr, gone once done, so that
reports printed on stdout stay clean, and redrawn only between items, with no thread drawing while a layer is timed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from rich.console import Console
from rich.progress import track

T = TypeVar("T")


def progress(items: Iterable[T], description: str) -> Iterable[T]:
    """`items`, with a progress bar while they are consumed (a sized iterable shows its share done)."""
    return track(items, description=description, transient=True, auto_refresh=False, console=Console(stderr=True))
