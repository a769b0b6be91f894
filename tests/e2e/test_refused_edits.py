"""An edit the server refuses over a real socket: the Python client drops it from pending
(``synced()`` resolves), tells the application, and undoes it locally, while the edits around
it are kept."""

from __future__ import annotations

from pathlib import Path

from octosync.client.shared import SharedDocument
from octosync.errors import Forbidden, OctosyncError
from tests.e2e.helpers import TIMEOUT, spawn_server


async def test_a_refused_edit_is_dropped_reported_and_undone(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as srv:
        doc = SharedDocument(srv.url, "refused", peer=5)
        told: list[OctosyncError] = []
        doc.on_error(told.append)
        async with doc:
            await doc.synced(TIMEOUT)
            clicks = doc.counter("clicks")
            clicks.add(1)
            # another peer's counter entry, forged: the server refuses its frame (Forbidden)
            forged = doc.cells.state._write("clicks", "pn/6", [7, 0])
            doc.cells._local_many("clicks", (forged,))
            clicks.add(1)
            assert clicks.value == 9  # applied locally at once, as every edit is
            await doc.synced(TIMEOUT)  # not pending forever
            assert [(type(e), e.path) for e in told] == [(Forbidden, "ops[0].key")]
            assert clicks.value == 2  # undone: the local copy is the server's
            assert doc.connected
        async with SharedDocument(srv.url, "refused") as reader:
            await reader.synced(TIMEOUT)
            assert reader.counter("clicks").value == 2  # both real clicks kept
