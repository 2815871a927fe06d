"""Build hook: compiles `kernels_ext/` into the `sparseprune._kernels` CUDA extension when a CUDA toolkit is found.

Without a toolkit (or without torch at build time) only the pure-Python package is installed and every packed
format falls back to its torch reference op. Metadata lives in pyproject.toml; this file only adds the extension.

Environment: CUDA_HOME selects the toolkit (default /usr/local/cuda-13.0 when it holds nvcc);
TORCH_CUDA_ARCH_LIST overrides the targets (default "9.0a", the Hopper build with wgmma; add "8.0" for the
mma.sync kernels on Ampere, at about 40% more compile time);
SPARSEPRUNE_NO_CUDA=1 skips the extension.

The 2:4 Hopper sparse GEMM (kernels_ext/sp24_gemm.cu) is built from CUTLASS headers, found through the
`nvidia-cutlass` wheel (`import cutlass_library`); without them the rest of the extension still builds and 2:4
weights run on the CUDA-core N:M kernels.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from setuptools import setup

log = logging.getLogger("sparseprune.setup")
ROOT = Path(__file__).resolve().parent
DEFAULT_CUDA_HOME = Path("/usr/local/cuda-13.0")


def _find_cuda_home() -> Path | None:
    """The toolkit to build with, or None: CUDA_HOME when set, else the default install if it has nvcc."""
    env = os.environ.get("CUDA_HOME")
    if env:
        return Path(env) if (Path(env) / "bin" / "nvcc").exists() else None
    return DEFAULT_CUDA_HOME if (DEFAULT_CUDA_HOME / "bin" / "nvcc").exists() else None


def _cutlass_includes() -> list[str]:
    """CUTLASS/CuTe include folders from the nvidia-cutlass wheel, or [] when it is not installed."""
    try:
        import cutlass_library
    except ImportError:
        return []
    source = Path(cutlass_library.__file__).resolve().parent / "source"
    folders = [source / "include", source / "tools" / "util" / "include"]
    return [str(f) for f in folders] if all((f / "cutlass").is_dir() for f in folders) else []


def _extensions() -> tuple[list, dict]:
    """(ext_modules, cmdclass) for setup(): empty when the CUDA build is off or impossible."""
    if os.environ.get("SPARSEPRUNE_NO_CUDA") == "1":
        return [], {}
    cuda_home = _find_cuda_home()
    if cuda_home is None:
        log.warning("no CUDA toolkit found: installing sparseprune without its CUDA kernels")
        return [], {}
    # torch reads these when cpp_extension is imported, so set them first.
    os.environ["CUDA_HOME"] = str(cuda_home)
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0a")
    try:
        from torch.utils.cpp_extension import BuildExtension, CUDAExtension
    except ImportError:
        log.warning("torch is not importable at build time: installing sparseprune without its CUDA kernels")
        return [], {}
    sources = [
        "kernels_ext/bindings.cpp",
        "kernels_ext/tw_gemm.cu",
        "kernels_ext/tw_gemv.cu",
        "kernels_ext/tw_gemm_sm90.cu",
        "kernels_ext/tw_gemm_sm90_ws.cu",
        "kernels_ext/tw_gemm_sm90_rows.cu",
        "kernels_ext/nm_gemm.cu",
        "kernels_ext/nm_gemv_mma.cu",
        "kernels_ext/im2col.cu",
        "kernels_ext/layer_norm.cu",
    ]
    include_dirs = [str(ROOT / "kernels_ext")]
    cxx_flags, nvcc_flags = ["-O3"], ["-O3"]  # torch picks the C++ standard it needs
    cutlass = _cutlass_includes()
    if cutlass:
        log.info("building the 2:4 sparse GEMM with CUTLASS from %s", cutlass[0])
        # One file per GEMM kernel (CTA tile, with or without a source), so they compile in parallel.
        sources += ["kernels_ext/sp24_gemm.cu"] + [
            f"kernels_ext/sp24_gemm_{tile}{source}.cu"
            for tile in ("wide", "tall", "pingpong", "narrow")
            for source in ("", "_source")
        ]
        include_dirs += cutlass
        cxx_flags.append("-DSPARSEPRUNE_SP24")
        # NDEBUG: CUTLASS's device asserts are function calls, and ptxas serializes every wgmma around a call.
        nvcc_flags += ["-DSPARSEPRUNE_SP24", "-DNDEBUG"]
    else:
        log.warning("CUTLASS headers not found (pip install nvidia-cutlass): building without the 2:4 sparse GEMM")
    ext = CUDAExtension(
        name="sparseprune._kernels",
        sources=sources,
        include_dirs=include_dirs,
        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
    )
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=True)}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
