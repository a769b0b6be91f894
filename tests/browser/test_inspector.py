"""Headless Chromium against a real server: the inspector at ``/`` and a page of the user's own.

Driven by Playwright with Debian's Chromium (no browser download). A failing test leaves a
screenshot of the page in its tmp dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp import web

from octosync.client.lazily import Client, connect
from octosync.graph import Context
from octosync.server.auth import AuthConfig
from tests.browser.support import ThreadedServer, chromium, threaded_server
from tests.conftest import require_module
from tests.e2e.helpers import handshake
from tests.protocol_schemas import check

pytestmark = pytest.mark.browser

playwright_api = require_module("playwright.sync_api", "drives Chromium in the browser tests")

WAIT_MS = 10_000
SECRET = "browser-test-secret-of-32-bytes-or-more"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@contextlib.contextmanager
def page_of(browser: Any, tmp_path: Path) -> Iterator[Any]:
    """A fresh page; on failure its screenshot and console go to ``tmp_path``."""
    context = browser.new_context()
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        yield page
    except BaseException:
        with contextlib.suppress(Exception):
            page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
        (tmp_path / "console.txt").write_text("\n".join(console))
        raise
    finally:
        context.close()


class Scoreboard:
    """A Python producer (the project's own client) publishing home, away and their total."""

    def __init__(self, server: ThreadedServer, stream: str, token: str | None = None) -> None:
        self.server = server
        assert server.running is not None
        self.ctx = Context()
        self.home = self.ctx.cell(0, type_tag="i64")
        self.away = self.ctx.cell(0, type_tag="i64")
        self.total = self.ctx.memo(lambda: self.home.get() + self.away.get(), type_tag="i64")
        self.note = self.ctx.cell("", type_tag="string")
        self.client: Client = connect(f"{server.running.ws_url}/lazily", token=token)

        async def start() -> None:
            await self.client.__aenter__()
            await self.client.publish(stream, self.ctx)

        server.run(start())

    def set_home(self, value: int) -> None:
        async def go() -> None:
            self.home.set(value)

        self.server.run(go())

    def flood(self, count: int, size: int) -> None:
        """``count`` deltas of about ``size`` bytes each, as fast as the producer sends them."""

        async def go() -> None:
            for i in range(count):
                self.note.set(f"{i:08d}" + "x" * size)
            await asyncio.sleep(0)

        self.server.run(go())

    def away_value(self) -> int:
        async def go() -> int:
            return self.away.get()

        return self.server.run(go())

    def close(self) -> None:
        self.server.run(self.client.close())


def text_of(page: Any, selector: str) -> str:
    return str(page.locator(selector).inner_text(timeout=WAIT_MS))


def wait_text(page: Any, selector: str, text: str) -> None:
    page.wait_for_function(
        "([sel, want]) => document.querySelector(sel)?.textContent === want",
        arg=[selector, text],
        timeout=WAIT_MS,
    )


def test_inspector_lists_streams_and_shows_values_changing(browser: Any, tmp_path: Path) -> None:
    with threaded_server(tmp_path / "server") as server, page_of(browser, tmp_path) as page:
        board = Scoreboard(server, "scoreboard")
        try:
            assert server.running is not None
            page.goto(f"{server.running.url}/")
            row = '#streams tr[data-stream="scoreboard"]'
            page.wait_for_selector(row, timeout=WAIT_MS)
            assert text_of(page, f"{row} td.face") == "lazily"
            assert text_of(page, f"{row} td.producer").startswith("#")
            page.click(row)
            wait_text(page, '#values tr[data-node="2"] td.value', "0")
            board.set_home(41)
            wait_text(page, '#values tr[data-node="0"] td.value', "41")
            wait_text(page, '#values tr[data-node="2"] td.value', "41")
            board.set_home(42)
            wait_text(page, '#values tr[data-node="2"] td.value', "42")
            assert text_of(page, "#watch-status") == "open"
            page.wait_for_function(
                "() => Number(document.querySelector("
                "'#streams tr[data-stream=\"scoreboard\"] td.subscribers')?.textContent) >= 1",
                timeout=WAIT_MS,
            )
            assert page.locator("#charts svg").count() == 5
            assert page.locator("#token-form").is_hidden()
        finally:
            board.close()


def test_inspector_asks_for_a_token_when_auth_is_on(browser: Any, tmp_path: Path) -> None:
    auth = AuthConfig(hs256_secret=SECRET)
    with (
        threaded_server(tmp_path / "server", insecure_dev=False, auth=auth) as server,
        page_of(browser, tmp_path) as page,
    ):
        producer = jwt.encode({"sub": "p", "streams": {"guarded": ["publish"]}}, SECRET)
        reader = jwt.encode({"sub": "r", "streams": {"guarded": ["read"]}}, SECRET)
        board = Scoreboard(server, "guarded", token=producer)
        try:
            assert server.running is not None
            page.goto(f"{server.running.url}/")
            page.wait_for_selector("#token-form", state="visible", timeout=WAIT_MS)
            assert "Unauthorized" in text_of(page, "#token-error")
            page.fill("#token-input", "not-a-token")
            page.click("#token-form button")
            page.wait_for_function(
                "() => document.querySelector('#token-error').textContent.includes('invalid')",
                timeout=WAIT_MS,
            )
            page.fill("#token-input", reader)
            page.click("#token-form button")
            row = '#streams tr[data-stream="guarded"]'
            page.wait_for_selector(row, timeout=WAIT_MS)
            page.wait_for_selector("#token-form", state="hidden", timeout=WAIT_MS)
            page.click(row)
            board.set_home(5)
            wait_text(page, '#values tr[data-node="2"] td.value', "5")
        finally:
            board.close()


OWN_PAGE = """<!doctype html><meta charset="utf-8"><title>my page</title>
<pre id="log"></pre>
<script type="module">
  import { connect, errors } from "%(base)s/client/octosync.js";
  window.frames_seen = [];
  const RecordingWebSocket = class extends WebSocket {
    constructor(url) {
      super(url);
      this.addEventListener("message", (e) => frames_seen.push(["received", e.data]));
    }
    send(data) { frames_seen.push(["sent", data]); super.send(data); }
  };
  const client = connect("%(base)s", { WebSocket: RecordingWebSocket });
  const sub = client.subscribe("mine");
  window.errorsSeen = [];
  sub.on("error", (e) => errorsSeen.push(e.code));
  sub.on("state", (s) => {
    const v = s.values;
    document.querySelector("#log").textContent = `${s.epoch} ${v.get(0)} ${v.get(1)} ${v.get(2)}`;
  });
  await sub.ready;
  sub.write(1, 7);
  try { sub.write(1, "seven"); } catch (e) { window.typedError = e instanceof errors.TypeTagError; }
</script>"""


def stalled_subscriber(port: int, stream: str) -> socket.socket:
    """A real subscriber that upgrades, handshakes, then never reads (tiny receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        b"GET /lazily HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n"
    )
    hello = handshake(stream)  # a masked text frame, mask 0 (client frames must be masked)
    sock.sendall(bytes([0x81, 0x80 | 126]) + len(hello).to_bytes(2, "big") + bytes(4) + hello)
    return sock


def test_inspector_flags_a_stream_whose_subscriber_stopped_reading(
    browser: Any, tmp_path: Path
) -> None:
    # Backlog bounds high enough that the subscriber is never reset to a snapshot here.
    roomy = {"outbox_max_bytes": 256 << 20, "outbox_max_frames": 100_000}
    with (
        threaded_server(tmp_path / "server", **roomy) as server,
        page_of(browser, tmp_path) as page,
    ):
        assert server.running is not None
        port = int(server.running.url.rsplit(":", 1)[1])
        healthy = Scoreboard(server, "healthy")
        jammed = Scoreboard(server, "jammed")
        stuck = stalled_subscriber(port, "jammed")
        try:
            page.goto(f"{server.running.url}/")
            row = '#streams tr[data-stream="jammed"]'
            page.wait_for_function(
                "() => document.querySelector("
                "'#streams tr[data-stream=\"jammed\"] td.subscribers')?.textContent === '1'",
                timeout=WAIT_MS,
            )
            jammed.flood(800, 16_000)  # far more than the socket and its buffers hold
            page.wait_for_selector(f"{row}.stalled", timeout=WAIT_MS)
            assert text_of(page, f"{row} td.flag") == "stalled subscriber"
            assert int(text_of(page, f"{row} td.backlog")) > 0
            healthy_row = '#streams tr[data-stream="healthy"]'
            assert page.locator(f"{healthy_row}.stalled").count() == 0
            assert text_of(page, f"{healthy_row} td.flag") == ""
        finally:
            stuck.close()
            healthy.close()
            jammed.close()


async def serve_page(html: str) -> str:
    """A second HTTP server on loopback serving one page; its URL (it lives as long as the
    server thread's loop)."""
    app = web.Application()

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app.router.add_get("/", index)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
    return f"http://127.0.0.1:{sockets[0].getsockname()[1]}/"


def test_a_page_of_its_own_subscribes_and_writes_with_the_served_client(
    browser: Any, tmp_path: Path
) -> None:
    with threaded_server(tmp_path / "server") as server, page_of(browser, tmp_path) as page:
        board = Scoreboard(server, "mine")
        try:
            assert server.running is not None
            base = server.running.url
            # Served by a web server of its own (another origin, as a developer's page would
            # be): the module import is a cross-origin request.
            own = server.run(serve_page(OWN_PAGE % {"base": base}))
            page.goto(own)
            page.wait_for_function(
                "() => document.querySelector('#log').textContent.endsWith(' 0 7 7')",
                timeout=WAIT_MS,
            )
            deadline = time.monotonic() + WAIT_MS / 1000
            while board.away_value() != 7 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert board.away_value() == 7, "the producer's cell took the page's write"
            assert page.evaluate("window.typedError") is True
            assert page.evaluate("window.errorsSeen") == []
            frames = page.evaluate("window.frames_seen")
            kinds = set()
            for direction, text in frames:
                doc = json.loads(text)
                schema = "lazily-handshake" if "protocol_id" in doc else "lazily-json"
                check(schema, doc)
                kinds.add((direction, doc.get("type", "handshake")))
            assert ("sent", "remote_op") in kinds, kinds  # the write, answered:
            assert ("received", "remote_op_result") in kinds, kinds
            assert ("received", "snapshot") in kinds, kinds
        finally:
            board.close()


def test_threaded_server_stops_cleanly(tmp_path: Path) -> None:
    """The fixture itself: a stopped server refuses connections (so tests cannot leak one)."""
    with threaded_server(tmp_path) as server:
        assert server.running is not None
        port = int(server.running.url.rsplit(":", 1)[1])

    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 5):
        pass


def test_inspector_lists_topgun_maps_once_a_client_writes(browser: Any, tmp_path: Path) -> None:
    import aiohttp

    from octosync.wire import topgun as tg
    from tests.topgun.helpers import batch, put

    with threaded_server(tmp_path / "server") as server, page_of(browser, tmp_path) as page:
        assert server.running is not None
        ws_url = server.running.ws_url
        page.goto(f"{server.running.url}/")
        page.wait_for_selector("#no-maps", state="visible", timeout=WAIT_MS)
        assert page.locator("#maps").is_hidden()
        assert page.locator("#no-dataspaces").is_visible()

        async def write() -> None:
            async with aiohttp.ClientSession() as http:
                ws = await http.ws_connect(f"{ws_url}/topgun")
                await ws.send_bytes(tg.encode(tg.DeviceHello()))
                await ws.receive()
                ops = [
                    put("1", "alice", 1, 100),
                    put("2", "bob", 2, 101),
                    put("3", "bob", None, 102),
                ]
                await ws.send_bytes(tg.encode(batch(*ops, write_concern="APPLIED")))
                await ws.receive()
                await ws.close()

        server.run(write())
        page.wait_for_selector("#maps tbody tr", timeout=WAIT_MS)
        assert page.locator("#maps tbody tr td").all_inner_texts() == ["users", "1", "1"]
        assert page.locator("#no-maps").is_hidden()


def test_inspector_shows_a_shared_documents_values_and_that_rows_can_be_clicked(
    browser: Any, tmp_path: Path
) -> None:
    from octosync.client.shared import SharedDocument

    with threaded_server(tmp_path / "server") as server, page_of(browser, tmp_path) as page:
        assert server.running is not None
        ws_url = server.running.ws_url
        page.goto(f"{server.running.url}/")
        page.wait_for_selector("#no-documents", state="visible", timeout=WAIT_MS)
        hint = page.locator("#streams-hint")
        assert hint.is_visible()
        assert "Click a stream's row" in hint.inner_text()

        async def write() -> None:
            async with SharedDocument(ws_url, "room") as doc:
                doc.counter("clicks").add(5)
                doc.counter("clicks").add(-2)
                doc.register("title").set("hello")
                doc.map("todo").set("milk", {"done": True})
                await doc.synced(10)

        server.run(write())
        page.wait_for_selector("#documents tbody tr", timeout=WAIT_MS)
        page.wait_for_function(
            "document.querySelector('#documents tbody td.doc-values')?.textContent"
            ".includes('clicks (counter): 3')",
            timeout=WAIT_MS,
        )
        cells = page.locator("#documents tbody tr td").all_inner_texts()
        assert cells[0] == "room"
        assert cells[4].splitlines() == [
            "clicks (counter): 3",
            'title (register): "hello"',
            'todo (map): {"milk":{"done":true}}',
        ]
