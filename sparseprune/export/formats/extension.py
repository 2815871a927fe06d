"""The compiled CUDA kernels (`sparseprune._kernels`, built from kernels_ext/ by setup.py), or None without them.

Every packed format asks here; a CPU-only install simply gets None and uses its torch reference op. The custom ops
(sparseprune.export.ops) call `load_kernels` when they run. Code that torch.compile traces (which layout a layer
computes in, which routes can run) asks `kernels_built` and `sp24_unavailable_on` instead: facts of the build and the
machine, constant for a process, which dynamo evaluates once while tracing instead of breaking its graph at the
import or at a call into the extension.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

import torch

from sparseprune.export.formats.limits import check_build

log = logging.getLogger(__name__)

HOPPER = (9, 0)  # the sm_90a sparse wgmma runs on exactly this compute capability


@functools.cache
def load_kernels() -> ModuleType | None:
    """The extension module, imported once; None when it was not built or does not load. UserError where it was
    built from headers whose constants differ from Python's (`limits.check_build`)."""
    try:
        from sparseprune import _kernels
    except ImportError as err:
        log.info("sparseprune CUDA kernels unavailable (%s): using the torch reference ops", err)
        return None
    check_build(_kernels)
    return _kernels


@torch.compiler.assume_constant_result
def kernels_built() -> bool:
    """Whether the extension loads (constant under torch.compile)."""
    return load_kernels() is not None


@torch.compiler.assume_constant_result
def sp24_unavailable_on(device: torch.device) -> str | None:
    """Why the 2:4 kernel cannot run on `device` in this build, or None when it can (constant under torch.compile)."""
    kernels = load_kernels()
    if kernels is None or not hasattr(kernels, "sp24_matmul"):
        return "the extension was built without the CUTLASS 2:4 kernel (install nvidia-cutlass and rebuild)"
    if device.type != "cuda":
        return f"x is on {device}, the 2:4 kernel needs CUDA"
    capability = torch.cuda.get_device_capability(device)
    if capability != HOPPER:
        return f"the 2:4 kernel needs a Hopper (sm_90) GPU, {device} is sm_{capability[0]}{capability[1]}"
    if not kernels.sp24_available():
        return "the 2:4 kernel has no sm_90a code in this build (TORCH_CUDA_ARCH_LIST must include 9.0a)"
    return None
