"""docs/seeds.md: every ```python block runs as written (each in a fresh namespace; the
``python live`` ones run against a server in ``tests/test_docs_live.py``), every seed has its
rows in the feature table, and every file or folder a row names exists."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT, SHARED

PAGE = (ROOT / "docs" / "seeds.md").read_text(encoding="utf-8")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_blocks = _BLOCK.findall(PAGE)
ROWS = [line for line in PAGE.splitlines() if re.match(r"^\| \d{3} ", line)]
SEEDS = ("000", "001", "002", "003", "004")
"""The seed documents (``../shared/seeds/NNN_*.txt``)."""


@pytest.mark.parametrize("source", _blocks, ids=[f"block{i}" for i in range(len(_blocks))])
def test_seeds_page_example_runs(source: str) -> None:
    exec(compile(source, "docs/seeds.md", "exec"), {"__name__": "docs_example"})


def test_every_seed_has_rows() -> None:
    assert sorted({row[2:5] for row in ROWS}) == list(SEEDS)
    seeds = SHARED / "seeds"
    if seeds.is_dir():  # beside a clone with ../shared: the page names every seed there is
        assert sorted(p.name[:3] for p in seeds.glob("*.txt")) == list(SEEDS)


def named_paths(row: str) -> list[str]:
    """The repository paths a row names in backticks (``tests/...``, ``server/x.py``...)."""
    out = []
    for word in re.findall(r"`([^`\s]+)`", row):
        if "/" in word and "://" not in word and re.fullmatch(r"[\w][\w./-]*", word):
            out.append(word)
    return out


def test_every_path_a_row_names_exists() -> None:
    absent = [
        f"{row[:40]}...: {path}"
        for row in ROWS
        for path in named_paths(row)
        if not (ROOT / path).exists() and not (ROOT / "src" / "octosync" / path).exists()
    ]
    assert absent == []


def test_seed_004_rows_name_code_and_tests() -> None:
    rows = [row for row in ROWS if row.startswith("| 004 ")]
    assert len(rows) >= 5
    for row in rows:
        paths = named_paths(row)
        assert any(p.startswith("tests/") for p in paths), row
        assert any(not p.startswith("tests/") for p in paths), row
