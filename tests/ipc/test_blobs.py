"""Spilling payloads into an arena and inlining them back; a mirror that reads descriptors."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from octosync.ipc.blobs import has_blobs, inline_blobs, spill_blobs
from octosync.ipc.messages import BlobRef, CellSet, Delta, NodeSnapshot, ResyncRequest, Snapshot
from octosync.ipc.mirror import Applied, Mirror
from octosync.shm.arena import BlobArena
from tests.strategies import deltas, snapshots


def _no_hash(msg: Snapshot | Delta) -> Snapshot | Delta:
    return msgspec.structs.replace(msg, state_hash=None)


@given(st.one_of(snapshots(), deltas()), st.integers(0, 16))
def test_spill_then_inline_is_the_identity_without_the_hash(
    msg: Snapshot | Delta, threshold: int
) -> None:
    plain = inline_blobs(msg, lambda ref: b"") if has_blobs(msg) else msg  # start from bytes
    arena = BlobArena(bytearray(1 << 20))
    spilled = spill_blobs(plain, lambda b: arena.write_blob(0, b), threshold)
    assert has_blobs(spilled) == (spilled is not plain)
    back = inline_blobs(spilled, lambda ref: bytes(arena.read_blob(ref)))
    if spilled is plain:
        assert back == plain
    else:
        assert back == _no_hash(plain)


def test_a_mirror_with_a_reader_resolves_descriptors_and_resyncs_on_reuse() -> None:
    arena = BlobArena(bytearray(200))
    read = lambda ref: bytes(arena.read_blob(ref))  # noqa: E731
    mirror = Mirror(blobs=read)
    first = arena.write_blob(0, b"a" * 100)
    snap = Snapshot(1, (NodeSnapshot(1, "bytes", "resolved", first),))
    assert mirror.apply(snap) == Applied(1)
    assert mirror.values() == {1: b"a" * 100}
    second = arena.write_blob(0, b"b" * 100)  # wraps: overwrites the first blob's region
    assert second.offset == first.offset == 0
    late = Delta(1, 2, (CellSet(slot_id=1, payload=second),))
    assert mirror.apply(late) == Applied(2)
    stale = Delta(2, 3, (CellSet(slot_id=1, payload=first),))
    result = mirror.apply(stale)
    assert isinstance(result, ResyncRequest)
    assert result.reason == "BlobInvalid"
    assert mirror.values() == {1: b"b" * 100}  # nothing of the stale frame was applied


def test_without_a_reader_a_descriptor_is_kept_as_is() -> None:
    ref = BlobRef(0, 1, 1, 0, 0)
    mirror = Mirror()
    mirror.apply(Snapshot(1, (NodeSnapshot(1, "bytes", "resolved", ref),)))
    assert mirror.values() == {1: ref}


def test_a_payload_the_arena_cannot_hold_stays_inline() -> None:
    arena = BlobArena(bytearray(100))
    msg = Delta(
        1, 2, (CellSet(slot_id=1, payload=b"x" * 80), CellSet(slot_id=2, payload=b"y" * 20))
    )

    def write(b: bytes) -> BlobRef | None:
        return arena.write_blob(0, b) if len(b) <= arena.max_blob_len else None

    spilled = spill_blobs(msg, write, 10)
    assert isinstance(spilled, Delta)
    payloads = [op.payload for op in spilled.ops if isinstance(op, CellSet)]
    assert payloads[0] == b"x" * 80
    assert isinstance(payloads[1], BlobRef)
