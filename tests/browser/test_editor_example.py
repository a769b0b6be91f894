"""``examples/editor`` as a user runs it: Tiptap with its collaboration and caret extensions,
bundled from the example's own ``package.json`` (npm, into ``~/.cache/octosync/editor-example``),
opened in two Chromium tabs against a real ``octosync serve``. Both tabs type; both end with
the same text, which is the server's document; the server is ``kill -9``ed and restarted, and
what the tab was told is saved is still there, and the tabs go on editing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pycrdt import XmlFragment

from tests.browser.support import chromium
from tests.conftest import ROOT, missing, node_executable, require_module
from tests.e2e.helpers import free_port, running
from tests.e2e.yjs_client import read_document
from tests.test_examples import example

pytestmark = pytest.mark.browser
playwright_api = require_module("playwright.sync_api", "drives Chromium in the browser tests")
EXAMPLE = ROOT / "examples" / "editor"
CACHE = Path.home() / ".cache" / "octosync" / "editor-example"
WAIT_MS = 20_000


@pytest.fixture(scope="module")
def built() -> Path:
    """The example's page and its bundle, built as its README says."""
    node_executable()
    npm = shutil.which("npm")
    if npm is None:
        missing("npm not found on PATH: the editor example is not built")
    CACHE.mkdir(parents=True, exist_ok=True)
    pins = (EXAMPLE / "package.json").read_text()
    if not (CACHE / "node_modules").is_dir() or (CACHE / "package.json").read_text() != pins:
        (CACHE / "package.json").write_text(pins)
        install = [npm, "install", "--no-audit", "--no-fund"]
        done = subprocess.run(install, cwd=CACHE, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            missing(f"npm install of the editor example failed: {done.stderr[-500:]}")
    for name in ("editor.js", "index.html"):
        shutil.copy(EXAMPLE / name, CACHE / name)
    build = subprocess.run(
        [npm, "run", "build"], cwd=CACHE, capture_output=True, text=True, timeout=300
    )
    assert build.returncode == 0, build.stderr
    return CACHE


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def serve(port: int, data: Path) -> Any:
    return running("serve", "--insecure-dev", "--port", str(port), "--data", str(data))


def expect(locator: Any, text: Any) -> None:
    playwright_api.expect(locator).to_have_text(text, timeout=WAIT_MS)


def text_of(page: Any) -> str:
    """The editor's text (not the page's: carets carry their user's name as a label)."""
    text: str = page.evaluate("window.example.editor.getText()")
    return text


def server_text(port: int) -> str:
    async def read() -> str:
        async with aiohttp.ClientSession() as http:
            doc = await read_document(http, f"ws://127.0.0.1:{port}", "tiptap")
            return str(doc.get("default", type=XmlFragment))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # Playwright's loop runs here
        return pool.submit(asyncio.run, read()).result(timeout=30)


def test_two_tabs_edit_and_what_was_saved_survives_kill_9(
    built: Path, browser: Any, tmp_path: Path
) -> None:
    port = free_port()
    data = tmp_path / "var"
    url = (built / "index.html").as_uri() + f"?server=ws://127.0.0.1:{port}&doc=tiptap"
    seed = ("--url", f"ws://127.0.0.1:{port}/yjs", "--doc", "tiptap")
    with serve(port, data) as (proc, line), example("editor", "seed.py", *seed) as ready:
        assert "octosync serving" in line
        assert ready.startswith("editor document 'tiptap' ready")
        ada, bob = browser.new_page(), browser.new_page()
        ada.goto(url + "&user=ada")
        bob.goto(url + "&user=bob")
        for page in (ada, bob):
            expect(page.locator("#status"), "saved")
        ada.click("#editor .ProseMirror")
        bob.click("#editor .ProseMirror")
        for a, b in zip(["ada ", "types ", "here. "], ["bob ", "too ", "now. "], strict=True):
            ada.keyboard.type(a)
            bob.keyboard.type(b)
        for page in (ada, bob):
            expect(page.locator("#status"), "saved")
        words = ("Welcome", "ada", "types", "here.", "bob", "too", "now.")  # seed.py's too
        same = text_of(ada)
        bob.wait_for_function(
            "expected => window.example.editor.getText() === expected", arg=same, timeout=WAIT_MS
        )
        for word in words:
            assert word in same
        assert bob.locator(".collaboration-carets__label").inner_text() == "ada"  # her caret
        ada.keyboard.type("saved-before-kill")
        expect(ada.locator("#status"), "saved")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with serve(port, data) as (_, line):
        assert "octosync serving" in line
        text = server_text(port)
        for word in (*words, "saved-before-kill"):
            assert word in text, text
        ada.keyboard.type(" after")
        bob.wait_for_function(
            "() => window.example.editor.getText().includes('saved-before-kill after')",
            timeout=WAIT_MS,
        )
        expect(ada.locator("#status"), "saved")
        assert "saved-before-kill after" in server_text(port)
        ada.close()
        bob.close()
