"""aiohttp application: one port, one route per wire face, plus ``/healthz`` and ``/metrics``."""

from __future__ import annotations

import asyncio
import functools

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from octosync import __version__
from octosync.hub.core import AcceptHook, ConnId, StreamId
from octosync.hub.model import Frame
from octosync.server.config import ServerConfig
from octosync.server.faces import (
    RUNTIME,
    lazily_handler,
    signal_handler,
    tcp_handler,
    wvp_handler,
)
from octosync.server.metrics import registry_for, render
from octosync.server.runtime import Runtime
from octosync.store.hub_hook import journal_hook
from octosync.store.journal import GroupCommitWriter
from octosync.store.retention import JournalKeeper

CONFIG_KEY = web.AppKey("config", ServerConfig)
TCP_SERVER = web.AppKey("tcp_server", asyncio.Server)
KEEPER = web.AppKey("journal_keeper", JournalKeeper)
KEEPER_TASK = web.AppKey("journal_keeper_task", asyncio.Task[None])

__all__ = ["CONFIG_KEY", "RUNTIME", "ServerConfig", "build_app"]


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "version": __version__})


def build_app(config: ServerConfig, *, on_accept: AcceptHook | None = None) -> web.Application:
    """The whole server. ``on_accept(stream, conn, frame)`` sees every frame the hub accepted;
    it runs inline, so it must not block. With ``config.journal`` every accepted frame is also
    queued to the journal, in accept order, before it is fanned out."""
    config = config.with_auth_mode()
    app = web.Application()
    writer: GroupCommitWriter | None = None
    if config.journal:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        writer = GroupCommitWriter(config.data_dir, durability=config.journal_durability)
        on_accept = _both(journal_hook(writer), on_accept)
    runtime = Runtime(config, on_accept=on_accept)
    registry = registry_for(runtime)
    app[CONFIG_KEY] = config
    app[RUNTIME] = runtime

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=render(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/lazily", lazily_handler)
    app.router.add_get("/wvp", wvp_handler)
    app.router.add_get("/signal", signal_handler)

    async def on_startup(app: web.Application) -> None:
        if writer is not None:  # every stream's state is back before the port opens
            keeper, _ = await asyncio.to_thread(
                JournalKeeper.start, runtime.hub, config.data_dir, export_dir=config.export_dir
            )
            app[KEEPER] = keeper
            app[KEEPER_TASK] = asyncio.create_task(keeper.run_every(config.checkpoint_interval))
        await runtime.start()
        if config.tcp_port is not None:
            server = await asyncio.start_server(
                functools.partial(tcp_handler, runtime), config.host, config.tcp_port
            )
            app[TCP_SERVER] = server

    async def on_shutdown(app: web.Application) -> None:
        server = app.get(TCP_SERVER)
        if server is not None:
            server.close()
        await runtime.shutdown()

    async def on_cleanup(app: web.Application) -> None:
        if KEEPER_TASK in app:
            app[KEEPER_TASK].cancel()
            app[KEEPER].close()
        if writer is not None:
            await asyncio.to_thread(writer.close)  # drains: every accepted frame is committed

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    return app


def _both(first: AcceptHook, second: AcceptHook | None) -> AcceptHook:
    if second is None:
        return first

    def hook(stream: StreamId, conn: ConnId, frame: Frame[object]) -> None:
        first(stream, conn, frame)
        second(stream, conn, frame)

    return hook
