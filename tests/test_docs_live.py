"""The README's quickstart and every ```python live / ```html live block in the docs, run as
written against a real ``octosync serve`` process (``127.0.0.1:8765`` replaced by its port),
with ``octosync publish-demo scoreboard`` running as in the quickstart. Python blocks run as
their own processes; HTML pages are opened from a file in headless Chromium."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.support import chromium
from tests.conftest import require_module
from tests.e2e.helpers import free_port, running
from tests.test_readme import blocks

BLOCK_TIMEOUT = 60
CLI = [sys.executable, "-m", "octosync.cli"]


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A server as ``make run`` starts it, and the quickstart's demo producer."""
    data = tmp_path_factory.mktemp("live-docs")
    port = free_port()
    url = f"ws://127.0.0.1:{port}/lazily"
    demo = ("publish-demo", "scoreboard", "--url", url, "--interval", "0.2")
    with running("serve", "--insecure-dev", "--port", str(port), "--data", str(data)) as (_, line):
        assert "octosync serving" in line
        with running(*demo) as (_, published):
            assert published.startswith("publishing 'scoreboard'")
            yield port


def at(source: str, port: int) -> str:
    assert "127.0.0.1:8765" in source, "a live block names the server as 127.0.0.1:8765"
    return source.replace("127.0.0.1:8765", f"127.0.0.1:{port}")


_python = blocks("python", live=True)
_html = blocks("html", live=True)


def test_the_quickstart_is_delimited_and_live() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text("utf-8")
    quickstart = readme.split("<!-- quickstart:start -->")[1].split("<!-- quickstart:end -->")[0]
    assert "```html counter" in quickstart  # the two-tab counter (tests/browser)
    assert "```html live" in quickstart
    assert "```python live" in quickstart
    assert any(i.startswith("README.md") for i, _ in _python + _html)


@pytest.mark.parametrize("source", [s for _, s in _python], ids=[i for i, _ in _python])
def test_live_python_block_runs(source: str, port: int, tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-c", at(source, port)],
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.browser
@pytest.mark.parametrize("source", [s for _, s in _html], ids=[i for i, _ in _html])
def test_live_page_shows_the_score(source: str, port: int, tmp_path: Path) -> None:
    playwright_expect = require_module(
        "playwright.sync_api", "drives Chromium in the browser tests"
    ).expect
    page_file = tmp_path / "scoreboard.html"
    page_file.write_text(at(source, port), encoding="utf-8")
    console: list[str] = []
    with chromium() as browser:
        page: Any = browser.new_page()
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.goto(page_file.as_uri())
        score = page.locator("#score")
        pattern = re.compile(r"^home \d+ : \d+ away \(total \d+\)$")
        with contextlib.suppress(Exception):  # the assertions below say what was there
            playwright_expect(score).to_have_text(pattern, timeout=20_000)
        text = score.text_content()
    assert text is not None, console
    assert pattern.match(text), (text, console)
    numbers = [int(n) for n in re.findall(r"\d+", text)]
    assert numbers[0] + numbers[1] == numbers[2], text
