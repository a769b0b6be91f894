"""A test that cannot run must not pass quietly: every skip in ``tests/`` goes through
``tests.conftest.missing``, which ``OCTOSYNC_REQUIRE_PEERS=1`` (CI) turns into a failure.

A skip decided anywhere else (``pytest.skip``, ``pytest.importorskip``, ``pytest.mark.skipif``,
``unittest.skip``...) would let a green run hide a test that never ran, so an AST walk of
``tests/`` refuses each one outside ``missing``; the helpers themselves are checked to skip,
and to fail under the variable."""

from __future__ import annotations

import ast

import pytest
from _pytest.outcomes import Failed, Skipped

from tests.conftest import REQUIRE_ENV, ROOT, missing, require_module, require_tool

TESTS = ROOT / "tests"
SKIPPERS = {"skip", "skipif", "importorskip", "skipTest", "SkipTest"}
"""Names that decide a skip: an attribute (``pytest.skip``, ``pytest.mark.skipif``,
``unittest.skip``) or an import (``from pytest import skip``); a bare name is one of those
imports, or a plain variable."""
ALLOWED = {("tests/conftest.py", "missing")}
"""(file, function) where a skip may be decided: the one helper."""
PEER_STARTERS = {"lazily_python", "require_lazily_python", "run_lazily", "topgun_peer"}
"""Helpers that start lazily-py and the fixture of TopGun's client: a test file that imports
one, or takes it as a fixture, carries the ``peer`` marker."""
BROWSER_STARTERS = {"chromium", "chromium_path"}
"""Helpers that start Chromium: a test file importing one carries the ``browser`` marker."""


def _functions(tree: ast.AST) -> dict[ast.AST, str]:
    """Each node inside a function, mapped to the innermost function's name."""
    owner: dict[ast.AST, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                owner[node] = fn.name  # inner functions are walked later and win
    return owner


def skips_in(source: str, name: str) -> list[str]:
    """Where ``source`` (the file ``name``, relative to the root) decides a skip itself."""
    tree = ast.parse(source)
    owner = _functions(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        word = None
        if isinstance(node, ast.Attribute) and node.attr in SKIPPERS:
            word = node.attr
        elif isinstance(node, ast.ImportFrom):
            hits = [a.name for a in node.names if a.name in SKIPPERS]
            word = hits[0] if hits else None
        if word is None or (name, owner.get(node, "")) in ALLOWED:
            continue
        found.append(f"{name}:{getattr(node, 'lineno', '?')}: {word}")
    return found


def test_no_skip_is_decided_outside_the_helper() -> None:
    found: list[str] = []
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        found += skips_in(path.read_text(encoding="utf-8"), name)
    assert found == [], "skip through tests.conftest.missing (or its helpers):\n" + "\n".join(found)


def starters_in(source: str) -> set[str]:
    """The names ``source`` imports or takes as a fixture (a test function's parameters)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.update(arg.arg for arg in node.args.args)
    return names


@pytest.mark.parametrize(
    ("starters", "marker"), [(PEER_STARTERS, "peer"), (BROWSER_STARTERS, "browser")]
)
def test_tests_starting_a_real_peer_or_a_browser_carry_its_marker(
    starters: set[str], marker: str
) -> None:
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        if starters_in(source) & starters and f"pytest.mark.{marker}" not in source:
            unmarked.append(path.relative_to(ROOT).as_posix())
    assert unmarked == []


def test_the_marker_check_sees_imports_and_fixtures() -> None:
    assert starters_in("from tests.browser.support import chromium\n") == {"chromium"}
    assert "topgun_peer" in starters_in("def test(topgun_peer, tmp_path):\n    pass\n")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import pytest\npytestmark = pytest.mark.skipif(True, reason='x')\n", ["skipif"]),
        ("import pytest\npytest.importorskip('x')\n", ["importorskip"]),
        ("import pytest\ndef test():\n    pytest.skip('x')\n", ["skip"]),
        ("import pytest\n@pytest.mark.skip\ndef test():\n    pass\n", ["skip"]),
        ("from pytest import importorskip\n", ["importorskip"]),
        ("import unittest\n@unittest.skip('x')\ndef test():\n    pass\n", ["skip"]),
        ("from tests.conftest import missing\ndef test():\n    missing('x')\n", []),
    ],
)
def test_the_walk_finds_every_way_of_skipping(source: str, expected: list[str]) -> None:
    found = skips_in(source, "tests/test_example.py")
    assert [f.rsplit(": ", 1)[1] for f in found] == expected


def test_the_old_collection_time_skip_of_the_shm_interop_is_found() -> None:
    old = (
        "import pytest\nfrom tests.lazily_peer import lazily_python\n"
        "pytestmark = pytest.mark.skipif(\n"
        "    lazily_python() is None, reason='lazily-py needs a Python 3.12+ interpreter'\n)\n"
    )
    assert skips_in(old, "tests/shm/test_lazily_interop.py") == [
        "tests/shm/test_lazily_interop.py:3: skipif"
    ]


def test_missing_skips_and_fails_under_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(Skipped, match="no such peer"):
        missing("no such peer")
    with pytest.raises(Skipped, match="octosync_no_such_module"):
        require_module("octosync_no_such_module", "a test of the helper")
    with pytest.raises(Skipped, match="octosync-no-such-tool"):
        require_tool("octosync-no-such-tool", "a test of the helper")
    monkeypatch.setenv(REQUIRE_ENV, "1")
    for call in (
        lambda: missing("no such peer"),
        lambda: require_module("octosync_no_such_module", "a test of the helper"),
        lambda: require_tool("octosync-no-such-tool", "a test of the helper"),
    ):
        with pytest.raises(Failed, match=REQUIRE_ENV):
            call()
