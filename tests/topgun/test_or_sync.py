"""OR-map Merkle sync: TopGun's entry hash (checked against the real client's root), and a
walk of the tree that reconstructs the server's live state and tombstones."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from octosync.topgun.or_merkle import js_number, js_value_string
from octosync.wire import topgun as tg
from octosync.wire.topgun_services import OrMapSyncInit
from tests.topgun.helpers import ALL, Clock, batch, core, or_add, or_remove, sent


def test_the_root_equals_the_real_clients() -> None:
    # peer.mjs "write" against octosync: the client's ORMAP_SYNC_INIT said rootHash 263080132
    # and bucketHashes {"d": 2513554077} for "tags" holding post-1 = ["python"] ("rust" removed)
    c = core(clock=Clock(1795426306200))  # the client's clock at the time
    c.connect(1, ALL)
    c.handle(1, batch(or_add("1", "post-1", "rust", 1795426306165, "w1")))
    python = tg.WireORRecord(
        msgspec.Raw(msgspec.msgpack.encode("python")),
        tg.WireTimestamp(1795426306165, 1, "w1"),
        "1795426306165:1:w1",
    )
    c.handle(1, batch(tg.ClientOp(map_name="tags", key="post-1", id="2", or_record=python)))
    c.handle(1, batch(or_remove("3", "post-1", "1795426306165:0:w1", 1795426306166, "w1")))
    (root,) = sent(c.handle(1, OrMapSyncInit("tags", 0, {})), 1)
    assert isinstance(root, tg.ORMapSyncRespRoot)
    assert root.payload.root_hash == 263080132
    (buckets,) = sent(c.handle(1, tg.ORMapMerkleReqBucket(tg.ORMapPath("tags", ""))), 1)
    assert isinstance(buckets, tg.ORMapSyncRespBuckets)
    assert buckets.payload.buckets == {"d": 2513554077}


def test_values_render_as_javascript_does() -> None:
    assert js_value_string({"b": 1, "a": [1.5, None, True]}) == '{"a":[1.5,null,true],"b":1}'
    assert js_value_string("plain") == "plain"
    assert js_value_string(2.0) == "2"
    assert js_number(1e21) == "1e+21"
    assert js_number(1.5e-7) == "1.5e-7"
    assert js_value_string(None) == "null"


OPS = st.lists(
    st.tuples(st.sampled_from(["add", "remove"]), st.sampled_from("pqrs"), st.integers(0, 5)),
    max_size=30,
)


def walk(c: Any, conn: int, name: str) -> dict[str, tuple[list[Any], set[str]]]:
    """What a client that holds nothing learns by walking the server's OR tree."""
    (root,) = sent(c.handle(conn, OrMapSyncInit(name, 0, {})), conn)
    assert isinstance(root, tg.ORMapSyncRespRoot)
    learned: dict[str, tuple[list[Any], set[str]]] = {}
    paths = [""] if root.payload.root_hash else []
    while paths:
        path = paths.pop()
        (reply,) = sent(c.handle(conn, tg.ORMapMerkleReqBucket(tg.ORMapPath(name, path))), conn)
        if isinstance(reply, tg.ORMapSyncRespBuckets):
            paths.extend(path + digit for digit in reply.payload.buckets)
            continue
        assert isinstance(reply, tg.ORMapSyncRespLeaf)
        for entry in reply.payload.entries:
            values = sorted(msgspec.msgpack.decode(r.value) for r in entry.records)
            learned[entry.key] = (values, set(entry.tombstones))
    return {k: v for k, v in learned.items() if v[0]}


@settings(max_examples=50)
@given(OPS)
def test_a_walk_learns_every_live_value(ops: list[tuple[str, str, int]]) -> None:
    c = core()
    c.connect(1, ALL)
    live: dict[str, dict[str, int]] = {}
    millis = 100
    for i, (kind, key, value) in enumerate(ops):
        millis += 1
        if kind == "add":
            c.handle(1, batch(or_add(str(i), key, value, millis)))
            live.setdefault(key, {})[f"{millis}:0:n1"] = value
        else:
            for tag in sorted(live.get(key, {})):
                c.handle(1, batch(or_remove(str(i), key, tag, millis)))
                live[key].pop(tag)
    learned = walk(c, 1, "tags")
    assert {k: v[0] for k, v in learned.items()} == {
        k: sorted(tags.values()) for k, tags in live.items() if tags
    }
