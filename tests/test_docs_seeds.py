"""Every ```python block in docs/seeds.md runs as written (each in a fresh namespace)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_blocks = _BLOCK.findall((ROOT / "docs" / "seeds.md").read_text(encoding="utf-8"))


@pytest.mark.parametrize("source", _blocks, ids=[f"block{i}" for i in range(len(_blocks))])
def test_seeds_page_example_runs(source: str) -> None:
    exec(compile(source, "docs/seeds.md", "exec"), {"__name__": "docs_example"})
