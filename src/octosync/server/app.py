"""aiohttp application: one port, one route per wire face, plus ``/healthz``, ``/metrics`` and
the browser's routes (``server.inspect``: the inspector at ``/`` and the JavaScript client).

Every face runs the same connection loop (``server.connection``); a face is declared once in
``server.faces``: its session, its routes and its state (``server.face_state``), which this
module makes, restores from the journal and joins to the cluster without naming a face. Ports
are bound by ``server.run``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from octosync import __version__, extras
from octosync.hub.model import Body, Frame
from octosync.hub.types import AcceptHook, ConnId, InterestHook, ReleaseHook, StreamId
from octosync.pipeline.resume import compacted_through
from octosync.server.config import ServerConfig
from octosync.server.connection import RUNTIME
from octosync.server.face_state import ClusterJoin, FaceLink
from octosync.server.faces import FACES
from octosync.server.faces import mount as mount_faces
from octosync.server.inspect import add_routes as add_browser_routes
from octosync.server.metrics import registry_for, render
from octosync.server.runtime import Runtime
from octosync.store.data_lock import DataDirLock
from octosync.store.hub_hook import JournalRecorder
from octosync.store.journal import GroupCommitWriter
from octosync.store.retention import JournalKeeper
from octosync.store.storage_rules import DirectPath

if TYPE_CHECKING:  # NATS comes with the cluster extra: imported only by a server that clusters
    from octosync.links.cluster_link import ClusterLink

log = logging.getLogger(__name__)

CONFIG_KEY = web.AppKey("config", ServerConfig)
KEEPER = web.AppKey("journal_keeper", JournalKeeper)
KEEPER_TASK = web.AppKey("journal_keeper_task", asyncio.Task[None])
CLUSTER: web.AppKey[ClusterLink] = web.AppKey("cluster_link")

__all__ = ["CLUSTER", "CONFIG_KEY", "RUNTIME", "ServerConfig", "build_app"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _export_dir(config: ServerConfig) -> Path | None:
    """Where the maintenance round exports the journal: nowhere without pyarrow (the pipeline
    extra), said once; the round still trims what checkpoints cover."""
    if config.export_dir is not None and not extras.installed("pipeline"):
        log.warning(
            "journal export is off: it needs the pipeline extra (%s); the journal is still "
            "trimmed to what its checkpoints cover, without a Parquet archive",
            extras.install_hint("pipeline"),
        )
        return None
    return config.export_dir


async def _healthz(request: web.Request) -> web.Response:
    """200 while the server can take writes; 503 ``degraded`` while its journal cannot commit
    (reads are still served), naming why."""
    writer = request.app[RUNTIME].writer
    health = None if writer is None else writer.health()
    if health is not None and not health.available:
        body = {"status": "degraded", "version": __version__, "journal": health.reason}
        return web.json_response(body, status=503)
    return web.json_response({"status": "ok", "version": __version__})


def build_app(config: ServerConfig, *, on_accept: AcceptHook | None = None) -> web.Application:
    """The whole server. ``on_accept(stream, conn, frame)`` sees every frame the hub accepted;
    it runs inline, so it must not block. With ``config.journal`` every accepted frame is also
    queued to the journal, in accept order, before it is fanned out."""
    config.check_exposure()
    config = config.with_auth_mode()
    writer: GroupCommitWriter | None = None
    recorder: JournalRecorder | None = None
    lock: DataDirLock | None = None
    if config.journal:
        config.data_dir.mkdir(parents=True, exist_ok=True)
        lock = DataDirLock.acquire(config.data_dir)  # one server per folder
        try:
            writer = GroupCommitWriter(config.data_dir, durability=config.journal_durability)
        except BaseException:
            lock.release()
            raise
        recorder = JournalRecorder(DirectPath(writer))  # on the runtime's path once it is made
    link: ClusterLink | None = None
    hook = on_accept
    released: ReleaseHook | None = None
    interest: InterestHook | None = None
    if config.cluster_url is not None:
        outer = on_accept

        def hook(stream: StreamId, conn: ConnId, frame: Frame[Body]) -> None:
            if outer is not None:
                outer(stream, conn, frame)
            assert link is not None
            link.on_accept(stream, conn, frame)

        def released(stream: StreamId, conn: ConnId) -> None:
            assert link is not None
            link.on_release(stream, conn)

        def interest(stream: StreamId, wanted: bool) -> None:
            assert link is not None
            link.on_interest(stream, wanted)

    node = None
    if config.cluster_url is not None:  # NATS (the cluster extra) only when asked for
        from octosync.links.cluster_link import default_node_id

        node = config.node_id or default_node_id()
    runtime = Runtime(
        config,
        on_accept=hook,
        on_release=released,
        on_interest=interest,
        recorder=recorder,
        writer=writer,
        node_id=node,
    )
    if recorder is not None:
        recorder.path = runtime.commits
        recorder.durable = runtime.durable.frame_durable
    if config.cluster_url is not None and node is not None:
        from octosync.links.cluster_link import ClusterLink

        link = ClusterLink(runtime, config.cluster_url, node)
        runtime.cluster = link.core
    states = [face.state(runtime) for face in FACES if face.state is not None]
    if writer is not None:  # each face's state back from the journal
        for state in states:
            state.restore(writer.journal)
    face_links: list[FaceLink] = []
    if link is not None:  # each face's op streams (after the restore: its position)
        from octosync.links.cluster_link import DEFAULT_CLUSTER
        from octosync.links.jetstream_log import LogSettings

        settings = LogSettings(
            replicas=config.map_replicas,
            sync_interval=config.map_sync_interval,
            settle=config.map_settle,
            replicate_timeout=config.map_replicate_timeout,
            max_age=config.map_log_max_age,
        )
        journal = None if writer is None else writer.journal
        join = ClusterJoin(link, DEFAULT_CLUSTER, settings, journal)
        for state in states:
            face_links.extend(state.join_cluster(join))
    registry = registry_for(runtime)

    @web.middleware
    async def request_arrived(request: web.Request, handler: Handler) -> web.StreamResponse:
        runtime.request_started(request.transport)
        return await handler(request)

    app = web.Application(middlewares=[request_arrived])
    app[CONFIG_KEY] = config
    app[RUNTIME] = runtime
    if link is not None:
        app[CLUSTER] = link

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=render(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/metrics", metrics)
    mount_faces(app, config)  # every face's routes (server.faces.FACES)
    add_browser_routes(app)  # /, /client/octosync.js, /inspector.js, /api/streams

    async def on_startup(app: web.Application) -> None:
        if writer is not None:  # every stream's state is back before the port opens
            keeper, _ = await asyncio.to_thread(
                JournalKeeper.start,
                runtime.hub,
                config.data_dir,
                export_dir=_export_dir(config),
                trim=config.journal_retention,
                durability=config.journal_durability,
                ops_covered=partial(compacted_through, config.compaction_dir),
                plane_compact_records=config.plane_compact_records,
            )
            app[KEEPER] = keeper
            app[KEEPER_TASK] = asyncio.create_task(keeper.run_every(config.checkpoint_interval))
        await runtime.start()
        if link is not None:  # joins the cluster before the port opens
            await link.start()
            for face_link in face_links:  # and replays each face's op stream
                await face_link.start(link.nats)

    async def on_shutdown(app: web.Application) -> None:
        for face_link in reversed(face_links):
            await face_link.stop()
        if link is not None:  # releases what it owns, so other nodes may take it at once
            await link.stop()
        await runtime.shutdown()

    async def on_cleanup(app: web.Application) -> None:
        if KEEPER_TASK in app:
            app[KEEPER_TASK].cancel()
            app[KEEPER].close()
        if writer is not None:
            await asyncio.to_thread(writer.close)  # drains: every accepted frame is committed
        if lock is not None:
            lock.release()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    return app
