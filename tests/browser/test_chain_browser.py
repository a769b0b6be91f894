"""A browser device on an Octoprotocol chain (octosync.js ``ChainDevice``, IndexedDB): the tab
is reloaded mid-game and the head link is ``kill -9``ed; every event the device numbered is
consumed by the chain exactly once (the example game audits each device's sequencers)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import subprocess
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from octosync.links.cli import chain_status, start_node
from octosync.links.config_store import ConfigStore
from tests.browser.support import chromium, threaded_server
from tests.conftest import require_module

pytestmark = pytest.mark.browser

playwright_api = require_module("playwright.sync_api", "drives Chromium in the browser tests")

T = TypeVar("T")
CHAIN = "browser"
APP = "octosync.chain.game:compute"
WAIT_MS = 30_000
DEVICE = "alice"

START = """async ([url, chain, name]) => {
    const m = await import('/client/octosync.js');
    const device = new m.ChainDevice(url, chain, name, {backoff: {base: 0.05, cap: 0.5}});
    window.device = device;
    window.latest = null;
    window.connects = 0;
    device.on('state', (s) => { window.latest = s; });
    device.on('status', (s) => { if (s === 'connecting') window.connects += 1; });
    await device.start();
    window.play = async (n) => {
        for (let i = 0; i < n; i++) {
            await device.emitEvent('move', JSON.stringify({dx: 1, dy: i % 3 - 1}));
        }
    };
}"""

AUDIT = f"window.latest?.state?.audit?.['{DEVICE}']"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a thread of its own (Playwright's loop owns this one)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result(60)


def _steady(url: str, links: int) -> bool:
    status = _run(chain_status(CHAIN, url))
    found = status["links"]
    return len(found) == links and all(
        e.get("role") in ("head", "tail", "middle") and e.get("epoch") == status["epoch"]
        for e in found
    )


def _until(predicate: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _head_id(url: str) -> str:
    async def read() -> str:
        configs = await ConfigStore(url, CHAIN).open()
        try:
            config, _ = await configs.read()
        finally:
            await configs.close()
        return config.members[0].id

    return _run(read())


@pytest.mark.slow
def test_reload_and_a_killed_head_lose_nothing_and_double_nothing(
    browser: Any, nats_url: str, tmp_path: Path
) -> None:
    procs: dict[str, subprocess.Popen[str]] = {}

    def launch(node_id: str) -> None:
        procs[node_id], _ = start_node(CHAIN, node_id, nats_url, APP, tmp_path / node_id)

    try:
        for node_id in ("n1", "n2"):
            launch(node_id)
        _until(lambda: _steady(nats_url, 2), "the chain to form")
        with threaded_server(tmp_path / "server", chain_config=nats_url) as server:
            assert server.running is not None
            url = server.running.url
            context = browser.new_context()
            page = context.new_page()
            try:
                page.goto(f"{url}/")
                page.evaluate(START, [url, CHAIN, DEVICE])
                page.wait_for_function("window.device.live", timeout=WAIT_MS)
                page.evaluate("window.device.emitEvent('join', JSON.stringify({name: 'Alice'}))")
                page.evaluate("window.play(20)")
                page.wait_for_function(f"{AUDIT} && {AUDIT}.n >= 10", timeout=WAIT_MS)

                # reload mid-game: moves in flight (numbered and persisted, maybe not yet sent;
                # the ones not yet numbered are the UI's to lose, and are not counted)
                page.evaluate("void window.play(15)")
                page.reload()
                page.evaluate(START, [url, CHAIN, DEVICE])
                page.wait_for_function("window.device.live", timeout=WAIT_MS)
                page.evaluate("window.play(10)")
                page.wait_for_function(f"{AUDIT} && {AUDIT}.n >= 25", timeout=WAIT_MS)

                # kill -9 the head; the survivor takes over, the killed link rejoins
                head = _head_id(nats_url)
                page.evaluate("void window.play(10)")
                os.kill(procs[head].pid, signal.SIGKILL)
                procs[head].wait(timeout=10)
                launch(head)
                _until(lambda: _steady(nats_url, 2), "the chain to heal")
                page.wait_for_function(
                    "window.connects >= 2 && window.device.live", timeout=WAIT_MS
                )
                page.evaluate("window.play(10)")

                page.wait_for_function(
                    f"window.device.live && window.device.events.size === 0 && {AUDIT} && "
                    f"{AUDIT}.n === window.device.nextSequencer - 1",
                    timeout=WAIT_MS,
                )
                audit = page.evaluate(AUDIT)
                numbered = page.evaluate("window.device.nextSequencer - 1")
            finally:
                context.close()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert audit["dup"] == 0  # nothing applied twice
    assert audit["ranges"] == [[1, numbered]]  # every numbered event, none missing
    assert numbered >= 1 + 20 + 10 + 10  # the moves after the reload were all numbered
