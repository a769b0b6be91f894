"""The server's compaction of a text's left chunks (``crdt/text_collect.py``): what goes, what
must stay, how the order is kept when a run's origin changes, and the late writes refused."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt import collect, text_collect
from octosync.crdt.plane import stamp_key
from octosync.crdt.shared import SharedState
from octosync.crdt.text import TextCrdt
from octosync.errors import ElementCollected
from octosync.hub.crdt_streams import Checked, CrdtStreams
from octosync.hub.types import AllowAll
from octosync.ipc.messages import CrdtOp, CrdtSync

DOC, TEXT = "doc", "notes"
LINE = "the quick brown fox jumps over the lazy dog. "


class Room:
    """Writers editing one text through a server core, every op delivered at once."""

    def __init__(self, *peers: int) -> None:
        self.now = 1_000
        self.server = CrdtStreams(lambda: self.now)
        self.writers = {p: SharedState(p, self.tick) for p in peers}
        for p in peers:
            self.server.join(p, DOC, p, AllowAll())

    def tick(self) -> int:
        self.now += 1
        return self.now

    def send(self, peer: int, ops: Iterable[CrdtOp], deliver: bool = True) -> None:
        ops = tuple(ops)
        self.writers[peer].receive(ops)
        self.server.commit(self.server.check(peer, CrdtSync(ops=ops)))
        if deliver:
            self.deliver()

    def deliver(self) -> None:
        for w in self.writers.values():
            w.receive(self.server.state_of(DOC))

    def insert(self, peer: int, index: int, text: str, deliver: bool = True) -> None:
        self.send(peer, self.writers[peer].text_insert(TEXT, index, text), deliver)

    def delete(self, peer: int, index: int, count: int, deliver: bool = True) -> None:
        self.send(peer, self.writers[peer].text_delete(TEXT, index, count), deliver)

    def text(self, peer: int) -> str:
        return str(self.writers[peer].text_of(TEXT))

    def report_all(self) -> None:
        for p, w in self.writers.items():
            self.server.report(p, w.replica.frontier())

    def collect(self) -> list[CrdtOp]:
        """Everyone reports, the server collects and everyone takes the rewrites."""
        self.report_all()
        ops = self.server.collect(DOC)
        if ops:
            self.server.commit(Checked(0, DOC, tuple(ops)))
            self.deliver()
        return ops


def fold(ops: Iterable[CrdtOp]) -> SharedState:
    """A late joiner holding ``ops``."""
    state = SharedState(99, lambda: 0)
    state.receive(tuple(ops))
    return state


def join_in_frames(ops: Iterable[CrdtOp], size: int) -> str:
    """What a late joiner shows once it took ``ops`` in key order, ``size`` ops a frame (runs
    may come before their origins, deletions before their characters)."""
    held = sorted(ops, key=lambda op: op.key or "")
    state = SharedState(98, lambda: 0)
    for i in range(0, len(held), size):
        state.receive(tuple(held[i : i + size]))
    return str(state.text_of(TEXT))


def typed(ops: Iterable[CrdtOp]) -> int:
    """Characters the run entries hold, deleted ones included."""
    return sum(
        len(run[1])
        for op in ops
        if f"{TEXT}/tx/" in (op.key or "")
        for run in json.loads(op.state)  # type: ignore[arg-type]
    )


def test_a_text_typed_at_its_end_and_trimmed_at_its_start_keeps_only_its_text() -> None:
    room = Room(1, 2)
    for i in range(30):  # each line names the line before as its origin
        room.insert(1, len(room.text(1)), f"{i:02} {LINE}")
        if i >= 2:
            room.delete(2, 0, len(f"{i:02} {LINE}"))
    final = room.text(1)
    assert typed(room.server.state_of(DOC)) == 30 * len(f"00 {LINE}")
    rewrites = room.collect()
    assert rewrites
    assert all(op.stamp.peer == collect.SERVER_PEER for op in rewrites)
    held = room.server.state_of(DOC)
    # each removed line's successor now names what the removed line named: only the live
    # text and the writer's open chunk (at most 63 clocks of it) are left
    assert typed(held) <= len(final) + 63
    assert str(fold(held).text_of(TEXT)) == room.text(1) == room.text(2) == final
    assert join_in_frames(held, 2) == final  # the deletions come before their characters
    for w in room.writers.values():
        assert w.text_of(TEXT).crdt.tombstones() <= 63
    room.insert(2, 3, "and more ")  # edits go on, on the compacted text
    room.delete(1, 0, 2)
    assert room.text(1) == room.text(2) == str(fold(room.server.state_of(DOC)).text_of(TEXT))


def test_a_word_deleted_inside_a_run_goes_and_the_rest_of_the_run_names_what_preceded_it() -> None:
    room = Room(1, 2)
    room.insert(1, 0, "the quick brown fox jumps over the lazy dog and runs away from it")
    room.insert(1, len(room.text(1)), " " + LINE)  # into a second chunk: the first is left
    room.delete(2, 4, 6)  # "quick " from the middle of the first run
    room.delete(1, 29, 5)  # "lazy " too, by the other writer
    want = room.text(1)
    assert room.collect()
    held = room.server.state_of(DOC)
    state = next(op.state for op in held if op.key == f"{TEXT}/tx/1/0")
    rows = json.loads(state)  # type: ignore[arg-type]
    assert [row[1] for row in rows] == [
        "the ",
        "brown fox jumps over the ",
        "dog and runs away from ",
    ]
    assert [row[2:] for row in rows] == [[0, 0], [1, 4], [1, 35]]  # each names what preceded
    assert typed(held) == len(want)  # the deleted words went
    assert str(fold(held).text_of(TEXT)) == want == room.text(2)
    assert join_in_frames(held, 1) == want


def test_nothing_goes_until_every_member_has_seen_the_deletion() -> None:
    room = Room(1, 2)
    room.insert(1, 0, LINE * 2)
    room.insert(1, len(room.text(1)), LINE)  # a second chunk: the first one is left
    room.delete(1, 53, 10, deliver=False)  # the end of chunk 0: peer 2 has not seen it
    room.server.report(1, room.writers[1].replica.frontier())
    room.server.report(2, room.writers[2].replica.frontier())
    assert room.server.collect(DOC) == []
    room.deliver()
    assert room.collect() != []


def test_a_writers_open_chunk_is_left_as_it_is() -> None:
    room = Room(1, 2)
    room.insert(1, 0, "hello world")  # all of it in the writer's first chunk
    room.delete(1, 5, 6)
    assert room.collect() == []
    assert room.writers[1].text_of(TEXT).crdt.tombstones() == 6


def test_a_deletion_named_by_a_run_in_an_open_chunk_stays() -> None:
    room = Room(1, 2)
    room.insert(1, 0, "a" * 60)
    room.insert(2, 60, "ta")  # (2, 61..62): peer 2's open chunk names the last a
    room.insert(1, 0, "b" * 10)  # peer 1 moves past its first chunk
    room.delete(1, 10, 60)
    room.collect()
    held = room.server.state_of(DOC)
    assert str(fold(held).text_of(TEXT)) == "b" * 10 + "ta" == room.text(2)
    tx = {op.key: json.loads(op.state) for op in held if "/tx/1/0" in (op.key or "")}
    # the a that "ta" names stays, and the a's before it (each names the one before)
    assert tx[f"{TEXT}/tx/1/0"][0][1] == "a" * 60


def test_a_greater_sibling_of_the_start_keeps_a_collected_runs_heir_in_place() -> None:
    room = Room(10, 11)
    room.insert(10, 0, "b", deliver=False)  # (10, 1) under the start
    room.insert(11, 0, "aaa", deliver=False)  # (11, 1..3): a greater sibling, ordered first
    room.deliver()
    assert room.text(10) == "aaab"
    room.insert(10, 4, "c" * 70)  # (10, 4..): a run of its own naming b, into a second chunk
    room.delete(10, 3, 1)  # b goes: "c..." would name the start if b were collected
    before = room.text(10)
    room.collect()
    held = room.server.state_of(DOC)
    assert str(fold(held).text_of(TEXT)) == before == room.text(11)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([1, 2, 3]),
            st.booleans(),
            st.integers(0, 400),
            st.sampled_from(["x", "yz", LINE]),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_collection_never_changes_the_text_and_the_entries_fold_to_it(
    steps: list[tuple[int, bool, int, str, bool]],
) -> None:
    room = Room(1, 2, 3)
    for peer, typing, at, word, collect_now in steps:
        n = len(room.text(peer))
        if typing or not n:
            room.insert(peer, at % (n + 1), word, deliver=False)
        else:
            room.delete(peer, at % n, min(len(word), n - at % n), deliver=False)
        if collect_now:
            room.deliver()
            before = room.text(peer)
            room.collect()
            assert str(fold(room.server.state_of(DOC)).text_of(TEXT)) == before
    room.deliver()
    room.collect()
    texts = {room.text(p) for p in room.writers}
    held = room.server.state_of(DOC)
    assert texts == {str(fold(held).text_of(TEXT))}
    assert texts == {join_in_frames(held, 1), join_in_frames(held, 3)}


# --- late writes ----------------------------------------------------------------------------


def _compacted_room() -> tuple[Room, CrdtOp]:
    room = Room(1, 2)
    room.insert(1, 0, "a" * 63)  # clocks 1..63: all of chunk 0
    room.insert(1, 63, "b" * 64)  # chunk 1
    room.insert(1, 127, "c")  # chunk 2: chunks 0 and 1 are left
    stale = next(op for op in room.server.state_of(DOC) if op.key == f"{TEXT}/tx/1/0")
    room.delete(2, 0, 63)
    assert room.collect()
    return room, stale


def test_a_write_over_a_compacted_chunk_is_refused() -> None:
    room, stale = _compacted_room()
    forged = CrdtOp(
        slot_id=stale.slot_id,
        stamp=room.writers[1].stamp(),
        state=stale.state,
        key=stale.key,
    )
    with pytest.raises(ElementCollected) as err:
        room.server.check(1, CrdtSync(ops=(forged,)))
    assert err.value.path == "ops[0].key"
    room.server.check(1, CrdtSync(ops=(stale,)))  # a resend of what was accepted is not


def test_a_run_naming_a_collected_character_is_refused() -> None:
    room, stale = _compacted_room()
    late = CrdtOp(
        slot_id=stale.slot_id,
        stamp=room.writers[2].stamp(),
        state=json.dumps([[200, "late", 1, 5]]).encode(),
        key=f"{TEXT}/tx/2/3",
    )
    with pytest.raises(ElementCollected) as err:
        room.server.check(2, CrdtSync(ops=(late,)))
    assert err.value.path == "ops[0].state[0]"
    ok = CrdtOp(
        slot_id=stale.slot_id,
        stamp=room.writers[2].stamp(),
        state=json.dumps([[200, "fine", 1, 65]]).encode(),  # the b that stays
        key=f"{TEXT}/tx/2/3",
    )
    room.server.check(2, CrdtSync(ops=(ok,)))


def test_rewrites_are_stamped_above_what_they_replace_and_each_other() -> None:
    room = Room(1, 2)
    for _i in range(6):
        room.insert(1, len(room.text(1)), LINE)
        room.delete(2, 0, len(LINE) // 2)
    held = {op.key: op for op in room.server.state_of(DOC)}
    rewrites = room.collect()
    stamps = [stamp_key(op.stamp) for op in rewrites]
    assert len(set(stamps)) == len(stamps)
    assert all(stamp_key(op.stamp) > stamp_key(held[op.key].stamp) for op in rewrites)
    assert {op.key for op in rewrites} <= set(held)
    assert all(text_collect.is_rewrite(op) for op in rewrites)


# --- a replica taking a rewrite --------------------------------------------------------------


def test_a_replica_drops_what_a_rewrite_lacks_and_reports_a_visible_one() -> None:
    crdt = TextCrdt(5)
    crdt.integrate_sorted([(1, 7, "hello", 0, 0)])
    crdt.remove([(7, 1, 2)])  # "he" deleted
    edits = crdt.compact(7, 0, [(3, 2)])  # the server keeps "ll", the rest goes
    assert str(crdt) == "ll"
    assert crdt.tombstones() == 0
    assert [(e.index, e.delete, e.insert) for e in edits] == [(2, 1, "")]  # the visible o


def test_a_deletion_of_a_collected_character_is_not_kept_for_later() -> None:
    crdt = TextCrdt(5)
    crdt.integrate_sorted([(1, 7, "abc", 0, 0)])
    crdt.remove([(7, 1, 3)])
    crdt.compact(7, 0, [])
    crdt.remove([(7, 1, 3)])  # a deletion entry naming them comes again
    crdt.integrate_sorted([(10, 8, "z", 0, 0)])
    assert str(crdt) == "z"
    assert crdt._tombs == {}


def joiner_before_origins() -> tuple[list[CrdtOp], str]:
    """A compacted chunk whose kept runs wait, at a joiner taking entries one at a time in key
    order, for origins of a later entry, while the deletions came first: among them, those of
    kept characters (a tombstone a kept character names) must still apply when they land."""
    room = Room(1, 2)
    room.insert(2, 0, "xy")  # (2, 1..2): the entry t/tx/2/0 comes last in key order
    room.insert(1, 1, "A" * 60)  # (1, 3..62) after x
    room.insert(1, 62, "B" * 10)  # (1, 63..72) after y: chunk 0 is left
    room.delete(2, 11, 3)  # A's inside the run: kept (the next A names them)
    room.delete(1, 56, 5)  # the run's last 5 A's: nothing names them, they go
    want = room.text(1)
    assert room.collect()
    held = room.server.state_of(DOC)
    assert [op.key for op in held if text_collect.is_rewrite(op)] == [f"{TEXT}/tx/1/0"]
    return held, want


def test_a_joiner_taking_a_compacted_chunk_before_its_origins_keeps_its_deletions() -> None:
    held, want = joiner_before_origins()
    assert join_in_frames(held, 1) == want
