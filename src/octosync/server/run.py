"""Start and stop the server: guarded listening sockets, signals, an orderly drain.

``start`` binds the HTTP/WebSocket port (and each face's TCP port and Unix socket when
configured, ``Face.tcp`` and ``Face.unix``) behind the connection guard and returns a
handle; ``serve_forever`` is what ``octosync serve`` runs: it binds first, reports, then
waits for SIGTERM/SIGINT and drains within the configured deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import gc
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from octosync.errors import ListenError
from octosync.server.app import CLUSTER, build_app
from octosync.server.config import ServerConfig
from octosync.server.connection import RUNTIME, AnySession, serve_tcp
from octosync.server.face_names import FaceName
from octosync.server.faces import FACES, TcpListener
from octosync.server.guard import GuardedProtocol
from octosync.server.runtime import Runtime
from octosync.server.throttled_log import ThrottledLog
from octosync.server.tls import server_context
from octosync.server.unix_listen import UnixListener

log = logging.getLogger("octosync.server")


@dataclass
class Started:
    runner: web.AppRunner
    runtime: Runtime
    servers: list[asyncio.Server]
    port: int
    tcp_ports: Mapping[FaceName, int] = field(default_factory=dict)
    """Every face's bound TCP port, by face."""
    unix_sockets: Mapping[FaceName, Path] = field(default_factory=dict)
    """Every face's Unix socket file (``--wvp-socket``, ``--lazily-socket``), by face."""
    unix_listeners: list[UnixListener] = field(default_factory=list)
    """Socket files made by ``unix_listen``, each removed at stop if it is still the one this
    server made."""

    async def stop(self) -> None:
        for server in self.servers:
            server.close()
        for listener in self.unix_listeners:
            listener.remove()
        await self.runner.cleanup()


def _loop_errors(
    throttle: ThrottledLog,
) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """The loop's exception handler: each kind of message once per interval, with a count
    (accept() failing for want of descriptors must not write a traceback per attempt)."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        message = str(context.get("message", "event loop error"))
        throttle.exception(message, exc if isinstance(exc, BaseException) else None)

    return handler


@contextlib.contextmanager
def _listening(host: str, port: int, option: str) -> Iterator[None]:
    """Turn a failed bind into a ``ListenError`` that says which port and what to do."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            fix = (
                f"another process listens there (another octosync serve?); choose another {option}"
            )
        elif exc.errno == errno.EADDRNOTAVAIL:
            fix = "this machine has no such address; use --host 127.0.0.1"
        elif exc.errno == errno.EACCES:
            fix = f"ports below 1024 need privileges; choose another {option}"
        else:
            fix = f"check --host and {option}"
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ListenError(f"cannot listen on {host}:{port}: {why}; {fix}") from exc


async def start(app: web.Application, config: ServerConfig) -> Started:
    """Bind every port of ``app`` (built by ``build_app``) behind the connection guard."""
    rt = app[RUNTIME]
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_loop_errors(ThrottledLog(log, interval=10.0)))
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        shutdown_timeout=config.shutdown_deadline + 2 * config.close_timeout,
    )
    await runner.setup()
    factory = runner.server
    assert factory is not None

    def on_deadline() -> None:
        rt.counters.deadline_closes += 1

    def guarded() -> asyncio.Protocol:
        return GuardedProtocol(
            factory(), rt.guard, rt.http_conns, config.request_timeout, on_deadline
        )

    servers: list[asyncio.Server] = []
    unix_listeners: list[UnixListener] = []
    try:
        tls = server_context(config.tls_cert, config.tls_key)
        with _listening(config.host, config.port, "--port"):
            http = await loop.create_server(
                guarded,
                config.host,
                config.port,
                reuse_address=True,
                ssl=tls,
                ssl_handshake_timeout=config.request_timeout if tls else None,
            )
        servers.append(http)
        port = int(http.sockets[0].getsockname()[1])
        tcp_ports: dict[FaceName, int] = {}
        for face in FACES:
            listener = face.tcp
            port_wanted = None if listener is None else listener.port(config)
            if listener is None or port_wanted is None:
                continue
            with _listening(config.host, port_wanted, listener.option):
                tcp = await asyncio.start_server(
                    _tcp_handler(rt, listener),
                    config.host,
                    port_wanted,
                    ssl=tls,
                    ssl_handshake_timeout=config.request_timeout if tls else None,
                )
            servers.append(tcp)
            tcp_ports[face.name] = int(tcp.sockets[0].getsockname()[1])
        unix_sockets: dict[FaceName, Path] = {}
        for face in FACES:
            unix = face.unix
            named = None if unix is None else unix.path(config)
            if unix is None or named is None:
                continue
            unix_sockets[face.name] = Path(named)
            unix_listeners.append(await unix.listen(rt, Path(named)))
        base = config.public_base(port)
        cluster = app.get(CLUSTER)
        for state in rt.states():  # each face learns the address clients use
            state.serving(base, cluster)
    except BaseException:
        for server in servers:
            server.close()
        for made in unix_listeners:
            made.remove()
        await runner.cleanup()
        raise
    return Started(runner, rt, servers, port, tcp_ports, unix_sockets, unix_listeners)


def _tcp_handler(
    rt: Runtime, listener: TcpListener
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """The TCP loop of one face's listener (its identity comes in-band)."""
    opener = listener.open

    def open_session(rt: Runtime, conn: int) -> AnySession:
        return opener(rt, conn, None, {})

    return functools.partial(serve_tcp, rt, open_session, framer=listener.framer)


YOUNG_COLLECTION_THRESHOLD = 20_000
"""Allocations between young-generation collections (CPython's default is 700): a serving
process makes thousands of short-lived containers per client batch, nearly none in cycles."""


def settle_heap() -> None:
    """Once the server is up: what is alive now (modules, state loaded from the journal)
    lives as long as the process, so it leaves the collector's view (``gc.freeze``), and the
    young generation is collected less often. Left as they were, every full collection
    scanned the loaded state, a pause on the path of every message in flight."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle, old)


async def serve_forever(config: ServerConfig, on_ready: Callable[[Started], None]) -> None:
    """Serve until SIGTERM or SIGINT, then drain (``Runtime.shutdown``) and return."""
    started = await start(build_app(config), config)
    settle_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    on_ready(started)
    try:
        await stop.wait()
    finally:
        await started.stop()
