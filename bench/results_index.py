"""The results index and the tables generated from it.

bench/results/index.json names, per benchmark, its latest result files (edited by hand when a new run lands), the
files each README table is built from, and every result file that the README, docs/ or the code cite (collected by
this script, with the results those files link in turn). The README's result tables and docs/architecture.md's N:M
route table are generated between marker comments, `<!-- generated:NAME -->` ... `<!-- /generated:NAME -->`, so a
table typed by hand fails tests/test_results_index.py.

    python -m bench.results_index --write    # refresh index.json's "cited" list
    python -m bench.results_index --readme   # regenerate the README's result tables
    python -m bench.results_index --docs     # regenerate the N:M route table of docs/architecture.md
    python -m bench.results_index --check    # exit 1 where any of the three differs from what this script makes
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
INDEX = RESULTS / "index.json"
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
CITING_SUFFIXES = {".md", ".py", ".cu", ".cuh", ".h", ".cpp", ".sh", ".yaml"}
CITING_DIRS = ("docs", "bench", "sparseprune", "kernels_ext", "conf", "tests")
RESULT_SUFFIXES = {".md", ".json", ".png", ".log"}
CITATION = re.compile(r"bench/results/([A-Za-z0-9_./-]+)")
BARE_NAME = re.compile(r"\b([A-Za-z0-9_]+\.(?:md|json))\b")
RELATIVE_LINK = re.compile(r"\]\(([A-Za-z0-9_./-]+)\)")
BLOCK = re.compile(r"(<!-- generated:([a-z0-9-]+) -->\n)(.*?)(<!-- /generated:\2 -->)", re.S)

SHAPES = {
    "bert_qkv": "BERT QKV 4096×768→2304",
    "bert_ffn_in": "BERT FFN in 4096×768→3072",
    "bert_ffn_out": "BERT FFN out 4096×3072→768",
    "vgg_conv4": "VGG16 conv4 6272×4608→512",
    "cube_8192": "8192³",
    "decode_m1": "decode, 1 row, 4096→11008",
    "decode_m16": "decode, 16 rows, 4096→11008",
}
MODEL_PATTERNS = {"tw@0.75": "TW 75%", "tw@0.9": "TW 90%", "nm-2:8-v64@0.75": "VW 2:8 (V = 64)", "nm-2:4@0.5": "2:4"}
ACCURACY_ROWS = {
    "dense": "dense",
    "ew": "EW",
    "vw": "VW, V = 16",
    "bw": "BW, 32 × 32",
    "tw-128": "TW, G = 128",
    "tw-64": "TW, G = 64",
    "tew": "TEW, G = 128, δ = 1.5%",
}
NONE = "—"


def load_index() -> dict[str, Any]:
    return json.loads(INDEX.read_text())


def load_result(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text())


def times(value: float | None) -> str:
    return NONE if value is None else f"{value:.2f}×"


def markdown(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def kernels_table(files: dict[str, str]) -> list[str]:
    """×dense cuBLAS of one GEMM per shape: TW, vector-wise 2:8, 2:4 and element-wise 2:8, from four bench runs."""

    def pick(name: str, **match: Any) -> dict[str, dict[str, Any]]:
        rows = load_result(files[name])["rows"]
        return {r["shape"]: r for r in rows if all(r.get(k) == v for k, v in match.items())}

    tw75, tw90 = pick("tw", G=128, sparsity=0.75), pick("tw", G=128, sparsity=0.9)
    vw = pick("vw", pattern="2:8", vector=128)
    sp24 = pick("sp24", pattern="2:4", vector=1)
    ew = pick("ew_decode", pattern="2:8", vector=1)

    def field(table: dict[str, dict[str, Any]], shape: str, key: str) -> float | None:
        row = table.get(shape)
        return None if row is None else row.get(key)

    header = ["shape", "TW 75%", "TW 75%, x row-major", "TW 90%", "VW 2:8 (V = 128)", "2:4", "EW 2:8"]
    rows = [
        [
            label,
            times(field(tw75, shape, "speedup_fm")),
            times(field(tw75, shape, "speedup")),
            times(field(tw90, shape, "speedup_fm")),
            times(field(vw, shape, "speedup_fm") or field(vw, shape, "speedup")),
            times(field(sp24, shape, "speedup")),
            times(field(ew, shape, "speedup")),
        ]
        for shape, label in SHAPES.items()
    ]
    return markdown(header, rows)


def models_table(files: dict[str, str]) -> list[str]:
    """Whole-model ×dense, every pruned layer sparse / each layer on its faster kernel, from model_bench."""
    cases = [("vgg16", "VGG16 224 × 224", "image"), ("bert", "BERT-base encoder", "× 256 tokens")]
    found: dict[tuple[str, int], dict[str, str]] = {}
    for key, _, _ in cases:
        for r in load_result(files[key])["rows"]:
            pattern = MODEL_PATTERNS.get(f"{r['pattern']}@{r['sparsity']}")
            if pattern is not None and r.get("batch_norms", "folded") == "folded":
                cell = f"{r['speedup']:.2f}× / {r['fastest_speedup']:.2f}×"
                found.setdefault((key, r["batch"]), {})[pattern] = cell
    rows = []
    for key, model, unit in cases:
        for batch in sorted({b for k, b in found if k == key}):
            label = f"{model}, {batch} {unit}{'s' if unit == 'image' and batch > 1 else ''}"
            rows.append([label, *(found[key, batch].get(p, NONE) for p in MODEL_PATTERNS.values())])
    return markdown(["model, batch", *MODEL_PATTERNS.values()], rows)


def e2e_label(pattern: str) -> str:
    """e2e_bench's pattern keys in words: tw75 -> TW 75%, tw75-g64 -> TW 75%, G = 64, vw-2:8 -> VW 2:8."""
    tile_wise = re.fullmatch(r"tw(\d+)(?:-g(\d+))?", pattern)
    if tile_wise:
        sparsity, granularity = tile_wise.groups()
        return f"TW {sparsity}%" + (f", G = {granularity}" if granularity else "")
    vector_wise = re.fullmatch(r"vw-(\d+:\d+)", pattern)
    return f"VW {vector_wise.group(1)}" if vector_wise else pattern


def e2e_table(files: dict[str, str]) -> list[str]:
    """BertModel with a padding mask against the best dense baseline: compiled feature-major twin / swapped twin."""
    rows = load_result(files["e2e"])["rows"]
    tokens = list(dict.fromkeys(r["tokens"] for r in rows))
    cells: dict[str, dict[str, str]] = {}
    for r in rows:
        compiled, swapped = r.get("stream_compiled_speedup"), r.get("swapped_speedup")
        cells.setdefault(r["pattern"], {})[r["tokens"]] = f"{times(compiled)} / {times(swapped)}"
    body = [[e2e_label(pattern), *(by_tokens.get(t, NONE) for t in tokens)] for pattern, by_tokens in cells.items()]
    return markdown(["pattern", *(f"{t} tokens" for t in tokens)], body)


def export_table(files: dict[str, str]) -> list[str]:
    """export.py on the trained VGG16 (75% TW, norms folded): all sparse and with layer_choice=fastest."""
    result = load_result(files["export"])
    prefix = f"{files['export_build']}_folded_b"
    runs = sorted(
        (int(name.removeprefix(prefix)), run) for name, run in result["runs"].items() if name.startswith(prefix)
    )
    body = [[str(batch), times(run["speedup"]), times(run["fastest"]["speedup"])] for batch, run in runs]
    return markdown(["images per batch", "every pruned layer sparse", "layer_choice=fastest"], body)


def accuracy_table(files: dict[str, str]) -> list[str]:
    """Test metric at 75% per pattern for the three sweeps, and the distilled TW G = 128 on the tweets."""
    columns = [("vgg16", "VGG16, Fashion-MNIST (test acc)"), ("bert", "MiniLM, tweets (test acc)")]
    columns.append(("lstm_nmt", "LSTM NMT, Bible (test BLEU)"))
    values: dict[str, dict[str, str]] = {}
    for key, _ in columns:
        table = load_result(files[key])
        metric = table["metric"]
        for run in table["runs"]:
            if run["pattern"] != "dense" and abs(run["sparsity"] - 0.75) > 0.01:
                continue
            name = run["pattern"]
            if name == "tw":
                name = f"tw-{run['options']['granularity']}"
            value = run["test"][metric]
            values.setdefault(name, {})[key] = f"{value:.2f}" if metric.endswith("bleu") else f"{value:.4f}"
    rows = [
        [label, *(values.get(name, {}).get(key, NONE) for key, _ in columns)] for name, label in ACCURACY_ROWS.items()
    ]
    distilled = next(r for r in load_result(files["distilled"])["runs"] if r["run"] == files["distilled_run"])
    rows.append(["TW, G = 128, distilled", NONE, f"{distilled['test']['test/acc']:.4f}", NONE])
    return markdown(["pattern at 75%", *(label for _, label in columns)], rows)


TABLES: dict[str, Callable[[dict[str, str]], list[str]]] = {
    "kernels": kernels_table,
    "models": models_table,
    "e2e": e2e_table,
    "export": export_table,
    "accuracy": accuracy_table,
}


def nm_route_table() -> list[str]:
    """What `auto` runs for each N:M packing by rows of x on an sm_90 GPU with the whole extension built, from
    sparseprune.export.formats.nm.auto_route itself (its device checks stubbed), for a 4096 x 11008 weight; packings
    that run alike share a row."""
    import torch

    from sparseprune.export.formats import nm

    patterns = [(kept, m, 1) for kept, m in [(2, 4), (1, 2), (1, 4), (2, 8), (1, 8), (3, 8), (3, 4), (4, 16), (8, 32)]]
    patterns += [(2, 8, 8), (2, 8, 16), (2, 4, 16), (2, 8, 32), (3, 32, 128), (2, 8, 128), (2, 4, 128)]
    buckets = [[1], [2], [3, 4], [5, 6, 7], list(range(8, 17)), [*range(17, 65), 256, 1024, 4096]]
    like = torch.empty(0, dtype=torch.float16)
    by_kernels: dict[tuple[str, ...], list[str]] = {}
    with mock.patch.object(nm, "_device_unavailable", lambda *_: None):
        for kept, m, vector in patterns:
            packed = _nm_packing(nm, 4096, 11008, kept, m, vector)
            cells = []
            for rows in buckets:
                kernels = [_route_kernel(nm, packed, nm.auto_route(like, packed, r), r) for r in rows]
                cells.append(" / ".join(dict.fromkeys(kernels)))
            label = f"{kept}:{m}" if vector == 1 else f"{kept}:{m}, V = {vector}"
            by_kernels.setdefault(tuple(cells), []).append(label)
    header = [
        "packing, by rows of x",
        *(f"{b[0]}" if len(b) == 1 else f"{b[0]}–{b[-1]}" for b in buckets[:-1]),
        "17 and more",
    ]
    return markdown(header, (["; ".join(labels), *cells] for cells, labels in by_kernels.items()))


def _nm_packing(nm: Any, k: int, n: int, kept: int, m: int, vector: int) -> Any:
    """A PackedNM of the right shapes (zeros) without packing a weight: auto_route reads only its metadata."""
    import torch

    rows = k // m * kept
    if vector == 1:
        values = torch.zeros(rows * n, dtype=torch.float16)
        idx = torch.zeros((rows * n * nm.index_bits(m, 1) + 7) // 8, dtype=torch.uint8)
    else:
        values = torch.zeros(rows, n, dtype=torch.float16)
        idx = torch.zeros(rows, n // vector, dtype=torch.uint8)
    return nm.PackedNM(values, idx, (k, n), m, kept, vector)


def _route_kernel(nm: Any, packed: Any, route: str, rows: int) -> str:
    """The kernel a route runs at this many rows."""
    if route == "simt":
        if rows > nm.SMALL_M:
            return "SpMM (CUDA cores)"
        if rows >= nm.TENSOR_CORE_GEMV_MIN_ROWS and nm.takes_tensor_core_gemv(packed):
            return "tensor-core GEMV"
        return "SpMV"
    if route == "sp24":
        return "2:4 tensor cores" if packed.kept <= nm.SP24_MAX_KEPT else "two 2:4 passes"
    return {"tw": "TW kernels", "reference": "reference"}[route]


def render(text: str, tables: dict[str, Callable[[], list[str]]]) -> str:
    """text with every generated block whose name is in `tables` replaced by that table."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in tables:
            return match.group(0)
        return match.group(1) + "\n".join(tables[name]()) + "\n" + match.group(4)

    return BLOCK.sub(replace, text)


def render_readme(text: str, index: dict[str, Any] | None = None) -> str:
    index = load_index() if index is None else index
    specs = index["readme_tables"]
    return render(text, {name: (lambda name=name: TABLES[name](specs[name])) for name in TABLES})


def render_architecture(text: str) -> str:
    return render(text, {"nm-routes": nm_route_table})


def citing_files() -> list[Path]:
    """README.md and every doc and source file that may cite a result."""
    files = [README]
    for folder in CITING_DIRS:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in CITING_SUFFIXES and RESULTS not in p.parents]
    return sorted(files)


def citations(text: str) -> set[str]:
    """Result files a text names, relative to bench/results/: as bench/results/NAME, or by a bare file name that is
    one in bench/results/ (code comments name the second result of a pair so: "sp24_h200.md, sp24_h200_turns.md")."""
    found = set()
    for match in CITATION.finditer(text):
        name = match.group(1).rstrip(".")
        if Path(name).suffix in RESULT_SUFFIXES:
            found.add(name)
    found |= {name for name in BARE_NAME.findall(text) if name != INDEX.name and (RESULTS / name).is_file()}
    return found


def companion(name: str) -> set[str]:
    """A result's other file: NAME.json (every row) beside NAME.md (its tables), where both exist."""
    path = Path(name)
    other = {".md": ".json", ".json": ".md"}.get(path.suffix)
    return {str(path.with_suffix(other))} if other and (RESULTS / path.with_suffix(other)).is_file() else set()


def baselines(name: str) -> set[str]:
    """The baseline half of an A/B pair, named as nm_bench's pairs are (X_base_1 for X_1, X_new_1 or X_trial_1; X_base
    for X), where it exists: a result measured against a baseline keeps it."""
    path = Path(name)
    stem, suffix = path.stem, path.suffix
    candidates = {f"{stem}_base", stem.replace("_new_", "_base_"), stem.replace("_trial_", "_base_")}
    numbered = re.fullmatch(r"(.*)_(\d+)", stem)
    if numbered:
        candidates.add(f"{numbered.group(1)}_base_{numbered.group(2)}")
    found = set()
    for candidate in candidates - {stem}:
        for ext in (suffix, ".json" if suffix == ".md" else ".md"):
            if (RESULTS / path.parent / f"{candidate}{ext}").is_file():
                found.add(str(path.parent / f"{candidate}{ext}").removeprefix("./"))
    return found


def cited_files() -> list[str]:
    """Every result file cited from outside bench/results/, with the results those link in turn."""
    cited: set[str] = set()
    for path in citing_files():
        cited |= citations(path.read_text(errors="replace"))
    index = load_index()
    pending = sorted(cited | set(latest_files(index)))
    while pending:
        name = pending.pop()
        path = RESULTS / name
        linked = baselines(name) | companion(name)
        if path.suffix == ".md" and path.exists():
            targets = ((path.parent / target).resolve() for target in RELATIVE_LINK.findall(path.read_text()))
            linked |= {
                str(t.relative_to(RESULTS)) for t in targets if RESULTS in t.parents and t.suffix in RESULT_SUFFIXES
            }
        for found in sorted(linked - cited):
            cited.add(found)
            pending.append(found)
    return sorted(cited)


def latest_files(index: dict[str, Any]) -> list[str]:
    """The files index.json names as benchmarks' latest results and as the README tables' sources."""
    names = [name for bench in index["benchmarks"].values() for name in bench["latest"]]
    for spec in index["readme_tables"].values():
        names += [value for value in spec.values() if Path(value).suffix in RESULT_SUFFIXES]
    return sorted(set(names))


def indexed_files(index: dict[str, Any]) -> list[str]:
    """Every result file index.json names."""
    return sorted(set(latest_files(index)) | set(index["cited"]))


def dump_index(index: dict[str, Any]) -> str:
    return json.dumps(index, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="refresh index.json's cited files")
    parser.add_argument("--readme", action="store_true", help="regenerate the README's result tables")
    parser.add_argument("--docs", action="store_true", help="regenerate docs/architecture.md's N:M route table")
    parser.add_argument("--check", action="store_true", help="exit 1 where a generated file is out of date")
    args = parser.parse_args(argv)
    index = load_index()
    stale = []
    outputs = [
        (
            args.write,
            INDEX,
            lambda _: json.dumps({**index, "cited": cited_files()}, indent=1, ensure_ascii=False) + "\n",
        ),
        (args.readme, README, lambda text: render_readme(text, index)),
        (args.docs, ARCHITECTURE, render_architecture),
    ]
    for wanted, path, make in outputs:
        if not (wanted or args.check):
            continue
        text = path.read_text()
        new = make(text)
        if args.check and new != text:
            stale.append(path.relative_to(ROOT))
        elif wanted and new != text:
            path.write_text(new)
            print(f"wrote {path.relative_to(ROOT)}")
    for path in stale:
        print(f"{path} is out of date: python -m bench.results_index --write --readme --docs", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
