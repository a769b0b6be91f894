"""Lazily on a Unix socket (``--lazily-socket``): the TCP face's sessions and u32 framing on
a local socket file, for the state plane and the shared-document plane alike.

It is the ``--tcp-port`` face on another transport: the same ``LazilySession``, the same
length-prefixed frames (``wire.framing``), the same in-band credentials (a handshake's
``auth:`` feature; anonymous only under ``--insecure-dev``), counted as the ``tcp`` face. The
socket file's mode (0600, ``unix_listen``) decides who may reach it at all.
"""

from __future__ import annotations

import functools
from pathlib import Path

from octosync.server.connection import AnySession, serve_tcp
from octosync.server.lazily_session import LazilySession
from octosync.server.lazily_state import lazily_state
from octosync.server.runtime import Runtime
from octosync.server.unix_listen import UnixListener, listen_unix
from octosync.wire.framing import FrameDecoder

OPTION = "--lazily-socket"


def open_socket_session(rt: Runtime, conn: int) -> AnySession:
    return LazilySession(lazily_state(rt), conn, "tcp", None)


async def listen(rt: Runtime, path: Path) -> UnixListener:
    """Serve lazily on a socket file at ``path`` (a ``ListenError`` when it cannot)."""
    serve = functools.partial(serve_tcp, rt, open_socket_session, framer=FrameDecoder)
    return await listen_unix(path, serve, OPTION)
