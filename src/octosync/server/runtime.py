"""The loop plumbing every face shares: the hub, the flusher, the commit path, connections.

The hub stays here because several faces share it (lazily and WVP streams, the TopGun face's
``map:`` streams, the shared documents' fan-out, the cluster's stand-ins). Everything one face
owns (TopGun's core, the shared documents, the Yjs documents, the relay, the rooms) is that
face's state (``server.face_state``), made by its declaration in ``server.faces`` through
``face_state``; sessions see a narrow port (``server.ports``), never the runtime itself."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

from octosync.cluster.core import ClusterCore
from octosync.hub import Hub
from octosync.hub.policy import CLOSE_GOING_AWAY
from octosync.hub.types import AcceptHook, InterestHook, Recorder, ReleaseHook
from octosync.server.auth import ClaimGrants, authenticate
from octosync.server.commit import Committer
from octosync.server.config import ServerConfig
from octosync.server.counters import probe_lag
from octosync.server.durable_acks import DurableAcks
from octosync.server.face_names import FaceName
from octosync.server.face_state import FaceState
from octosync.server.guard import ConnectionGuard, default_max_connections
from octosync.server.live_connections import LiveConnections
from octosync.server.view_encoders import view_encoders
from octosync.store.journal import GroupCommitWriter
from octosync.store.storage_rules import rules_for

S = TypeVar("S", bound=FaceState)


class Runtime(LiveConnections):
    def __init__(
        self,
        config: ServerConfig,
        on_accept: AcceptHook | None = None,
        recorder: Recorder | None = None,
        on_release: ReleaseHook | None = None,
        on_interest: InterestHook | None = None,
        writer: GroupCommitWriter | None = None,
        *,
        node_id: str | None = None,
    ) -> None:
        """``writer``: the journal's (None: no journal); ``node_id``: this node's id in a
        cluster (faces stamp with it: servers of one cluster must never stamp alike)."""
        self.config, self.writer, self.node_id = config, writer, node_id
        self.durable = DurableAcks()
        self.durable_listeners = self.durable.listeners
        rules = () if writer is None else rules_for(writer, config.data_dir, config.storage)
        self.commits = Committer(writer, rules, self._fault, self.durable.send)
        """The one commit path every face's writes take (``server.commit``)."""
        self.run = f"{time.time_ns() // 1_000_000:x}"
        """Names this server run in journaled connection names (``<run>.<connection>``)."""
        self.limits = config.limits()
        self.hub = Hub(
            config.hub_config(),
            clock=time.monotonic,
            encoders=view_encoders(),
            on_accept=on_accept,
            on_release=on_release,
            on_interest=on_interest,
            recorder=recorder,
        )
        super().__init__(self.hub, config.socket_high_water)
        self.guard = ConnectionGuard(
            max_total=default_max_connections(config.max_connections),
            max_per_address=config.max_connections_per_address,
        )
        self.closing = False
        self.cluster: ClusterCore | None = None
        """The cluster's core when the server joined one (``--cluster``)."""
        self._ids = itertools.count(1)
        self._states: dict[FaceName, FaceState] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def max_frame(self) -> int:
        return self.limits.max_frame_bytes

    @property
    def journaled(self) -> bool:
        return self.writer is not None

    def authenticate(self, token: str | None) -> ClaimGrants:
        return authenticate(token, self.config.auth)

    def face_state(self, face: FaceName, make: Callable[[Runtime], S]) -> S:
        """A face's own state (``Face.state``), made by ``make`` on first use and kept."""
        state = self._states.get(face)
        if state is None:
            state = self._states[face] = make(self)
        return cast(S, state)

    def states(self) -> Sequence[FaceState]:
        """Every face's state made so far, in the order they were made."""
        return tuple(self._states.values())

    def follow(self, stream: str) -> None:
        """A lazily client subscribes to ``stream``: the face producing it starts now."""
        for state in self.states():
            state.follow(stream)

    def new_conn_id(self) -> int:
        return next(self._ids)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._tick()), loop.create_task(probe_lag(self.counters))]

    async def _tick(self) -> None:
        """Once a second: the hub's expiry, then each face's ``tick``."""
        while True:
            await asyncio.sleep(1.0)
            self.hub.expire()
            for state in self.states():
                state.tick()

    async def shutdown(self) -> None:
        """Stop taking work, flush until ``shutdown_deadline``, ask everyone to close, abort
        who is still open ``close_timeout`` later (a stuck reader cannot hold the process),
        then close each face's state."""
        self.closing = True
        for task in self._tasks:
            task.cancel()
        loop, flusher = asyncio.get_running_loop(), self.flusher
        deadline = loop.time() + self.config.shutdown_deadline
        flusher.flush_all()
        while flusher.pending() and loop.time() < deadline:
            await asyncio.sleep(0.01)
            flusher.flush_all()
        links = list(self.links.values())
        for link in links:
            link.close_soon(CLOSE_GOING_AWAY)
        deadline = loop.time() + self.config.close_timeout
        while any(not link.transport.is_closing() for link in links) and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for link in links:
            if not link.transport.is_closing():
                link.abort()
        for state in self.states():
            state.close()
