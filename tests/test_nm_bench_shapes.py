"""nm_bench's grid is nmSPARSE's own operator table (M1-M32), as the paper prints it."""

from __future__ import annotations

from bench.nm_bench import NMSPARSE_SHAPES, SHAPES

# (m, k, n) of M1..M32, copied row by row from nmSPARSE's "Operator Settings" table.
PAPER_TABLE = [
    *[(1, k, n) for k, n in [(1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192), (1024, 4096), (4096, 1024),
                             (5120, 20480), (20480, 5120)]],
    (256, 1024, 1024), (1024, 1024, 1024), (4096, 1024, 1024), (256, 2048, 2048), (1024, 2048, 2048),
    (4096, 2048, 2048), (256, 4096, 4096), (1024, 4096, 4096), (4096, 4096, 4096), (256, 8192, 8192),
    (1024, 8192, 8192), (4096, 8192, 8192), (256, 1024, 4096), (1024, 1024, 4096), (4096, 1024, 4096),
    (256, 4096, 1024), (1024, 4096, 1024), (4096, 4096, 1024), (256, 5120, 20480), (1024, 5120, 20480),
    (4096, 5120, 20480), (256, 20480, 5120), (1024, 20480, 5120), (4096, 20480, 5120),
]  # fmt: skip


def test_grid_is_the_papers_32_shapes() -> None:
    assert len(PAPER_TABLE) == len(set(PAPER_TABLE)) == 32
    assert sorted(NMSPARSE_SHAPES.values()) == sorted(PAPER_TABLE)
    assert all(SHAPES[name] == shape for name, shape in NMSPARSE_SHAPES.items())
    assert NMSPARSE_SHAPES["nms_m1_k4096_n4096"] == (1, 4096, 4096)  # the name docs/nm.md runs
