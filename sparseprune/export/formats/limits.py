"""The kernels' constants that Python's packing and dispatch use, in one table, by their qualified C++ names.

Python holds the values itself: the packed layouts need some of them where no extension is built (K_STEP, PANEL,
the G values), and installs carry no headers to read them from. They cannot drift from the C++ side silently: the
extension exports its own through `limits()` (kernels_ext/bindings.cpp), `check_build` refuses an extension whose
values differ (built from other sources), and tests/test_dispatch.py parses the headers in CI, where no extension is
built, and fails where a value or a name differs.
"""

from __future__ import annotations

from types import ModuleType

from sparseprune.errors import UserError

# qualified C++ name: (its header under kernels_ext/, the value)
LIMITS: dict[str, tuple[str, int | tuple[int, ...]]] = {
    "tw::kKStep": ("tw_gemm.h", 32),  # kept K of every TW tile is padded to a multiple of this
    "tw::kSmallM": ("tw_gemm.h", 16),  # rows of x up to which the TW kernels run a GEMV
    "tw::kGemvMaxM": ("tw_gemm.h", 8),  # rows up to which that GEMV runs on CUDA cores
    "tw::kMmaGemvMaxM": ("tw_gemm.h", 256),  # rows up to which auto may take the tensor-core GEMV
    "tw::kGranularities": ("tw_gemm.h", (32, 64, 128)),  # TW tile widths G
    "tw::Path::kAuto": ("tw_gemm.h", 0),  # the TW kernel family codes, formats.tw.KERNELS
    "tw::Path::kMmaSync": ("tw_gemm.h", 1),
    "tw::Path::kWgmma": ("tw_gemm.h", 2),
    "tw::Path::kWgmmaWs": ("tw_gemm.h", 3),
    "tw::Path::kGemvMma": ("tw_gemm.h", 5),
    "tw::Path::kWgmmaRows": ("tw_gemm.h", 7),
    "nm::kSmallM": ("nm_gemm.h", 16),  # rows of x up to which the N:M SpMV runs
    "nm::kMaxM": ("nm_gemm.h", 32),  # largest N:M group the kernels take
    "nm::kPanel": ("nm_gemm.h", 32),  # columns per panel of the element-wise N:M layout
    "nm::kGemvMmaMinM": ("nm_gemm.h", 5),  # rows from which the SpMV hands over to its tensor-core GEMV
    "nm::kGemvMmaStep": ("nm_gemm.h", 32),  # K and N multiple that GEMV needs
    "norm::kHStep": ("layer_norm.h", 64),  # hidden sizes the LayerNorm kernel takes: multiples of this
    "norm::kMaxH": ("layer_norm.h", 1024),  # up to this
    "sp24::kKAlign": ("sp24_gemm.h", 16),  # K multiple of the 2:4 GEMM
    "sp24::kNAlign": ("sp24_gemm.h", 8),  # N multiple of the 2:4 GEMM
    "sp24::Tile::kAuto": ("sp24_gemm.h", 0),  # the 2:4 CTA tile codes, formats.sp24.TILES
    "sp24::Tile::kWide": ("sp24_gemm.h", 1),
    "sp24::Tile::kTall": ("sp24_gemm.h", 2),
    "sp24::Tile::kPingpong": ("sp24_gemm.h", 3),
    "sp24::Tile::kNarrow": ("sp24_gemm.h", 4),
}
OPTIONAL_PREFIXES = ("sp24::",)  # exported only by builds with the CUTLASS 2:4 kernel


def limit(name: str) -> int:
    """The value of one scalar constant."""
    value = LIMITS[name][1]
    assert isinstance(value, int), name
    return value


def codes(enum: str, names: dict[str, str]) -> dict[str, int]:
    """{Python name: code} of a C++ enum's entries, from {Python name: enumerator}: codes("tw::Path", {"auto": "kAuto",
    ...}) -> {"auto": 0, ...}."""
    return {name: limit(f"{enum}::{enumerator}") for name, enumerator in names.items()}


def disagreements(exported: dict[str, int | tuple[int, ...]]) -> list[str]:
    """Where C++ values (by qualified name) differ from this table, one line each; empty where they agree."""
    lines = [f"{name} is {exported[name]} there, {value} here" for name, (_, value) in LIMITS.items()
             if name in exported and tuple(_as_tuple(exported[name])) != tuple(_as_tuple(value))]  # fmt: skip
    missing = [name for name in LIMITS if name not in exported and not name.startswith(OPTIONAL_PREFIXES)]
    extra = [name for name in exported if name not in LIMITS]
    return lines + [f"{name} is missing there" for name in missing] + [f"{name} is unknown here" for name in extra]


def check_build(kernels: ModuleType) -> None:
    """Raise UserError where the built extension's constants differ from this table (a stale build)."""
    why = disagreements(dict(kernels.limits())) if hasattr(kernels, "limits") else ["it exports no limits()"]
    if why:
        raise UserError(f"sparseprune._kernels was built from other sources ({'; '.join(why)}): rebuild it "
                        "(python setup.py build_ext --inplace)")  # fmt: skip


def _as_tuple(value: int | tuple[int, ...]) -> tuple[int, ...]:
    return value if isinstance(value, tuple) else (value,)
