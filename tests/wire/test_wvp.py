from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError
from octosync.wire import cbor, wvp
from octosync.wire.jsabi import encode_packet


def roundtrip(msg: wvp.Message, ts: int = 7) -> wvp.Message:
    back, got_ts = wvp.decode(wvp.encode(msg, ts))
    assert got_ts == ts
    return back


def test_every_message_roundtrips() -> None:
    msgs: list[wvp.Message] = [
        wvp.Handshake(capabilities=("publish",), client_version=1, agent_id="a"),
        wvp.HandshakeAck(
            status="ERROR",
            server_version=1,
            capabilities=(),
            session_id="s",
            error=wvp.ErrorPayload(code=7, name="HandshakeFailed", message="no"),
        ),
        wvp.ErrorPayload(code=8, name="EpochGap", message="gap", details={"hint": "x"}),
        wvp.Notification(kind="Warn", scope={"Warp": 3}, title="t"),
        wvp.Notification(kind="Info", scope="Global", title="t", body="b"),
        wvp.SubscribeWarp(warp_id=2**64 - 1),
        wvp.WarpStream(1, wvp.WarpSnapshot(epoch=0, graph={"nodes": []}, state_hash=b"h" * 32)),
        wvp.WarpStream(1, wvp.WarpDiff(from_epoch=0, to_epoch=1, ops=[{"AddNode": 1}])),
        wvp.ResyncRequest(warp_id=4, epoch=9, reason="Desync"),
        wvp.ResyncRequest(warp_id=4),
        wvp.HandOver(warp_id=4, session_id="conn-2"),
    ]
    for m in msgs:
        assert roundtrip(m) == m


def test_optional_fields_are_written_as_null_like_the_reference() -> None:
    pkt = wvp.encode(wvp.Handshake(capabilities=(), client_version=1), 0)
    env = cbor.decode(pkt[12:-32])
    assert env["payload"] == {
        "capabilities": [],
        "client_version": 1,
        "agent_id": None,
        "session_meta": None,
    }


def _packet(env: object) -> bytes:
    return encode_packet(cbor.encode(env))


def test_legacy_rmg_aliases_are_accepted() -> None:
    msg, _ = wvp.decode(_packet({"op": "subscribe_rmg", "ts": 1, "payload": {"rmg_id": 5}}))
    assert msg == wvp.SubscribeWarp(warp_id=5)
    frame = {"Diff": {"from_epoch": 1, "to_epoch": 2, "ops": [], "state_hash": list(range(32))}}
    msg, _ = wvp.decode(
        _packet({"op": "rmg_stream", "ts": 1, "payload": {"rmg_id": 5, "frame": frame}})
    )
    assert msg == wvp.WarpStream(5, wvp.WarpDiff(1, 2, [], bytes(range(32))))


@pytest.mark.parametrize(
    ("env", "path"),
    [
        ({"op": "nope", "ts": 1, "payload": {}}, "op"),
        ({"op": "subscribe_warp", "ts": -1, "payload": {"warp_id": 1}}, "ts"),
        ({"op": "subscribe_warp", "ts": 1, "payload": {"warp_id": "x"}}, "payload"),
        ({"op": "subscribe_warp", "ts": 1, "payload": {"warp_id": 1, "extra": 1}}, "payload"),
        (
            {"op": "warp_stream", "ts": 1, "payload": {"warp_id": 1, "frame": {"Bad": {}}}},
            "payload.frame",
        ),
        (
            {
                "op": "warp_stream",
                "ts": 1,
                "payload": {"warp_id": 1, "frame": {"Diff": {"from_epoch": 1}}},
            },
            "payload.frame.Diff",
        ),
        (
            {
                "op": "notification",
                "ts": 1,
                "payload": {"kind": "Info", "scope": {"Moon": 1}, "title": "t", "body": None},
            },
            "payload",
        ),
        ({"op": "handshake", "ts": 1}, "$"),
    ],
)
def test_bad_envelopes_are_decode_errors_naming_the_path(env: object, path: str) -> None:
    with pytest.raises(DecodeError) as err:
        wvp.decode(_packet(env))
    assert err.value.path == path


@given(st.binary(max_size=60))
def test_garbage_payload_is_only_ever_a_decode_error(junk: bytes) -> None:
    with contextlib.suppress(DecodeError):
        wvp.decode_payload(junk)


def test_resync_request_and_hand_over_match_the_documented_schema() -> None:
    from tests.protocol_schemas import check

    for msg in (
        wvp.ResyncRequest(warp_id=4, epoch=9, reason="Desync"),
        wvp.ResyncRequest(warp_id=4),
        wvp.HandOver(warp_id=4, session_id="conn-2"),
    ):
        check("wvp-envelope", cbor.decode(wvp.encode(msg, 3)[12:-32]))
