"""A Python peer and Chromium (octosync.js ``followPeer``) meet through /signal and carry the
state plane over a WebRTC data channel: snapshot, deltas and a resync after a gap."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from octosync.client.signaling import SignalingClient
from octosync.graph import Context
from octosync.ipc.messages import Delta, ResyncRequest
from octosync.ipc.mirror import Mirror
from octosync.signaling.messages import PeerJoined
from octosync.wire import json as wire_json
from tests.browser.support import CHROMIUM_FLAGS, ThreadedServer, chromium_path, threaded_server
from tests.conftest import require_module

playwright_api = require_module("playwright.sync_api", "drives Chromium in the browser tests")
require_module("aiortc", "the webrtc extra")

from octosync.client import webrtc  # noqa: E402

pytestmark = pytest.mark.browser

WAIT_MS = 20_000
# Chromium hides host addresses behind mDNS names a Python peer cannot resolve: show them.
FLAGS = [*CHROMIUM_FLAGS, "--disable-features=WebRtcHideLocalIpsWithMdns"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=FLAGS)
        try:
            yield b
        finally:
            b.close()


@contextlib.contextmanager
def meeting(browser: Any, tmp_path: Path) -> Iterator[tuple[ThreadedServer, Any, SignalingClient]]:
    """A server, a page of it, and the Python peer in signaling session ``room`` as peer 1;
    the page's console is printed (and kept in ``console.txt``) when the block fails."""
    with threaded_server(tmp_path) as server:
        assert server.running is not None
        ws_url = server.running.ws_url
        page = browser.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text))
        page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
        try:
            page.goto(f"{server.running.url}/")

            async def join() -> SignalingClient:
                sig = SignalingClient(f"{ws_url}/signal", "room")
                await sig.__aenter__()
                await sig.join(1)
                return sig

            yield server, page, server.run(join())
        except BaseException:
            (tmp_path / "console.txt").write_text("\n".join(console))
            print("\n".join(console))
            raise
        finally:
            page.close()


@pytest.mark.slow
def test_chromium_follows_a_python_peer_over_a_data_channel(browser: Any, tmp_path: Path) -> None:
    ctx = Context()
    score = ctx.cell(0, type_tag="i64")
    with meeting(browser, tmp_path) as (server, page, sig):
        url = server.running.url  # type: ignore[union-attr]
        page.evaluate(
            """async (url) => {
                const m = await import('/client/octosync.js');
                window.seen = [];
                window.linked = m.followPeer(url, {session: 'room', peer: 2,
                    onState: (s) => window.seen.push(Object.fromEntries(s.values))});
                window.linked.then((l) => { window.link = l; });
            }""",
            url,
        )

        async def call() -> tuple[webrtc.PeerLink, asyncio.Task[None]]:
            joined = await sig.receive(20)
            assert joined == PeerJoined(peer=2)
            link = await webrtc.offer(sig, 2, timeout=20)
            return link, asyncio.ensure_future(webrtc.publish_context(link, "room", ctx))

        link, task = server.run(call(), timeout=30)
        page.wait_for_function(f"window.seen.some(v => v[{score.id}] === 0)", timeout=WAIT_MS)

        async def set_scores() -> None:
            for value in range(1, 4):
                score.set(value)

        server.run(set_scores())
        page.wait_for_function(f"window.seen.at(-1)[{score.id}] === 3", timeout=WAIT_MS)

        async def gap_then_more() -> None:
            link.send(wire_json.encode(Delta(base_epoch=500, epoch=501)))
            score.set(4)

        server.run(gap_then_more())
        page.wait_for_function(
            f"window.link && window.link.resyncs === 1 && window.seen.at(-1)[{score.id}] === 4",
            timeout=WAIT_MS,
        )
        assert page.evaluate("window.link.peer") == 1

        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await link.close()
            await sig.__aexit__(None, None, None)

        server.run(stop())


@pytest.mark.slow
def test_a_python_peer_follows_chromium_over_a_data_channel(browser: Any, tmp_path: Path) -> None:
    """Chromium makes the offer and publishes a store; the Python peer answers and mirrors it."""
    with meeting(browser, tmp_path) as (server, page, sig):
        url = server.running.url  # type: ignore[union-attr]
        states: list[dict[int, Any]] = []
        changed = threading.Event()

        def on_state(mirror: Mirror) -> None:
            states.append(dict(mirror.values()))
            changed.set()

        def until(what: Callable[[], bool]) -> None:
            while True:
                changed.clear()  # before the check: a state that lands after it sets it again
                if what():
                    return
                assert changed.wait(WAIT_MS / 1000), f"no new state; last {states[-1:]}"

        cell = page.evaluate(
            """async (url) => {
                const m = await import('/client/octosync.js');
                const store = new m.Store();
                window.score = store.cell(0, 'i64');
                window.linked = m.publishToPeer(url, store, {session: 'room', peer: 2, to: 1});
                window.linked.then((l) => { window.link = l; });
                return window.score.id;
            }""",
            url,
        )

        async def answer() -> tuple[webrtc.PeerLink, asyncio.Task[Mirror]]:
            offerer, link = await webrtc.answer(sig, timeout=20)
            assert offerer == 2
            return link, asyncio.ensure_future(webrtc.follow(link, "room", on_state))

        link, task = server.run(answer(), timeout=30)
        until(lambda: any(s.get(cell) == 0 for s in states))
        page.wait_for_function("window.link !== undefined", timeout=WAIT_MS)
        for value in range(1, 4):
            page.evaluate(f"window.score.set({value})")
        until(lambda: bool(states) and states[-1].get(cell) == 3)

        async def ask() -> None:  # the follower lost sync: the browser answers with a snapshot
            link.send(wire_json.encode(ResyncRequest(last_epoch=3, reason="test")))

        seen = len(states)
        server.run(ask())
        page.wait_for_function("window.link.resyncs === 1", timeout=WAIT_MS)
        until(lambda: len(states) > seen and states[-1].get(cell) == 3)
        assert page.evaluate("window.link.deltasSent") == 3

        async def stop() -> None:
            await link.close()
            await asyncio.wait_for(task, 10)
            await sig.__aexit__(None, None, None)

        server.run(stop(), timeout=20)
