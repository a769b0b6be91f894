"""CRDT plane records in the journal: restored by merging, kept through every trim."""

from __future__ import annotations

from pathlib import Path

import pytest

from octosync.errors import InvalidRecord
from octosync.hub.crdt_streams import CrdtStreams
from octosync.ipc.messages import CrdtOp, WireStamp
from octosync.store.journal import Journal
from octosync.store.records import KIND_PLANE, PlaneOps, StreamCheckpoint, StreamDropped
from octosync.store.recovery import restore_planes


def op(wall: int, peer: int, state: bytes) -> CrdtOp:
    return CrdtOp(slot_id=1, stamp=WireStamp(wall, 0, peer), state=state, key="t/lww")


def test_a_restart_merges_every_record_whatever_their_order(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.append([PlaneOps("doc", (op(9, 2, b'"late"'),))])
        journal.append([PlaneOps("doc", (op(3, 1, b'"early"'),))])  # journaled after, older
        journal.append([PlaneOps("other", (op(1, 1, b"1"),))])
        planes = CrdtStreams(lambda: 0)
        assert restore_planes(journal, planes) == 3
    assert planes.state_of("doc") == (op(9, 2, b'"late"'),)
    assert planes.state_of("other") == (op(1, 1, b"1"),)


def test_a_trim_keeps_plane_records(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.append([PlaneOps("doc", (op(1, 1, b"1"),))])
        journal.append([StreamDropped("gone")])
        journal.put_checkpoints([StreamCheckpoint("gone", through_seq=2, epoch=None)])
        result = journal.trim(3, exported_through=2)
        assert result.deleted == 1  # the drop went; the plane record is the only copy of its op
        assert journal.scopes(KIND_PLANE) == ["doc"]
        planes = CrdtStreams(lambda: 0)
        restore_planes(journal, planes)
    assert planes.state_of("doc") == (op(1, 1, b"1"),)


def test_a_plane_record_is_validated_before_it_is_stored(tmp_path: Path) -> None:
    bad = CrdtOp(slot_id=-1, stamp=WireStamp(1, 0, 1), state=b"1")
    with Journal(tmp_path) as journal, pytest.raises(InvalidRecord):
        journal.append([PlaneOps("doc", (bad,))])
