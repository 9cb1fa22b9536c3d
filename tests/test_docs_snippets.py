"""Every ```python block of the documentation and the README runs verbatim (mktestdocs), the blocks of one page in
order in one namespace, in a fresh working directory. A fragment that cannot run here (it needs a model from the hub)
is fenced as ```py, explicitly; every how-to page carries at least one complete ```python recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

mktestdocs = pytest.importorskip("mktestdocs")

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
RUNNABLE = [page for page in PAGES if "```python\n" in page.read_text()]


@pytest.mark.parametrize("page", RUNNABLE, ids=[str(page.relative_to(ROOT)) for page in RUNNABLE])
def test_every_python_block_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mktestdocs.check_md_file(page, memory=True)


def test_every_how_to_page_has_a_complete_recipe():
    how_to = sorted((ROOT / "docs" / "how-to").glob("*.md"))
    assert how_to and all(page in RUNNABLE for page in how_to), [p.name for p in how_to if p not in RUNNABLE]


def test_fragments_are_marked_and_nothing_else_hides_python():
    """Python is fenced as ``python`` (run) or ``py`` (a marked fragment), never untagged or as ``python3``."""
    for page in PAGES:
        for line in page.read_text().splitlines():
            if line.startswith("```") and line.strip() != "```":
                assert line.strip()[3:] in ("python", "py", "bash", "yaml", "text", "console", "json", "toml"), (
                    page.name, line)
