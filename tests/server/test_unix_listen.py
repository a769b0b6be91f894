"""Socket files made safely (``server.unix_listen``): mode 0600 whatever the umask, the umask
given back, a stale file replaced, a live one, a symlink or a plain file refused, and only
this server's own file removed at stop."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from pathlib import Path

import pytest

from octosync.errors import ListenError
from octosync.server.unix_listen import listen_unix


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(await reader.read(100))
    await writer.drain()
    writer.close()


async def test_the_file_is_0600_under_a_wide_umask_and_the_umask_is_given_back(
    tmp_path: Path,
) -> None:
    old = os.umask(0)
    try:
        made = await listen_unix(tmp_path / "s.sock", echo, "--option")
        assert os.umask(0) == 0  # given back as it was
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "s.sock").lstat().st_mode) == 0o600
    reader, writer = await asyncio.open_unix_connection(str(tmp_path / "s.sock"))
    writer.write(b"ping")
    assert await reader.read() == b"ping"
    writer.close()
    made.remove()
    assert not (tmp_path / "s.sock").exists()


async def test_a_stale_file_is_replaced_and_a_live_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()
    made = await listen_unix(path, echo, "--option")
    with pytest.raises(ListenError, match=r"another process serves .*; choose another --option"):
        await listen_unix(path, echo, "--option")
    assert stat.S_ISSOCK(path.lstat().st_mode)
    made.remove()


async def test_a_symlink_or_a_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ListenError, match="is a symlink"):
        await listen_unix(link, echo, "--option")
    with pytest.raises(ListenError, match="not a socket"):
        await listen_unix(target, echo, "--option")
    assert link.is_symlink()
    assert target.read_text() == "keep"


async def test_stopping_removes_only_the_file_it_made(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    made = await listen_unix(path, echo, "--option")
    path.unlink()  # someone else's file now stands where ours was
    path.write_text("theirs")
    made.remove()
    assert path.read_text() == "theirs"
