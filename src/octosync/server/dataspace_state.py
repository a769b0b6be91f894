"""The ``/dataspace`` face's state: the Syndicate relay (made on first use, with the server's
sturdy-ref secret) and each connection's transport framing; the dataspace sessions' port
(``server.ports.DataspacePort``), on the WebSocket and the TCP face alike. What the
dataspaces took is journaled through the one commit path (``store.dataspace_hook``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from octosync.errors import OctosyncError
from octosync.server.dataspace_key import load_or_create_secret
from octosync.server.face_names import FaceName
from octosync.server.runtime import Runtime
from octosync.server.served_state import ServedFaceState
from octosync.store.commit_path import Commit
from octosync.store.dataspace_hook import dataspace_records
from octosync.syndicate import Relay

log = logging.getLogger(__name__)


class DataspaceState(ServedFaceState):
    def __init__(self, rt: Runtime) -> None:
        super().__init__(rt)
        self._relay: Relay | None = None
        self.relay_framing: dict[int, Callable[[bytes], bytes]] = {}
        """Each dataspace connection's transport framing (WebSocket message or raw TCP)."""

    @property
    def relay(self) -> Relay:
        """The relay, made with the server's sturdy-ref secret on first use."""
        if self._relay is None:
            config = self.rt.config
            secret = config.dataspace_secret
            if secret is None:
                secret = load_or_create_secret(config.data_dir)
            self._relay = Relay(secret, record=self.rt.journaled)
        return self._relay

    def started_relay(self) -> Relay | None:
        """The relay if the face has been used (the inspector lists it); never creates it
        (that would make the sturdy-ref key file)."""
        return self._relay

    def check_activity_room(self) -> None:
        """Before a turn: refuse it while the journal could not record what it does (the
        storage rules: ``JournalUnavailable``, a full queue, ...)."""
        self.rt.commits.refuse()

    def record_activity(self) -> None:
        """Queue what the dataspaces took since the last call to the journal (not waited for);
        a close's retractions cannot be refused, so a full queue loses those notes only."""
        relay, commits = self._relay, self.rt.commits
        if relay is None or not commits.journaled:
            return
        taken = relay.take_activity()
        if taken:
            try:
                commits.submit(Commit(0, dataspace_records(taken, self.rt.run)))
            except OctosyncError as exc:
                log.warning("dataspace activity not journaled: %s", exc)


def dataspace_state(rt: Runtime) -> DataspaceState:
    return rt.face_state(FaceName.DATASPACE, DataspaceState)
