"""Each example in examples/ as a user runs it: a real server, the example's Python side as
its own process (one command), and its pages in headless Chromium (opened from their files)."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.support import chromium
from tests.conftest import ROOT
from tests.e2e.helpers import free_port, running

pytestmark = pytest.mark.browser
playwright_api = pytest.importorskip("playwright.sync_api")
EXAMPLES = ROOT / "examples"
WAIT_MS = 20_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    data = tmp_path_factory.mktemp("examples")
    port = free_port()
    with running("serve", "--insecure-dev", "--port", str(port), "--data", str(data)) as (_, line):
        assert "octosync serving" in line
        yield port


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@contextlib.contextmanager
def example(name: str, script: str, port: int, *args: str) -> Iterator[str]:
    """The example's Python side, started with its one command; yields its first line."""
    url = f"ws://127.0.0.1:{port}/lazily"
    command = (sys.executable, str(EXAMPLES / name / script), *args)
    with running("--url", url, command=command) as (proc, line):
        assert proc.poll() is None, proc.stderr and proc.stderr.read()
        yield line


def page_url(folder: str, port: int, **query: str) -> str:
    params = "&".join(f"{k}={v}" for k, v in {"server": f"ws://127.0.0.1:{port}", **query}.items())
    return f"{(EXAMPLES / folder / 'index.html').as_uri()}?{params}"


def expect(locator: Any, text: str | re.Pattern[str]) -> None:
    playwright_api.expect(locator).to_have_text(text, timeout=WAIT_MS)


def test_chat_with_presence(server: int, browser: Any) -> None:
    with example("chat", "room.py", server) as line:
        assert line.startswith("chat room up")
        ada, bob = browser.new_page(), browser.new_page()
        ada.goto(page_url("chat", server, name="ada"))
        bob.goto(page_url("chat", server, name="bob"))
        for page in (ada, bob):
            expect(page.locator("#present"), "ada, bob")
        ada.fill("#text", "hello from ada")
        ada.click("button")
        expect(bob.locator("#messages li"), ["ada: hello from ada"])
        bob.fill("#text", "hi ada")
        bob.press("#text", "Enter")
        expect(ada.locator("#messages li"), ["ada: hello from ada", "bob: hi ada"])
        bob.close()  # bob's tab is gone: he stops saying he is here
        expect(ada.locator("#present"), "ada")
        ada.close()


def test_live_dashboard(server: int, browser: Any) -> None:
    with example("dashboard", "producer.py", server) as line:
        assert line.startswith("dashboard published")
        page = browser.new_page()
        page.goto(page_url("dashboard", server))
        expect(page.locator("#status"), "open")
        playwright_api.expect(page.locator("#tick")).to_have_text(
            re.compile(r"^([3-9]|\d\d+)$"), timeout=WAIT_MS
        )
        expect(page.locator("#load"), re.compile(r"^\d+\.\d\d$"))
        points = page.locator("#chart polyline").get_attribute("points") or ""
        assert len(points.split()) >= 3
        page.close()


def test_a_counter_clicked_in_two_tabs_loses_no_click(server: int, browser: Any) -> None:
    with example("counter", "clicker.py", server, "--every", "0") as line:
        assert line.startswith("counter at")
        start = int(line.rsplit(": ", 1)[1].split()[0])
        ada, bob = browser.new_page(), browser.new_page()
        for page in (ada, bob):
            page.goto(page_url("counter", server))
            expect(page.locator("#status"), "synced")
        for _ in range(25):  # both tabs click, interleaved, as fast as the browser goes
            ada.click("#plus")
            bob.click("#plus")
        for page in (ada, bob):
            expect(page.locator("#count"), str(start + 50))
        ada.close()
        bob.close()


def test_a_todo_list_edited_in_two_tabs_and_by_python(server: int, browser: Any) -> None:
    with example("todo", "helper.py", server) as line:
        assert line.startswith("todo list ready")
        ada, bob = browser.new_page(), browser.new_page()
        for page in (ada, bob):
            page.goto(page_url("todo", server))
            expect(page.locator("#items li span"), ["try the list in two tabs"])
        ada.fill("#text", "buy milk")
        ada.press("#text", "Enter")
        bob.fill("#text", "call the plumber!")
        bob.click("#add button")
        for page in (ada, bob):  # both edits, in the order they were made, on both tabs
            expect(
                page.locator("#items li span"),
                ["try the list in two tabs", "buy milk", "call the plumber!"],
            )
        # the Python side finished the urgent one; ada ticks hers; bob removes the welcome
        playwright_api.expect(ada.locator("li", has_text="plumber")).to_have_class(
            "done", timeout=WAIT_MS
        )
        ada.locator("li", has_text="buy milk").locator("input").check()
        bob.locator("li", has_text="try the list").locator("button").click()
        for page in (ada, bob):
            expect(page.locator("#items li.done span"), ["buy milk", "call the plumber!"])
            expect(page.locator("#items li span"), ["buy milk", "call the plumber!"])
        ada.close()
        bob.close()


def test_every_example_is_listed_and_has_both_sides() -> None:
    listed = (EXAMPLES / "README.md").read_text("utf-8")
    for folder in sorted(p for p in EXAMPLES.iterdir() if p.is_dir()):
        assert f"[{folder.name}]({folder.name})" in listed
        assert (folder / "index.html").exists()
        assert any(folder.glob("*.py"))
        assert f'example("{folder.name}", ' in Path(__file__).read_text("utf-8")  # and run here
