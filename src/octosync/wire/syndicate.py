"""The Syndicate network protocol's packets (``protocol.prs``) over Preserves binary.

Bytes <-> frozen Structs: ``Turn`` of ``TurnEvent(oid, Assert | Retract | Message | Sync)``,
``Error``, ``Extension`` and ``Nop``. Embedded values on the wire are ``WireRef``s
(``sturdy.prs``: ``[0 oid]`` is the sender's own object, ``[1 oid caveat ...]`` the receiver's);
they are decoded to ``Mine`` / ``Yours`` here, so a bad ref fails the packet like any other
field. Preserves values are the ``preserves`` package's; this module only checks shapes,
strictly, and names the failing field. ``PacketStream`` splits a TCP byte stream into packets.

The bytes go through ``wire.preserves_fast``, which reads and writes exactly what the
``preserves`` package does, faster; ``OCTOSYNC_PRESERVES=package`` in the environment makes
this module use the package's own codec instead (to measure one against the other).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, TypeAlias

import msgspec
from preserves import Embedded, Record, Symbol
from preserves import error as preserves_error
from preserves.binary import Decoder, Encoder

from octosync.errors import DecodeError, Oversize
from octosync.wire import preserves_fast

PACKAGE_CODEC = os.environ.get("OCTOSYNC_PRESERVES") == "package"
"""Use the ``preserves`` package's codec rather than the fast path (a benchmark's baseline)."""

Value: TypeAlias = Any
"""A Preserves value as the ``preserves`` package represents it."""


class Mine(msgspec.Struct, frozen=True):
    """``[0 oid]``: an object exported by the side that sent the packet."""

    oid: int


class Yours(msgspec.Struct, frozen=True):
    """``[1 oid caveat ...]``: an object of the receiving side, optionally attenuated."""

    oid: int
    attenuation: tuple[Value, ...] = ()


WireRef: TypeAlias = Mine | Yours


class Assert(msgspec.Struct, frozen=True):
    assertion: Value
    handle: int


class Retract(msgspec.Struct, frozen=True):
    handle: int


class Message(msgspec.Struct, frozen=True):
    body: Value


class Sync(msgspec.Struct, frozen=True):
    peer: WireRef


Event: TypeAlias = Assert | Retract | Message | Sync


class TurnEvent(msgspec.Struct, frozen=True):
    oid: int
    event: Event


class Turn(msgspec.Struct, frozen=True):
    events: tuple[TurnEvent, ...]


class Error(msgspec.Struct, frozen=True):
    message: str
    detail: Value


class Extension(msgspec.Struct, frozen=True):
    label: Value
    fields: tuple[Value, ...]


class Nop(msgspec.Struct, frozen=True):
    pass


Packet: TypeAlias = Turn | Error | Extension | Nop

A = Symbol("A")
R = Symbol("R")
M = Symbol("M")
S = Symbol("S")
ERROR = Symbol("error")


def _int(v: Value, path: str) -> int:
    if type(v) is not int:
        raise DecodeError(f"expected an integer, got {type(v).__name__}", path=path)
    return v


def _oid(v: Value, path: str) -> int:
    oid = _int(v, path)
    if oid < 0:
        raise DecodeError("an OID is a non-negative integer", path=path)
    return oid


def decode_wire_ref(v: Value) -> WireRef:
    """The ``decode_embedded`` hook: a ``WireRef`` or ``DecodeError``."""
    if type(v) is Embedded and isinstance(v.embeddedValue, Mine | Yours):
        # syndicate-py embeds its Sync peer twice (``#:#:[0 oid]``): accept it as one.
        ref: WireRef = v.embeddedValue
        return ref
    if type(v) is not tuple or len(v) < 2:
        raise DecodeError("a wire ref is [0 oid] or [1 oid caveat ...]", path="ref")
    if v[0] == 0 and type(v[0]) is int and len(v) == 2:
        return Mine(_oid(v[1], "ref.oid"))
    if v[0] == 1 and type(v[0]) is int:
        return Yours(_oid(v[1], "ref.oid"), tuple(v[2:]))
    raise DecodeError("a wire ref is [0 oid] or [1 oid caveat ...]", path="ref")


def encode_wire_ref(ref: WireRef) -> Value:
    if isinstance(ref, Mine):
        return (0, ref.oid)
    return (1, ref.oid, *ref.attenuation)


def _event(v: Value, path: str) -> Event:
    if not isinstance(v, Record):
        raise DecodeError("an event is <A ...>, <R ...>, <M ...> or <S ...>", path=path)
    label, fields = v.key, v.fields
    if label == A and len(fields) == 2:
        return Assert(fields[0], _int(fields[1], f"{path}.handle"))
    if label == R and len(fields) == 1:
        return Retract(_int(fields[0], f"{path}.handle"))
    if label == M and len(fields) == 1:
        return Message(fields[0])
    if label == S and len(fields) == 1:
        peer = fields[0]
        if not isinstance(peer, Embedded):
            raise DecodeError("Sync's peer must be an embedded ref", path=f"{path}.peer")
        ref: WireRef = peer.embeddedValue
        return Sync(ref)
    raise DecodeError(f"unknown event {label!r}/{len(fields)}", path=path)


def packet_of(v: Value) -> Packet:
    """The packet a decoded Preserves value is; ``DecodeError`` naming the field if none."""
    if v is False:
        return Nop()
    if type(v) is tuple:
        events = []
        for i, item in enumerate(v):
            if type(item) is not tuple or len(item) != 2:
                raise DecodeError("a turn event is [oid event]", path=f"turn[{i}]")
            events.append(TurnEvent(_oid(item[0], f"turn[{i}].oid"), _event(item[1], f"turn[{i}]")))
        return Turn(tuple(events))
    if isinstance(v, Record):
        if v.key == ERROR and len(v.fields) == 2 and type(v.fields[0]) is str:
            return Error(v.fields[0], v.fields[1])
        return Extension(v.key, tuple(v.fields))
    raise DecodeError("a packet is a turn, <error ...>, an extension or #f", path="packet")


def _decoder(data: bytes | bytearray = b"") -> Decoder:
    return Decoder(data, decode_embedded=decode_wire_ref)


def decode_value(data: bytes) -> Value:
    """Exactly one Preserves value from ``data``; ``DecodeError`` on anything else."""
    if PACKAGE_CODEC:
        decoder = _decoder(data)
        value = _next(decoder)
        end = decoder.index
    else:
        got = _fast_next(bytes(data), 0)
        value, end = (None, 0) if got is None else got
    if value is None:
        raise DecodeError("truncated Preserves value", path="packet")
    if end != len(data):
        raise DecodeError("bytes after the packet's value", path="packet")
    return value


def decode_packet(data: bytes) -> Packet:
    return packet_of(decode_value(data))


@contextlib.contextmanager
def _malformed() -> Iterator[None]:
    """Whatever either codec raises on bad bytes, as one ``DecodeError``."""
    try:
        yield
    except DecodeError:
        raise
    except RecursionError:
        raise DecodeError("value nested too deeply", path="packet") from None
    except (preserves_error.DecodeError, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise DecodeError(f"malformed Preserves: {exc}", path="packet") from None


def _next(decoder: Decoder) -> Value | None:
    with _malformed():
        return decoder.try_next()


def _fast_next(data: bytes, index: int) -> tuple[Value, int] | None:
    """``_next`` on the fast path: the same errors for the same bytes."""
    with _malformed():
        return preserves_fast.decode_from(data, index, decode_wire_ref)


def _event_value(e: Event) -> Value:
    if type(e) is Assert:
        return Record(A, (e.assertion, e.handle))
    if type(e) is Retract:
        return Record(R, (e.handle,))
    if type(e) is Message:
        return Record(M, (e.body,))
    assert type(e) is Sync
    return Record(S, (Embedded(e.peer),))


def packet_value(p: Packet) -> Value:
    if type(p) is Turn:
        return tuple((te.oid, _event_value(te.event)) for te in p.events)
    if type(p) is Error:
        return Record(ERROR, (p.message, p.detail))
    if type(p) is Extension:
        return Record(p.label, p.fields)
    return False


def encode_packet(p: Packet) -> bytes:
    if not PACKAGE_CODEC:
        return preserves_fast.encode(packet_value(p), encode_wire_ref)
    encoder = Encoder(encode_embedded=encode_wire_ref)
    encoder.append(packet_value(p))
    return bytes(encoder.buffer)


class PreDecoded(bytes):
    """A packet's bytes that ``PacketStream`` already decoded: the value rides along, so the
    session does not parse them twice."""

    value: Value


class PacketStream:
    """Splits a byte stream into Preserves values (sans-I/O); ``Oversize`` when an incomplete
    value grows past the limit, ``DecodeError`` on bytes that cannot start a value."""

    def __init__(self, max_frame_size: int) -> None:
        self._decoder = _decoder()
        self._buf = b""
        self.max_frame_size = max_frame_size

    def feed(self, data: bytes | bytearray) -> list[bytes]:
        if not PACKAGE_CODEC:
            return self._feed_fast(data)
        decoder = self._decoder
        decoder.extend(data)
        frames: list[bytes] = []
        while True:
            start = decoder.index
            value = _next(decoder)
            if value is None:
                break
            frame = PreDecoded(decoder.packet[start : decoder.index])
            frame.value = value
            frames.append(frame)
        self._check_pending(len(decoder.packet) - decoder.index)
        return frames

    def _feed_fast(self, data: bytes | bytearray) -> list[bytes]:
        buf = self._buf + bytes(data) if self._buf else bytes(data)
        frames: list[bytes] = []
        index = 0
        while True:
            got = _fast_next(buf, index)
            if got is None:
                break
            value, end = got
            frame = PreDecoded(buf[index:end])
            frame.value = value
            frames.append(frame)
            index = end
        self._buf = buf[index:]
        self._check_pending(len(self._buf))
        return frames

    def _check_pending(self, pending: int) -> None:
        if pending > self.max_frame_size:
            raise Oversize(
                f"a packet of more than {self.max_frame_size} bytes is still incomplete",
                path="length",
            )
