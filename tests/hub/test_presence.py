"""The server's presence core: values end on close (presence) or TTL (both), each ending is an
op above the value it ends, repeats and older values change nothing, and the bounds refuse
before anything is taken."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.crdt.entries import node_of
from octosync.crdt.plane import stamp_key
from octosync.errors import LimitExceeded
from octosync.hub.presence import (
    MAX_PER_CONNECTION,
    MAX_PER_DOCUMENT,
    MAX_VALUE_BYTES,
    NULL,
    PresenceRooms,
)
from octosync.ipc.messages import CrdtOp, WireStamp


def op(key: str, state: bytes, wall: int = 100, logical: int = 0) -> CrdtOp:
    peer = int(key.rsplit("/", 1)[1])
    return CrdtOp(node_of(key.split("/")[0]), WireStamp(wall, logical, peer), state, key=key)


def test_a_closed_connection_ends_its_presence_and_keeps_its_awareness_until_the_ttl() -> None:
    rooms = PresenceRooms(ttl=10)
    here, cursor = op("presence/pr/5", b'"ann"'), op("cursor/aw/5", b"3")
    assert rooms.put(1, "doc", [here, cursor], now=0) == [here, cursor]
    assert rooms.put(1, "doc", [here], now=1) == []  # a repeat changes nothing readers see
    gone = rooms.close(1, wall_ms=50)
    assert [(o.key, o.state) for o in gone["doc"]] == [("presence/pr/5", NULL)]
    assert stamp_key(gone["doc"][0].stamp) > stamp_key(here.stamp)  # wins over the value
    assert rooms.live("doc") == (cursor,)
    assert rooms.tick(9.9, 200) == {}
    ended = rooms.tick(10, 200)["doc"][0]
    assert (ended.key, ended.state, ended.stamp) == ("cursor/aw/5", NULL, WireStamp(200, 0, 5))
    assert rooms.live("doc") == ()
    assert len(rooms) == 0


def test_a_value_older_than_an_ending_is_not_taken() -> None:
    rooms = PresenceRooms(ttl=1)
    rooms.put(1, "doc", [op("presence/pr/5", b"1", 1000)], now=0)
    ending = rooms.tick(1, 900)["doc"][0]
    assert ending.stamp == WireStamp(1000, 1, 5)
    assert rooms.put(1, "doc", [op("presence/pr/5", b"2", 999)], now=2) == []  # readers drop it
    fresh = op("presence/pr/5", b"2", 1000, 2)
    assert rooms.put(1, "doc", [fresh], now=2) == [fresh]


def test_an_older_value_does_not_replace_a_newer_one() -> None:
    rooms = PresenceRooms()
    new, old = op("presence/pr/5", b'"b"', 100, 1), op("presence/pr/5", b'"a"', 100, 0)
    rooms.put(1, "doc", [new], now=0)
    assert rooms.put(1, "doc", [old], now=0) == []
    assert rooms.live("doc") == (new,)


def test_a_reconnected_peer_is_not_ended_by_its_old_connection_closing() -> None:
    rooms = PresenceRooms()
    rooms.put(1, "doc", [op("presence/pr/5", b"1", 100)], now=0)
    again = op("presence/pr/5", b"1", 200)
    rooms.put(2, "doc", [again], now=1)
    assert rooms.close(1, wall_ms=300) == {}
    assert rooms.live("doc") == (again,)


def test_bounds_refuse_before_anything_is_taken() -> None:
    rooms = PresenceRooms()
    big = op("presence/pr/5", b'"' + b"x" * MAX_VALUE_BYTES + b'"')
    with pytest.raises(LimitExceeded) as err:
        rooms.check(1, "doc", [(3, big)])
    assert err.value.path == "ops[3].state"
    many = [(i, op(f"v{i}/aw/5", b"1")) for i in range(MAX_PER_CONNECTION + 1)]
    with pytest.raises(LimitExceeded) as err:
        rooms.check(1, "doc", many)
    assert err.value.path == "ops"
    rooms.check(1, "doc", many[:-1])
    assert rooms.live("doc") == ()


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 4), st.integers(0, 3)), max_size=25))
def test_every_ending_is_stamped_above_what_it_ends(steps: list[tuple[int, int, int]]) -> None:
    rooms = PresenceRooms(ttl=2)
    now, wall = 0, 1000
    held: dict[str, CrdtOp] = {}
    for peer, wait, back in steps:
        now += wait
        wall += wait - back  # the wall clock may step back
        value = op(f"presence/pr/{peer}", str(now).encode(), wall)
        for ended in [o for ops in rooms.tick(now, wall).values() for o in ops]:
            assert stamp_key(ended.stamp) > stamp_key(held[ended.key or ""].stamp)
        rooms.put(peer, "doc", [value], now)
        for live in rooms.live("doc"):
            held[live.key or ""] = live


def test_another_nodes_values_live_by_the_ttl_and_only_this_nodes_are_local() -> None:
    """A remote node's values (a negative connection id) are read like any other, end by the
    TTL here (flagged as not this node's), and are never this node's to tell others."""
    rooms = PresenceRooms(ttl=10)
    mine, theirs = op("presence/pr/5", b'"ann"'), op("presence/pr/6", b'"bob"')
    rooms.put(1, "doc", [mine], now=0)
    assert rooms.put_remote(-1, "doc", [theirs], now=5) == [theirs]
    assert rooms.live("doc") == (mine, theirs)
    assert rooms.local("doc") == (mine,)
    ends = rooms.expire(10, 200)["doc"]
    assert [(o.key, local) for o, local in ends] == [("presence/pr/5", True)]
    ends = rooms.expire(15, 300)["doc"]
    assert [(o.key, o.state, local) for o, local in ends] == [("presence/pr/6", NULL, False)]
    with pytest.raises(ValueError, match="negative"):
        rooms.put_remote(3, "doc", [theirs], now=0)


def test_another_nodes_values_are_bounded_and_only_presence_or_awareness() -> None:
    rooms = PresenceRooms()
    counter = op("clicks/pn/6", b"[1,0]")
    big = op("presence/pr/6", b'"' + b"x" * MAX_VALUE_BYTES + b'"')
    assert rooms.put_remote(-1, "doc", [counter, big], now=0) == []
    many = [op(f"presence/pr/{p}", b"1") for p in range(1, MAX_PER_DOCUMENT + 10)]
    taken = rooms.put_remote(-1, "doc", many, now=0)
    assert len(taken) == MAX_PER_DOCUMENT == len(rooms)
    assert rooms.put_remote(-2, "doc", [op("presence/pr/9999", b"1")], now=0) == []


def test_forgetting_a_document_drops_only_other_nodes_values() -> None:
    rooms = PresenceRooms()
    mine, theirs = op("presence/pr/5", b"1"), op("presence/pr/6", b"2")
    rooms.put(1, "doc", [mine], now=0)
    rooms.put_remote(-1, "doc", [theirs], now=0)
    rooms.put_remote(-1, "other", [theirs], now=0)
    rooms.forget_remote("doc")
    assert rooms.live("doc") == (mine,)
    assert rooms.live("other") == (theirs,)


def test_held_names_the_ops_that_are_their_entries_live_value() -> None:
    """What a cluster renews on other nodes: a repeat of the live value is held, an older
    value or one of another document is not."""
    rooms = PresenceRooms()
    new, old = op("presence/pr/5", b"2", 100, 1), op("presence/pr/5", b"1", 100, 0)
    rooms.put(1, "doc", [new], now=0)
    assert rooms.held("doc", [new, old]) == [new]
    assert rooms.held("other", [new]) == []
