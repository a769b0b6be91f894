"""The one table of what happens to a connection after each error it caused.

Errors always go to the offending connection only. Whether it stays open depends on whether
the connection can still be trusted to be in step: an authority, gap or permission error leaves
framing and identity intact (keep it open, the peer can correct itself); a failed handshake, a
missing credential, or a byte stream whose framing is lost (oversize, bad packet, garbage on a
length-prefixed stream) cannot be recovered, so the connection is closed after the error frame.

| error              | closes | why                                                         |
| ------------------ | ------ | ----------------------------------------------------------- |
| HandshakeFailed    | yes    | nothing was agreed; fail closed                             |
| Unauthorized       | yes    | no identity to act for                                      |
| Oversize           | yes    | the frame's payload is refused unread, so framing is lost   |
| DecodeError        | framed | closes on byte-stream faces (TCP, JS-ABI); a bad WebSocket  |
|                    |        | message is self-delimited, so that connection stays open    |
| Forbidden          | no     | the request is refused, the connection is still valid       |
| ForbiddenPublish   | no     | the frame is dropped; the peer may keep subscribing         |
| SnapshotRequired   | no     | the producer can send a snapshot next                       |
| EpochGap           | no     | the producer can send a snapshot next                       |
| Desync             | no     | reported to the producer, which re-snapshots                |
| LimitExceeded      | no     | the frame is refused whole; framing and identity are intact |
| RemoteProtocolError| no     | an op that breaks the graph: that frame is refused, unchanged|
| YjsRefused         | yes    | a Yjs message refused: the y-websocket protocol has no error |
|                    |        | message, so the close (with its code) is the refusal        |
| RelayError         | yes    | a Syndicate relay ends on its ``Error`` packet (the protocol |
|                    |        | has no way to resynchronise a peer's handles and OIDs)      |
| InvalidValue       | yes    | a peer's value or pattern the dataspace cannot hold: the    |
| InvalidPattern     | yes    | relay ends, as on any Syndicate error                       |
| ShuttingDown       | yes    | the server is draining                                      |
| Overloaded         | yes    | a connection cap is reached                                 |
| Unavailable        | yes    | this node's copy may be stale (it lost its cluster): come   |
|                    |        | back later or go to another node                            |
| JournalUnavailable | yes    | the journal cannot commit: the peer is told to come back    |
|                    |        | later and resend what was not acknowledged                  |
| InternalError      | yes    | serving this connection failed; only it is reset            |
| anything else      | yes    | unexpected: close rather than guess                         |

A closed WebSocket gets the close code of ``CLOSE_CODES`` (RFC 6455 §7.4.1): 1008 policy,
1009 too big, 1002 protocol error, 1011 internal, 1001 going away, 1013 try again later.
"""

from __future__ import annotations

from typing import Literal

from octosync.errors import (
    AuthError,
    DecodeError,
    Desync,
    EpochGap,
    Forbidden,
    ForbiddenPublish,
    HandshakeFailed,
    InternalError,
    InvalidPattern,
    InvalidValue,
    JournalUnavailable,
    LimitExceeded,
    OctosyncError,
    Overloaded,
    Oversize,
    ProtocolError,
    ReadOnlyDocument,
    RelayError,
    RemoteProtocolError,
    ShuttingDown,
    SnapshotRequired,
    Unauthorized,
    Unavailable,
    YjsRefused,
    YjsUpdateTooLarge,
)

Disposition = Literal["close", "keep", "close-if-stream"]

ERROR_POLICY: dict[type[OctosyncError], Disposition] = {
    HandshakeFailed: "close",
    Unauthorized: "close",
    Oversize: "close",
    DecodeError: "close-if-stream",
    Forbidden: "keep",
    ForbiddenPublish: "keep",
    SnapshotRequired: "keep",
    EpochGap: "keep",
    Desync: "keep",
    LimitExceeded: "keep",
    RemoteProtocolError: "keep",
    RelayError: "close",
    YjsRefused: "close",
    InvalidValue: "close",
    InvalidPattern: "close",
    ShuttingDown: "close",
    Overloaded: "close",
    JournalUnavailable: "close",
    Unavailable: "close",
    InternalError: "close",
}

CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_PROTOCOL = 1002
CLOSE_INTERNAL = 1011
CLOSE_GOING_AWAY = 1001
CLOSE_TRY_LATER = 1013

CLOSE_CODES: dict[type[OctosyncError], int] = {
    Oversize: CLOSE_TOO_BIG,
    YjsUpdateTooLarge: CLOSE_TOO_BIG,
    ReadOnlyDocument: CLOSE_POLICY,
    AuthError: CLOSE_POLICY,
    HandshakeFailed: CLOSE_POLICY,
    ProtocolError: CLOSE_PROTOCOL,
    ShuttingDown: CLOSE_GOING_AWAY,
    Overloaded: CLOSE_TRY_LATER,
    JournalUnavailable: CLOSE_TRY_LATER,
    Unavailable: CLOSE_TRY_LATER,
    InternalError: CLOSE_INTERNAL,
}


def close_code(error: OctosyncError) -> int:
    """The WebSocket close code for a connection closed because of ``error``."""
    for cls in type(error).__mro__:
        code = CLOSE_CODES.get(cls)
        if code is not None:
            return code
    return CLOSE_INTERNAL


def closes_connection(error: OctosyncError, *, byte_stream: bool) -> bool:
    """Whether the face must close ``error``'s connection after sending it the error frame.

    ``byte_stream``: the face reads a continuous byte stream (TCP u32 frames, JS-ABI packets)
    rather than self-delimited messages.
    """
    for cls in type(error).__mro__:
        disposition = ERROR_POLICY.get(cls)
        if disposition is not None:
            return disposition == "close" or (disposition == "close-if-stream" and byte_stream)
    return True
