"""bench/results/index.json and the tables generated from it: the README's and docs/architecture.md's tables are the
script's output (a hand edit fails), every file the index names exists, and every link into bench/results/ from the
README and docs/ resolves (CPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import results_index

ROOT = Path(__file__).parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")


def anchors(markdown: Path) -> set[str]:
    """The heading anchors GitHub gives a markdown file: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_readme_tables_are_the_scripts_output() -> None:
    text = results_index.README.read_text()
    assert set(re.findall(r"<!-- generated:([a-z0-9-]+) -->", text)) == set(results_index.TABLES)
    assert results_index.render_readme(text) == text, "run: python -m bench.results_index --readme"


def test_nm_route_table_is_the_scripts_output() -> None:
    text = results_index.ARCHITECTURE.read_text()
    assert "<!-- generated:nm-routes -->" in text
    assert results_index.render_architecture(text) == text, "run: python -m bench.results_index --docs"


def test_a_hand_edited_table_is_caught() -> None:
    text = results_index.README.read_text()
    edited = re.sub(r"(<!-- generated:kernels -->\n\|[^\n]*\n\|[^\n]*\n\|[^|]*\| )([^ |]+)", r"\g<1>9.99×", text)
    assert edited != text
    assert results_index.render_readme(edited) == text


def test_every_file_the_index_names_exists() -> None:
    index = results_index.load_index()
    missing = [name for name in results_index.indexed_files(index) if not (results_index.RESULTS / name).exists()]
    assert not missing


def test_the_index_lists_every_cited_result() -> None:
    index = results_index.load_index()
    unlisted = sorted(set(results_index.cited_files()) - set(results_index.indexed_files(index)))
    assert not unlisted, f"run: python -m bench.results_index --write ({unlisted[:5]})"


@pytest.mark.parametrize("doc", [results_index.README, *DOCS], ids=lambda p: p.name)
def test_links_into_results_and_docs_resolve(doc: Path) -> None:
    broken = []
    for target, anchor in LINK.findall(doc.read_text()):
        if "://" in target:
            continue
        path = doc.parent / target if target else doc
        if not path.exists() or anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}#{anchor}" if anchor else target)
    assert not broken


def test_citations_name_results_by_path_or_bare_name() -> None:
    text = "see bench/results/tw_h200_full_idle.md. and (sp24_h200.md, no_such_result.md), bench/results/NAME"
    assert results_index.citations(text) == {"tw_h200_full_idle.md", "sp24_h200.md"}
