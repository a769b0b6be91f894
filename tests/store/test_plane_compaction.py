"""Compacting shared documents' journal history: a restart merges to the same state, seqs are
never reused, and the history shrinks to the document's entries."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.crdt.plane import PlaneReplica
from octosync.crdt.shared import SharedState
from octosync.hub.crdt_streams import CrdtStreams
from octosync.hub.types import AllowAll
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.store.journal import Journal
from octosync.store.plane_compaction import (
    CHUNK,
    compact_planes,
    compact_stream,
    plane_records,
)
from octosync.store.records import KIND_PLANE, PlaneOps
from octosync.store.recovery import JournalState, restore_planes
from octosync.store.retention import JournalKeeper

STREAMS = ("doc", "other")


def frame_ops(peer: int, wall: int, keys: list[str], value: int) -> tuple[CrdtOp, ...]:
    return tuple(
        CrdtOp(slot_id=7, stamp=WireStamp(wall, 0, peer), state=b"%d" % value, key=key)
        for key in keys
    )


class CompactedJournal(RuleBasedStateMachine):
    """Writers' frames are journaled; compaction runs at any point; a restart (the journal
    closed and opened again, every plane merged back) must equal merging every frame ever
    accepted, as a replica that never restarted would."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="plane-compaction-"))
        self.journal = Journal(self.dir)
        self.model = {s: PlaneReplica() for s in STREAMS}
        self.used_seqs: set[int] = set()
        self.wall = 1

    def teardown(self) -> None:
        self.journal.close()

    @rule(
        stream=st.sampled_from(STREAMS),
        peer=st.integers(1, 4),
        keys=st.lists(st.sampled_from(["a/lww", "b/pn/1", "c/map/x", "c/map/y"]), min_size=1),
        value=st.integers(0, 9),
        later=st.booleans(),
    )
    def write(self, stream: str, peer: int, keys: list[str], value: int, later: bool) -> None:
        self.wall += later
        ops = frame_ops(peer, self.wall, sorted(set(keys)), value)
        seqs = self.journal.append([PlaneOps(stream, ops)])
        assert not self.used_seqs & set(seqs), "a seq was used twice"
        self.used_seqs.update(seqs)
        self.model[stream].merge(ops)

    @rule(stream=st.sampled_from(STREAMS))
    def compact(self, stream: str) -> None:
        latest = self.journal.latest_seq()
        before = self.journal.count_scoped(KIND_PLANE, stream)
        removed = compact_stream(self.journal, stream)
        after = self.journal.count_scoped(KIND_PLANE, stream)
        assert removed == before
        entries = len(self.model[stream])
        assert after == -(-entries // CHUNK)  # one record per chunk of entries
        rows = self.journal.scoped_rows(KIND_PLANE, stream, 1, 2**62)
        assert all(row.seq > latest for row in rows)  # new seqs, never reused ones
        self.used_seqs.update(row.seq for row in rows)

    @rule()
    def restart(self) -> None:
        self.journal.close()
        self.journal = Journal(self.dir)

    @invariant()
    def a_restart_merges_to_every_accepted_op(self) -> None:
        planes = CrdtStreams(lambda: 0)
        restore_planes(self.journal, planes)
        for stream in STREAMS:
            assert planes.state_of(stream) == self.model[stream].ops()


CompactedJournal.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None
)
test_compacted_journal = CompactedJournal.TestCase


def test_a_round_compacts_streams_past_the_threshold_only(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    for wall in range(1, 31):
        journal.append([PlaneOps("busy", frame_ops(1, wall, ["n/pn/1"], wall))])
    for wall in range(1, 4):
        journal.append([PlaneOps("quiet", frame_ops(2, wall, ["t/lww"], wall))])
    keeper = JournalKeeper(journal, JournalState(), plane_compact_records=10)
    report = keeper.round()
    assert report.plane_records_compacted == 30
    assert journal.count_scoped(KIND_PLANE, "busy") == 1
    assert journal.count_scoped(KIND_PLANE, "quiet") == 3
    assert compact_planes(journal, min_records=10) == 0  # nothing past the threshold now
    planes = CrdtStreams(lambda: 0)
    restore_planes(journal, planes)
    (survivor,) = planes.state_of("busy")
    assert (survivor.stamp.wall_time, survivor.state) == (30, b"30")
    journal.close()


def test_a_compaction_keeps_how_far_the_cluster_stream_was_merged(tmp_path: Path) -> None:
    """Other nodes' batches carry the op stream's position; a restart after a compaction must
    still replay the stream only from after the highest one."""
    journal = Journal(tmp_path)
    for position, wall in ((4, 1), (9, 2), (7, 3)):
        ops = frame_ops(2, wall, ["n/pn/2"], wall)
        journal.append([PlaneOps("doc", ops, position)])
    journal.append([PlaneOps("doc", frame_ops(1, 4, ["t/lww"], 4))])  # a local writer's
    assert compact_stream(journal, "doc") == 4
    planes = CrdtStreams(lambda: 0)
    restore_planes(journal, planes)
    assert planes.replica_position == 9
    assert [op.key for op in planes.state_of("doc")] == ["n/pn/2", "t/lww"]
    journal.close()


def test_a_compaction_keeps_collected_tombstones_out(tmp_path: Path) -> None:
    """The replacement holds the document as it is after collection: its ``NAME/gc`` entry
    sorts before the list's element entries, so a replacement that still held them in a later
    chunk would bring them back on the next restart."""
    journal = Journal(tmp_path)
    now = [1_000]
    planes = CrdtStreams(lambda: now[0])
    ann = SharedState(1, lambda: now[0])
    planes.join(1, "doc", 1, AllowAll())
    for edit in (lambda: ann.list_insert("todo", 0, "milk"), lambda: ann.list_delete("todo", 0)):
        now[0] += 1
        ops = edit()
        ann.receive(ops)
        journal.append([PlaneOps("doc", planes.commit(planes.check(1, CrdtSync(ops=ops))).ack)])
    planes.report(1, ann.replica.frontier())
    gc = tuple(planes.collect("doc"))
    assert [op.key for op in gc] == ["todo/gc"]
    journal.append([PlaneOps("doc", gc)])
    assert compact_stream(journal, "doc") == 3
    kept = [op.key for r in plane_records(journal, "doc", 2**62) for op in r.ops]
    assert kept == ["todo/gc"]  # a later chunk holding them would bring them back on replay
    restored = CrdtStreams(lambda: 0)
    restore_planes(journal, restored)
    assert [op.key for op in restored.state_of("doc")] == ["todo/gc"]
    journal.close()
