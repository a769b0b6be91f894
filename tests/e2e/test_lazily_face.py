"""/lazily over real loopback WebSockets: roles, authority, gaps, late joiners, resync, errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from tests.e2e.helpers import (
    Follower,
    delta,
    follow_until,
    handshake,
    recv_json,
    serve,
    snap,
    ws_lazily,
)


async def test_two_subscribers_one_producer(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        subs = [await ws_lazily(http, srv.ws_url, "board") for _ in range(2)]
        for _, reply in subs:
            assert reply["protocol_id"] == "lazily-ipc"
            assert reply["session_id"] == "board"
        prod, reply = await ws_lazily(http, srv.ws_url, "board", publish=True)
        assert "publish" in reply["features"]
        await prod.send_bytes(snap(0, {1: b"a", 2: b"b"}))
        for e in range(10):
            await prod.send_bytes(delta(e, 1 + e % 2, str(e).encode()))
        for ws, _ in subs:
            seen = await follow_until(ws, Follower(), 10)
            assert seen.values == {1: b"8", 2: b"9"}
            assert seen.gaps == 0
            assert seen.snapshots == 1


async def test_second_publisher_is_refused_and_not_fanned_out(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        sub, _ = await ws_lazily(http, srv.ws_url, "s")
        owner, _ = await ws_lazily(http, srv.ws_url, "s", publish=True)
        early, _ = await ws_lazily(http, srv.ws_url, "s", publish=True)  # before any frame
        await owner.send_bytes(snap(0, {1: b"mine"}))
        seen = await follow_until(sub, Follower(), 0)
        # Once the stream has a producer, another is refused in place of the handshake reply.
        thief, refusal = await ws_lazily(http, srv.ws_url, "s", publish=True)
        assert refusal == {
            "type": "error",
            "code": "ForbiddenPublish",
            "message": refusal["message"],
            "path": "stream",
        }
        assert "another connection" in refusal["message"]
        await thief.close()
        # One that joined before the owner's first frame is refused frame by frame.
        await early.send_bytes(snap(0, {1: b"stolen"}))
        err = await recv_json(early)
        assert err == {
            "type": "error",
            "code": "ForbiddenPublish",
            "message": err["message"],
            "path": "stream",
        }
        await early.send_bytes(delta(0, 1, b"stolen"))
        assert (await recv_json(early))["code"] == "ForbiddenPublish"
        await owner.send_bytes(delta(0, 1, b"still mine"))
        seen = await follow_until(sub, seen, 1)
        assert seen.values == {1: b"still mine"}
        await sub.send_bytes(snap(5, {1: b"sub"}))  # a subscriber may not publish either
        assert (await recv_json(sub))["code"] == "ForbiddenPublish"


async def test_gap_and_missing_snapshot_are_rejected(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        sub, _ = await ws_lazily(http, srv.ws_url, "g")
        prod, _ = await ws_lazily(http, srv.ws_url, "g", publish=True)
        await prod.send_bytes(delta(0, 1, b"x"))
        assert (await recv_json(prod))["code"] == "SnapshotRequired"
        await prod.send_bytes(snap(3, {1: b"a"}))
        await prod.send_bytes(delta(5, 1, b"gap"))
        err = await recv_json(prod)
        assert err["code"] == "EpochGap"
        assert "base" in err["message"] or "epoch" in err["message"]
        await prod.send_bytes(delta(3, 1, b"ok"))
        seen = await follow_until(sub, Follower(), 4)
        assert seen.values == {1: b"ok"}
        assert seen.deltas == 1  # the gap never reached the subscriber


async def test_late_joiner_gets_the_latest_state_from_the_hub(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        prod, _ = await ws_lazily(http, srv.ws_url, "late", publish=True)
        await prod.send_bytes(snap(0, {1: b"0"}))
        for e in range(25):
            await prod.send_bytes(delta(e, 1, str(e + 1).encode()))
        await asyncio.sleep(0.05)
        late, _ = await ws_lazily(http, srv.ws_url, "late")
        first = await recv_json(late)
        assert first["type"] == "snapshot"
        assert first["epoch"] == 25
        seen = Follower()
        seen.feed(json.dumps(first))
        assert seen.values == {1: b"25"}


async def test_resync_request_and_reconnect_after_a_dropped_connection(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        prod, _ = await ws_lazily(http, srv.ws_url, "r", publish=True)
        await prod.send_bytes(snap(0, {1: b"0"}))
        sub, _ = await ws_lazily(http, srv.ws_url, "r")
        await follow_until(sub, Follower(), 0)
        await sub.send_str(json.dumps({"type": "resync_request", "last_epoch": 0}))
        again = await recv_json(sub)
        assert again["type"] == "snapshot"
        await sub.close()  # dropped
        for e in range(5):
            await prod.send_bytes(delta(e, 1, str(e + 1).encode()))
        back, _ = await ws_lazily(http, srv.ws_url, "r")
        seen = await follow_until(back, Follower(), 5)
        assert seen.values == {1: b"5"}
        assert seen.snapshots == 1


async def test_subscriber_writes_reach_the_producer(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        prod, _ = await ws_lazily(http, srv.ws_url, "w", publish=True)
        await prod.send_bytes(snap(0, {1: b"0"}))
        sub, _ = await ws_lazily(http, srv.ws_url, "w")
        await follow_until(sub, Follower(), 0)
        await sub.send_bytes(delta(0, 1, b"please"))
        forwarded = await recv_json(prod)
        assert forwarded["ops"] == [{"op": "cell_set", "slot_id": 1, "payload": "cGxlYXNl"}]
        bad = json.dumps(
            {
                "type": "delta",
                "base_epoch": 0,
                "epoch": 1,
                "ops": [{"op": "invalidate", "slot_id": 1}],
            }
        )
        await sub.send_str(bad)
        err = await recv_json(sub)
        assert err["code"] == "Forbidden"
        assert err["path"] == "ops[0]"
        assert err["message"] == "a subscriber may only send cell_set writes"


async def test_garbage_and_oversize_get_typed_errors_others_keep_working(tmp_path: Path) -> None:
    async with serve(tmp_path, max_frame_size=4096) as srv, aiohttp.ClientSession() as http:
        prod, _ = await ws_lazily(http, srv.ws_url, "o", publish=True)
        await prod.send_bytes(snap(0, {1: b"0"}))
        sub, _ = await ws_lazily(http, srv.ws_url, "o")
        follower = await follow_until(sub, Follower(), 0)
        bad, _ = await ws_lazily(http, srv.ws_url, "o")
        await recv_json(bad)  # its snapshot
        await bad.send_str("{not json")
        err = await recv_json(bad)
        assert err["code"] == "DecodeError"
        await bad.send_str(json.dumps({"type": "resync_request", "last_epoch": -1}))
        err = await recv_json(bad)
        assert err["code"] == "DecodeError"
        assert "last_epoch" in err["path"]
        assert "last_epoch" not in err["message"]
        await bad.send_str("x" * 5000)
        err = await recv_json(bad)
        assert err["code"] == "Oversize"
        closed = await asyncio.wait_for(bad.receive(), 5)
        assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        await prod.send_bytes(delta(0, 1, b"fine"))
        await follow_until(sub, follower, 1)
        assert follower.values == {1: b"fine"}


async def test_handshake_fails_closed(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{srv.ws_url}/lazily")
        await ws.send_str(handshake("s", protocol_major_version=2).decode())
        err = await recv_json(ws)
        assert err["code"] == "HandshakeFailed"
        assert err["path"] == "protocol_major_version"
        assert err["message"] == "major version 2 (remote) != 1 (local)"
        closed = await asyncio.wait_for(ws.receive(), 5)
        assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        ws = await http.ws_connect(f"{srv.ws_url}/lazily")
        await ws.send_bytes(snap(0, {}))
        assert (await recv_json(ws))["code"] == "HandshakeFailed"
