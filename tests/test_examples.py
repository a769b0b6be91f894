"""Each example in examples/ as a user runs it: a real server, the example's Python side as
its own process (one command), and its pages in headless Chromium (opened from their files)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.support import chromium
from tests.conftest import ROOT, require_module
from tests.e2e.helpers import free_port, running

pytestmark = pytest.mark.browser
playwright_api = require_module("playwright.sync_api", "drives Chromium in the browser tests")
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
def example(name: str, script: str, *args: str) -> Iterator[str]:
    """The example's Python side, started with its one command; yields its first line."""
    command = (sys.executable, str(EXAMPLES / name / script))
    with running(*args, command=command) as (proc, line):
        assert proc.poll() is None, proc.stderr and proc.stderr.read()
        yield line


def lazily(port: int) -> tuple[str, str]:
    return ("--url", f"ws://127.0.0.1:{port}/lazily")


def page_url(folder: str, port: int, **query: str) -> str:
    params = "&".join(f"{k}={v}" for k, v in {"server": f"ws://127.0.0.1:{port}", **query}.items())
    return f"{(EXAMPLES / folder / 'index.html').as_uri()}?{params}"


def expect(locator: Any, text: str | re.Pattern[str]) -> None:
    playwright_api.expect(locator).to_have_text(text, timeout=WAIT_MS)


def test_chat_with_presence(server: int, browser: Any) -> None:
    """Messages are a shared list, presence is the server's: no process collects heartbeats
    (the Python bot is one more member, answering ``/who`` from the presence it reads)."""
    with example("chat", "bot.py", "--url", f"ws://127.0.0.1:{server}") as line:
        assert line.startswith("chat bot in the room")
        ada, bob = browser.new_page(), browser.new_page()
        ada.goto(page_url("chat", server, name="ada"))
        bob.goto(page_url("chat", server, name="bob"))
        for page in (ada, bob):
            expect(page.locator("#present"), "ada, bob, bot")
        ada.fill("#text", "hello from ada")
        ada.click("button")
        expect(bob.locator("#messages li"), ["ada: hello from ada"])
        bob.fill("#text", "/who")
        bob.press("#text", "Enter")
        said = ["ada: hello from ada", "bob: /who", "bot: here: ada, bob, bot"]
        expect(ada.locator("#messages li"), said)
        bob.close()  # bob's tab is gone: his connection closed, so is his presence
        expect(ada.locator("#present"), "ada, bot")
        late = browser.new_page()  # a late joiner gets every message, in order
        late.goto(page_url("chat", server, name="cy"))
        expect(late.locator("#messages li"), said)
        expect(late.locator("#present"), "ada, bot, cy")
        late.close()
        ada.close()


def test_live_dashboard(server: int, browser: Any) -> None:
    with example("dashboard", "producer.py", *lazily(server)) as line:
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
    with example("counter", "clicker.py", *lazily(server), "--every", "0") as line:
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
    with example("todo", "helper.py", *lazily(server)) as line:
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
        bob.locator("li", has_text="try the list").locator("button[title=remove]").click()
        for page in (ada, bob):
            expect(page.locator("#items li.done span"), ["buy milk", "call the plumber!"])
            expect(page.locator("#items li span"), ["buy milk", "call the plumber!"])
        ada.close()
        bob.close()


def board_coin(page: Any) -> tuple[int, int]:
    at = page.evaluate(
        "[...document.querySelectorAll('#board div')].findIndex((c) => c.className === 'coin')"
    )
    assert at >= 0
    return at % 9, at // 9


def walk(page: Any, start: tuple[int, int], to: tuple[int, int]) -> None:
    """Arrow keys from ``start`` to ``to``, one square per key press."""
    (x, y), (tx, ty) = start, to
    keys = ["ArrowRight" if tx > x else "ArrowLeft"] * abs(tx - x)
    keys += ["ArrowDown" if ty > y else "ArrowUp"] * abs(ty - y)
    for key in keys:
        page.keyboard.press(key)


@pytest.mark.slow
def test_coin_chase_on_a_chain_played_in_two_tabs_and_by_python(
    browser: Any, tmp_path: Path
) -> None:
    nats = f"nats://127.0.0.1:{(nats_port := free_port())}"
    port = free_port()
    chain_args = ("--nats-port", str(nats_port), "--data", str(tmp_path / "chain"))
    with example("chain-game", "chain.py", *chain_args, "--port", str(port)) as line:
        links = re.match(r"chain game 'game' up: 2 links \(processes (\d+), (\d+)\)", line)
        assert links is not None, line
        # the one command also started the server that relays the players
        context = browser.new_context()  # one browser profile: one IndexedDB, two players
        ada, bob = context.new_page(), context.new_page()
        ada.goto(page_url("chain-game", port, name="ada"))
        expect(ada.locator("#scores li"), ["ada 0 at 0,0"])  # first to join: first corner
        bob.goto(page_url("chain-game", port, name="bob"))
        for page in (ada, bob):
            expect(page.locator("#status"), "live")
            expect(page.locator("#scores li"), ["ada 0 at 0,0", "bob 0 at 8,8"])

        coin = board_coin(bob)
        assert board_coin(ada) == coin
        assert coin not in ((0, 0), (8, 8))
        walk(ada, (0, 0), coin)  # ada takes the coin; both tabs see it, and where it went
        for page in (ada, bob):
            expect(page.locator("#scores li"), [f"ada 1 at {coin[0]},{coin[1]}", "bob 0 at 8,8"])
        assert board_coin(ada) == board_coin(bob) != coin
        assert ada.locator("#board").inner_text() == bob.locator("#board").inner_text()

        ada.reload()  # the game and ada's place in it survive the reload
        expect(ada.locator("#status"), "live")
        expect(ada.locator("#scores li"), [f"ada 1 at {coin[0]},{coin[1]}", "bob 0 at 8,8"])
        ada.click("#pad button >> text=←")
        bob.keyboard.press("ArrowUp")
        for page in (ada, bob):
            expect(
                page.locator("#scores li"),
                [f"ada 1 at {coin[0] - 1},{coin[1]}", "bob 0 at 8,7"],
            )

        # kill -9 the first link (the head): the other leads, the tabs reconnect and play on
        os.kill(int(links.group(1)), signal.SIGKILL)
        ada.keyboard.press("ArrowDown")
        for page in (ada, bob):
            expect(
                page.locator("#scores li"),
                [f"ada 1 at {coin[0] - 1},{coin[1] + 1}", "bob 0 at 8,7"],
            )

        robot = ("--config", nats, "--moves", "3", "--every", "0")
        with example("chain-game", "robot.py", *robot) as said:  # a Python player joins
            found = re.fullmatch(r"robot at (\d),(\d) with (\d) coins\n", said)
            assert found is not None, said
            x, y, score = found.groups()
            assert (x, y) != ("0", "8")  # it moved from its corner
            for page in (ada, bob):
                expect(page.locator("#scores li", has_text="robot"), f"robot {score} at {x},{y}")
        context.close()


def test_the_chain_game_says_what_is_missing_when_no_chain_is_there(
    server: int, browser: Any
) -> None:
    page = browser.new_page()  # this server has no --chain-config
    page.goto(page_url("chain-game", server, name="ada"))
    playwright_api.expect(page.locator("#status")).to_contain_text(
        "is examples/chain-game/chain.py running, and the server started with --chain-config",
        timeout=WAIT_MS,
    )
    page.close()


def test_every_example_is_listed_and_has_both_sides() -> None:
    listed = (EXAMPLES / "README.md").read_text("utf-8")
    browser_tests = sorted((ROOT / "tests" / "browser").glob("test_*_example.py"))
    runs = "".join(p.read_text("utf-8") for p in [Path(__file__), *browser_tests])
    for folder in sorted(p for p in EXAMPLES.iterdir() if p.is_dir()):
        assert f"[{folder.name}]({folder.name})" in listed
        assert (folder / "index.html").exists()
        assert any(folder.glob("*.py"))
        assert f'example("{folder.name}", ' in runs  # and run, here or in tests/browser


def test_notes_typed_in_two_tabs_beside_python(server: int, browser: Any) -> None:
    with example("notes", "scribe.py", *lazily(server)) as line:
        assert line.startswith("notes ready")
        ada, bob = browser.new_page(), browser.new_page()
        for page in (ada, bob):
            page.goto(page_url("notes", server))
            playwright_api.expect(page.locator("#notes")).to_have_value(
                re.compile("^Shared notes"), timeout=WAIT_MS
            )
        ada.click("#notes")
        ada.keyboard.press("Control+End")
        ada.keyboard.type("ada: hi\n")
        for page in (ada, bob):
            playwright_api.expect(page.locator("#notes")).to_have_value(
                "Shared notes: type in any tab.\nada: hi\n", timeout=WAIT_MS
            )
        bob.click("#notes")
        bob.keyboard.press("Control+Home")
        bob.keyboard.type("# ")
        for page in (ada, bob):
            playwright_api.expect(page.locator("#notes")).to_have_value(
                "# Shared notes: type in any tab.\nada: hi\n", timeout=WAIT_MS
            )
        ada.close()
        bob.close()


def test_the_counter_says_offline_with_its_pending_clicks_when_the_server_is_gone(
    browser: Any, tmp_path: Path
) -> None:
    port = free_port()
    serve = ("serve", "--insecure-dev", "--port", str(port), "--data", str(tmp_path))
    page = browser.new_page()
    with running(*serve) as (proc, line):
        assert "octosync serving" in line
        page.goto(page_url("counter", port))
        expect(page.locator("#status"), "synced")
        page.click("#plus")
        expect(page.locator("#count"), "1")
        expect(page.locator("#status"), "synced")
        proc.send_signal(signal.SIGKILL)  # the server is gone, not stopped politely
        proc.wait(timeout=30)
        status = page.locator("#status")
        expect(status, re.compile(r"^offline: 0 clicks pending"))
        for _ in range(3):
            page.click("#plus")
        expect(status, re.compile(r"^offline: 3 clicks pending, kept here"))
        expect(page.locator("#count"), "4")
    with running(*serve) as (_, line):  # back: the kept clicks land, and the page says so
        assert "octosync serving" in line
        expect(status, "synced")
        fresh = browser.new_page()
        fresh.goto(page_url("counter", port))
        expect(fresh.locator("#count"), "4")
        fresh.close()
    page.close()


def test_todo_ticking_and_renaming_one_item_at_once_keeps_both(
    browser: Any, tmp_path: Path
) -> None:
    """Two tabs edit the same item while neither can see the other's edit (the server is
    down: both edits wait in their tabs, then land together); each field is its own value, so
    the tick and the new text both survive (one value per item lost one of them)."""
    port = free_port()
    serve = ("serve", "--insecure-dev", "--port", str(port), "--data", str(tmp_path))
    ada, bob = browser.new_page(), browser.new_page()
    with running(*serve) as (proc, line):
        assert "octosync serving" in line
        for page in (ada, bob):
            page.goto(page_url("todo", port))
            expect(page.locator("#status"), "synced")
        ada.fill("#text", "buy milk")
        ada.press("#text", "Enter")
        for page in (ada, bob):
            expect(page.locator("#items li span"), ["buy milk"])
            expect(page.locator("#status"), "synced")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    for page in (ada, bob):
        expect(page.locator("#status"), re.compile(r"^offline"))
    ada.locator("li", has_text="buy milk").locator("input[type=checkbox]").check()
    bob.locator("li", has_text="buy milk").locator("span").dblclick()
    bob.fill("li input.edit", "buy oat milk")
    bob.press("li input.edit", "Enter")
    expect(ada.locator("#items li.done span"), ["buy milk"])  # each tab has its own edit only
    expect(bob.locator("#items li span"), ["buy oat milk"])
    expect(bob.locator("#items li.done"), [])
    with running(*serve) as (_, line):
        assert "octosync serving" in line
        fresh = browser.new_page()
        fresh.goto(page_url("todo", port))
        for page in (ada, bob, fresh):
            expect(page.locator("#items li.done span"), ["buy oat milk"])
            expect(page.locator("#status"), "synced")
        fresh.close()
    ada.close()
    bob.close()


def test_todo_reorders_by_drag_and_two_drags_of_one_item_keep_one_copy(
    browser: Any, tmp_path: Path
) -> None:
    """The order is a shared list of the item ids: a drag in one tab moves the item in every
    tab; the same item dragged to two places in two tabs while the server is down ends in one
    place, once, in both, and every item is still there."""
    port = free_port()
    serve = ("serve", "--insecure-dev", "--port", str(port), "--data", str(tmp_path))
    ada, bob = browser.new_page(), browser.new_page()
    items = lambda page: page.locator("#items li span")  # noqa: E731
    item = lambda page, text: page.locator("#items li", has_text=text)  # noqa: E731
    with running(*serve) as (proc, line):
        assert "octosync serving" in line
        for page in (ada, bob):
            page.goto(page_url("todo", port))
            expect(page.locator("#status"), "synced")
        for text in ("one", "two", "three", "four"):
            ada.fill("#text", text)
            ada.press("#text", "Enter")
        for page in (ada, bob):
            expect(items(page), ["one", "two", "three", "four"])
        item(bob, "four").drag_to(item(bob, "one"))  # four to the top
        for page in (ada, bob):
            expect(items(page), ["four", "one", "two", "three"])
            expect(page.locator("#status"), "synced")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    for page in (ada, bob):
        expect(page.locator("#status"), re.compile(r"^offline"))
    item(ada, "one").drag_to(item(ada, "three"))  # ada: one to the bottom
    item(bob, "one").drag_to(item(bob, "four"))  # bob: one to the top
    expect(items(ada), ["four", "two", "three", "one"])
    expect(items(bob), ["one", "four", "two", "three"])
    with running(*serve) as (_, line):
        assert "octosync serving" in line
        for page in (ada, bob):
            expect(page.locator("#status"), "synced")
        final = items(ada).all_text_contents()
        assert sorted(final) == ["four", "one", "three", "two"]  # one copy of each
        assert final in (["four", "two", "three", "one"], ["one", "four", "two", "three"])
        expect(items(bob), final)
        fresh = browser.new_page()
        fresh.goto(page_url("todo", port))
        expect(items(fresh), final)
        fresh.close()
    ada.close()
    bob.close()
