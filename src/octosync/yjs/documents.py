"""The ``/yjs`` face's documents, sans-I/O: pycrdt ``Doc``s, their members and the sync rules.

A document holds only committed updates. A member's update is checked here (membership, the
write grant, the size limit, and pycrdt reading it on a scratch document, so a malformed
update never touches the real one), journaled by the caller, and only then ``commit``ted:
applied and fanned out to the other members. So what any peer is sent, and what a step 2
answers with, is what a restarted server has. Members are keyed by ``(connection,
document)``: a Hocuspocus socket joins many documents, each under its own address, whose
bytes (``prefix``) go before every body sent there; y-websocket's prefix is empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from pycrdt import Doc

from octosync.errors import MalformedYjsMessage, ReadOnlyDocument, YjsUpdateTooLarge
from octosync.yjs import messages as m
from octosync.yjs.awareness import DocumentAwareness, decode_entries, encode_entries
from octosync.yjs.encoding import Reader


class Limits(msgspec.Struct, frozen=True):
    """What one message may carry (``max_update_bytes``: an update or step 2)."""

    max_update_bytes: int = 1 << 20
    max_state_bytes: int = 16 << 10
    """One awareness state's JSON."""
    max_awareness_entries: int = 64
    max_clients: int = 8
    """Awareness clients one connection speaks for, per document."""


class Out(msgspec.Struct, frozen=True):
    """``body`` to ``conns``, each under its own prefix for ``document``."""

    document: str
    conns: tuple[int, ...]
    body: bytes


class Checked(msgspec.Struct, frozen=True):
    """An update that may be journaled and then committed."""

    document: str
    conn: int
    update: bytes


@dataclass(slots=True)
class Member:
    prefix: bytes
    can_write: bool


@dataclass(slots=True)
class Document:
    doc: Doc[Any] = field(default_factory=Doc)
    members: dict[int, Member] = field(default_factory=dict)
    awareness: DocumentAwareness = field(default_factory=DocumentAwareness)
    updates: int = 0
    """Updates committed since the server started (the inspector lists it)."""

    def others(self, conn: int) -> tuple[int, ...]:
        return tuple(c for c in self.members if c != conn)


def check_count(data: bytes, per_entry: int, path: str) -> None:
    """The leading count of an update (its clients) or a state vector (its entries) fits the
    bytes that follow, ``per_entry`` at least each. Yrs sizes a table by that count before it
    reads a byte more: five bytes claiming 2^28 clients cost half a gigabyte and half a
    second, so it is refused here first."""
    reader = Reader(data)
    n = reader.var_uint(path)
    if n * per_entry > len(data) - reader.at:
        raise MalformedYjsMessage(
            f"{n} entries announced in {len(data) - reader.at} bytes", path=path
        )


def read_update(update: bytes, path: str = "$.update") -> None:
    """pycrdt reads ``update`` (on a scratch document), or ``MalformedYjsMessage``."""
    check_count(update, 3, path)  # each client: its struct count, id and clock
    try:
        Doc().apply_update(update)
    except Exception as exc:  # pycrdt raises ValueError; anything it raises is a refusal
        raise MalformedYjsMessage(f"not a Yjs update: {exc}", path=path) from None


class YjsDocuments:
    """Every document the face serves, by name."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.documents: dict[str, Document] = {}
        self.replica_position = 0
        """In a cluster: the Yjs op stream's sequence the journal holds updates through."""

    def document(self, name: str) -> Document:
        found = self.documents.get(name)
        if found is None:
            found = self.documents[name] = Document(
                awareness=DocumentAwareness(max_clients=self.limits.max_clients)
            )
        return found

    # -- membership --------------------------------------------------------------------------

    def join(self, conn: int, name: str, prefix: bytes, *, can_write: bool) -> None:
        self.document(name).members[conn] = Member(prefix, can_write)

    def is_member(self, conn: int, name: str) -> bool:
        doc = self.documents.get(name)
        return doc is not None and conn in doc.members

    def prefix(self, conn: int, name: str) -> bytes:
        return self.documents[name].members[conn].prefix

    def leave(self, conn: int, name: str) -> list[Out]:
        """``conn`` left ``name``: its awareness clients' removals go to the others."""
        doc = self.documents.get(name)
        if doc is None or doc.members.pop(conn, None) is None:
            return []
        gone = doc.awareness.leave(conn)
        if not gone or not doc.members:
            return []
        return [Out(name, tuple(doc.members), m.awareness(encode_entries(gone)))]

    # -- sync ----------------------------------------------------------------------------------

    def state_vector(self, name: str) -> bytes:
        return self.document(name).doc.get_state()

    def answer_step1(self, name: str, state_vector: bytes) -> bytes:
        """Step 2: the whole of what the peer lacks, as one update (a late joiner's state)."""
        check_count(state_vector, 2, "$.state_vector")  # each entry: a client and a clock
        try:
            update: bytes = self.document(name).doc.get_update(state_vector)
        except Exception as exc:
            raise MalformedYjsMessage(f"not a state vector: {exc}", path="$.state_vector") from None
        return m.sync_step2(update)

    def check(self, conn: int, name: str, update: bytes) -> Checked | None:
        """An update ``conn`` sent on ``name``, checked; None when it carries nothing (an
        empty step 2), so there is nothing to journal."""
        member = self.documents[name].members[conn]
        if update == m.EMPTY_UPDATE:
            return None
        if not member.can_write:
            raise ReadOnlyDocument(f"{name!r} is read-only for this connection", path="$.update")
        limit = self.limits.max_update_bytes
        if len(update) > limit:
            raise YjsUpdateTooLarge(
                f"an update of {len(update)} bytes, at most {limit}", path="$.update"
            )
        read_update(update)
        return Checked(name, conn, update)

    def commit(self, checked: Checked) -> list[Out]:
        """Journaled: apply, and send to every other member of the document."""
        doc = self.document(checked.document)
        doc.doc.apply_update(checked.update)
        doc.updates += 1
        others = doc.others(checked.conn)
        if not others:
            return []
        return [Out(checked.document, others, m.sync_update(checked.update))]

    def apply_remote(self, name: str, update: bytes) -> list[Out]:
        """An update another node of the cluster accepted (checked there): applied and sent
        to every member here. Applying it again changes nothing (Yjs updates are
        idempotent)."""
        doc = self.document(name)
        try:
            doc.doc.apply_update(update)
        except Exception as exc:
            raise MalformedYjsMessage(f"not a Yjs update: {exc}", path="$.update") from None
        doc.updates += 1
        if not doc.members:
            return []
        return [Out(name, tuple(doc.members), m.sync_update(update))]

    def docs(self) -> dict[str, Doc[Any]]:
        """Every document's pycrdt ``Doc``, by name (the cluster's anti-entropy reads them)."""
        return {name: d.doc for name, d in self.documents.items()}

    def restore(self, name: str, updates: Iterable[bytes]) -> None:
        """At start-up: the journal's updates of ``name`` (merges commute)."""
        doc = self.document(name).doc
        for update in updates:
            doc.apply_update(update)

    # -- awareness -----------------------------------------------------------------------------

    def awareness(self, conn: int, name: str, payload: bytes) -> list[Out]:
        """``conn``'s awareness update: what changed goes to the document's other members."""
        limits = self.limits
        entries = decode_entries(
            payload,
            max_state_bytes=limits.max_state_bytes,
            max_entries=limits.max_awareness_entries,
        )
        doc = self.documents[name]
        taken = doc.awareness.apply(conn, entries)
        others = doc.others(conn)
        if not taken or not others:
            return []
        return [Out(name, others, m.awareness(encode_entries(taken)))]

    def awareness_states(self, name: str) -> bytes | None:
        """Every awareness state of ``name`` as one message body (None: there are none)."""
        states = self.document(name).awareness.states()
        return m.awareness(encode_entries(states)) if states else None

    def stateless(self, conn: int, name: str, payload: str) -> list[Out]:
        """Hocuspocus's stateless string: relayed to the document's other Hocuspocus
        connections (y-websocket has no such message), never part of the document."""
        doc = self.documents[name]
        others = tuple(c for c, member in doc.members.items() if c != conn and member.prefix)
        return [Out(name, others, m.stateless(payload))] if others else []
