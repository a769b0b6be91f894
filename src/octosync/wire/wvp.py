"""WARP View Protocol messages: canonical CBOR ``{op, ts, payload}`` inside JS-ABI packets.

Payload shapes follow the reference session protocol. Optional fields are written as CBOR
``null`` (as the reference does) and accepted absent. Legacy ``subscribe_rmg`` / ``rmg_stream``
ops and the ``rmg_id`` field are accepted on input and never written. ``graph`` and ``ops`` are
the producer's own data: carried through untouched, never interpreted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec

from octosync.errors import DecodeError
from octosync.warp.frames import WarpDiff as WarpDiff  # re-exported: the frames of its messages
from octosync.warp.frames import WarpSnapshot as WarpSnapshot
from octosync.wire import cbor
from octosync.wire.jsabi import MAX_PAYLOAD, decode_packet, encode_packet

U32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]
U64 = Annotated[int, msgspec.Meta(ge=0)]
"""msgspec itself refuses integers beyond the u64 range."""
WarpId = U64


class _Payload(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


class ErrorPayload(_Payload, frozen=True):
    code: U32
    name: str
    message: str
    details: Any = None


class Handshake(_Payload, frozen=True):
    capabilities: tuple[str, ...]
    client_version: U32
    agent_id: str | None = None
    session_meta: dict[str, Any] | None = None


class HandshakeAck(_Payload, frozen=True):
    status: Literal["OK", "ERROR"]
    server_version: U32
    capabilities: tuple[str, ...]
    session_id: str
    error: ErrorPayload | None = None


class Notification(_Payload, frozen=True):
    kind: Literal["Info", "Warn", "Error"]
    scope: Any
    title: str
    body: str | None = None

    def __post_init__(self) -> None:
        s = self.scope
        ok = s in ("Global", "Local") or (
            isinstance(s, dict)
            and len(s) == 1
            and next(iter(s)) in ("Session", "Warp")
            and type(next(iter(s.values()))) is int
        )
        if not ok:
            raise ValueError("scope must be Global, Local, {Session: u64} or {Warp: u64}")


class SubscribeWarp(_Payload, frozen=True):
    warp_id: WarpId


class WarpStream(_Payload, frozen=True):
    warp_id: WarpId
    frame: WarpSnapshot | WarpDiff


class DurableAck(_Payload, frozen=True):
    """Server to a producer whose handshake offered ``durable_ack``: the journal holds warp
    ``warp_id`` through ``through_epoch`` (what it must keep to resend after a crash)."""

    warp_id: WarpId
    through_epoch: U64


class ResyncRequest(_Payload, frozen=True):
    """A consumer lost the stream (a gap, a hash mismatch): it asks for a fresh snapshot.
    The hub forwards it to the warp's producer; ``epoch`` is the consumer's last good epoch."""

    warp_id: WarpId
    epoch: U64 | None = None
    reason: str | None = None


class HandOver(_Payload, frozen=True):
    """The producer of ``warp_id`` hands it to the connection whose handshake ack carried
    ``session_id``; that connection's next snapshot continues the stream."""

    warp_id: WarpId
    session_id: str


Message = (
    Handshake
    | HandshakeAck
    | ErrorPayload
    | Notification
    | SubscribeWarp
    | WarpStream
    | ResyncRequest
    | HandOver
    | DurableAck
)

OPS: dict[type[Message], str] = {
    Handshake: "handshake",
    HandshakeAck: "handshake_ack",
    ErrorPayload: "error",
    Notification: "notification",
    SubscribeWarp: "subscribe_warp",
    WarpStream: "warp_stream",
    ResyncRequest: "resync_request",
    HandOver: "hand_over",
    DurableAck: "durable_ack",
}
_BY_OP: dict[str, type[Message]] = {v: k for k, v in OPS.items()}
_BY_OP["subscribe_rmg"] = SubscribeWarp
_BY_OP["rmg_stream"] = WarpStream


OPAQUE = frozenset({"graph", "ops"})
"""Fields that are the peer's own data: the server validates them and keeps them as raw CBOR."""
MAX_COOKED = 64 * 1024
"""Bytes of a packet outside its opaque fields that the server builds into objects."""


def frame_to_plain(f: WarpSnapshot | WarpDiff) -> dict[str, Any]:
    if isinstance(f, WarpSnapshot):
        return {"Snapshot": {"epoch": f.epoch, "graph": f.graph, "state_hash": f.state_hash}}
    return {
        "Diff": {
            "from_epoch": f.from_epoch,
            "to_epoch": f.to_epoch,
            "ops": f.ops,
            "state_hash": f.state_hash,
        }
    }


def encode_frame(frame: WarpSnapshot | WarpDiff) -> bytes:
    """A stream frame alone as canonical CBOR (what the journal stores for a WVP stream)."""
    return cbor.encode(frame_to_plain(frame))


def decode_frame(data: bytes, *, opaque: bool = True) -> WarpSnapshot | WarpDiff:
    """The inverse of ``encode_frame`` (graph and ops kept raw unless ``opaque`` is False)."""
    return _frame_from_plain(cbor.decode(data, raw_keys=OPAQUE if opaque else frozenset()))


def encode_frames(frames: Sequence[WarpSnapshot | WarpDiff]) -> bytes:
    """Several stream frames as one canonical CBOR array (a snapshot and the diffs since it,
    as the cluster carries a WVP stream's state)."""
    return cbor.encode([frame_to_plain(f) for f in frames])


def decode_frames(data: bytes) -> list[WarpSnapshot | WarpDiff]:
    """The inverse of ``encode_frames`` (graph and ops kept raw)."""
    raw = cbor.decode(data, raw_keys=OPAQUE)
    if not isinstance(raw, list):
        raise DecodeError("frames must be an array", path="$")
    return [_frame_from_plain(f) for f in raw]


def to_plain(msg: Message) -> dict[str, Any]:
    """The CBOR-ready payload map (optional fields present as null, as the reference does)."""
    if isinstance(msg, WarpStream):
        return {"warp_id": msg.warp_id, "frame": frame_to_plain(msg.frame)}
    out: dict[str, Any] = msgspec.to_builtins(msg, builtin_types=(bytes, bytearray))
    for name in msg.__struct_fields__:
        out.setdefault(name, None)
    if isinstance(msg, HandshakeAck) and msg.error is not None:
        out["error"] = to_plain(msg.error)
    return out


def encode(msg: Message, ts: int) -> bytes:
    """A complete JS-ABI packet carrying ``msg``."""
    envelope = {"op": OPS[type(msg)], "ts": ts, "payload": to_plain(msg)}
    return encode_packet(cbor.encode(envelope))


def _frame_from_plain(raw: Any) -> WarpSnapshot | WarpDiff:
    if not isinstance(raw, dict) or len(raw) != 1:
        raise DecodeError("frame must be {Snapshot: ...} or {Diff: ...}", path="payload.frame")
    ((kind, body),) = raw.items()
    if not isinstance(body, dict):
        raise DecodeError("frame body must be a map", path=f"payload.frame.{kind}")
    body = dict(body)
    h = body.get("state_hash")
    if isinstance(h, list) and len(h) == 32 and all(type(b) is int and 0 <= b < 256 for b in h):
        body["state_hash"] = bytes(h)  # the reference writes Hash32 as an array of u8
    cls: type[WarpSnapshot] | type[WarpDiff]
    if kind == "Snapshot":
        cls = WarpSnapshot
    elif kind == "Diff":
        cls = WarpDiff
    else:
        raise DecodeError(f"unknown frame kind {kind!r}", path="payload.frame")
    try:
        return msgspec.convert(body, cls)
    except msgspec.ValidationError as exc:
        raise DecodeError(str(exc), path=f"payload.frame.{kind}") from exc


def decode_payload(data: bytes, *, opaque: bool = False) -> tuple[Message, int]:
    """``(message, ts)`` from a CBOR envelope (the packet's payload).

    ``opaque``: the server's reading. ``graph`` and ``ops`` stay ``cbor.Raw`` (validated,
    spliced back verbatim when re-encoded) and the rest of the packet is bounded by
    ``MAX_COOKED``; clients read everything as plain data.
    """
    raw_keys, cooked = (OPAQUE, MAX_COOKED) if opaque else (frozenset(), None)
    env = cbor.decode(data, raw_keys=raw_keys, max_cooked=cooked)
    if not isinstance(env, dict) or set(env) != {"op", "ts", "payload"}:
        raise DecodeError("envelope must be exactly {op, ts, payload}", path="$")
    op, ts, payload = env["op"], env["ts"], env["payload"]
    if not isinstance(op, str) or op not in _BY_OP:
        raise DecodeError(f"unknown op {op!r}", path="op")
    if type(ts) is not int or not 0 <= ts <= 2**64 - 1:
        raise DecodeError("ts must be a u64", path="ts")
    if not isinstance(payload, dict):
        raise DecodeError("payload must be a map", path="payload")
    cls = _BY_OP[op]
    payload = dict(payload)
    if cls in (SubscribeWarp, WarpStream, ResyncRequest) and "rmg_id" in payload:
        if "warp_id" in payload:
            raise DecodeError("both warp_id and legacy rmg_id given", path="payload.rmg_id")
        payload["warp_id"] = payload.pop("rmg_id")
    try:
        if cls is WarpStream:
            if set(payload) != {"warp_id", "frame"}:
                raise DecodeError("warp_stream needs exactly warp_id and frame", path="payload")
            frame = _frame_from_plain(payload["frame"])
            msg: Message = WarpStream(
                warp_id=msgspec.convert(payload["warp_id"], WarpId), frame=frame
            )
        else:
            msg = msgspec.convert(payload, cls)
    except msgspec.ValidationError as exc:
        raise DecodeError(str(exc), path="payload") from exc
    return msg, ts


def decode(
    packet: bytes, *, max_payload: int = MAX_PAYLOAD, opaque: bool = False
) -> tuple[Message, int]:
    """``(message, ts)`` from one complete JS-ABI packet."""
    return decode_payload(decode_packet(packet, max_payload=max_payload), opaque=opaque)
