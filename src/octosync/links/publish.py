"""``octosync chain publish``: a chain's computed state as a hub stream, for observers.

A small watcher process, not a link: it follows the chain like a device that never emits
(``ChainDevice``: it finds the head in the configuration, bootstraps, applies every
``StateUpdate``) and serves what it holds as the lazily stream ``chain:<name>`` through the
project's client (``octosync.client``), laid out by ``chain.state_cells``. So every
``/lazily`` subscriber, the Python client and ``octosync watch`` see the chain's state.

Why a watcher and not the tail: the tail changes on every failover and would have to hand the
stream over (a new producer must start from a snapshot); links also stay free of any server.

Gapless across failover: when the head fails, the watcher's device connection drops, it
bootstraps with the new head and receives the whole state; the cells take it as one more
state, so subscribers get one delta that continues the stream's epochs. If the watcher's own
connection to the server drops, the client reconnects and starts again from a snapshot; a new
watcher process starts from a snapshot too (the hub accepts it once the old one is gone).

The server must let the watcher publish: with ``[auth]``, its token grants ``publish`` on
``chain:<name>`` and on ``$chain:<name>`` (``hub.streams.check_chain_publisher``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable

from octosync.chain.records import BootstrapComplete, HeadToDevice, StateUpdate
from octosync.chain.state_cells import StateCells
from octosync.client.lazily import Publication, connect
from octosync.hub.streams import chain_stream_id
from octosync.links.config_store import ConfigStore
from octosync.links.device import ChainDevice


def default_observer_name() -> str:
    """A device name no other watcher uses (two watchers with one name would evict each other)."""
    return f"publisher-{socket.gethostname()}-{os.getpid()}"


async def publish_chain(
    chain: str,
    config_url: str,
    server_url: str,
    *,
    token: str | None = None,
    name: str | None = None,
    ready: Callable[[Publication], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Publish ``chain``'s state until ``stop`` is set (or forever); raises the server's
    refusal (``Forbidden``, ``Unauthorized``) as soon as it comes."""
    stream = chain_stream_id(chain)
    cells = StateCells()
    first = asyncio.Event()

    def show(message: HeadToDevice) -> None:
        if isinstance(message, BootstrapComplete | StateUpdate):
            cells.apply(device.client.state, device.client.state_sequencer)
            first.set()

    configs = await ConfigStore(config_url, chain).open()
    device = ChainDevice(name or default_observer_name(), configs=configs, listener=show)
    device.start()
    try:
        await first.wait()  # publish the chain's state, not an empty graph
        async with connect(server_url, token=token) as client:
            publication = await client.publish(stream, cells.ctx)
            if ready is not None:
                ready(publication)
            ended: asyncio.Future[object] = asyncio.ensure_future(publication.wait())
            waiters = {ended}
            if stop is not None:
                waiters.add(asyncio.ensure_future(stop.wait()))
            try:
                done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
            if ended in done:
                ended.result()  # the server's refusal, if that is why it ended
    finally:
        await device.stop()
        with contextlib.suppress(Exception):
            await configs.close()
