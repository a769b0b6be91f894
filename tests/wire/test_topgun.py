"""TopGun dialect against the reference fixtures, plus strictness and BATCH framing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.crdt import OpKind
from octosync.crdt.sync_messages import SyncInit, SyncRespRoot, WireLWWRecord, WireTimestamp
from octosync.errors import DecodeError, LimitExceeded, Oversize
from octosync.wire import topgun
from octosync.wire.topgun import (
    AuthFail,
    Batch,
    ClientOpMessage,
    CounterSync,
    OpBatch,
    Ping,
    client_op_to_record,
    decode,
    encode,
    pack_batch,
    split_batch,
    unpack_batch,
)

REQUIRED = [
    "AUTH",
    "AUTH_REQUIRED",
    "AUTH_ACK",
    "AUTH_FAIL",
    "CLIENT_OP",
    "OP_BATCH",
    "OP_ACK",
    "OP_REJECTED",
    "SYNC_INIT",
    "SYNC_RESP_ROOT",
    "MERKLE_REQ_BUCKET",
    "SYNC_RESP_BUCKETS",
    "SYNC_RESP_LEAF",
    "SYNC_RESET_REQUIRED",
    "QUERY_SUB",
    "QUERY_UNSUB",
    "QUERY_RESP",
    "QUERY_UPDATE",
    "TOPIC_SUB",
    "TOPIC_UNSUB",
    "TOPIC_PUB",
    "TOPIC_MESSAGE",
    "LOCK_REQUEST",
    "LOCK_GRANTED",
    "LOCK_RELEASE",
    "LOCK_RELEASED",
    "COUNTER_REQUEST",
    "COUNTER_SYNC",
    "COUNTER_RESPONSE",
    "COUNTER_UPDATE",
    "PING",
    "PONG",
    "SERVER_EVENT",
    "SERVER_BATCH_EVENT",
    "ERROR",
    "BATCH",
]


def fixtures(vectors: Path) -> list[Path]:
    return sorted((vectors / "topgun").glob("*.msgpack"))


def normalise(value: Any) -> Any:
    """Generic value with integral floats as ints and JSON Buffers as bytes."""
    if isinstance(value, dict):
        if value.get("type") == "Buffer" and set(value) == {"type", "data"}:
            return bytes(value["data"])
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def test_every_required_type_is_in_the_union() -> None:
    tags = {cls.__struct_config__.tag for cls in topgun.Message.__args__}  # type: ignore[attr-defined]
    assert set(REQUIRED) <= tags


def test_fixture_set_is_present(vectors_dir: Path) -> None:
    assert len(fixtures(vectors_dir)) >= 30


def test_every_fixture_decodes_and_reencodes_to_an_equal_value(vectors_dir: Path) -> None:
    for path in fixtures(vectors_dir):
        raw = path.read_bytes()
        msg = decode(raw)
        assert msg.__struct_config__.tag == path.stem, path.name
        again = encode(msg)
        generic_fixture = normalise(msgspec.msgpack.decode(raw))
        assert normalise(msgspec.msgpack.decode(again)) == generic_fixture, path.name
        assert decode(again) == msg, path.name
        as_json = json.loads(path.with_suffix(".json").read_text())
        assert normalise(as_json) == generic_fixture, path.name


def test_fixture_details(vectors_dir: Path) -> None:
    topgun_dir = vectors_dir / "topgun"
    op = decode((topgun_dir / "CLIENT_OP.msgpack").read_bytes())
    assert isinstance(op, ClientOpMessage)
    record = op.payload.record
    assert record is not None
    assert record.timestamp.millis == 1700000000000
    assert type(record.timestamp.millis) is int  # sent as float64, held as int
    assert record.ttl_ms == 60000
    assert msgspec.msgpack.decode(record.value) == {"name": "Alice", "age": 30}
    rec = client_op_to_record(op.payload)
    # client op ids repeat across clients: an LWW record is identified by its HLC
    assert (rec.op, rec.op_id, rec.origin) == (OpKind.PUT, "1700000000000:1:node-1", "node-1")
    assert rec.value == bytes(record.value)

    batch = decode((topgun_dir / "OP_BATCH.msgpack").read_bytes())
    assert isinstance(batch, OpBatch)
    assert [o.key for o in batch.payload.ops] == ["user-1", "user-2"]
    counter = decode((topgun_dir / "COUNTER_SYNC.msgpack").read_bytes())
    assert isinstance(counter, CounterSync)
    assert counter.payload.state.p == {"node-1": 10}
    root = decode((topgun_dir / "SYNC_RESP_ROOT.msgpack").read_bytes())
    assert isinstance(root, SyncRespRoot)
    assert root.payload.root_hash == 12345
    init = decode((topgun_dir / "SYNC_INIT.msgpack").read_bytes())
    assert isinstance(init, SyncInit)
    assert init.bucket_hashes == {"0": 111, "1": 222, "2": 333}


def test_reference_batch_fixture_is_opaque_and_its_frames_do_not_tile(
    vectors_dir: Path,
) -> None:
    batch = decode((vectors_dir / "topgun" / "BATCH.msgpack").read_bytes())
    assert isinstance(batch, Batch)
    assert (batch.count, batch.data) == (3, bytes.fromhex("deadbeef"))
    with pytest.raises(DecodeError):
        split_batch(batch)


frames = st.lists(st.builds(Ping, st.integers(0, 2**53)), max_size=5)


@given(frames)
def test_batch_round_trip(pings: list[Ping]) -> None:
    encoded = [encode(p) for p in pings]
    batch = pack_batch(encoded)
    assert batch.data[:4] == (len(encoded[0]).to_bytes(4, "big") if encoded else b"")
    again = decode(encode(batch))
    assert isinstance(again, Batch)
    assert split_batch(again) == encoded
    assert unpack_batch(again) == pings


def test_batch_count_mismatch_and_truncation() -> None:
    frame = encode(Ping(1))
    with pytest.raises(DecodeError) as info:
        split_batch(Batch(2, len(frame).to_bytes(4, "big") + frame))
    assert info.value.path == "count"
    with pytest.raises(DecodeError):
        split_batch(Batch(1, b"\x00\x00"))


inner_frames = st.lists(st.binary(max_size=12), max_size=12)


@given(inner_frames, st.integers(0, 2**31))
def test_a_batch_is_counted_from_its_lengths_and_a_forged_count_refused(
    frames: list[bytes], declared: int
) -> None:
    packed = pack_batch(frames)
    if declared == len(frames):
        assert split_batch(Batch(declared, packed.data)) == frames
    else:
        with pytest.raises(DecodeError) as info:
            split_batch(Batch(declared, packed.data))
        assert info.value.path == "count"


@given(inner_frames.filter(bool), st.data())
def test_a_batch_cut_anywhere_but_between_frames_is_refused_naming_the_frame(
    frames: list[bytes], data: st.DataObject
) -> None:
    whole = pack_batch(frames).data
    cut = data.draw(st.integers(0, len(whole) - 1))
    bounds, at = [], 0
    for f in frames:
        bounds.append(at)
        at += 4 + len(f)
    kept = sum(1 for b in bounds[1:] if b <= cut)  # frames that end at or before the cut
    with pytest.raises(DecodeError) as info:
        split_batch(Batch(len(frames), whole[:cut]))
    if cut in bounds:  # whole frames only: the count disagrees
        assert info.value.path == "count"
    else:
        assert info.value.path == f"data[{kept}]"


@given(st.integers(1, 6), st.integers(0, 4), st.integers(0, 2**31))
def test_more_inner_frames_than_the_bound_are_refused_whatever_the_count_says(
    bound: int, extra: int, declared: int
) -> None:
    frames = [b"\x00"] * (bound + extra)
    batch = Batch(declared, pack_batch(frames).data)
    if extra == 0:
        if declared == bound:
            assert split_batch(batch, max_items=bound) == frames
        return
    with pytest.raises(LimitExceeded) as info:
        split_batch(batch, max_items=bound)
    assert info.value.path == f"data[{bound}]"


def test_the_bound_is_topguns_8192_and_inner_messages_are_decoded_strictly() -> None:
    ping = encode(Ping(1))
    assert len(split_batch(pack_batch([ping] * 8192))) == 8192
    with pytest.raises(LimitExceeded):
        split_batch(Batch(1, pack_batch([b""] * 8193).data))
    with pytest.raises(DecodeError) as info:
        unpack_batch(pack_batch([ping, encode(Ping(2))[:-1]]))
    assert info.value.path is not None
    assert info.value.path.startswith("data[1]")
    with pytest.raises(DecodeError) as info:
        unpack_batch(pack_batch([ping, encode(pack_batch([ping]))]))
    assert info.value.path == "data[1].type"


def have(**over: Any) -> dict[str, Any]:
    """A MERKLE_REQ_BUCKET with a leaf digest (octosync extension), fields overridden."""
    digest = {
        "keys": b"\x01" * 16,
        "baseMillis": 1_700_000_000_000.0,  # JS float64 millis are accepted
        "millis": [0, 5],
        "counters": [0, 1],
        "nodeIds": ["n1"],
        "nodes": [0, 0],
    }
    digest.update(over)
    return {"type": "MERKLE_REQ_BUCKET", "payload": {"mapName": "m", "path": "abc", "have": digest}}


LEAF_DIGEST_ERRORS = [
    (have(keys=b"\x01" * 15), "payload.have.keys"),
    (have(millis=[0]), "payload.have.millis"),
    (have(counters=[0, 1, 2]), "payload.have.counters"),
    (have(nodes=[0, 1]), "payload.have.nodes"),
    (have(nodes=[0, -1]), "payload.have.nodes"),
    (have(nodeIds=["a:b"]), "payload.have.nodeIds"),
    (have(millis=[0, 2**53]), "payload.have.millis"),
    (have(extra=1), "payload.have"),
]


@pytest.mark.parametrize(("doc", "path"), LEAF_DIGEST_ERRORS)
def test_leaf_digest_decodes_strictly(doc: dict[str, Any], path: str) -> None:
    assert isinstance(decode(msgspec.msgpack.encode(have())), topgun.MerkleReqBucket)
    with pytest.raises(DecodeError) as info:
        decode(msgspec.msgpack.encode(doc))
    assert info.value.path is not None
    assert info.value.path.startswith(path)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"type": "PING", "timestamp": 1.5}, "timestamp"),
        ({"type": "PING", "timestamp": -3}, "timestamp"),
        ({"type": "PING", "timestamp": "1"}, "timestamp"),
        ({"type": "PING", "timestamp": True}, "timestamp"),
        ({"type": "PING", "timestamp": float("nan")}, "timestamp"),
        ({"type": "PING", "timestamp": 2**53 + 1}, "timestamp"),
        ({"type": "AUTH_FAIL", "code": 2.0**60}, "code"),
        ({"type": "SYNC_INIT", "mapName": "m", "rootHash": 2.0**32}, "rootHash"),
        ({"type": "PING", "timestamp": 1, "extra": 1}, None),
        ({"type": "NOPE"}, "type"),
        ({"type": "SYNC_INIT", "mapName": "m", "rootHash": 2**32}, "rootHash"),
        (
            {"type": "SYNC_RESP_BUCKETS", "payload": {"mapName": "m", "buckets": {"a": -1}}},
            "payload.buckets",
        ),
        ({"type": "AUTH_FAIL", "code": "x"}, "code"),
        ({"type": "CLIENT_OP", "payload": {"mapName": "m", "key": "k", "timeout": -1}}, "payload"),
        ({"type": "CLIENT_OP", "payload": {"mapName": "m", "key": "k", "timeout": 0.5}}, "payload"),
        (
            {
                "type": "CLIENT_OP",
                "payload": {
                    "mapName": "m",
                    "key": "k",
                    "record": {
                        "value": 1,
                        "timestamp": {"millis": 1, "counter": 0, "nodeId": "n"},
                        "ttlMs": -5,
                    },
                },
            },
            "payload.record",
        ),
        ({"type": "LOCK_GRANTED", "payload": {"requestId": "r"}}, "payload"),
        (
            {
                "type": "COUNTER_SYNC",
                "payload": {"name": "c", "state": {"p": {"a": 1.25}, "n": {}}},
            },
            "payload.state",
        ),
    ],
)
def test_strict_decode_names_the_field(doc: dict[str, Any], path: str | None) -> None:
    with pytest.raises(DecodeError) as info:
        decode(msgspec.msgpack.encode(doc))
    if path is not None:
        assert info.value.path is not None
        assert info.value.path.startswith(path)


def test_integral_floats_are_accepted_as_ints() -> None:
    msg = decode(msgspec.msgpack.encode({"type": "AUTH_FAIL", "code": 401.0}))
    assert msg == AuthFail(code=401)
    assert type(msg.code) is int
    op = decode(
        msgspec.msgpack.encode(
            {"type": "CLIENT_OP", "payload": {"mapName": "m", "key": "k", "timeout": 5.0}}
        )
    )
    assert isinstance(op, ClientOpMessage)
    assert type(op.payload.timeout) is int
    state = {"positive": {"a": 2.0**40}, "negative": {"b": 3}}
    sync = decode(
        msgspec.msgpack.encode({"type": "COUNTER_SYNC", "payload": {"name": "c", "state": state}})
    )
    assert isinstance(sync, CounterSync)
    assert sync.payload.state.sides() == ({"a": 2**40}, {"b": 3})
    assert all(type(v) is int for side in sync.payload.state.sides() for v in side.values())
    init = decode(msgspec.msgpack.encode({"type": "SYNC_INIT", "mapName": "m", "rootHash": 7.0}))
    assert isinstance(init, SyncInit)
    assert type(init.root_hash) is int


def test_oversize_and_garbage() -> None:
    with pytest.raises(Oversize):
        decode(b"\x80" * 20, max_size=10)
    with pytest.raises(DecodeError):
        decode(b"\xc1")


@given(st.binary(max_size=64))
def test_fuzz_decodes_or_raises_decode_error(data: bytes) -> None:
    try:
        msg = decode(data)
    except DecodeError:
        return
    assert decode(encode(msg)) == msg


@pytest.mark.parametrize("digests", [True, False])
def test_sync_session_over_encoded_frames(digests: bool) -> None:
    """The sync messages survive the wire: every frame goes through encode and decode."""
    from octosync.crdt import HLC, LWWMap, SyncRequester, SyncResponder

    now = [1_000]
    # depth 1: 16 leaves, so most leaves mix keys a holds with keys it lacks
    a, b = LWWMap(HLC("a", lambda: now[0]), 1), LWWMap(HLC("b", lambda: now[0]), 1)
    for i in range(0, 60, 2):
        now[0] += 1
        a.set(f"k{i}", i)  # older than b's writes below, or absent there
    for i in range(40):
        now[0] += 1
        b.set(f"k{i}", {"i": i, "s": "é😀"} if i % 5 else None)
    b.remove("k3")
    b.set("ttl", "x", ttl_ms=10)
    shared = [(k, r) for k, r in b.records() if k < "k2"]  # a already holds these versions
    for key, rec in shared:
        a.merge(key, rec)
    requester = SyncRequester("m", a, leaf_digests=digests)
    responder = SyncResponder("m", b)
    wave: list[Any] = [requester.start()]
    frames = 0
    while wave:
        replies = [decode(encode(r)) for m in wave for r in responder.handle(decode(encode(m)))]
        frames += len(wave) + len(replies)
        wave = [m for r in replies for m in requester.receive(r)]  # type: ignore[arg-type]
    assert requester.done
    assert frames > 2
    if digests:
        assert requester.records_received == len(b) - len(shared)
    else:
        assert requester.records_received > len(b) - len(shared)
    for key, rec in b.records():
        assert a.record(key) == rec
    assert len(a) == len(b) + 10  # k40..k58 live only in a


def test_types_without_fixtures_round_trip() -> None:
    from octosync.crdt.sync_messages import WireLWWRecord, WireTimestamp
    from octosync.wire.topgun import (
        CounterResponse,
        CounterState,
        CounterStatePayload,
        CounterUpdate,
        LockGranted,
        LockGrantedPayload,
        QueryUpdate,
        QueryUpdatePayload,
        ServerBatchEvent,
        ServerBatchEventPayload,
        ServerEventPayload,
    )

    value = msgspec.Raw(msgspec.msgpack.encode({"name": "Ada"}))
    stamp = WireTimestamp(1700000000000, 2, "node-1")
    state = CounterState({"a": 3}, {"b": 1})
    messages = [
        QueryUpdate(QueryUpdatePayload("q1", "u1", value, "ENTER")),
        LockGranted(LockGrantedPayload("r1", 42, "res")),
        CounterResponse(CounterStatePayload("views", state)),
        CounterUpdate(CounterStatePayload("views", state)),
        ServerBatchEvent(
            ServerBatchEventPayload(
                [ServerEventPayload("users", "PUT", "u1", WireLWWRecord(value, stamp))]
            )
        ),
    ]
    for msg in messages:
        frame = encode(msg)
        assert msgspec.msgpack.decode(frame)["type"] == msg.__struct_config__.tag
        assert decode(frame) == msg


def test_invalid_utf8_in_a_string_is_a_decode_error() -> None:
    # found by the face fuzz test: msgspec raised UnicodeDecodeError, not a typed error
    with pytest.raises(DecodeError, match="UTF-8"):
        decode(b"\x81\xa4type\xa3\x80\x80\x80")


def _event(i: int, map_name: str = "m") -> topgun.ServerEventPayload:
    stamp = WireTimestamp(1_700_000_000_000 + i, i, "node")
    record = WireLWWRecord(msgspec.Raw(msgspec.msgpack.encode({"v": i})), stamp)
    return topgun.ServerEventPayload(map_name, "PUT", f"k{i}", record=record)


@given(st.lists(st.integers(0, 20), min_size=1, max_size=6))
def test_joined_event_runs_are_the_message_of_their_events(sizes: list[int]) -> None:
    runs, events = [], []
    for n, size in enumerate(sizes):
        batch = [_event(100 * n + i) for i in range(size)]
        events.extend(batch)
        runs.append((size, topgun.encode_event_run(batch)))
    if not events:
        return
    joined = topgun.join_event_runs(runs)
    if len(events) == 1:
        assert joined == topgun.encode(topgun.ServerEvent(events[0]))
    else:
        batch_event = topgun.ServerBatchEvent(topgun.ServerBatchEventPayload(events))
        assert joined == topgun.encode(batch_event)


@pytest.mark.parametrize("count", [15, 16, 65_535, 65_536])
def test_joined_event_runs_use_every_array_header_size(count: int) -> None:
    one = topgun.encode_event_run([_event(7)])
    joined = topgun.join_event_runs([(1, one)] * count)
    message = topgun.decode(joined)
    assert isinstance(message, topgun.ServerBatchEvent)
    assert message.payload.events == [_event(7)] * count


@given(
    st.integers(0, 2**53),
    st.integers(0, 2**31 - 1),
    st.text(min_size=1, max_size=8).filter(lambda n: ":" not in n),
    st.sampled_from([None, "PUT", "REMOVE"]),
    st.one_of(st.none(), st.integers(-(2**63), 2**63), st.text(max_size=5)),
    st.booleans(),
)
def test_lww_ops_become_records_identified_by_their_hlc(
    millis: int, counter: int, node: str, op_type: str | None, value: Any, as_float: bool
) -> None:
    stamp = WireTimestamp(float(millis) if as_float else millis, counter, node)
    raw = msgspec.Raw(msgspec.msgpack.encode(value))
    op = topgun.ClientOp("m", "k", "1", op_type, WireLWWRecord(raw, stamp))
    rec = client_op_to_record(op)
    removed = op_type == "REMOVE" or value is None
    assert rec.op is (OpKind.REMOVE if removed else OpKind.PUT)
    assert rec.value == (b"" if removed else bytes(raw))
    assert (rec.ts.millis, rec.ts.counter, rec.ts.node_id) == (millis, counter, node)
    assert type(rec.ts.millis) is int
    assert rec.op_id == str(rec.ts) == f"{millis}:{counter}:{node}"
    assert rec.origin == node


@given(
    st.text(max_size=20),
    st.sampled_from(["APPLIED", "PERSISTED", "MEMORY", "REPLICATED", "FIRE_AND_FORGET", "x"]),
    st.lists(st.text(max_size=40), max_size=300),
)
def test_an_all_succeeded_ack_is_the_bytes_of_its_structs(
    last_id: str, level: str, op_ids: list[str]
) -> None:
    fast = topgun.encode_all_succeeded(last_id, level, op_ids)
    results = [topgun.OpResult(op_id, True, level) for op_id in op_ids]
    assert fast == topgun.encode(topgun.OpAck(topgun.OpAckPayload(last_id, level, results)))
    decoded = topgun.decode(fast)
    assert isinstance(decoded, topgun.OpAck)
    assert [r.op_id for r in decoded.payload.results or []] == op_ids
