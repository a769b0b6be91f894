"""A listening Unix socket made safely: mode 0600 from its first instant, never through a
symlink, a stale file replaced, a live one left to its server.

Who may connect is decided by the file's mode (this user only), so the file must never be
wider, even for a moment (the socket is bound under a umask of 0177), and binding must never
land where a symlink points (``bind`` itself refuses any existing path, a symlink included).
A socket file nobody answers on is what a killed server leaves: it is replaced. A socket some
process still serves, or any other kind of file, is a ``ListenError`` naming the option.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from octosync.errors import ListenError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class UnixListener:
    """A bound socket file, known by its inode so that stopping removes only this one."""

    path: Path
    server: asyncio.Server
    inode: tuple[int, int]

    def remove(self) -> None:
        """Close and unlink the file, unless another server has since put its own there."""
        self.server.close()
        try:
            st = self.path.lstat()
        except FileNotFoundError:
            return
        if (st.st_dev, st.st_ino) == self.inode:
            self.path.unlink(missing_ok=True)


def _clear_stale(path: Path, option: str) -> None:
    """Unlink ``path`` if it is a socket file nobody answers on; refuse anything else there."""
    try:
        st = path.lstat()  # lstat: a symlink is judged as itself, never followed
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a socket"
        raise ListenError(f"{path} exists and is {kind}; choose another {option}")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)  # a live server with a full backlog answers EAGAIN, not a wait
    try:
        probe.connect(str(path))
    except ConnectionRefusedError:
        path.unlink(missing_ok=True)  # nobody listens: left by a process that died
        return
    except BlockingIOError:
        pass  # listening, busy: a live server
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ListenError(f"cannot check {path}: {why}; choose another {option}") from exc
    finally:
        probe.close()
    raise ListenError(f"another process serves {path}; choose another {option}")


def bind_socket(path: Path, option: str) -> socket.socket:
    """A listening socket at ``path``, created with mode 0600."""
    _clear_stale(path, option)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the file is created 0600: no window with a wider mode
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:  # something appeared there since the check
            raise ListenError(f"{path} was taken while starting; choose another {option}") from exc
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ListenError(f"cannot listen on {path}: {why}; check {option}") from exc
    finally:
        os.umask(old)
    sock.listen(128)
    return sock


async def listen_unix(path: Path, handler: Handler, option: str) -> UnixListener:
    """Serve ``handler`` on a socket file at ``path`` (see the module's rules)."""
    sock = bind_socket(path, option)
    st = path.lstat()
    try:
        server = await asyncio.start_unix_server(handler, sock=sock)
    except BaseException:
        sock.close()
        path.unlink(missing_ok=True)
        raise
    return UnixListener(path, server, (st.st_dev, st.st_ino))
