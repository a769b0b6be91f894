"""docs/PROTOCOL.md and docs/schemas against the code and against real traffic.

Every schema is a valid JSON Schema; every message the codecs can produce validates; what the
server really sends on each face (over loopback) validates; the documented error table is the
one ``errors.py`` and ``hub/policy.py`` implement, and the JavaScript client agrees with it.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import cbor2
import msgspec
import pytest
from hypothesis import given
from jsonschema import Draft202012Validator

from octosync.errors import all_errors
from octosync.hub.policy import close_code, closes_connection
from octosync.hub.streams import warp_stream_id
from octosync.ipc.messages import Delta, IpcMessage, ResyncRequest, Snapshot
from octosync.store.journal import Journal
from octosync.wire import jsabi, wvp
from octosync.wire import json as seed_json
from tests.e2e.helpers import TIMEOUT, delta, handshake, serve, snap, ws_lazily
from tests.protocol_schemas import SCHEMAS, check, validator
from tests.strategies import deltas, handshakes, resync_requests, snapshots

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.json")), ids=lambda p: p.name)
def test_every_schema_is_a_valid_2020_12_schema(path: Path) -> None:
    Draft202012Validator.check_schema(json.loads(path.read_text()))


@given(snapshots() | deltas() | resync_requests())
def test_every_seed_json_message_the_codec_writes_validates(msg: IpcMessage) -> None:
    assert isinstance(msg, Snapshot | Delta | ResyncRequest)
    check("lazily-json", json.loads(seed_json.encode(msg)))


@given(handshakes)
def test_handshakes_the_server_would_accept_validate(hs: Any) -> None:
    doc = json.loads(seed_json.encode_handshake(hs))
    acceptable = (
        hs.protocol_id == "lazily-ipc"
        and hs.protocol_major_version == 1
        and hs.ordered_reliable
        and hs.max_frame_size > 0
        and 0 < len(hs.session_id) <= 256
    )
    assert validator("lazily-handshake").is_valid(doc) == acceptable


@pytest.mark.parametrize(
    "doc",
    [
        {"type": "snapshot", "epoch": 1, "extra": 0},
        {"type": "snapshot", "epoch": 2**53 + 1},
        {
            "type": "snapshot",
            "epoch": 1,
            "nodes": [{"slot_id": 1, "type_tag": "i32", "state": "resolved"}],
        },
        {
            "type": "snapshot",
            "epoch": 1,
            "nodes": [{"slot_id": 1, "type_tag": "i32", "state": "unset", "payload": "AA=="}],
        },
        {
            "type": "delta",
            "base_epoch": 0,
            "epoch": 1,
            "ops": [{"op": "cell_set", "slot_id": 1, "payload": "A"}],
        },
        {"type": "delta", "base_epoch": 0, "epoch": 1, "ops": [{"op": "teleport", "slot_id": 1}]},
        {
            "type": "delta",
            "base_epoch": 0,
            "epoch": 1,
            "ops": [{"op": "node_add", "slot_id": 1, "type_tag": "i32", "key": "a//b"}],
        },
        {"type": "error", "code": "X"},
    ],
)
def test_the_schema_refuses_what_the_decoder_refuses(doc: dict[str, Any]) -> None:
    assert not validator("lazily-json").is_valid(doc)
    if doc["type"] != "error":
        with pytest.raises(Exception, match=r".") as caught:
            seed_json.decode(json.dumps(doc).encode())
        assert type(caught.value).__name__ == "DecodeError"


async def _text(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    msg = await asyncio.wait_for(ws.receive(), TIMEOUT)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    doc: dict[str, Any] = json.loads(msg.data)
    return doc


async def test_what_the_lazily_face_sends_validates(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        sub, reply = await ws_lazily(http, srv.ws_url, "board")
        check("lazily-handshake", reply)
        prod, reply = await ws_lazily(http, srv.ws_url, "board", publish=True)
        check("lazily-handshake", reply)
        await prod.send_bytes(snap(0, {1: b"a"}))
        await prod.send_bytes(delta(0, 1, b"b"))
        received = [await _text(sub), await _text(sub)]
        assert [m["type"] for m in received] == ["snapshot", "delta"]
        await sub.send_str(json.dumps({"type": "resync_request", "last_epoch": 1}))
        received.append(await _text(sub))
        assert received[-1]["type"] == "snapshot"
        await sub.send_bytes(delta(1, 1, b"w"))  # a write, forwarded to the producer
        received.append(await _text(prod))
        assert received[-1]["ops"][0]["op"] == "cell_set"
        await sub.send_bytes(snap(9, {}))  # ForbiddenPublish
        await sub.send_str('{"type":"delta"}')  # DecodeError
        await prod.send_bytes(delta(7, 1, b"x"))  # EpochGap
        await sub.send_str(
            json.dumps(
                {
                    "type": "delta",
                    "base_epoch": 1,
                    "epoch": 2,
                    "ops": [{"op": "node_remove", "slot_id": 1}],
                }
            )
        )
        errors = [await _text(sub), await _text(sub), await _text(prod), await _text(sub)]
        assert [e["code"] for e in errors] == [
            "ForbiddenPublish",
            "DecodeError",
            "EpochGap",
            "Forbidden",
        ]
        bad = await http.ws_connect(f"{srv.ws_url}/lazily")
        await bad.send_bytes(handshake("s", protocol_id="other"))
        errors.append(await _text(bad))
        assert errors[-1]["code"] == "HandshakeFailed"
        for doc in received + errors:
            check("lazily-json", doc)


async def test_what_the_http_routes_send_validates(tmp_path: Path) -> None:
    from octosync.server.auth import AuthConfig

    async with (
        serve(tmp_path, insecure_dev=False, auth=AuthConfig(hs256_secret="s" * 32)) as srv,
        aiohttp.ClientSession() as http,
        http.get(f"{srv.url}/lazily") as res,
    ):
        assert res.status == 401
        check("http-error", await res.json())


async def test_what_the_signal_face_sends_validates(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        a = await http.ws_connect(f"{srv.ws_url}/signal?session=room")
        b = await http.ws_connect(f"{srv.ws_url}/signal?session=room")
        sent = [
            {"type": "join", "peer": 1},
            {"type": "join", "peer": 2, "capabilities": ["relay"]},
            {"type": "offer", "to": 2, "sdp": "v=0"},
            {"type": "relay", "to": 9, "payload": {"x": [1]}},
        ]
        for doc in sent:
            check("signal-client", doc)
        await b.send_str(json.dumps({"type": "offer", "to": 1, "sdp": "early"}))
        got = [await _text(b)]  # not_joined
        await a.send_str(json.dumps(sent[0]))
        got.append(await _text(a))  # welcome
        await b.send_str(json.dumps(sent[1]))
        got += [await _text(b), await _text(a)]  # welcome, peer-joined
        await a.send_str(json.dumps(sent[2]))
        got.append(await _text(b))  # offer from 1
        await a.send_str(json.dumps(sent[3]))
        got.append(await _text(a))  # unknown_target
        await b.send_str(json.dumps({"type": "leave"}))
        got.append(await _text(a))  # peer-left
        assert [g["type"] for g in got] == [
            "error",
            "welcome",
            "welcome",
            "peer-joined",
            "offer",
            "error",
            "peer-left",
        ]
        for doc in got:
            check("signal-server", doc)


def _envelope(packet: bytes) -> Any:
    """The decoded CBOR envelope, with byte strings as lists so JSON Schema can see them."""

    def plain(v: Any) -> Any:
        if isinstance(v, bytes):
            return list(v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return plain(cbor2.loads(jsabi.decode_packet(packet)))


async def test_what_the_wvp_face_sends_validates(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        sent = [wvp.encode(wvp.Handshake(capabilities=(), client_version=1), 0)]
        sub = await http.ws_connect(f"{srv.ws_url}/wvp", max_msg_size=0)
        prod = await http.ws_connect(f"{srv.ws_url}/wvp", max_msg_size=0)
        await sub.send_bytes(sent[0])
        await prod.send_bytes(sent[0])
        sent.append(wvp.encode(wvp.SubscribeWarp(warp_id=3), 0))
        await sub.send_bytes(sent[-1])
        sent.append(wvp.encode(wvp.WarpStream(3, wvp.WarpSnapshot(0, {"n": [1]})), 1))
        sent.append(wvp.encode(wvp.WarpStream(3, wvp.WarpDiff(0, 1, [{"s": 2}])), 2))
        sent.append(wvp.encode(wvp.WarpStream(3, wvp.WarpDiff(5, 6, [])), 3))  # a gap
        for packet in sent[2:]:
            await prod.send_bytes(packet)
        got = []
        for ws, count in ((sub, 3), (prod, 2)):
            for _ in range(count):
                msg = await asyncio.wait_for(ws.receive(), TIMEOUT)
                got.append(msg.data)
        ops = [_envelope(p)["op"] for p in got]
        assert ops == ["handshake_ack", "warp_stream", "warp_stream", "handshake_ack", "error"]
        for packet in sent + got:
            check("wvp-envelope", _envelope(packet))


async def test_a_wvp_producer_that_asks_learns_what_is_journaled(tmp_path: Path) -> None:
    async with serve(tmp_path, journal=True) as srv, aiohttp.ClientSession() as http:
        prod = await http.ws_connect(f"{srv.ws_url}/wvp", max_msg_size=0)
        hello = wvp.Handshake(capabilities=("durable_ack",), client_version=1)
        await prod.send_bytes(wvp.encode(hello, 0))
        ack, _ = wvp.decode((await asyncio.wait_for(prod.receive(), TIMEOUT)).data)
        assert isinstance(ack, wvp.HandshakeAck)
        assert "durable_ack" in ack.capabilities
        await prod.send_bytes(wvp.encode(wvp.WarpStream(4, wvp.WarpSnapshot(0, {"n": [1]})), 1))
        await prod.send_bytes(wvp.encode(wvp.WarpStream(4, wvp.WarpDiff(0, 1, [{"s": 2}])), 2))
        through = -1
        while through < 1:
            packet = (await asyncio.wait_for(prod.receive(), TIMEOUT)).data
            check("wvp-envelope", _envelope(packet))
            msg, _ = wvp.decode(packet)
            assert isinstance(msg, wvp.DurableAck), msg
            assert msg.warp_id == 4
            assert msg.through_epoch > through
            through = msg.through_epoch
    with Journal(tmp_path, readonly=True) as j:  # what it said is there
        assert [e.record.epoch for e in j.frames(warp_stream_id(4))] == [0, 1]


def _doc_error_table() -> list[tuple[int, str, bool, bool, str]]:
    text = (ROOT / "docs" / "PROTOCOL.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| (yes|no) \| (yes|no) \| ([\d–]+) \|$", text, re.M)
    return [(int(c), n, ws == "yes", tcp == "yes", cc) for c, n, ws, tcp, cc in rows]


def test_the_documented_error_table_is_the_implemented_one() -> None:
    implemented = []
    for cls in sorted(all_errors(), key=lambda c: c.code):
        err = cls("x")
        ws = closes_connection(err, byte_stream=False)
        tcp = closes_connection(err, byte_stream=True)
        implemented.append(
            (cls.code, cls.name, ws, tcp, str(close_code(err)) if ws or tcp else "–")
        )
    assert _doc_error_table() == implemented


def test_the_js_client_knows_which_errors_close() -> None:
    source = (ROOT / "src/octosync/server/static/octosync.js").read_text()

    def names(const: str) -> set[str]:
        block = re.search(rf"const {const} = new Set\(\[(.*?)\]\);", source, re.S)
        assert block is not None, const
        return set(re.findall(r'"(\w+)"', block.group(1)))

    closing, keeping = names("CLOSING"), names("KEEPING")
    for cls in all_errors():
        closes = closes_connection(cls("x"), byte_stream=False)
        # The client treats a name in neither set as closing, like the policy's default.
        assert (cls.name in keeping) == (not closes), cls.name
        assert cls.name not in closing or closes, cls.name


def test_error_frames_carry_name_message_and_path() -> None:
    from octosync.errors import EpochGap
    from octosync.server.lazily_dialect import SEED_JSON

    frame = msgspec.json.decode(SEED_JSON.encode_error(EpochGap("gap", path="base_epoch")))
    assert frame == {"type": "error", "code": "EpochGap", "message": "gap", "path": "base_epoch"}
    check("lazily-json", frame)
