"""A device over TCP: the ``DeviceClient`` core, its SQLite store and a reconnecting socket.

The device finds the head in the configuration (NATS) or, without one, tries the known link
addresses in order; it says who it is (``DeviceHello``), bootstraps, and from then on sends
each event as it is numbered. Its machine is saved (one transaction) before anything it
produced is sent, so after a crash it restarts from a state the chain has not seen past.
When the connection drops it reconnects and bootstraps again, which re-sends every event not
yet consumed: that is how events lost with a failed head come back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from octosync.chain.device import DeviceClient, Phase
from octosync.chain.json_tree import merge_patch
from octosync.chain.records import (
    BootstrapComplete,
    DeviceEvent,
    DeviceNotice,
    HeadToDevice,
    StateUpdate,
)
from octosync.errors import OctosyncError
from octosync.links import frames
from octosync.links.config_store import ConfigStore
from octosync.links.shared_decoding import SharedDecoding
from octosync.store.chain import DeviceStore
from octosync.wire import chain_link

RETRY = 0.05


class ChainDevice:
    def __init__(
        self,
        name: str,
        *,
        configs: ConfigStore | None = None,
        addresses: Sequence[tuple[str, int]] = (),
        store: DeviceStore | None = None,
        listener: Callable[[HeadToDevice], None] | None = None,
        shared: SharedDecoding | None = None,
    ) -> None:
        self.name = name
        self.configs = configs
        self.addresses = list(addresses)
        self.store = store
        self.listener = listener
        """Sees every message from the head after the device applied it (benchmarks, demos)."""
        self.shared = shared
        """Devices of one process may share decoding and merging (``shared_decoding``)."""
        self.client = DeviceClient(
            name, store.load() if store else None, merge=shared.merge if shared else merge_patch
        )
        self._decode = shared.decode if shared else chain_link.decode
        self._saved_version = self.client.version
        self._writer: asyncio.StreamWriter | None = None
        self._outbox: list[bytes] = []
        self._flush_due = False
        self.epoch = 0
        self.acked: set[int] = set()
        """Every sequencer the chain said is durable at its tail, over all connections."""
        self.changed = asyncio.Event()
        self.connections = 0
        self._task: asyncio.Task[None] | None = None

    # -- the application side ------------------------------------------------------------------

    def emit(self, name: str, payload: str) -> None:
        self._send(self.client.emit(name, payload))

    @property
    def live(self) -> bool:
        return self.client.phase is Phase.LIVE

    def unacked(self) -> int:
        return sum(1 for d in self.client.events if d not in self.acked)

    # -- connection ------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task  # a failure was already the caller's to see; stop regardless
        if self._writer is not None:
            self._writer.close()
        if self.store is not None:
            self.store.close()

    async def _candidates(self) -> list[tuple[str, int]]:
        if self.configs is not None:
            with contextlib.suppress(Exception):
                config, _ = await self.configs.read()
                self.epoch = config.epoch
                return [(m.host, m.port) for m in config.members]
        return self.addresses

    async def _run(self) -> None:
        while True:
            for host, port in await self._candidates():
                try:
                    reader, writer = await asyncio.open_connection(host, port)
                except OSError:
                    continue
                try:
                    await self._session(reader, writer)
                except (asyncio.IncompleteReadError, ConnectionError, OSError, OctosyncError):
                    pass  # reconnect and bootstrap again: the head forgets nothing we hold
                finally:
                    self.client.disconnect()
                    self._writer = None
                    self._outbox.clear()
                    writer.close()
                break
            await asyncio.sleep(RETRY)

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(chain_link.encode(chain_link.DeviceHello(self.epoch, self.name)))
        request = self.client.connect()
        writer.write(chain_link.encode(chain_link.FromDevice(self.epoch, request)))
        self._writer = writer
        self.connections += 1
        incoming = frames.FrameReader(reader)
        while True:
            for payload in await incoming.payloads():
                frame = self._decode(payload)
                if isinstance(frame, chain_link.Refused):
                    return
                if not isinstance(frame, chain_link.ForDevice):
                    continue
                outgoing = self.client.receive(frame.message)
                self._note_durable(frame.message)
                self._send(outgoing)
                if self.listener is not None:
                    self.listener(frame.message)
            self.changed.set()

    def _note_durable(self, message: HeadToDevice) -> None:
        """Only this message's sequencers: the client's sets grow over a whole connection."""
        if isinstance(message, DeviceNotice):
            self.acked.update(message.acked)
            self.acked.update(message.consumed)
        elif isinstance(message, StateUpdate):
            self.acked.update(message.consumed.get(self.name, ()))
        elif isinstance(message, BootstrapComplete):
            self.acked.update(message.kill)

    def _send(self, events: list[DeviceEvent]) -> None:
        """Save, then queue the events for this loop turn's one write (saved before sent)."""
        self._save()
        if self._writer is None or not events:
            return
        self._outbox.extend(chain_link.encode(chain_link.FromDevice(self.epoch, e)) for e in events)
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Everything emitted during one loop turn in one write. What a session that ended
        had queued was dropped with it: those events go out again with the next bootstrap."""
        self._flush_due = False
        outbox, self._outbox = self._outbox, []
        if self._writer is not None and outbox:
            self._writer.write(b"".join(outbox))

    def _save(self) -> None:
        if self.store is not None and self.client.version != self._saved_version:
            self.store.save(self.client.machine())
            self._saved_version = self.client.version
