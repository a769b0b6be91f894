"""WVP over a Unix socket, as Echo's own tools connect: bare JS-ABI packets back to back.

The session is the WebSocket face's (same hub calls, same lifecycle), over the plain-stream
loop (``connection.serve_tcp``) with a framer that splits packets by their header. Who may
connect is decided by the socket file's mode (0600: this user only), so a connection here is
granted read and publish on every warp and global notifications, as ``--insecure-dev`` grants
a loopback WebSocket.
"""

from __future__ import annotations

import functools
from pathlib import Path

from octosync.errors import DecodeError
from octosync.hub import ViewKey
from octosync.hub.types import GLOBAL_SCOPE
from octosync.server.auth import ClaimGrants
from octosync.server.connection import serve_tcp
from octosync.server.runtime import Runtime
from octosync.server.unix_listen import UnixListener, listen_unix
from octosync.server.view_encoders import WVP_STREAM_VIEW
from octosync.server.wvp_session import WvpSession
from octosync.wire import jsabi, wvp

SOCKET_GRANTS = ClaimGrants.of(
    subject="unix-socket",
    streams={"*": frozenset({"read", "publish"}), GLOBAL_SCOPE: frozenset({"publish"})},
)


class WvpStreamSession(WvpSession):
    byte_stream = True
    view = ViewKey("wvp", WVP_STREAM_VIEW)

    def _frame(self, msg: wvp.Message) -> bytes:
        return wvp.encode(msg, self.rt.hub.next_ts())


def open_socket_session(rt: Runtime, conn: int) -> WvpStreamSession:
    return WvpStreamSession(rt, conn, SOCKET_GRANTS)


class PacketSplitter:
    """Splits a byte stream into whole JS-ABI packets (header, payload and checksum, checked
    by the session's ``decode``); a length past ``max_frame_size`` is refused at its header."""

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while len(self._buf) >= jsabi.HEADER_SIZE:
            room = max(0, self.max_frame_size - jsabi.HEADER_SIZE - jsabi.CHECKSUM_SIZE)
            length = jsabi.check_header(
                bytes(self._buf[: jsabi.HEADER_SIZE]), max_payload=min(room, jsabi.MAX_PAYLOAD)
            )
            total = jsabi.HEADER_SIZE + length + jsabi.CHECKSUM_SIZE
            if len(self._buf) < total:
                break
            out.append(bytes(self._buf[:total]))
            del self._buf[:total]
        return out


async def listen(rt: Runtime, path: Path) -> UnixListener:
    """Listen on ``path`` (mode 0600, made as ``unix_listen`` makes it): a stale socket file
    is replaced; anything else there, or a socket another process still serves, is a
    ``ListenError``."""
    serve = functools.partial(serve_tcp, rt, open_socket_session, framer=PacketSplitter)
    return await listen_unix(path, serve, "--wvp-socket")


__all__ = ["DecodeError", "PacketSplitter", "WvpStreamSession", "listen", "open_socket_session"]
