"""Every ```python block in README.md and docs/ runs as written (each in a fresh namespace).

Blocks marked ```python live or ```html live need a running server: ``tests/test_docs_live.py``
runs those. Blocks marked sh, text, toml and the like are shown, not run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

BLOCK = re.compile(r"^```(\w+)( live)?\n(.*?)^```", re.S | re.M)


def doc_pages() -> list[Path]:
    """README.md and every Markdown page under docs/ and examples/."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return pages + sorted((ROOT / "examples").rglob("*.md"))


def blocks(language: str, *, live: bool) -> list[tuple[str, str]]:
    """``(id, source)`` of every block in ``language``, live (needs a server) or not."""
    found = []
    for page in doc_pages():
        name = page.relative_to(ROOT).as_posix()
        for n, (lang, marker, source) in enumerate(BLOCK.findall(page.read_text("utf-8"))):
            if lang == language and bool(marker) == live:
                found.append((f"{name}#{n}", source))
    return found


_blocks = blocks("python", live=False)


def test_pages_have_runnable_blocks() -> None:
    assert len(_blocks) >= 7, [i for i, _ in _blocks]


@pytest.mark.parametrize("source", [s for _, s in _blocks], ids=[i for i, _ in _blocks])
def test_doc_example_runs(source: str) -> None:
    exec(compile(source, "docs", "exec"), {"__name__": "readme_example"})


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = BLOCK.sub("", page.read_text("utf-8"))
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_relative_links_and_their_anchors_resolve() -> None:
    broken = []
    for page in doc_pages():
        for target in LINK.findall(BLOCK.sub("", page.read_text("utf-8"))):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


_DEFINING = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
)


def idle_definitions(source: str) -> list[str]:
    """What a block defines and never runs: a function or class its code never names, or
    nothing but imports, definitions and assignments (running such a block proves only that
    it imports)."""
    tree = ast.parse(source)
    named = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    idle = [
        f"{node.name} is defined and never used"
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.name not in named
    ]
    if tree.body and all(isinstance(n, _DEFINING) for n in tree.body):
        idle.append("the block only defines things: it runs nothing")
    return idle


_every_python = blocks("python", live=False) + blocks("python", live=True)


@pytest.mark.parametrize("source", [s for _, s in _every_python], ids=[i for i, _ in _every_python])
def test_a_block_runs_what_it_defines(source: str) -> None:
    assert idle_definitions(source) == []


@pytest.mark.parametrize(
    ("source", "idle"),
    [
        (
            "async def producer(url):\n    pass\n\n\nasync def viewer(url):\n    pass\n",
            [
                "producer is defined and never used",
                "viewer is defined and never used",
                "the block only defines things: it runs nothing",
            ],
        ),
        ("import asyncio\n", ["the block only defines things: it runs nothing"]),
        ("def main():\n    print(1)\n\n\nmain()\n", []),
        ("import asyncio\n\n\nasync def main():\n    pass\n\n\nasyncio.run(main())\n", []),
    ],
)
def test_idle_blocks_are_found(source: str, idle: list[str]) -> None:
    assert idle_definitions(source) == idle
