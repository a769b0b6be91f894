"""Hostile clients against a real ``octosync serve``: how long can one frame stall everyone?

For each attack the server runs as its own process (auth on, journal on). A canary producer
publishes a delta every 2 ms to a canary subscriber on another stream; the attack runs beside
it. Reported per attack, with the quiet phase just before it as the same-run baseline:

- the canary's longest gap between deltas (what other subscribers feel) and any epoch gap;
- the server's own event-loop stalls (its 5 ms lag probe, ``octosync_loop_stalls``);
- typed errors and closes the attacker got; the server's RSS before and after.

Targets (issue #17): under 10 ms of stall for unauthenticated input, under 50 ms for any
authorized frame within limits, RSS growth under 20 MB. Usage::

    python bench/hostile.py            # every attack, full size
    python bench/hostile.py --quick    # small counts (CI smoke run)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from _harness import (
    AUTH,
    SECRET,
    Canary,
    Server,
    lazily,
    rss_mb,
    run_canary,
    stalls,
    worst,
)
from octosync.crdt.sync_messages import WireLWWRecord, WireTimestamp
from octosync.ipc.messages import Delta, EdgeAdd, NodeRemove, NodeSnapshot, Snapshot
from octosync.server.auth import issue_token
from octosync.wire import cbor, jsabi
from octosync.wire import topgun as tg
from octosync.wire import topgun_services as sv


@dataclass
class Outcome:
    frames: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    closes: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    """What a set-up step leaves for its attack."""

    def error(self, name: str) -> None:
        self.errors[name] = self.errors.get(name, 0) + 1


Attack = Callable[[aiohttp.ClientSession, Server, Outcome, int], Awaitable[None]]
Setup = Callable[[aiohttp.ClientSession, Server, Outcome], Awaitable[None]]


def cbor_maps(total: int) -> bytes:
    """Canonical CBOR: an array of ``{0: 0}`` maps, ``total`` bytes in all (about)."""
    n = (total - 5) // 3
    return b"\x9a" + struct.pack(">I", n) + b"\xa1\x00\x00" * n


def wvp_packet(op: str, payload: Any) -> bytes:
    return jsabi.encode_packet(cbor.encode({"op": op, "ts": 1, "payload": payload}))


def unauthenticated(face: str) -> Attack:
    body = jsabi.encode_packet(cbor_maps(8 * 1024 * 1024 - 64), max_payload=16 << 20)

    async def attack(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
        for _ in range(count):
            out.frames += 1
            try:
                ws = await http.ws_connect(f"{srv.ws}{face}")
            except aiohttp.WSServerHandshakeError as exc:
                out.error(f"HTTP {exc.status}")
                continue
            await ws.send_bytes(body)  # only reached if the upgrade were allowed
            out.closes += 1
            await ws.close()

    return attack


async def wvp_big_graph(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
    ws = await http.ws_connect(f"{srv.ws}/wvp", headers=AUTH, max_msg_size=0)
    await ws.send_bytes(wvp_packet("handshake", {"capabilities": [], "client_version": 1}))
    await ws.receive()
    graph = cbor_maps(1024 * 1024 - 200)
    envelope = b"\xa3\x62op\x6bwarp_stream\x62ts\x01\x67payload\xa2\x65frame\xa1\x68Snapshot"
    for i in range(count):
        snap = b"\xa3\x65epoch" + cbor.encode(i) + b"\x65graph" + graph + b"\x6astate_hash\xf6"
        raw = envelope + snap + b"\x67warp_id\x01"
        await ws.send_bytes(jsabi.encode_packet(raw))
        out.frames += 1
    await ws.send_bytes(wvp_packet("subscribe_warp", {"warp_id": 99}))
    await asyncio.sleep(0.5)
    await ws.close()


async def lazily_nested(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
    ws = await lazily(http, srv, "nested", True)
    frame = b'{"x":' + b"[" * 1000 + b"]" * 1000 + b"}"
    for _ in range(count):
        await ws.send_bytes(frame)
        out.frames += 1
        msg = await ws.receive()
        if msg.type == aiohttp.WSMsgType.TEXT:
            out.error(json.loads(msg.data)["code"])
        else:
            out.closes += 1
            ws = await lazily(http, srv, "nested", True)
    await ws.close()


async def signal_garbage(
    http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int
) -> None:
    ws = await http.ws_connect(f"{srv.ws}/signal", headers=AUTH)
    frames = [
        b'{"type":"\xff"}',
        b'{"type":"relay","to":1,"payload":' + b"[" * 1000 + b"]" * 1000 + b"}",
    ]
    for i in range(count):
        await ws.send_bytes(frames[i % 2])
        out.frames += 1
        msg = await ws.receive()
        if msg.type == aiohttp.WSMsgType.TEXT:
            out.error(json.loads(msg.data)["code"])
        else:
            out.closes += 1
            ws = await http.ws_connect(f"{srv.ws}/signal", headers=AUTH)
    await ws.close()


async def dense_graph(http: aiohttp.ClientSession, srv: Server, out: Outcome) -> None:
    """Set-up for ``node_remove``: 12,000 nodes and 48,000 edges (before the quiet phase)."""
    ws = await lazily(http, srv, "dense", True)
    n = 12_000
    nodes = tuple(NodeSnapshot(i, "b", "resolved", b"") for i in range(n))
    await ws.send_bytes(msgspec.json.encode(Snapshot(epoch=0, nodes=nodes)))
    epoch = 0
    for start in range(0, n, 3_000):
        edges = tuple(
            EdgeAdd(a, (a + k) % n) for a in range(start, start + 3_000) for k in (1, 2, 3, 4)
        )
        await ws.send_bytes(msgspec.json.encode(Delta(epoch, epoch + 1, edges)))
        epoch += 1
    out.state.update(ws=ws, epoch=epoch, n=n)


async def node_remove(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
    """6,000 removes against 48,000 edges in one 215 KB delta (the issue's reproducer)."""
    ws, epoch, n = out.state["ws"], out.state["epoch"], out.state["n"]
    removes = tuple(NodeRemove(i) for i in range(0, n, 2))
    raw = msgspec.json.encode(Delta(epoch, epoch + 1, removes))
    await ws.send_bytes(raw)
    out.frames += 1
    out.error(f"{len(raw) // 1024} KB delta")
    await asyncio.sleep(0.5)
    await ws.close()


async def idle_flood(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
    """``count`` sockets that never send a request, from two other loopback addresses."""
    loop = asyncio.get_running_loop()
    socks = []
    for i in range(count):
        s = socket.socket()
        s.bind((f"127.0.0.{2 + i % 2}", 0))
        s.setblocking(False)
        await loop.sock_connect(s, ("127.0.0.1", srv.port))
        socks.append(s)
        out.frames += 1
    closed = 0
    deadline = time.monotonic() + 10
    for s in socks:
        try:
            data = await asyncio.wait_for(
                loop.sock_recv(s, 1), max(0.01, deadline - time.monotonic())
            )
            closed += data == b""
        except (TimeoutError, ConnectionError):
            closed += 1
        s.close()
    out.closes = closed


# --- TopGun live queries: patterns, amplification, names ---------------------------------------

MAP_TOKEN = issue_token(SECRET, "bench-maps", {}, maps={"*": ["read", "write"]})


async def topgun(http: aiohttp.ClientSession, srv: Server) -> aiohttp.ClientWebSocketResponse:
    ws = await http.ws_connect(f"{srv.ws}/topgun", max_msg_size=0)
    await ws.receive()  # AUTH_REQUIRED
    await ws.send_bytes(tg.encode(tg.Auth(token=MAP_TOKEN)))
    await ws.receive()  # AUTH_ACK
    return ws


def put_op(i: int, map_name: str, key: str, value: Any) -> tg.ClientOp:
    stamp = WireTimestamp(1_000 + i, 0, "bench")
    record = WireLWWRecord(msgspec.Raw(msgspec.msgpack.encode(value)), stamp)
    return tg.ClientOp(map_name=map_name, key=key, id=str(i), op_type="PUT", record=record)


async def write_map(ws: Any, map_name: str, values: dict[str, Any], start: int = 0) -> None:
    ops = [put_op(start + i, map_name, k, v) for i, (k, v) in enumerate(values.items())]
    for at in range(0, len(ops), 500):
        await ws.send_bytes(tg.encode(tg.OpBatch(tg.OpBatchPayload(ops[at : at + 500]))))


def query(qid: str, map_name: str, spec: dict[str, Any]) -> bytes:
    raw = msgspec.Raw(msgspec.msgpack.encode(spec))
    return tg.encode(tg.QuerySub(tg.QuerySubPayload(qid, map_name, raw)))


async def drain(ws: Any, seconds: float, out: Outcome) -> None:
    """Read what the server sends for ``seconds``, counting refusals."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = await asyncio.wait_for(ws.receive(), left)
        except TimeoutError:
            return
        if msg.type != aiohttp.WSMsgType.BINARY:
            out.closes += 1
            return
        reply = tg.decode(msg.data)
        error = getattr(getattr(reply, "payload", None), "code", None)
        if isinstance(error, str):
            out.error(error)


async def patterned_map(http: aiohttp.ClientSession, srv: Server, out: Outcome) -> None:
    ws = await topgun(http, srv)
    await write_map(ws, "redos", {f"k{i}": {"s": "a" * 60} for i in range(200)})
    out.state["ws"] = ws


async def redos(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
    """Backtracking bombs as live queries, then writes that make them run again."""
    ws = out.state["ws"]
    patterns = [
        {"op": "like", "attribute": "s", "value": "%a%a%a%a%a%a%a%a%b"},
        {"op": "regex", "attribute": "s", "value": "^(a+)+$"},
        {"op": "regex", "attribute": "s", "value": "(a|aa)+$b"},
    ]
    for i in range(count):
        await ws.send_bytes(query(f"q{i}", "redos", {"predicate": patterns[i % 3]}))
        out.frames += 1
    await write_map(ws, "redos", {f"k{i}": {"s": "a" * 59 + "c"} for i in range(200)}, 1_000)
    out.frames += 200
    await drain(ws, 0.5, out)
    await ws.close()


async def sorted_map(http: aiohttp.ClientSession, srv: Server, out: Outcome) -> None:
    ws = await topgun(http, srv)
    await write_map(ws, "big", {f"k{i}": {"n": i} for i in range(2_000)})
    out.state["ws"] = ws


async def amplification(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
    """``count`` sort + limit:1 queries from one connection, then writes that move the top."""
    ws = out.state["ws"]
    spec = {"sort": [{"field": "n", "direction": "desc"}], "limit": 1}
    for i in range(count):
        await ws.send_bytes(query(f"a{i}", "big", spec))
        out.frames += 1
    for round_ in range(20):  # the top row sinks: every window must be recomputed
        top = 1_999 if round_ == 0 else 10_000 + round_ - 1
        await write_map(ws, "big", {f"k{top}": {"n": -round_}, f"k{10_000 + round_}": {"n": 5_000}})
        out.frames += 2
    await drain(ws, 0.5, out)
    await ws.close()


async def name_flood(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
    """Queries and writes on distinct 1 MB map names from three connections that then leave."""
    for c in range(3):
        ws = await topgun(http, srv)
        for i in range(count):
            name = f"{c}-{i}-" + "n" * 1_000_000
            await ws.send_bytes(query(f"n{i}", name, {}))
            await write_map(ws, name, {"k": 1}, i)
            out.frames += 2
        await drain(ws, 0.3, out)
        await ws.close()


# --- TopGun search: queries and vector bursts at the bounds ------------------------------------

WORDS = [f"w{i}" for i in range(2000)]


async def search_corpus(http: aiohttp.ClientSession, srv: Server, out: Outcome) -> None:
    """20,000 documents of 12 words in the full-text map ``docs``."""
    ws = await topgun(http, srv)
    docs = {
        f"d{i}": {"body": " ".join(WORDS[(i * 7 + j * 13) % 2000] for j in range(12))}
        for i in range(20_000)
    }
    await write_map(ws, "docs", docs)
    await drain(ws, 1.0, out)
    out.state["ws"] = ws


async def search_flood(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
    """``count`` SEARCH requests at the bounds: 1 KiB of words (a wide OR), limit 100."""
    ws = out.state["ws"]
    text = " ".join(WORDS[:300])[:1024]
    options = sv.SearchOptions(limit=100)
    for i in range(count):
        await ws.send_bytes(tg.encode(sv.Search(sv.SearchPayload(f"r{i}", "docs", text, options))))
        reply = tg.decode((await ws.receive()).data)
        out.frames += 1
        if isinstance(reply, sv.SearchResp) and reply.payload.error:
            out.error(reply.payload.error.split(":")[0])
    await ws.close()


async def vector_burst(http: aiohttp.ClientSession, srv: Server, out: Outcome, count: int) -> None:
    """``count`` batches of 500 records with 64-number vectors."""
    ws = await topgun(http, srv)
    for b in range(count):
        values = {
            f"v{b}-{i}": {"vector": [((i * 31 + j * 17) % 97) / 97.0 for j in range(64)]}
            for i in range(500)
        }
        await write_map(ws, "vecs", values, b * 500)
        out.frames += 1
    await drain(ws, 0.5, out)
    await ws.close()


ATTACKS: list[tuple[str, str, Any, int, int, dict[str, Any]]] = [
    # (name, kind, attack, full count, quick count, server settings)
    ("wvp 8 MB packet, no token", "unauth", "/wvp", 20, 3, {}),
    ("lazily upgrade, no token", "unauth", "/lazily", 20, 3, {}),
    ("signal upgrade, no token", "unauth", "/signal", 20, 3, {}),
    ("wvp 1 MiB graph, decoded off-loop", "auth", wvp_big_graph, 5, 1, {}),
    (
        "wvp 1 MiB graph, decoded inline (baseline)",
        "auth",
        wvp_big_graph,
        5,
        1,
        {"offload_decode_bytes": 1 << 30},
    ),
    ("lazily nested JSON x1000", "auth", lazily_nested, 1000, 50, {}),
    ("signal bad UTF-8 / nested", "auth", signal_garbage, 1000, 50, {}),
    ("lazily node_remove 6k vs 48k edges", "auth", node_remove, 1, 1, {}),
    ("topgun like/regex backtracking bombs", "auth", redos, 60, 6, {}),
    ("topgun 2,000 sort+limit:1 queries, top row sinking", "auth", amplification, 2000, 200, {}),
    ("topgun 1 MB map names, 3 connections", "auth", name_flood, 100, 10, {}),
    (
        "topgun SEARCH 1 KiB OR, limit 100, 20k docs",
        "auth",
        search_flood,
        200,
        20,
        {"topgun_search": ["docs"]},
    ),
    ("topgun 500-vector batches, HNSW", "auth", vector_burst, 10, 2, {"topgun_vectors": ["vecs"]}),
    (
        "2,000 sockets that never send a request",
        "idle",
        idle_flood,
        2000,
        100,
        {"request_timeout": 2.0, "max_connections_per_address": 4096},
    ),
]


def _attacker(name: str, count: int, ws: str, port: int, ready: Any, go: Any, results: Any) -> None:
    """The attack in a process of its own: the canary's timing must not include the
    attacker's own work (building 1 MB names, masking frames) on a shared event loop."""
    attack, setup = ATTACK_BY_NAME[name]

    async def run() -> Outcome:
        srv = Server.__new__(Server)  # only the address is needed here
        srv.ws, srv.port = ws, port
        out = Outcome()
        async with aiohttp.ClientSession() as http:
            if setup is not None:
                await setup(http, srv, out)
            ready.set()
            await asyncio.to_thread(go.wait)
            await attack(http, srv, out, count)
        return out

    out = asyncio.run(run())
    out.state = {}
    results.put(out)


async def run_one(
    name: str,
    count: int,
    settings: dict[str, Any],
    phase: float,
) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(Path(tmp), **{"handshake_timeout": 2.0, **settings})
        try:
            async with aiohttp.ClientSession() as http:
                await srv.ready(http)
                canary, stop = Canary(), asyncio.Event()
                task = asyncio.create_task(run_canary(http, srv, canary, stop))
                ready, go, results = ctx.Event(), ctx.Event(), ctx.Queue()
                attacker = ctx.Process(
                    target=_attacker, args=(name, count, srv.ws, srv.port, ready, go, results)
                )
                attacker.start()
                await asyncio.to_thread(ready.wait, 120)
                await asyncio.sleep(phase)  # warm up
                canary.reset_window()
                m0 = await srv.metrics(http)
                await asyncio.sleep(phase)  # quiet: the same-run baseline
                quiet_gap = canary.longest
                m1 = await srv.metrics(http)
                rss0 = rss_mb(srv.proc.pid)
                canary.reset_window()
                go.set()
                out: Outcome = await asyncio.to_thread(results.get, True, 600)
                await asyncio.to_thread(attacker.join, 60)
                await asyncio.sleep(phase)
                attack_gap = canary.longest
                m2 = await srv.metrics(http)
                rss1 = rss_mb(srv.proc.pid)
                stop.set()
                await task
        finally:
            log = srv.stop()

    return {
        "attack": name,
        "frames": out.frames,
        "errors": out.errors,
        "closes": out.closes,
        "canary_gap_quiet_ms": round(quiet_gap * 1000, 1),
        "canary_gap_attack_ms": round(attack_gap * 1000, 1),
        "stalls_quiet": stalls(m0, m1),
        "stalls_attack": stalls(m1, m2),
        "canary_gaps": canary.gaps,
        "canary_deltas": canary.received,
        "rss_before_mb": round(rss0, 1),
        "rss_after_mb": round(rss1, 1),
        "tracebacks": log.count("Traceback"),
    }


SETUPS: dict[Any, Setup] = {
    node_remove: dense_graph,
    redos: patterned_map,
    amplification: sorted_map,
    search_flood: search_corpus,
}
ATTACK_BY_NAME: dict[str, tuple[Attack, Setup | None]] = {
    name: (unauthenticated(attack) if kind == "unauth" else attack, SETUPS.get(attack))
    for name, kind, attack, *_ in ATTACKS
}


async def main_async(quick: bool, only: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for name, _kind, _attack, full, small, settings in ATTACKS:
        if only is not None and only not in name:
            continue
        if quick and "request_timeout" in settings:
            settings = {**settings, "request_timeout": 0.5}
        row = await run_one(name, small if quick else full, settings, 0.3 if quick else 1.0)
        rows.append(row)
        print(
            f"{name:44s} frames {row['frames']:5d}"
            f"  canary gap {row['canary_gap_attack_ms']:6.1f} ms"
            f" (quiet {row['canary_gap_quiet_ms']:5.1f})"
            f"  loop stall {worst(row['stalls_attack']):>8s} (quiet {worst(row['stalls_quiet'])})"
            f"  RSS {row['rss_before_mb']:.0f}->{row['rss_after_mb']:.0f} MB"
            f"  canary gaps {row['canary_gaps']}  closes {row['closes']}  errors {row['errors']}"
            f"  tracebacks {row['tracebacks']}",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    parser.add_argument("--only", help="run the attacks whose name contains this")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    rows = asyncio.run(main_async(args.quick, args.only))
    if args.json:
        print(json.dumps(rows, indent=1))
    bad = [r for r in rows if r["canary_gaps"] or r["tracebacks"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
