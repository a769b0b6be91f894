"""Shared-memory blobs through a real server: ``shared-blob`` negotiated per session, each
descriptor checked before it is accepted, bytes for everyone who did not negotiate it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import msgspec
import pytest

import octosync
from octosync.client.lazily import remote_error
from octosync.errors import HandshakeFailed
from octosync.graph import Context
from octosync.ipc.messages import BlobRef, CellSet, Delta, NodeSnapshot, Snapshot
from octosync.server.lazily_session import server_handshake
from octosync.shm.region import REGION_FEATURE, SHARED_BLOB, SharedRegion, fresh_name
from octosync.wire import json as wire_json
from tests.e2e.helpers import TIMEOUT, TcpLazily, free_port, handshake, handshake_struct, serve

BIG = 200_000


async def test_a_large_payload_travels_by_shared_memory_and_inline_alike(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        url = f"{srv.ws_url}/lazily"
        ctx = Context()
        blob = ctx.cell(b"\x01" * BIG, type_tag="bytes")
        small = ctx.cell(1, type_tag="i64")
        async with (
            octosync.connect(url, shared_blobs=True) as producer,
            octosync.connect(url, shared_blobs=True) as near,
            octosync.connect(url) as far,
            aiohttp.ClientSession() as http,
        ):
            await producer.publish("film", ctx)
            near_sub = await near.subscribe("film")
            far_sub = await far.subscribe("film")
            # a raw subscriber that negotiated the feature sees descriptors, not bytes
            raw = await http.ws_connect(url)
            hs = msgspec.structs.replace(handshake_struct("film"), features=(SHARED_BLOB,))
            await raw.send_bytes(wire_json.encode_handshake(hs))
            reply = wire_json.decode_handshake((await raw.receive()).data)
            assert any(f.startswith(REGION_FEATURE) for f in reply.features)
            first = wire_json.decode((await asyncio.wait_for(raw.receive(), TIMEOUT)).data)
            assert isinstance(first, Snapshot)
            payloads = {n.slot_id: n.payload for n in first.nodes}
            assert isinstance(payloads[blob.id], BlobRef)
            assert not isinstance(payloads[small.id], BlobRef)  # below the threshold
            for sub in (near_sub, far_sub):
                state = await asyncio.wait_for(anext(sub), TIMEOUT)
                assert state.values[blob.id] == b"\x01" * BIG
            blob.set(b"\x02" * BIG)
            for sub in (near_sub, far_sub):
                state = await asyncio.wait_for(
                    sub.wait_for(lambda s: s.values.get(blob.id) == b"\x02" * BIG), TIMEOUT
                )
                assert sub.resyncs == 0
            # what the hub keeps (late joiners, the journal) is bytes
            kept = srv.runtime.hub.latest_snapshot("film")
            assert kept is not None
            assert {n.slot_id: n.payload for n in kept.nodes}[blob.id] == b"\x02" * BIG
            await raw.close()


async def _producer(
    http: aiohttp.ClientSession, url: str, features: list[str], stream: str = "raw"
) -> aiohttp.ClientWebSocketResponse:
    ws = await http.ws_connect(url)
    hs = server_handshake(stream, 1 << 20)
    doc = json.loads(wire_json.encode_handshake(hs))
    doc.update(peer_id=5, features=["publish", *features])
    await ws.send_str(json.dumps(doc))
    msg = await asyncio.wait_for(ws.receive(), TIMEOUT)
    err = remote_error(msg.data)
    if err is not None:
        raise err
    return ws


async def test_descriptors_are_refused_unless_negotiated_and_valid(tmp_path: Path) -> None:
    region = SharedRegion.create(fresh_name("test"), 4096)
    try:
        good = region.write(0, b"hello shared memory")
        async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
            url = f"{srv.ws_url}/lazily"
            # 1. no shared-blob negotiated: refused, nothing accepted
            ws = await _producer(http, url, [])
            snap = Snapshot(1, ())
            await ws.send_bytes(wire_json.encode(snap))
            await ws.send_bytes(wire_json.encode(Delta(1, 2, (CellSet(slot_id=1, payload=good),))))
            err = json.loads((await ws.receive()).data)
            assert err["code"] == "FeatureNotNegotiated"
            assert srv.runtime.hub.epoch_of("raw") == 1
            await ws.close()
            # 2. negotiated with the region: a bad checksum is BlobInvalid, a good one lands
            ws = await _producer(http, url, [SHARED_BLOB, REGION_FEATURE + region.name])
            node = NodeSnapshot(1, "bytes", "resolved", b"")
            await ws.send_bytes(wire_json.encode(Snapshot(1, (node,))))
            bad = BlobRef(good.offset, good.len, good.generation, good.epoch, good.checksum ^ 1)
            await ws.send_bytes(wire_json.encode(Delta(1, 2, (CellSet(slot_id=1, payload=bad),))))
            err = json.loads((await ws.receive()).data)
            assert (err["code"], err.get("path")) == ("BlobInvalid", "checksum")
            await ws.send_bytes(wire_json.encode(Delta(1, 2, (CellSet(slot_id=1, payload=good),))))
            for _ in range(50):
                if srv.runtime.hub.epoch_of("raw") == 2:
                    break
                await asyncio.sleep(0.02)
            kept = srv.runtime.hub.latest_snapshot("raw")
            assert kept is not None
            assert kept.nodes[0].payload == b"hello shared memory"
            # 3. a region that does not exist fails the handshake
            with pytest.raises(HandshakeFailed):
                await _producer(http, url, [SHARED_BLOB, REGION_FEATURE + "no-such"], "other")
            await ws.close()
    finally:
        region.close()


async def test_shared_blobs_cross_the_tcp_face(tmp_path: Path) -> None:
    """A producer on plain TCP hands the server a descriptor into its region; a TCP subscriber
    that negotiated ``shared-blob`` reads the payload from the server's region, another gets
    the bytes inline."""
    port = free_port()
    payload = bytes(range(256)) * (BIG // 256)
    region = SharedRegion.create(fresh_name("test"), 4 * BIG)
    try:
        async with serve(tmp_path, tcp_port=port) as srv:
            prod = await TcpLazily.open(port)
            prod.send(
                handshake(
                    "reel",
                    publish=True,
                    features=["publish", SHARED_BLOB, REGION_FEATURE + region.name],
                )
            )
            assert json.loads(await prod.recv())["session_id"] == "reel"
            ref = region.write(0, payload)
            node = NodeSnapshot(1, "bytes", "resolved", ref)
            prod.send(wire_json.encode(Snapshot(1, (node,), roots=(1,))))
            for _ in range(100):
                if srv.runtime.hub.epoch_of("reel") == 1:
                    break
                await asyncio.sleep(0.02)
            near, far = await TcpLazily.open(port), await TcpLazily.open(port)
            near.send(handshake("reel", features=[SHARED_BLOB]))
            far.send(handshake("reel"))
            agreed = json.loads(await near.recv())
            (server_region,) = [
                f[len(REGION_FEATURE) :] for f in agreed["features"] if f.startswith(REGION_FEATURE)
            ]
            assert not any(
                f.startswith(REGION_FEATURE) for f in json.loads(await far.recv())["features"]
            )
            got_near = wire_json.decode(await near.recv())
            got_far = wire_json.decode(await far.recv())
            assert isinstance(got_near, Snapshot)
            assert isinstance(got_far, Snapshot)
            described = got_near.nodes[0].payload
            assert isinstance(described, BlobRef)
            with SharedRegion.open(server_region) as theirs:
                assert theirs.read(described) == payload
            assert got_far.nodes[0].payload == payload
            for c in (prod, near, far):
                c.close()
    finally:
        region.close()
