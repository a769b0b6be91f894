"""TopGun maps as ``map:<name>`` streams: whatever the writes, a mirror that applies the snapshot
and then every delta holds exactly the map's live entries (LWW and OR keys)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.errors import Forbidden
from octosync.hub.model import GraphModel, lazily_frame
from octosync.ipc.messages import Delta, Snapshot
from octosync.topgun import TopGunCore, durable
from octosync.topgun.map_streams import MapStreams, node_key
from tests.topgun.helpers import ALL, Clock, batch, or_add, or_remove, put

KEYS = st.sampled_from(["alice", "bob", "x/y", "/bad", ""])
VALUES = st.none() | st.integers(-5, 5) | st.text(max_size=3) | st.lists(st.integers(0, 3))


def mirror_of(frames: list[Snapshot | Delta]) -> list[tuple[str | None, Any]]:
    """Apply frames as the hub's own mirror does; ``(node key, JSON value)`` of each node."""
    model = GraphModel()
    for msg in frames:
        frame = lazily_frame(msg)
        model.reset(frame) if isinstance(msg, Snapshot) else model.apply(frame)  # type: ignore[arg-type]
    snap = model.snapshot()
    assert snap is not None
    out = []
    for n in snap.nodes:
        assert n.type_tag == "json"
        assert isinstance(n.payload, bytes)
        out.append((n.key, json.loads(n.payload)))
    return sorted(out, key=repr)


def expected(live: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """A key that is not a valid node key shows as a node without one."""
    return sorted(((node_key(k), v) for k, v in live.items()), key=repr)


@given(
    before=st.lists(st.tuples(KEYS, VALUES), max_size=6),
    batches=st.lists(st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=4), max_size=6),
)
@settings(max_examples=100, deadline=None)
def test_snapshot_then_deltas_mirror_the_live_lww_map(
    before: list[tuple[str, Any]], batches: list[list[tuple[str, Any]]]
) -> None:
    core = TopGunCore(Clock(10_000), persistent=False)
    core.connect(1, ALL)
    live: dict[str, Any] = {}
    millis = 1_000
    n = 0

    def write(ops: list[tuple[str, Any]]) -> list[tuple[str, Snapshot | Delta]]:
        nonlocal millis, n
        out = []
        for key, value in ops:
            millis += 1
            n += 1
            out.append(put(str(n), key, value, millis))
            if value is None:
                live.pop(key, None)
            else:
                live[key] = value
        return core.handle(1, batch(*out)).frames

    if before:
        assert write(before) == []  # nobody follows the map yet: no frames made
    snap = core.follow_map("users")
    assert snap is not None
    assert core.follow_map("users") is None  # once
    frames: list[Snapshot | Delta] = [snap]
    for ops in batches:
        made = write(ops)
        assert all(name == "users" for name, _ in made)
        assert len(made) <= 1  # one delta per applied batch, none when nothing visible changed
        frames.extend(msg for _, msg in made)
    assert mirror_of(frames) == expected(live)


def test_or_keys_show_their_live_values_and_a_removed_key_leaves() -> None:
    core = TopGunCore(Clock(10_000), persistent=False)
    core.connect(1, ALL)
    core.handle(1, batch(or_add("1", "post", "go", 1_000), or_add("2", "post", "py", 1_001)))
    snap = core.follow_map("tags")
    assert snap is not None
    frames: list[Snapshot | Delta] = [snap]
    assert mirror_of(frames) == [("post", ["go", "py"])]
    for op in (
        or_remove("3", "post", "1000:0:n1", 2_000),
        or_remove("4", "post", "1001:0:n1", 2_001),
    ):
        frames.extend(msg for _, msg in core.handle(1, batch(op)).frames)
    assert len(frames) == 3
    assert mirror_of(frames[:2]) == [("post", ["py"])]
    assert mirror_of(frames) == []


def test_reserved_maps_have_no_stream() -> None:
    core = TopGunCore(Clock(), persistent=True)
    with pytest.raises(Forbidden):
        core.follow_map(durable.COUNTERS_MAP)


def test_a_key_that_returns_gets_a_new_node() -> None:
    streams = MapStreams()
    assert streams.follow("m", [("k", b"1")]) is not None
    gone = streams.changed("m", {"k": None})
    back = streams.changed("m", {"k": b"2"})
    assert gone is not None
    assert back is not None
    (remove,) = gone.ops
    (add,) = back.ops
    assert msgspec.structs.asdict(remove)["slot_id"] != msgspec.structs.asdict(add)["slot_id"]
    assert streams.changed("m", {"k": b"2"}) is None  # the same value: no delta
    assert streams.changed("other", {"k": b"2"}) is None  # not followed
