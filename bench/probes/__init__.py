"""One-off GPU probes and development tools, kept beside the product benchmarks for the lab notes they back.

Anatomies (a kernel rebuilt with parts of its work left out), a gather-only probe, the A/B timing of two builds, the
schedule-balance model, the timing-drift probe, N:M route sweeps by rows, the BERT feed-forward and CUDA-graph mask
probes and the Nsight Compute driver. Each runs as `python -m bench.probes.<name>` from the repository root; what
each one found is in docs/lab-notes.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

KERNELS_EXT = Path(__file__).resolve().parents[2] / "kernels_ext"


def load_probe_extension(probe_file: str) -> Any:
    """Builds the .cu beside a probe module (same name) with torch's extension loader, for sm_90a, with kernels_ext/
    on its include path; the module calls it with its own __file__."""
    from torch.utils.cpp_extension import load  # only the probes that build their own kernels pay for the import

    source = Path(probe_file).with_suffix(".cu")
    return load(
        name=source.stem,
        sources=[str(source)],
        extra_include_paths=[str(KERNELS_EXT)],
        extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"],
    )
