"""The shared-blob arena: lazily-spec's arena fixture byte for byte, every descriptor field
checked before a read, and reuse caught by the generation (a hypothesis state machine)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from octosync.errors import BlobInvalid, LimitExceeded
from octosync.ipc.messages import BlobRef
from octosync.shm.arena import HEADER_LEN, BlobArena


def test_the_spec_fixture_byte_for_byte(vectors_dir: Path) -> None:
    doc = json.loads((vectors_dir / "lazily" / "arena_blob.json").read_text())
    given, expected = doc["input"], doc["expected"]
    buf = bytearray(given["capacity"])
    arena = BlobArena(buf)
    ref = arena.write_blob(given["epoch"], bytes(given["payload"]))
    assert msgspec.structs.asdict(ref) == {**expected["descriptor"], "backend": "shm"}
    assert arena.header_bytes(ref) == bytes(expected["header_bytes"])
    assert buf[HEADER_LEN : HEADER_LEN + ref.len] == bytes(expected["payload_region"])
    assert doc["assertions"]["header_len"] == HEADER_LEN
    assert bytes(expected["header_bytes"][:4])[::-1] == doc["assertions"]["magic"].encode()
    assert bytes(arena.read_blob(ref)) == bytes(given["payload"])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("generation", 2),
        ("epoch", 8),
        ("len", 30),
        ("checksum", 1),
        ("offset", 8),
        ("offset", 200),
        ("backend", "arrow"),
    ],
)
def test_a_descriptor_that_does_not_match_is_refused_naming_the_field(
    field: str, value: object
) -> None:
    arena = BlobArena(bytearray(256))
    ref = arena.write_blob(9, b"lazily shared-memory blob arena")
    bad = msgspec.structs.replace(ref, **{field: value})
    with pytest.raises(BlobInvalid) as info:
        arena.read_blob(bad)
    want = {"offset": "magic" if value == 8 else "offset"}.get(field, field)
    assert info.value.path == want


def test_a_flipped_payload_byte_fails_the_checksum() -> None:
    buf = bytearray(128)
    arena = BlobArena(buf)
    ref = arena.write_blob(1, b"payload")
    buf[HEADER_LEN] ^= 0xFF
    with pytest.raises(BlobInvalid) as info:
        arena.read_blob(ref)
    assert info.value.path == "checksum"


def test_the_spec_shared_blob_frames_do_not_validate_against_a_fresh_arena(
    vectors_dir: Path,
) -> None:
    """The wire fixtures' descriptors name checksums no payload here has: refused."""
    from octosync.wire import json_tagged

    for name in ("snapshot_shared_blob.json", "delta_shared_blob.json"):
        doc = json.loads((vectors_dir / "lazily" / name).read_text())
        msg = json_tagged.decode(json.dumps(doc["wire"]).encode())
        refs = [n.payload for n in getattr(msg, "nodes", ())] + [
            op.payload for op in getattr(msg, "ops", ())
        ]
        for ref in refs:
            assert isinstance(ref, BlobRef)
            arena = BlobArena(bytearray(256), next_generation=ref.generation)
            arena.write_offset = ref.offset
            arena.write_blob(ref.epoch, bytes(ref.len))  # same place, generation, length
            with pytest.raises(BlobInvalid) as info:
                arena.read_blob(ref)
            assert info.value.path == "checksum"


def test_too_large_and_too_small() -> None:
    with pytest.raises(LimitExceeded):
        BlobArena(bytearray(HEADER_LEN))
    arena = BlobArena(bytearray(100))
    with pytest.raises(LimitExceeded):
        arena.write_blob(0, bytes(61))
    arena.write_blob(0, bytes(60))


class ArenaMachine(RuleBasedStateMachine):
    """Writes wrap around a small arena; every descriptor reads back its exact bytes while
    its region is untouched, and once a later write reused it, it is refused or (when the
    new bytes happen to equal the old ones) still reads its own bytes: never other bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.arena = BlobArena(bytearray(300))
        self.live: list[tuple[BlobRef, bytes]] = []
        self.dead: list[tuple[BlobRef, bytes]] = []

    @rule(payload=st.binary(max_size=120), epoch=st.integers(0, 5))
    def write(self, payload: bytes, epoch: int) -> None:
        ref = self.arena.write_blob(epoch, payload)
        lo, hi = ref.offset, ref.offset + HEADER_LEN + ref.len
        still = []
        for old, data in self.live:
            o_lo, o_hi = old.offset, old.offset + HEADER_LEN + old.len
            if o_lo < hi and lo < o_hi:
                self.dead.append((old, data))
            else:
                still.append((old, data))
        self.live = [*still, (ref, payload)]

    @invariant()
    def live_blobs_read_back(self) -> None:
        for ref, data in self.live:
            assert bytes(self.arena.read_blob(ref)) == data

    @invariant()
    def reused_regions_are_refused(self) -> None:
        for ref, data in self.dead:
            try:
                got = bytes(self.arena.read_blob(ref))
            except BlobInvalid:
                continue
            assert got == data, f"a reused region was read as {got!r}"


TestArenaMachine = ArenaMachine.TestCase


@pytest.mark.parametrize("name", ["", "/etc/passwd", "../x", "a" * 201, "name with space"])
def test_a_region_name_is_a_plain_name(name: str) -> None:
    from octosync.shm.region import SharedRegion

    with pytest.raises(BlobInvalid) as info:
        SharedRegion.open(name)
    assert info.value.path == "region"
