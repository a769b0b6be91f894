"""The hub's encoder table: one encoder per view key, built once from the faces' dialects.

A view key names a face's wire dialect plus its transport's framing: ``lazily-<dialect>/ws``,
``lazily-<dialect>/tcp``, ``wvp/ws`` and ``wvp/stream``. The runtime hands this table to the
hub when it makes it, and the hub encodes each accepted frame once per view through it;
nothing is registered later, and the hub never calls back into the server.
"""

from __future__ import annotations

from octosync.hub.streams import warp_id_of
from octosync.hub.types import Encoder, OutFrame
from octosync.wire import wvp
from octosync.wire.framing import encode_frame
from octosync.wire.lazily_dialects import DIALECT_SET, FaceDialect
from octosync.wire.websocket import ws_frame

WVP_VIEW = "wvp/ws"
WVP_STREAM_VIEW = "wvp/stream"
"""WVP over a byte stream (the Unix socket): bare JS-ABI packets, back to back."""


def lazily_view_key(dialect: FaceDialect, transport: str) -> str:
    """The view key of a lazily connection speaking ``dialect`` over ``transport``."""
    return f"lazily-{dialect.name}/{transport}"


def _lazily_encoders(dialect: FaceDialect) -> dict[str, Encoder]:
    def for_ws(frame: OutFrame) -> bytes:
        return ws_frame(dialect.encode(frame.body), text=dialect.text)

    def for_tcp(frame: OutFrame) -> bytes:
        return encode_frame(dialect.encode(frame.body))

    return {lazily_view_key(dialect, "ws"): for_ws, lazily_view_key(dialect, "tcp"): for_tcp}


def wvp_packet(frame: OutFrame) -> bytes:
    """A WVP stream frame (or a resync request for the producer) as one JS-ABI packet."""
    body = frame.body
    msg: wvp.Message
    if isinstance(body, wvp.ResyncRequest):
        msg = body
    elif isinstance(body, wvp.WarpSnapshot | wvp.WarpDiff):
        msg = wvp.WarpStream(warp_id_of(frame.stream), body)
    else:
        raise TypeError(f"{type(body).__name__} is not a WVP stream frame")
    return wvp.encode(msg, frame.ts)


def _encode_wvp(frame: OutFrame) -> bytes:
    return ws_frame(wvp_packet(frame), text=False)


def view_encoders() -> dict[str, Encoder]:
    """Every view key the server's faces use, with its encoder."""
    table: dict[str, Encoder] = {WVP_VIEW: _encode_wvp, WVP_STREAM_VIEW: wvp_packet}
    for dialect in DIALECT_SET.values():
        table.update(_lazily_encoders(dialect))
    return table
