"""Malformed frames at every face of a real server while a canary must not notice.

For each face (``/lazily``, lazily over TCP, ``/wvp``, ``/signal``, ``/topgun``,
``/dataspace``) the harness sends ``--frames`` malformed frames (random bytes, truncated and
mistyped JSON and MessagePack, integers such as 2^64 and 2^53+1, nesting 100,000 deep, frames
over the limit, bad JS-ABI magic, version, length and checksum, CBOR with indefinite lengths and
duplicate keys, MessagePack ext types, Preserves packets of the wrong shape and length),
reconnecting whenever the server closes a connection as its policy says. Reported per face:
frames sent, typed errors received (by name), closes, crashes (the server died, or wrote a
traceback: must be 0), the canary's gaps (must be 0) and longest pause, the server's RSS
before, after and by tenths of the run. The seeded generator makes a run repeatable (``--seed``).

    python bench/fuzz_faces.py                       # 1,000,000 frames per face (long)
    python bench/fuzz_faces.py --frames 2000         # what CI runs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import struct
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec.msgpack as msgpack
import preserves

from _harness import AUTH, TOKEN, Canary, Server, lazily_handshake, rss_mb, run_canary
from octosync.wire import cbor, jsabi

LIMIT = 64 * 1024
Gen = Callable[[random.Random], bytes]


def _json_frames() -> list[Gen]:
    good = (
        b'{"type":"delta","base_epoch":0,"epoch":1,'
        b'"ops":[{"op":"cell_set","slot_id":1,"payload":"YQ=="}]}'
    )
    return [
        lambda r: r.randbytes(r.randint(0, 64)),
        lambda r: good[: r.randint(0, len(good) - 1)],
        lambda r: good.replace(b"1,", b'"1",', 1),
        lambda r: good.replace(b'"epoch":1', b'"epoch":%d' % r.choice([2**64, 2**53 + 1, -1])),
        lambda r: b'{"type":"delta","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        lambda r: b'"' + b"a" * LIMIT + b'"',
        lambda r: b"\xd4\x01\x00" + r.randbytes(4),  # a MessagePack fixext
        lambda r: b'{"type":"\xff"}',
    ]


def _packet(payload: bytes, *, magic: bytes = b"JIT!", version: int = 1, fix: int = 0) -> bytes:
    ok = jsabi.encode_packet(payload)
    header = struct.pack(">4sHHI", magic, version, 0, len(payload) + fix)
    return header + ok[12:]


def _wvp_frames() -> list[Gen]:
    env = cbor.encode({"op": "subscribe_warp", "ts": 1, "payload": {"warp_id": 1}})
    return [
        lambda r: r.randbytes(r.randint(0, 64)),
        lambda r: _packet(env, magic=b"JIT?"),
        lambda r: _packet(env, version=2),
        lambda r: _packet(env, fix=r.choice([-1, 1, 2**31])),
        lambda r: jsabi.encode_packet(env)[:-1] + b"\x00",  # checksum
        lambda r: jsabi.encode_packet(b"\x9f\x01\x02\xff"),  # indefinite array
        lambda r: jsabi.encode_packet(b"\xa2\x61a\x00\x61a\x01"),  # duplicate keys
        lambda r: jsabi.encode_packet(b"\x81" * 100_000 + b"\x00"),
        lambda r: jsabi.encode_packet(
            cbor.encode({"op": "warp_stream", "ts": 2**64 - 1, "payload": {}})
        ),
        lambda r: b"\x00" * (LIMIT + 1),
    ]


def _topgun_frames() -> list[Gen]:
    good = msgpack.encode({"type": "PING", "timestamp": 1})
    op = {"type": "CLIENT_OP", "payload": {"mapName": "m", "key": "k", "opType": "PUT"}}
    return [
        lambda r: r.randbytes(r.randint(0, 64)),
        lambda r: good[: r.randint(0, len(good) - 1)],
        lambda r: msgpack.encode({"type": "NOT_A_TYPE"}),
        lambda r: msgpack.encode({**op, "payload": {**op["payload"], "opType": 5}}),
        lambda r: msgpack.encode({"type": "PING", "timestamp": r.choice([2**64 - 1, -(2**63)])}),
        lambda r: b"\x91" * 100_000 + b"\x00",  # arrays 100,000 deep
        lambda r: msgpack.encode({"type": "PING", "timestamp": 1, "x": "a" * LIMIT}),
        lambda r: b"\xd4\x01\x00",  # an ext type
    ]


def _dataspace_frames() -> list[Gen]:
    return [
        lambda r: r.randbytes(r.randint(0, 64)),
        lambda r: preserves.encode(preserves.Record(preserves.Symbol("turn"), [[1, 2]])),
        lambda r: preserves.encode([preserves.Symbol("nonsense"), 2**70]),
        lambda r: b"\xb5" * 100_000,  # sequences 100,000 deep
        lambda r: b"\xb1" + b"\xff" * 9,  # a string with an impossible length
        lambda r: b"\x00" * (LIMIT + 1),
    ]


FACES: dict[str, list[Gen]] = {
    "lazily": _json_frames(),
    "tcp": _json_frames(),
    "wvp": _wvp_frames(),
    "signal": _json_frames(),
    "topgun": _topgun_frames(),
    "dataspace": _dataspace_frames(),
}


@dataclass
class Tally:
    sent: int = 0
    closes: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, name: str) -> None:
        self.errors[name] = self.errors.get(name, 0) + 1


def _error_name(face: str, data: bytes | str) -> str | None:
    try:
        if face == "topgun":
            doc = msgpack.decode(data if isinstance(data, bytes) else data.encode())
            if isinstance(doc, dict) and doc.get("type") == "ERROR":
                return str(doc["payload"]["details"]["name"])
            return None
        if face == "dataspace":
            packet = preserves.decode(data if isinstance(data, bytes) else data.encode())
            detail = packet[1] if isinstance(packet, preserves.Record) else None
            if isinstance(detail, preserves.Record) and detail.key == preserves.Symbol("octosync"):
                return str(detail[0])
            return None
        if face == "wvp":
            from octosync.wire import wvp

            msg = wvp.decode(data if isinstance(data, bytes) else data.encode())[0]
            return msg.name if isinstance(msg, wvp.ErrorPayload) else None
        doc = json.loads(data)
    except Exception:
        return "undecodable reply"
    return doc.get("code") if isinstance(doc, dict) and doc.get("type") == "error" else None


async def _open_ws(http: aiohttp.ClientSession, srv: Server, face: str) -> Any:
    if face == "topgun":  # authenticates in its first frames
        ws = await http.ws_connect(f"{srv.ws}/topgun", max_msg_size=0)
        await ws.receive()  # AUTH_REQUIRED
        await ws.send_bytes(msgpack.encode({"type": "AUTH", "token": TOKEN}))
        await ws.receive()  # AUTH_ACK
        return ws
    if face == "dataspace":
        return await http.ws_connect(f"{srv.ws}/dataspace", headers=AUTH, max_msg_size=0)
    if face == "signal":
        return await http.ws_connect(f"{srv.ws}/signal", headers=AUTH)
    if face == "lazily":
        ws = await http.ws_connect(f"{srv.ws}/lazily", headers=AUTH, max_msg_size=0)
        await ws.send_bytes(lazily_handshake("fuzz", True))
        await ws.receive()
        return ws
    ws = await http.ws_connect(f"{srv.ws}/wvp", headers=AUTH, max_msg_size=0)
    hello = cbor.encode(
        {"op": "handshake", "ts": 1, "payload": {"capabilities": [], "client_version": 1}}
    )
    await ws.send_bytes(jsabi.encode_packet(hello))
    await ws.receive()
    return ws


async def fuzz_ws(
    http: aiohttp.ClientSession,
    srv: Server,
    face: str,
    n: int,
    rng: random.Random,
    tally: Tally,
) -> Tally:
    """One frame at a time: each gets its typed error (or the policy's close) before the next."""
    gens = FACES[face]
    ws = await _open_ws(http, srv, face)
    while tally.sent < n:
        await ws.send_bytes(rng.choice(gens)(rng))
        tally.sent += 1
        msg = await ws.receive(timeout=10)
        if msg.type in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            tally.error(_error_name(face, msg.data) or "a reply that is not an error")
            continue
        tally.closes += 1
        ws = await _open_ws(http, srv, face)
    await ws.close()
    return tally


async def fuzz_tcp(srv: Server, n: int, rng: random.Random, tally: Tally) -> Tally:
    gens = FACES["tcp"]
    port = srv.tcp_port
    assert port is not None
    hs = lazily_handshake("fuzz-tcp", True, f"auth:{TOKEN}")

    async def reply(reader: asyncio.StreamReader) -> bytes:
        head = await reader.readexactly(4)
        return await reader.readexactly(struct.unpack(">I", head)[0])

    while tally.sent < n:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">I", len(hs)) + hs)
        await reply(reader)
        try:
            while tally.sent < n:
                frame = rng.choice(gens)(rng)
                writer.write(struct.pack(">I", len(frame)) + frame)
                tally.sent += 1
                name = _error_name("tcp", await asyncio.wait_for(reply(reader), 10))
                tally.error(name or "a reply that is not an error")
                if name in ("DecodeError", "Oversize", "LimitExceeded"):
                    await reader.read()  # the policy closes a byte stream after these
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        tally.closes += 1
        writer.close()
    return tally


@dataclass
class Row:
    face: str
    tally: Tally
    canary: Canary
    rss_before: float
    rss_after: float
    crashed: bool
    tracebacks: int
    rss_tenths: list[float] = field(default_factory=list)
    """The server's RSS after each tenth of the frames: a leak grows to the end, a high-water
    mark levels off."""


async def rss_by_tenths(pid: int, tally: Tally, n: int, out: list[float]) -> None:
    for k in range(1, 11):
        while tally.sent < n * k // 10:
            await asyncio.sleep(0.05)
        out.append(rss_mb(pid))


async def run_face(face: str, n: int, seed: int, journal: bool = True) -> Row:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(Path(tmp), tcp=face == "tcp", max_frame_size=LIMIT, journal=journal)
        crashed = False
        try:
            async with aiohttp.ClientSession() as http:
                await srv.ready(http)
                canary, stop = Canary(), asyncio.Event()
                task = asyncio.create_task(run_canary(http, srv, canary, stop))
                await asyncio.sleep(0.5)
                canary.reset_window()
                rss0 = rss_mb(srv.proc.pid)
                tally, tenths = Tally(), list[float]()
                sampler = asyncio.create_task(rss_by_tenths(srv.proc.pid, tally, n, tenths))
                if face == "tcp":
                    await fuzz_tcp(srv, n, rng, tally)
                else:
                    await fuzz_ws(http, srv, face, n, rng, tally)
                sampler.cancel()
                await asyncio.sleep(0.5)
                crashed = srv.proc.poll() is not None
                rss1 = rss_mb(srv.proc.pid) if not crashed else float("nan")
                stop.set()
                await task
        finally:
            log = srv.stop()
    return Row(face, tally, canary, rss0, rss1, crashed, log.count("Traceback"), tenths)


async def main_async(frames: int, seed: int, faces: list[str], journal: bool = True) -> list[Row]:
    rows = []
    for face in faces:
        row = await run_face(face, frames, seed, journal)
        rows.append(row)
        t = row.tally
        print(
            f"{face:7s} frames {t.sent:>9,}  typed errors {sum(t.errors.values()):>9,}"
            f"  closes {t.closes:>7,}  crashes {int(row.crashed) + row.tracebacks}"
            f"  canary gaps {row.canary.gaps} (longest pause {row.canary.longest * 1000:.0f} ms,"
            f" {row.canary.received} deltas)  RSS {row.rss_before:.0f}->{row.rss_after:.0f} MB"
            f" (by tenths: {' '.join(f'{r:.0f}' for r in row.rss_tenths)})"
            f"  {dict(sorted(t.errors.items(), key=lambda kv: -kv[1]))}",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1_000_000, help="per face")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--faces", default=",".join(FACES))
    parser.add_argument(
        "--no-journal", action="store_true", help="serve without the journal (RSS baseline)"
    )
    args = parser.parse_args(argv)
    rows = asyncio.run(
        main_async(args.frames, args.seed, args.faces.split(","), not args.no_journal)
    )
    bad = [r for r in rows if r.crashed or r.tracebacks or r.canary.gaps]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
