"""The two-tab counter at scale, in headless Chromium: no click is ever lost.

Ten tabs of one page (``octosync.js``'s shared document) each click +1 a hundred times at
once; midway the server is killed with SIGKILL, the tabs go on clicking while it is down, and
it is started again on the same data; then one tab is closed and a new one opened in its
place (after its clicks so far were acknowledged) to click the rest. Every tab ends showing
exactly 1,000.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.support import CHROMIUM_FLAGS, chromium_path
from tests.conftest import require_module
from tests.e2e.helpers import free_port

playwright_api = require_module("playwright.sync_api", "drives Chromium in the browser tests")
pytestmark = pytest.mark.browser

STATIC = Path(__file__).resolve().parents[2] / "src" / "octosync" / "server" / "static"
TABS = 10
CLICKS = 100
WAIT_MS = 60_000

PAGE = """<!doctype html>
<meta charset="utf-8">
<button id="plus">+1</button> <output id="count">…</output>
<script type="module">
import { connect } from "./octosync.js";
const server = new URLSearchParams(location.search).get("server");
const client = connect(server, { backoff: { base: 0.05, cap: 0.5 } });
const doc = client.openDocument("clicks");
const counter = doc.counter("clicks");
counter.onChange((v) => (document.getElementById("count").textContent = String(v)));
document.getElementById("plus").onclick = () => counter.add(1);
window.doc = doc;
window.clickMany = async (n) => {
  for (let i = 0; i < n; i += 1) {
    document.getElementById("plus").click();
    await new Promise((r) => setTimeout(r, 10 + Math.random() * 15));
  }
};
</script>
"""


class Server:
    """``octosync serve`` as a process on a fixed port, so it can be killed and started again."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev"]
        command += ["--port", str(self.port), "--data", str(self.data)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert b"octosync serving" in line, line

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()  # SIGKILL: no shutdown, no flush
        self.proc.wait()


@contextlib.contextmanager
def static_site(root: Path) -> Iterator[str]:
    """The page and the client module, served from their own origin (the server goes down)."""
    (root / "index.html").write_text(PAGE)
    (root / "octosync.js").write_bytes((STATIC / "octosync.js").read_bytes())

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(root))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=site.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}"
    finally:
        site.shutdown()
        site.server_close()


@contextlib.contextmanager
def counter_site(tmp_path: Path, page: str = PAGE) -> Iterator[tuple[Server, Any, str]]:
    """A server on fixed data, the page on its own origin and a Chromium context:
    ``(server, context, url)``; the server is killed at the end, whatever happened."""
    executable = chromium_path()
    server = Server(tmp_path / "data")
    server.start()
    site_root = tmp_path / "site"
    site_root.mkdir()
    try:
        with static_site(site_root) as site, playwright_api.sync_playwright() as p:
            (site_root / "index.html").write_text(page)
            browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
            yield (
                server,
                browser.new_context(),
                f"{site}/index.html?server=ws://127.0.0.1:{server.port}",
            )
            browser.close()
    finally:
        server.kill()


def test_ten_tabs_a_kill_9_and_a_closed_tab_lose_no_click(tmp_path: Path) -> None:
    with counter_site(tmp_path) as (server, context, url):

        def open_tab() -> Any:
            page = context.new_page()
            page.goto(url)
            page.wait_for_function("() => window.doc && window.doc.joined", timeout=WAIT_MS)
            return page

        tabs = [open_tab() for _ in range(TABS)]
        half, online = CLICKS // 2, 40

        def click(n_of: Any) -> None:  # every tab at once; awaited later
            for i, tab in enumerate(tabs):
                tab.evaluate("n => { window.clicking = window.clickMany(n); }", n_of(i))

        def clicked() -> None:
            for tab in tabs:
                tab.evaluate("() => window.clicking")

        click(lambda i: online)
        tabs[1].wait_for_function(
            "() => Number(document.getElementById('count').textContent) >= 150",
            timeout=WAIT_MS,
            polling=5,
        )
        server.kill()  # while clicks are in flight (on a loaded machine, maybe just after)
        clicked()
        click(lambda i: (half if i == 0 else CLICKS) - online)  # offline: they queue
        clicked()
        assert all(tab.evaluate("() => window.doc.pending") == 1 for tab in tabs)
        server.start()
        tabs[0].evaluate("() => window.doc.synced()")  # acknowledged: journaled
        tabs[0].close()
        tabs[0] = open_tab()
        tabs[0].evaluate("n => { window.clicking = window.clickMany(n); }", CLICKS - half)
        clicked()
        for tab in tabs:
            tab.evaluate("() => window.doc.synced()")
            tab.wait_for_function(
                "() => document.getElementById('count').textContent === '1000'",
                timeout=WAIT_MS,
            )
        shown = [tab.inner_text("#count") for tab in tabs]
        assert shown == ["1000"] * TABS
        assert tabs[3].evaluate("() => window.doc.reconnects") >= 1


@pytest.mark.parametrize("page_of", ["README.md", "docs/crdt.md"])
def test_the_two_tab_counter_of_the_docs_counts_every_click(tmp_path: Path, page_of: str) -> None:
    """The quickstart's counter page (README and the shared-documents page), as written,
    opened twice against a real server."""
    doc = (Path(__file__).resolve().parents[2] / page_of).read_text("utf-8")
    (page,) = re.findall(r"^```html counter\n(.*?)^```", doc, re.S | re.M)
    assert "127.0.0.1:8765" in page
    executable = chromium_path()
    server = Server(tmp_path / "data")
    server.start()
    page_file = tmp_path / "clicks.html"
    page_file.write_text(page.replace("127.0.0.1:8765", f"127.0.0.1:{server.port}"))
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
            context = browser.new_context()
            tabs = [context.new_page() for _ in range(2)]
            for tab in tabs:
                tab.goto(page_file.as_uri())
                playwright_api.expect(tab.locator("#count")).to_have_text("0", timeout=WAIT_MS)
            for _ in range(20):
                for tab in tabs:
                    tab.click("#plus")
            for tab in tabs:
                playwright_api.expect(tab.locator("#count")).to_have_text("40", timeout=WAIT_MS)
            browser.close()
    finally:
        server.kill()


PERSIST_PAGE = PAGE.replace(
    'client.openDocument("clicks")', 'client.openDocument("clicks", { persist: true })'
).replace(
    "window.doc = doc;",
    """window.doc = doc;
window.savedTally = async () => {  // this page's peer's saved counter entry, as IndexedDB has it
  const db = await new Promise((ok) => {
    const o = indexedDB.open("octosync-pending", 1);
    o.onsuccess = () => ok(o.result);
  });
  const all = await new Promise((ok) => {
    const q = db.transaction("pending").objectStore("pending").getAll();
    q.onsuccess = () => ok(q.result);
  });
  db.close();
  const mine = all.find((r) => r.peer === doc.peer);
  return mine ? new TextDecoder().decode(Uint8Array.from(mine.ops[0].bytes)) : null;
};
await doc.ready;
window.restored = true;""",
)


def test_offline_clicks_outlive_a_closed_tab(tmp_path: Path) -> None:
    """Clicks made while the server is down, in a tab that is then closed, are taken up by the
    next tab of the page (with that tab's peer id) and counted once the server is back; a tab
    open beside it draws a peer of its own."""
    with counter_site(tmp_path, PERSIST_PAGE) as (server, context, url):

        def open_tab(*, joined: bool = True) -> Any:
            page = context.new_page()
            page.goto(url)
            page.wait_for_function("() => window.restored === true", timeout=WAIT_MS)
            if joined:
                page.wait_for_function("() => window.doc.joined", timeout=WAIT_MS)
            return page

        first, beside = open_tab(), open_tab()
        first.evaluate("() => window.clickMany(3)")
        first.evaluate("() => window.doc.synced()")
        peer = first.evaluate("() => window.doc.peer")
        assert beside.evaluate("() => window.doc.peer") != peer  # the lock is held
        server.kill()
        first.evaluate("() => window.clickMany(7)")  # offline: pending, saved
        assert first.evaluate("() => window.doc.pending") == 1
        first.wait_for_function(
            "async () => (await window.savedTally()) === '[10,0]'", timeout=WAIT_MS
        )
        first.close()
        again = open_tab(joined=False)  # the server is still down
        assert again.evaluate("() => window.doc.peer") == peer
        assert again.evaluate("() => window.doc.pending") == 1
        assert again.inner_text("#count") == "10"  # its saved clicks, shown at once
        server.start()
        again.evaluate("() => window.doc.synced()")
        for tab in (again, beside):
            tab.wait_for_function(
                "() => document.getElementById('count').textContent === '10'",
                timeout=WAIT_MS,
            )
        again.evaluate("() => window.clickMany(2)")
        again.evaluate("() => window.doc.synced()")
        fresh = open_tab()
        fresh.wait_for_function(
            "() => document.getElementById('count').textContent === '12'", timeout=WAIT_MS
        )
        assert fresh.evaluate("() => window.doc.peer") not in (
            peer,
            beside.evaluate("() => window.doc.peer"),
        )


def test_the_readme_notes_page_merges_two_tabs_typing(tmp_path: Path) -> None:
    """The quickstart's shared-text page, as written, in two tabs typing at once against a real
    server: both end with the same text, holding every keystroke of both."""
    doc = (Path(__file__).resolve().parents[2] / "README.md").read_text("utf-8")
    (page,) = re.findall(r"^```html notes\n(.*?)^```", doc, re.S | re.M)
    assert "127.0.0.1:8765" in page
    executable = chromium_path()
    server = Server(tmp_path / "data")
    server.start()
    page_file = tmp_path / "notes.html"
    page_file.write_text(page.replace("127.0.0.1:8765", f"127.0.0.1:{server.port}"))
    typed = {0: "alpha beta ", 1: "gamma delta "}
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
            context = browser.new_context()
            tabs = [context.new_page() for _ in range(2)]
            for tab in tabs:
                tab.goto(page_file.as_uri())
                tab.click("#notes")
            for a, b in zip(typed[0], typed[1], strict=False):  # interleaved keystrokes
                tabs[0].keyboard.type(a)
                tabs[1].keyboard.type(b)
            tabs[1].keyboard.type(typed[1][len(typed[0]) :])
            total = sum(len(t) for t in typed.values())
            for tab in tabs:
                tab.wait_for_function(
                    f"() => document.getElementById('notes').value.length === {total}",
                    timeout=WAIT_MS,
                )
            values = [tab.input_value("#notes") for tab in tabs]
            browser.close()
    finally:
        server.kill()
    assert values[0] == values[1]
    assert sorted(values[0]) == sorted(typed[0] + typed[1])
