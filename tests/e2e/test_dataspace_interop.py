"""Interop with real syndicate-py programs in their own processes, over TCP and WebSocket.

Each peer is ``syndicate_peer.py`` run with the project's Python: it connects with syndicate-py's
own relay, resolves a sturdy ref at the gatekeeper and prints what it sees as JSON lines. The
server runs in the test's event loop on loopback ports.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import preserves
import pytest

from octosync.dataspace.values import Record, Symbol
from octosync.server.dataspace_state import dataspace_state
from octosync.syndicate import mint_text
from octosync.syndicate.sturdy import attenuate, mint
from tests.e2e.helpers import TIMEOUT, Running, serve

pytestmark = pytest.mark.peer

SECRET = b"interop-test-secret-0123456789ab"
PEER = Path(__file__).with_name("syndicate_peer.py")
ROOT = Path(__file__).resolve().parents[2]


class Peer:
    """One syndicate-py process and the JSON lines it printed."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[list[Any]] = []

    async def next(self) -> list[Any]:
        assert self.proc.stdout is not None
        raw = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT)
        assert raw, "the peer exited before printing what was expected"
        line: list[Any] = json.loads(raw)
        self.lines.append(line)
        return line

    async def until(self, *expected: Any) -> list[list[Any]]:
        """Read until the line ``expected`` arrives; returns every line read on the way."""
        seen = []
        while True:
            line = await self.next()
            seen.append(line)
            if line == list(expected):
                return seen

    def kill(self) -> None:
        if self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGKILL)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Running]:
    async with serve(tmp_path, dataspace_port=0, dataspace_secret=SECRET) as running:
        yield running


@pytest.fixture
async def peers() -> AsyncIterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        peer.kill()
        await peer.proc.wait()


def address(server: Running, transport: str) -> str:
    if transport == "tcp":
        return f'<tcp "127.0.0.1" {server.dataspace_port}>'
    return f'<ws "{server.ws_url}/dataspace">'


async def start_peer(peers: list[Peer], mode: str, addr: str, ref: str, *args: str) -> Peer:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PEER),
        mode,
        addr,
        ref,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
    )
    peer = Peer(proc)
    peers.append(peer)
    return peer


REF = mint_text(SECRET, "demo")


@pytest.mark.parametrize(("first", "second"), [("tcp", "ws"), ("ws", "tcp")])
async def test_presence_and_its_retraction_when_a_peer_is_killed(
    server: Running, peers: list[Peer], first: str, second: str
) -> None:
    alice = await start_peer(peers, "presence", address(server, first), REF, "alice")
    bob = await start_peer(peers, "presence", address(server, second), REF, "bob")
    both = [["+", "alice"], ["+", "bob"]]
    assert sorted([await alice.next(), await alice.next()]) == both
    assert sorted([await bob.next(), await bob.next()]) == both
    bob.kill()
    assert await alice.next() == ["-", "bob"]
    relay = dataspace_state(server.runtime).relay
    assert len(relay.conns) == 1
    space = relay.dataspace("demo").space
    assert space.count(Record(Symbol("Present"), "bob")) == 0
    assert space.count(Record(Symbol("Present"), "alice")) == 1


@pytest.mark.parametrize("transport", ["tcp", "ws"])
async def test_an_observer_gets_exactly_the_matches_each_message_once_and_syncs_round_trip(
    server: Running, peers: list[Peer], transport: str
) -> None:
    other = "ws" if transport == "tcp" else "tcp"
    observer = await start_peer(peers, "observe", address(server, transport), REF)
    assert await observer.next() == ["ready"]  # printed by syndicate-py's sync continuation
    publisher = await start_peer(peers, "publish", address(server, other), REF)
    assert await publisher.next() == ["synced"]
    assert await publisher.next() == ["done"]
    seen = await observer.until("-", 1, "a")
    # Everything before the retraction: the two matches, in some order, and each Ping once.
    assert sorted(map(json.dumps, seen)) == sorted(
        map(json.dumps, [["+", 1, "a"], ["+", 3, "c"], ["!", 1], ["!", 3], ["-", 1, "a"]])
    )
    publisher.kill()
    assert await observer.next() == ["-", 3, "c"]


@pytest.mark.parametrize("transport", ["tcp", "ws"])
async def test_a_wrong_signature_is_rejected(
    server: Running, peers: list[Peer], transport: str
) -> None:
    forged = preserves.stringify(mint(b"not-the-server-secret-0123456789", "demo"))
    peer = await start_peer(peers, "resolve", address(server, transport), forged)
    good = await start_peer(peers, "resolve", address(server, transport), REF)
    assert await peer.next() == ["rejected", "bad signature"]
    assert await good.next() == ["accepted"]


async def test_a_reject_caveat_keeps_what_it_matches_out(
    server: Running, peers: list[Peer]
) -> None:
    """A ref attenuated with ``<reject <rec Present [<_>]>>`` resolves, but its presence never
    reaches the dataspace: the other peer sees only itself."""
    reject = preserves.parse("<reject <rec Present [<_>]>>")
    limited = preserves.stringify(attenuate(mint(SECRET, "demo"), [reject]))
    alice = await start_peer(peers, "presence", address(server, "tcp"), REF, "alice")
    assert await alice.next() == ["+", "alice"]
    mallory = await start_peer(peers, "presence", address(server, "ws"), limited, "mallory")
    assert await mallory.next() == ["+", "alice"]
    carol = await start_peer(peers, "presence", address(server, "ws"), REF, "carol")
    assert await carol.until("+", "carol")
    assert await alice.next() == ["+", "carol"]  # carol arrives, mallory never did
    assert ["+", "mallory"] not in alice.lines + carol.lines
