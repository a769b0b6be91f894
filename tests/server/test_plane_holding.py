"""The plane with a holder (documents held by interest): a member of a document that is still
loading waits, its frames wait unapplied, and both go on, in order, once it is loaded."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from octosync.errors import DocumentUnavailable, OctosyncError
from octosync.hub.crdt_streams import CrdtStreams
from octosync.hub.types import AllowAll, ConnId
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.server.plane import Framing, Plane
from octosync.server.plane_parking import MAX_PARKED_FRAMES
from octosync.store.commit_path import WRITE, Ask, Commit

NOW = 1_000_000
DOC = "doc"


def op(peer: int, key: str, wall: int = NOW) -> CrdtOp:
    return CrdtOp(slot_id=1, stamp=WireStamp(wall, 0, peer), state=b"1", key=key)


class NoJournal:
    """The commit path of a server without a journal."""

    journaled = False

    def refuse(self, ask: Ask = WRITE) -> None:
        raise AssertionError("no journal here")

    def submit(self, commit: Commit) -> None:
        raise AssertionError("no journal here")


class Host:
    """The runtime as the plane asks it, with no journal: what it sends and whom it resets."""

    hub = None
    commits = NoJournal()

    def __init__(self) -> None:
        self.sent: list[tuple[int, CrdtSync]] = []
        self.faults: list[tuple[int, OctosyncError]] = []

    def fault(self, conn: int, err: OctosyncError) -> None:
        self.faults.append((conn, err))

    def send_now(self, conn: int, data: bytes) -> bool:
        self.sent.append((conn, msgspec.msgpack.decode(data, type=CrdtSync)))
        return True


class Holder:
    def __init__(self) -> None:
        self.loaded: set[str] = set()
        self.members: dict[int, str] = {}

    def joined(self, conn: ConnId, stream: str) -> bool:
        self.members[conn] = stream
        return stream in self.loaded

    def left(self, conn: ConnId, stream: str) -> None:
        self.members.pop(conn, None)

    def ready(self, stream: str) -> bool:
        return stream in self.loaded


def plane() -> tuple[Plane, Host, Holder]:
    host, holder = Host(), Holder()
    p = Plane(host, CrdtStreams(lambda: NOW))  # type: ignore[arg-type]
    p.holder = holder
    return p, host, holder


def join(p: Plane, conn: int, peer: int) -> None:
    state = p.core.join(conn, DOC, peer, AllowAll())
    framing = Framing("msgpack", lambda sync: msgspec.msgpack.encode(sync))
    p.join(conn, DOC, framing, state)


def ops_sent(host: Host, conn: int) -> list[CrdtOp]:
    return [o for c, sync in host.sent if c == conn for o in sync.ops]


async def test_frames_of_a_loading_document_wait_and_go_in_order_once_it_is_loaded() -> None:
    p, host, holder = plane()
    join(p, 1, peer=5)
    assert host.sent == []  # not even the state: there is none yet
    mine = [op(5, "a/lww"), op(5, "b/lww")]
    for o in mine:
        p.receive(1, CrdtSync(ops=(o,)))
    assert p.core.state_of(DOC) == ()  # nothing applied to the partial copy
    theirs = op(7, "c/lww", NOW - 5)
    p.merge_remote(DOC, [theirs], None)  # the load brings what JetStream holds
    holder.loaded.add(DOC)
    p.loaded(DOC)
    first = host.sent[0]
    assert first == (1, CrdtSync(frontier=first[1].frontier, ops=(theirs,)))  # the document
    assert set(p.core.state_of(DOC)) == {theirs, *mine}  # then its frames, checked and applied
    await asyncio.sleep(0.05)  # the plane's flush
    assert {*mine} <= set(ops_sent(host, 1))  # acknowledged
    assert host.faults == []


async def test_a_failed_load_tells_its_waiting_members_and_keeps_nothing() -> None:
    p, host, _ = plane()
    join(p, 1, peer=5)
    p.receive(1, CrdtSync(ops=(op(5, "a/lww"),)))
    p.release(DOC, failed=True)
    assert [(c, type(e)) for c, e in host.faults] == [(1, DocumentUnavailable)]
    assert DOC not in p.core.streams
    with pytest.raises(DocumentUnavailable):  # a frame still on its way is refused
        p.receive(1, CrdtSync(ops=(op(5, "b/lww"),)))
    p.leave(1)  # and the member leaves cleanly
    assert not p.core.is_member(1)


def test_frames_waiting_for_a_load_are_bounded() -> None:
    p, _, _ = plane()
    join(p, 1, peer=5)
    for i in range(MAX_PARKED_FRAMES):
        p.receive(1, CrdtSync(ops=(op(5, f"k{i}/lww"),)))
    with pytest.raises(DocumentUnavailable) as err:
        p.receive(1, CrdtSync(ops=(op(5, "over/lww"),)))
    assert err.value.path == "ops"
    assert p.core.state_of(DOC) == ()
