"""The ``/yjs`` face over a real journal file, as a hypothesis state machine.

Several pycrdt clients edit a ``Y.Text`` and a ``Y.Map``; their updates reach the face
interleaved across clients in any order, and any update already sent may come again; commits
land when the machine says; the server is restarted (every record
the writer had is committed, the rest of the face is rebuilt from the journal) and compacted.
One client's own updates arrive in the order it made them the first time (a WebSocket is
ordered; Yrs keeps an update with a gap before it pending, and which of two such sets a
document shows can depend on the order they came in, so a model could not predict it).
Always: the server's document equals the merge of every update it confirmed (after a restart:
of every update it committed), and nothing a client was told is lost.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pycrdt import Doc, Map, Text

from octosync.server.yjs_face import YjsFace
from octosync.store.commit_path import WRITE, Ask, Commit
from octosync.store.journal import GroupCommitWriter, Journal
from octosync.store.yjs_compaction import compact_yjs, restore_yjs
from octosync.yjs import messages as m
from octosync.yjs.encoding import Reader

CLIENTS = 3
NAME = "doc"


def ws_payload(frame: bytes) -> bytes:
    """The payload of one unmasked server frame."""
    n = frame[1] & 0x7F
    start = 2 if n < 126 else 4 if n == 126 else 10
    return frame[start:]


class Host:
    """The runtime as the face sees it, over a real ``GroupCommitWriter``: commits are
    submitted at once and land (their ``then`` called, in order) when the machine says."""

    run = "machine"
    max_frame = 1 << 20

    def __init__(self, data: Path) -> None:
        self.writer: GroupCommitWriter | None = GroupCommitWriter(data, durability="normal")
        self.pending: list[tuple[concurrent.futures.Future[list[int]], Commit]] = []
        self.inbox: dict[int, list[bytes]] = {c: [] for c in range(CLIENTS)}

    @property
    def commits(self) -> Host:
        """The commit path as the face sees it: this host, over the real writer."""
        return self

    journaled = True

    def refuse(self, ask: Ask = WRITE) -> None:
        """The journal is healthy and its queue unbounded here: nothing is refused."""

    def submit(self, commit: Commit) -> None:
        assert self.writer is not None
        self.pending.append((self.writer.submit_encoded(commit.records, block=False), commit))

    def deliver(self, conn: int, *data: bytes) -> None:
        self.inbox[conn].append(ws_payload(b"".join(data)))

    def land(self) -> None:
        pending, self.pending = self.pending, []
        for future, commit in pending:
            future.result()
            for effect in commit.after:
                effect()


def state_vector(doc: Doc[Any]) -> dict[int, int]:
    """The state vector as client -> clock (its encoding's order is not canonical)."""
    reader = Reader(doc.get_state())
    return {
        reader.var_uint("client"): reader.var_uint("clock") for _ in range(reader.var_uint("n"))
    }


def view(doc: Doc[Any]) -> tuple[str, dict[str, Any], dict[int, int]]:
    return str(doc.get("text", type=Text)), doc.get("map", type=Map).to_py(), state_vector(doc)


def merged(updates: list[bytes]) -> Doc[Any]:
    doc: Doc[Any] = Doc()
    for update in updates:
        doc.apply_update(update)
    return doc


class YjsFaceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="yjs-machine-"))
        self.clients: list[Doc[Any]] = [Doc(client_id=c + 1) for c in range(CLIENTS)]
        self.network: list[list[bytes]] = [[] for _ in range(CLIENTS)]
        self.sent: list[tuple[int, bytes]] = []
        self.confirmed: list[bytes] = []
        self._open()

    def _open(self) -> None:
        self.host = Host(self.dir)
        self.face = YjsFace(self.host)
        assert self.host.writer is not None
        restore_yjs(self.host.writer.journal, self.face.core)
        for conn in range(CLIENTS):
            self.face.core.join(conn, NAME, b"", can_write=True)

    @rule(
        client=st.integers(0, CLIENTS - 1),
        at=st.integers(0, 50),
        text=st.text("abc", min_size=1, max_size=3),
        key=st.sampled_from(["x", "y", "z"]),
        delete=st.booleans(),
    )
    def edit(self, client: int, at: int, text: str, key: str, delete: bool) -> None:
        doc = self.clients[client]
        before = doc.get_state()
        body = doc.get("text", type=Text)
        if delete and len(body) > 0:
            del body[at % len(body)]
        else:
            body.insert(at % (len(body) + 1), text)
        doc.get("map", type=Map)[key] = f"{client}{text}"
        self.network[client].append(doc.get_update(before))

    @rule(client=st.integers(0, CLIENTS - 1))
    def deliver(self, client: int) -> None:
        """A client's next update reaches the server."""
        if self.network[client]:
            update = self.network[client].pop(0)
            self.sent.append((client, update))
            self.face.update(client, NAME, update, lambda: self.confirmed.append(update))

    @precondition(lambda self: self.sent)
    @rule(data=st.data())
    def deliver_again(self, data: st.DataObject) -> None:
        """An update already sent comes again (a provider resending after a reconnect)."""
        client, update = data.draw(st.sampled_from(self.sent))
        self.face.update(client, NAME, update, lambda: self.confirmed.append(update))

    @rule()
    def commits_land(self) -> None:
        self.host.land()

    @rule(client=st.integers(0, CLIENTS - 1))
    def receive(self, client: int) -> None:
        for body in self.host.inbox[client]:
            message = m.decode_y_websocket(body)
            assert isinstance(message, m.SyncUpdate)
            self.clients[client].apply_update(message.update)
        self.host.inbox[client].clear()

    @rule()
    def restart(self) -> None:
        """Everything submitted is committed by the close; what landed nowhere but committed
        is the server's now too (nobody was told, nobody is owed it)."""
        writer = self.host.writer
        assert writer is not None
        pending = self.host.pending
        writer.close()
        for future, _ in pending:
            future.result()  # committed by the close
        self._open()
        # each in-flight update is durable: applied to the confirmed model by its record
        self.confirmed = list(self._journaled())

    def _journaled(self) -> list[bytes]:
        from octosync.store.yjs_compaction import yjs_updates

        with Journal(self.dir) as journal:
            return list(yjs_updates(journal, NAME, journal.latest_seq()))

    @rule()
    def compact(self) -> None:
        with Journal(self.dir) as journal:
            compact_yjs(journal, min_records=2)

    @invariant()
    def the_server_holds_the_merge_of_what_it_confirmed(self) -> None:
        assert view(self.face.core.document(NAME).doc) == view(merged(self.confirmed))

    @invariant()
    def every_confirmed_update_is_in_the_journal(self) -> None:
        journaled = self._journaled()
        assert view(merged(journaled)) == view(merged([*journaled, *self.confirmed]))

    def teardown(self) -> None:
        if self.host.writer is not None:
            self.host.writer.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TestYjsFaceMachine = YjsFaceMachine.TestCase
