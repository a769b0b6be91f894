"""The cluster's messages: round trips, and strict decoding that names what is wrong."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError
from octosync.ipc.messages import Delta, RemoteOp, RemoteOpResult, Snapshot
from octosync.wire import cbor, wvp
from octosync.wire import cluster as wire
from tests.strategies import deltas, snapshots

nodes = st.from_regex(r"[A-Za-z0-9_-]{1,16}", fullmatch=True)
streams = st.text(min_size=1, max_size=30).filter(lambda s: not s.startswith("warp:"))
warps = st.integers(0, 2**64 - 1).map(lambda w: f"warp:{w}")
epochs = st.integers(0, 2**53)


@given(nodes, streams, epochs, epochs, st.integers(1, 5))
def test_a_frame_carries_the_message_and_its_epochs(
    node: str, stream: str, claim: int, base: int, span: int
) -> None:
    base = min(base, 2**53 - span)
    for msg in (Snapshot(epoch=base), Delta(base_epoch=base, epoch=base + span)):
        frame = wire.frame_of(node, stream, claim, msg)
        back = wire.decode(wire.encode(frame))
        assert isinstance(back, wire.ClusterFrame)
        assert back == frame
        assert (back.from_epoch, back.to_epoch) == (
            (base, base) if isinstance(msg, Snapshot) else (base, base + span)
        )
        assert wire.decode_body(back) == msg


@given(nodes, st.dictionaries(streams, st.tuples(st.none() | epochs, st.integers(0, 9), epochs)))
def test_a_heartbeat_round_trips(node: str, loads: dict[str, tuple[int | None, int, int]]) -> None:
    beat = wire.Heartbeat(
        node, "ws://127.0.0.1:1/lazily", {s: wire.StreamLoad(*v) for s, v in loads.items()}, 3
    )
    assert wire.decode(wire.encode(beat)) == beat


def test_a_body_that_is_not_what_the_envelope_announces_is_refused() -> None:
    frame = wire.frame_of("n1", "s", 1, Delta(base_epoch=4, epoch=5))
    lying = msgspec.structs.replace(frame, from_epoch=3)
    with pytest.raises(DecodeError) as err:
        wire.decode_body(lying)
    assert err.value.path == "$.body"
    swapped = msgspec.structs.replace(frame, kind="snapshot")
    with pytest.raises(DecodeError):
        wire.decode_body(swapped)


@pytest.mark.parametrize(
    ("message", "path"),
    [
        (
            {
                "type": "frame",
                "node": "",
                "stream": "s",
                "claim": 1,
                "kind": "delta",
                "from_epoch": 0,
                "to_epoch": 1,
                "body": b"",
            },
            "$.node",
        ),
        (
            {
                "type": "frame",
                "node": "n",
                "stream": "s",
                "claim": -1,
                "kind": "delta",
                "from_epoch": 0,
                "to_epoch": 1,
                "body": b"",
            },
            "$.claim",
        ),
        (
            {
                "type": "frame",
                "node": "n",
                "stream": "s",
                "claim": 1,
                "kind": "reset",
                "from_epoch": 0,
                "to_epoch": 1,
                "body": b"",
            },
            "$.kind",
        ),
        (
            {
                "type": "frame",
                "node": "n",
                "stream": "s",
                "claim": 1,
                "kind": "delta",
                "from_epoch": 2**53 + 1,
                "to_epoch": 1,
                "body": b"",
            },
            "$.from_epoch",
        ),
        ({"type": "gossip", "node": "n"}, "$.type"),
    ],
)
def test_strict_decoding_names_the_field(message: dict[str, object], path: str) -> None:
    with pytest.raises(DecodeError) as err:
        wire.decode(msgspec.msgpack.encode(message))
    assert err.value.path == path


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_the_typed_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        wire.decode(data)


@given(st.one_of(snapshots(), deltas(tagged=True)))
def test_any_state_plane_message_crosses_unchanged(msg: Snapshot | Delta) -> None:
    """The body is ``wire.msgpack``: exact for every message in the spelling that dialect
    reads back (an implied node state is not written; ``tests/wire/test_roundtrip.py``)."""
    back = wire.decode(wire.encode(wire.frame_of("n1", "s", 7, msg)))
    assert isinstance(back, wire.ClusterFrame)
    assert wire.decode_body(back) == msg


# --- WVP streams ------------------------------------------------------------------------------

plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
raws = plain.map(lambda v: cbor.Raw(cbor.encode(v)))
hashes = st.none() | st.binary(min_size=32, max_size=32)


def _diffs(base: int, ops: list[cbor.Raw]) -> list[wvp.WarpDiff]:
    return [wvp.WarpDiff(base + i, base + i + 1, op) for i, op in enumerate(ops)]


@given(nodes, warps, epochs, st.integers(0, 2**53 - 10), raws, hashes)
def test_a_wvp_diff_crosses_as_its_canonical_cbor(
    node: str, stream: str, claim: int, base: int, ops: cbor.Raw, h: bytes | None
) -> None:
    diff = wvp.WarpDiff(base, base + 1, ops, h)
    frame = wire.wvp_frame_of(node, stream, claim, [diff])
    assert frame.body == wvp.encode_frame(diff)  # the journal's bytes, encoded once
    back = wire.decode(wire.encode(frame))
    assert isinstance(back, wire.ClusterFrame)
    assert back == frame
    assert (back.kind, back.from_epoch, back.to_epoch) == ("delta", base, base + 1)
    assert wire.decode_wvp_body(back) == [diff]


@given(nodes, warps, epochs, st.integers(0, 2**53 - 10), raws, st.lists(raws, max_size=5))
def test_a_wvp_snapshot_crosses_with_the_diffs_since_it(
    node: str, stream: str, claim: int, base: int, graph: cbor.Raw, ops: list[cbor.Raw]
) -> None:
    frames: list[wire.WvpFrame] = [wvp.WarpSnapshot(base, graph), *_diffs(base, ops)]
    back = wire.decode(wire.encode(wire.wvp_frame_of(node, stream, claim, frames)))
    assert isinstance(back, wire.ClusterFrame)
    assert (back.kind, back.from_epoch, back.to_epoch) == ("snapshot", base, base + len(ops))
    decoded = wire.decode_wvp_body(back)
    assert decoded == frames
    assert all(
        isinstance(f.graph if isinstance(f, wvp.WarpSnapshot) else f.ops, cbor.Raw) for f in decoded
    )


def _lie(frame: wire.ClusterFrame, **changes: object) -> wire.ClusterFrame:
    return msgspec.structs.replace(frame, **changes)


SNAP = wvp.WarpSnapshot(4, cbor.Raw(cbor.encode({"nodes": [1]})))
DIFF = wvp.WarpDiff(4, 5, cbor.Raw(cbor.encode([["add", 2]])))
DIFF_FRAME = wire.wvp_frame_of("n1", "warp:9", 1, [DIFF])
SNAP_FRAME = wire.wvp_frame_of("n1", "warp:9", 1, [SNAP, DIFF])


@pytest.mark.parametrize(
    ("frame", "path"),
    [
        (_lie(DIFF_FRAME, from_epoch=3), "$.body"),
        (_lie(DIFF_FRAME, to_epoch=6), "$.body"),
        (
            _lie(DIFF_FRAME, body=wvp.encode_frame(wvp.WarpDiff(4, 6, DIFF.ops)), to_epoch=6),
            "$.body",
        ),
        (_lie(DIFF_FRAME, body=wvp.encode_frame(SNAP)), "$.body"),
        (_lie(DIFF_FRAME, body=wvp.encode_frame(DIFF) + b"\x00"), "$"),
        (_lie(DIFF_FRAME, stream="s"), "$.stream"),
        (_lie(SNAP_FRAME, to_epoch=4), "$.body"),
        (_lie(SNAP_FRAME, from_epoch=3), "$.body"),
        (_lie(SNAP_FRAME, body=wvp.encode_frames([DIFF])), "$.body"),
        (_lie(SNAP_FRAME, body=wvp.encode_frames([])), "$.body"),
        (_lie(SNAP_FRAME, body=wvp.encode_frame(SNAP)), "$"),
        (
            _lie(
                SNAP_FRAME, body=wvp.encode_frames([SNAP, wvp.WarpDiff(5, 6, DIFF.ops)]), to_epoch=6
            ),
            "$.body[1]",
        ),
        (_lie(SNAP_FRAME, body=wvp.encode_frames([SNAP, DIFF, SNAP]), to_epoch=4), "$.body[2]"),
        (_lie(SNAP_FRAME, body=wire.frame_of("n1", "s", 1, Snapshot(epoch=4)).body), "$"),
    ],
)
def test_a_wvp_body_is_decoded_strictly(frame: wire.ClusterFrame, path: str) -> None:
    with pytest.raises(DecodeError) as err:
        wire.decode_wvp_body(frame)
    assert err.value.path == path


def test_each_face_body_is_refused_as_the_other_face_body() -> None:
    lazily = wire.frame_of("n1", "warp:9", 1, Snapshot(epoch=4))
    with pytest.raises(DecodeError):  # msgpack is not canonical CBOR of WVP frames
        wire.decode_wvp_body(lazily)
    with pytest.raises(DecodeError) as err:
        wire.decode_wvp_body(_lie(lazily, stream="s"))
    assert err.value.path == "$.stream"
    for frame in (SNAP_FRAME, DIFF_FRAME):
        with pytest.raises(DecodeError):  # CBOR WVP frames are not wire.msgpack messages
            wire.decode_body(_lie(frame, stream="s"))


@given(st.binary(max_size=64), st.sampled_from(["snapshot", "delta"]))
def test_any_wvp_body_decodes_or_raises_the_typed_error(body: bytes, kind: str) -> None:
    frame = _lie(DIFF_FRAME, body=body, kind=kind)
    with contextlib.suppress(DecodeError):
        wire.decode_wvp_body(frame)


@given(
    nodes,
    warps,
    epochs,
    st.builds(wvp.ResyncRequest, st.integers(0, 2**64 - 1), epochs, st.text(max_size=20)),
)
def test_a_resync_request_crosses_as_its_wvp_packet(
    node: str, stream: str, claim: int, request: wvp.ResyncRequest
) -> None:
    sent = wire.Resync(node, stream, claim, wvp.encode(request, 1))
    got = wire.decode(wire.encode(sent))
    assert got == sent
    assert isinstance(got, wire.Resync)
    assert wire.decode_resync(got) == request


def test_a_resync_that_carries_another_wvp_message_is_refused() -> None:
    frame = wvp.WarpStream(1, wvp.WarpDiff(0, 1, [1]))
    with pytest.raises(DecodeError) as err:
        wire.decode_resync(wire.Resync("n", "warp:1", 1, wvp.encode(frame, 1)))
    assert err.value.path == "$.body"


writer_fields = (st.integers(0, 2**53), st.integers(1, 2**53), st.none() | st.text(max_size=20))
remote_ops = st.one_of(
    st.builds(
        lambda node, payload, req, peer, subject: RemoteOp(
            "write", node, payload, req, peer, subject
        ),
        st.integers(0, 2**53),
        st.binary(max_size=32),
        *writer_fields,
    ),
    st.builds(
        lambda node, req, peer, subject: RemoteOp("trigger_effect", node, None, req, peer, subject),
        st.integers(0, 2**53),
        *writer_fields,
    ),
)
results = st.builds(
    RemoteOpResult,
    st.integers(1, 2**53),
    st.integers(1, 2**53),
    st.none() | st.text(min_size=1, max_size=20),
    st.none() | st.text(min_size=1, max_size=40),
    st.booleans(),
)


@given(nodes, streams, epochs, remote_ops)
def test_a_writers_request_crosses_to_the_owner_unchanged(
    node: str, stream: str, claim: int, op: RemoteOp
) -> None:
    got = wire.decode(wire.encode(wire.Write(node, stream, claim, wire.encode_body(op))))
    assert isinstance(got, wire.Write)
    assert wire.decode_write(got) == op


@given(nodes, streams, results)
def test_the_producers_answer_crosses_back_unchanged(
    node: str, stream: str, result: RemoteOpResult
) -> None:
    got = wire.decode(wire.encode(wire.Answer(node, stream, wire.encode_body(result))))
    assert isinstance(got, wire.Answer)
    assert wire.decode_answer(got) == result


def test_an_answer_to_nobody_or_of_another_kind_is_refused() -> None:
    for body in (RemoteOpResult(1, applied=True), RemoteOp("write", 1, b"1")):
        with pytest.raises(DecodeError) as err:
            wire.decode_answer(wire.Answer("n", "s", wire.encode_body(body)))
        assert err.value.path == "$.body"
    with pytest.raises(DecodeError, match="a delta or a remote_op"):
        wire.decode_write(wire.Write("n", "s", 1, wire.encode_body(RemoteOpResult(1, 2))))
