"""The typed spine, read from the source: no ``type: ignore`` in ``hub/`` or ``server/``, no
attribute looked up by name on a frame's body, and no timer or socket in the TopGun core."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "octosync"
IGNORE = re.compile(r"#\s*type:\s*ignore")


def _sources(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (SRC / pkg).rglob("*.py"))


def test_no_type_ignore_in_hub_or_server() -> None:
    found = [
        f"{path.relative_to(SRC)}:{n}"
        for path in _sources("hub", "server")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if IGNORE.search(line)
    ]
    assert found == []


def _getattr_on_body(tree: ast.AST) -> list[int]:
    """Lines calling ``getattr(<something>.body, ...)``."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and node.args
        and isinstance(node.args[0], ast.Attribute)
        and node.args[0].attr == "body"
    ]


def test_no_attribute_looked_up_by_name_on_a_frame_body() -> None:
    found = [
        f"{path.relative_to(SRC)}:{line}"
        for path in _sources("hub", "server", "store")
        for line in _getattr_on_body(ast.parse(path.read_text()))
    ]
    assert found == []


def test_the_checker_sees_a_lookup_on_a_body() -> None:
    assert _getattr_on_body(ast.parse("getattr(frame.body, 'graph', None)")) == [1]


def test_the_topgun_core_starts_no_timer_thread_or_socket() -> None:
    """Its indexes may guard what the server's indexer thread shares (``threading.Lock``), but
    nothing in ``topgun/`` starts a timer or a thread, sleeps, reads the clock or opens a socket."""
    banned_modules = {"asyncio", "socket", "time"}
    banned_calls = {"Timer", "Thread", "sleep"}
    found = []
    for path in _sources("topgun"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [
                    f"{path.name}: import {a.name}" for a in node.names if a.name in banned_modules
                ]
            elif isinstance(node, ast.ImportFrom) and (node.module or "") in banned_modules:
                found.append(f"{path.name}: from {node.module}")
            elif isinstance(node, ast.Attribute) and node.attr in banned_calls:
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert found == []
