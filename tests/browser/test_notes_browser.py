"""The notes example in headless Chromium: three tabs type into one ``<textarea>`` at once
(each typing, and now and then typing a stray ``x`` and backspacing it), the server is killed
with SIGKILL mid-typing and started again, and every tab ends with the same text holding every
keystroke; a tab closed and opened again shows it. Others' edits landing in a tab keep its
caret and selection on the characters they were on, in a ``<textarea>`` and in a plain-text
contenteditable element."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.browser.support import CHROMIUM_FLAGS, chromium_path
from tests.browser.test_shared_counter import Server
from tests.conftest import require_module

playwright_api = require_module("playwright.sync_api", "drives Chromium in the browser tests")
pytestmark = pytest.mark.browser

PAGE = Path(__file__).resolve().parents[2] / "examples" / "notes" / "index.html"
WAIT_MS = 60_000
KEYS = 60

TYPE = """([n, letter]) => {
  const el = document.getElementById("notes");
  const input = () => el.dispatchEvent(new InputEvent("input", { bubbles: true }));
  window.typing = (async () => {
    for (let i = 0; i < n; i += 1) {
      const at = (i * 7919) % (el.value.length + 1);  // all over the text
      el.setSelectionRange(at, at);
      el.setRangeText(letter, at, at, "end");
      input();
      if (i % 5 === 4) {  // a typo, backspaced at once
        const p = el.selectionStart;
        el.setRangeText("x", p, p, "end");
        input();
        const q = el.selectionStart;
        el.setRangeText("", q - 1, q, "end");
        input();
      }
      await new Promise((r) => setTimeout(r, 8));
    }
  })();
}"""


def open_tab(context: Any, url: str) -> Any:
    page = context.new_page()
    page.goto(url)
    page.wait_for_function("() => window.doc && window.doc.joined", timeout=WAIT_MS)
    return page


def test_three_tabs_typing_through_a_kill_9_keep_every_keystroke(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    server.start()
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
            context = browser.new_context()
            url = f"{PAGE.as_uri()}?server=ws://127.0.0.1:{server.port}"
            tabs = [open_tab(context, url) for _ in range(3)]
            for tab, letter in zip(tabs, "abc", strict=True):
                tab.evaluate(TYPE, [KEYS, letter])
            tabs[2].wait_for_function(
                "() => document.getElementById('notes').value.length >= 40",
                timeout=WAIT_MS,
                polling=5,
            )
            server.kill()  # mid-typing: the tabs type on, offline
            for tab in tabs:
                tab.evaluate("() => window.typing")
            assert any(tab.evaluate("() => window.doc.pending") for tab in tabs)
            server.start()
            for tab in tabs:
                tab.evaluate("() => window.doc.synced()")
            want = Counter({"a": KEYS, "b": KEYS, "c": KEYS})
            for tab in tabs:
                tab.wait_for_function(
                    f"() => document.getElementById('notes').value.length === {3 * KEYS}",
                    timeout=WAIT_MS,
                )
            shown = [tab.input_value("#notes") for tab in tabs]
            assert len(set(shown)) == 1
            assert Counter(shown[0]) == want  # every keystroke, no typo left
            assert {tab.evaluate("() => window.doc.text('body').toString()") for tab in tabs} == {
                shown[0]
            }
            tabs[1].close()
            again = open_tab(context, url)
            again.wait_for_function(
                f"() => document.getElementById('notes').value.length === {3 * KEYS}",
                timeout=WAIT_MS,
            )
            assert again.input_value("#notes") == shown[0]
            browser.close()
    finally:
        server.kill()


def test_others_edits_keep_the_caret_and_selection_in_place(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    server.start()
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
            context = browser.new_context()
            url = f"{PAGE.as_uri()}?server=ws://127.0.0.1:{server.port}"
            ada, bob = open_tab(context, url), open_tab(context, url)
            ada.click("#notes")
            ada.keyboard.type("hello world")
            bob.wait_for_function(
                "() => document.getElementById('notes').value === 'hello world'",
                timeout=WAIT_MS,
            )
            ada.evaluate("() => document.getElementById('notes').setSelectionRange(6, 11)")
            bob.evaluate("() => window.doc.text('body').insert(0, 'Oh, ')")  # before it
            bob.evaluate("() => window.doc.text('body').insert(9, '!')")  # inside 'hello'
            ada.wait_for_function(
                "() => document.getElementById('notes').value === 'Oh, hello! world'",
                timeout=WAIT_MS,
            )
            selection = ada.evaluate(
                "() => { const el = document.getElementById('notes');"
                " return [el.selectionStart, el.selectionEnd]; }"
            )
            assert selection == [11, 16]  # still on "world"
            ada.keyboard.type("W")  # typing replaces the selection, where it now is
            bob.wait_for_function(
                "() => document.getElementById('notes').value === 'Oh, hello! W'",
                timeout=WAIT_MS,
            )
            browser.close()
    finally:
        server.kill()


EDITABLE = """<!doctype html>
<meta charset="utf-8">
<div id="notes" contenteditable="plaintext-only" style="white-space: pre-wrap"></div>
<script type="module">
  const server = new URLSearchParams(location.search).get("server");
  const base = server.replace(/^ws/, "http");
  const { connect, bindContentEditable } = await import(`${base}/client/octosync.js`);
  const doc = connect(server).openDocument("notes");
  bindContentEditable(doc.text("body"), document.getElementById("notes"));
  window.doc = doc;
</script>
"""


def test_a_contenteditable_element_stays_in_step_with_its_caret(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    server.start()
    page_file = tmp_path / "editable.html"
    page_file.write_text(EDITABLE)
    try:
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
            context = browser.new_context()
            url = f"{page_file.as_uri()}?server=ws://127.0.0.1:{server.port}"
            ada, bob = open_tab(context, url), open_tab(context, url)
            ada.click("#notes")
            ada.keyboard.type("hello world")
            bob.wait_for_function(
                "() => document.getElementById('notes').textContent === 'hello world'",
                timeout=WAIT_MS,
            )
            ada.evaluate(
                "() => { const t = document.getElementById('notes').firstChild;"
                " getSelection().setBaseAndExtent(t, 6, t, 11); }"
            )
            bob.evaluate("() => window.doc.text('body').insert(0, 'Oh, ')")
            ada.wait_for_function(
                "() => document.getElementById('notes').textContent === 'Oh, hello world'",
                timeout=WAIT_MS,
            )
            selected = ada.evaluate("() => getSelection().toString()")
            assert selected == "world"  # the selection moved with its characters
            ada.keyboard.type("W")
            bob.wait_for_function(
                "() => document.getElementById('notes').textContent === 'Oh, hello W'",
                timeout=WAIT_MS,
            )
            browser.close()
    finally:
        server.kill()
