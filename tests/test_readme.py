"""Every ```python block in README.md runs as written (each in a fresh namespace)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_blocks = _BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


@pytest.mark.parametrize("source", _blocks, ids=[f"block{i}" for i in range(len(_blocks))])
def test_readme_example_runs(source: str) -> None:
    exec(compile(source, "README.md", "exec"), {"__name__": "readme_example"})
