"""What the browser-side tests need from the machine: Node, Chromium, a server in a thread.

A missing tool skips its tests with a one-line reason, except under ``OCTOSYNC_REQUIRE_PEERS=1``
(CI), where the skip becomes a failure (``tests.conftest.missing``).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tests.conftest import missing, node_executable, require_module
from tests.e2e.helpers import Running, serve

ROOT = Path(__file__).resolve().parents[2]
JS_CLIENT = ROOT / "clients" / "js"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Without the background-networking flags Chromium keeps dialling hosts this machine cannot
reach; ``--no-sandbox`` because CI runs as root."""

T = TypeVar("T")


def node_command() -> list[str]:
    """``node`` plus the flag that gives it a global WebSocket, or a skip saying why not."""
    node = node_executable()
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    match = re.match(r"v(\d+)\.(\d+)", version.stdout)
    major, minor = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if major >= 22:
        return [node]
    if major > 20 or (major == 20 and minor >= 10):
        return [node, "--experimental-websocket"]
    missing(f"node {version.stdout.strip()} has no WebSocket (needs 20.10+): JS tests skipped")
    return []


def chromium_path() -> str:
    if not Path(CHROMIUM).exists():
        missing(f"{CHROMIUM} is not installed (apt-get install chromium): browser tests skipped")
    return CHROMIUM


@contextmanager
def chromium() -> Iterator[Any]:
    """Headless Chromium driven by Playwright (a skip when either is absent)."""

    playwright_api = require_module("playwright.sync_api", "drives Chromium in the browser tests")
    executable = chromium_path()
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            browser.close()


class ThreadedServer:
    """A real server on loopback in its own event-loop thread, for synchronous browser tests."""

    def __init__(self, tmp_path: Path, **overrides: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._tmp_path = tmp_path
        self._overrides = overrides
        self._stop: asyncio.Event | None = None
        self._done: Future[None] | None = None
        self.running: Running | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> Running:
        self._thread.start()
        started: Future[Running] = Future()

        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                async with serve(self._tmp_path, **self._overrides) as running:
                    started.set_result(running)
                    await self._stop.wait()
            except BaseException as exc:
                if not started.done():
                    started.set_exception(exc)
                raise

        self._done = asyncio.run_coroutine_threadsafe(main(), self.loop)  # type: ignore[assignment]
        self.running = started.result(10.0)
        return self.running

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        if self._done is not None:
            self._done.result(10.0)
        self.run(_cancel_the_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10.0)
        self.loop.close()


async def _cancel_the_rest() -> None:
    """End what tests left on the loop (client tasks, extra servers) before it closes."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@contextmanager
def threaded_server(tmp_path: Path, **overrides: Any) -> Iterator[ThreadedServer]:
    server = ThreadedServer(tmp_path, **overrides)
    server.start()
    try:
        yield server
    finally:
        server.stop()
