"""The compiled CUDA kernels (`sparseprune._kernels`, built from kernels_ext/ by setup.py), or None without them.

Every packed format asks here once; a CPU-only install simply gets None and uses its torch reference op.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

import torch  # noqa: F401  (loads libtorch before the extension, which links against it)

log = logging.getLogger(__name__)


@functools.cache
def load_kernels() -> ModuleType | None:
    """The extension module, imported once; None when it was not built or does not load."""
    try:
        from sparseprune import _kernels
    except ImportError as err:
        log.info("sparseprune CUDA kernels unavailable (%s): using the torch reference ops", err)
        return None
    return _kernels
