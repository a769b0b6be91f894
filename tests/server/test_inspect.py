"""The browser routes: ``/api/streams`` rows from the hub, credentials, and the shipped files."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import jwt
import pytest
from pycrdt import Doc

from octosync.hub import lazily_frame
from octosync.server.auth import ANONYMOUS_DEV, AuthConfig, ClaimGrants
from octosync.server.inspect import ASSETS
from octosync.server.listings import stream_rows
from octosync.yjs import messages as yjs_messages
from tests.e2e.helpers import delta, handshake, serve, snap, ws_lazily
from tests.e2e.yjs_client import edit, next_body, open_hocuspocus
from tests.hub.helpers import cell_set
from tests.hub.helpers import snap as hub_snap
from tests.hub.test_core import join, make_hub
from tests.protocol_schemas import check

SECRET = "inspect-test-secret-of-at-least-32-bytes"


def test_rows_report_producer_epoch_subscribers_backlog_and_frames() -> None:
    hub, _, woken = make_hub()
    for conn in (1, 2, 3):
        join(hub, conn, woken)
    hub.publish(1, "b", lazily_frame(hub_snap(0, {1: b"x"})))
    hub.subscribe(2, "b")
    hub.subscribe(3, "b")
    hub.take(2)
    hub.take(3)
    for epoch in range(3):
        hub.publish(1, "b", lazily_frame(cell_set(epoch, 1, b"y")))
    hub.take(2)  # 2 caught up; 3 is three deltas behind
    hub.subscribe(2, "a")  # a stream with subscribers and no producer yet
    rows = stream_rows(hub, ANONYMOUS_DEV)
    assert rows == [
        {
            "stream": "a",
            "face": "lazily",
            "producer": None,
            "epoch": None,
            "subscribers": 1,
            "backlog": 0,
            "frames": 0,
        },
        {
            "stream": "b",
            "face": "lazily",
            "producer": 1,
            "epoch": 3,
            "subscribers": 2,
            "backlog": 3,
            "frames": 4,
        },
    ]
    for row in rows:
        check("api-streams", {"streams": [row], "connections": 3})
    hub.take(3)
    assert stream_rows(hub, ANONYMOUS_DEV)[1]["backlog"] == 0


def test_rows_list_only_streams_the_identity_may_read() -> None:
    hub, _, woken = make_hub()
    join(hub, 1, woken)
    for name in ("public", "secret"):
        hub.publish(1, name, lazily_frame(hub_snap(0, {1: b"x"})))
    reader = ClaimGrants.of("r", streams={"public": frozenset({"read"})})
    assert [row["stream"] for row in stream_rows(hub, reader)] == ["public"]
    assert stream_rows(hub, ClaimGrants("nobody")) == []


async def test_api_streams_takes_credentials_like_an_upgrade(tmp_path: Path) -> None:
    auth = AuthConfig(hs256_secret=SECRET)
    async with (
        serve(tmp_path, insecure_dev=False, auth=auth) as srv,
        aiohttp.ClientSession() as http,
    ):
        publisher = jwt.encode({"sub": "p", "streams": {"*": ["publish"]}}, SECRET)
        for name in ("seen", "hidden"):
            ws, _ = await ws_lazily(http, srv.ws_url, name, publish=True, token=publisher)
            await ws.send_bytes(snap(0, {1: b"a"}))
            await ws.send_bytes(delta(0, 1, b"b"))
        async with http.get(f"{srv.url}/api/streams") as res:
            assert res.status == 401
            body = await res.json()
            check("http-error", body)
            assert body["code"] == "Unauthorized"
        reader = jwt.encode({"sub": "r", "streams": {"seen": ["read"]}}, SECRET)
        for kwargs in (
            {"params": {"token": reader}},
            {"headers": {"Authorization": f"Bearer {reader}"}},
        ):
            for _ in range(50):  # the deltas were sent, not yet necessarily accepted
                async with http.get(f"{srv.url}/api/streams", **kwargs) as res:  # type: ignore[arg-type]
                    assert res.status == 200
                    body = await res.json()
                if body["streams"] and body["streams"][0]["epoch"] == 1:
                    break
            check("api-streams", body)
            assert [(r["stream"], r["epoch"], r["frames"]) for r in body["streams"]] == [
                ("seen", 1, 2)
            ]
        expired = jwt.encode({"sub": "r", "exp": 1}, SECRET)
        async with http.get(f"{srv.url}/api/streams", params={"token": expired}) as res:
            assert res.status == 401


@pytest.mark.parametrize("path", sorted(ASSETS))
async def test_shipped_files_are_served(tmp_path: Path, path: str) -> None:
    name, content_type = ASSETS[path]
    shipped = (Path(__file__).parents[2] / "src/octosync/server/static" / name).read_bytes()
    async with (
        serve(tmp_path) as srv,
        aiohttp.ClientSession() as http,
        http.get(f"{srv.url}{path}") as res,
    ):
        assert res.status == 200
        assert res.content_type == content_type
        assert await res.read() == shipped
        cors = res.headers.get("Access-Control-Allow-Origin")
        assert cors == ("*" if path == "/client/octosync.js" else None)


def test_the_js_client_in_clients_js_is_the_shipped_one() -> None:
    root = Path(__file__).parents[2]
    assert (root / "clients/js/octosync.js").resolve() == (
        root / "src/octosync/server/static/octosync.js"
    ).resolve()


def test_handshake_helper_matches_the_schema() -> None:
    import json

    check("lazily-handshake", json.loads(handshake("s", publish=True)))


def test_map_rows_count_live_keys_and_tombstones_of_readable_maps() -> None:
    from octosync.crdt.fold import MapStore
    from octosync.crdt.op import OpKind, OpRecord
    from octosync.crdt.timestamp import Timestamp
    from octosync.server.listings import map_rows

    store = MapStore()
    writes = [
        ("users", "a", OpKind.PUT),
        ("users", "b", OpKind.PUT),
        ("users", "b", OpKind.REMOVE),
        ("notes", "x", OpKind.PUT),
    ]
    for i, (m, key, op) in enumerate(writes):
        value = b"\xa1v" if op is OpKind.PUT else b""
        store.apply(OpRecord(m, key, op, value, Timestamp(100 + i, 0, "n"), "n", f"op{i}"))
    assert map_rows(store, ANONYMOUS_DEV) == [
        {"map": "notes", "keys": 1, "tombstones": 0},
        {"map": "users", "keys": 1, "tombstones": 1},
    ]
    reader = ClaimGrants.of("r", maps={"users": frozenset({"read"})})
    assert [r["map"] for r in map_rows(store, reader)] == ["users"]
    assert map_rows(store, ClaimGrants("nobody")) == []


async def test_api_streams_lists_maps_dataspaces_and_documents_of_a_real_server(
    tmp_path: Path,
) -> None:
    from octosync.client.shared import SharedDocument
    from octosync.wire import topgun as tg
    from tests.e2e.test_dataspace_face import SECRET as DS_SECRET
    from tests.e2e.test_dataspace_face import Raw
    from tests.topgun.helpers import batch, put

    async with (
        serve(tmp_path, dataspace_secret=DS_SECRET) as srv,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(f"{srv.url}/api/streams") as res:
            body = await res.json()
        assert (body["maps"], body["dataspaces"], body["documents"]) == ([], [], [])
        assert body["yjs"] == []
        topgun = await http.ws_connect(f"{srv.ws_url}/topgun")
        await topgun.send_bytes(tg.encode(tg.DeviceHello()))
        await topgun.receive()  # DeviceAck
        ops = [put("1", "alice", 1, 100), put("2", "bob", 2, 101), put("3", "bob", None, 102)]
        await topgun.send_bytes(tg.encode(batch(*ops, write_concern="APPLIED")))
        assert isinstance(tg.decode((await topgun.receive()).data), tg.OpAck)
        client = Raw(await http.ws_connect(f"{srv.ws_url}/dataspace"))
        await client.resolved()  # the sturdy ref to dataspace "demo"
        async with SharedDocument(srv.ws_url, "room") as doc:
            doc.counter("clicks").add(2)
            doc.register("title").set("hi")
            await doc.synced(10)
        async with http.get(f"{srv.url}/api/streams") as res:
            body = await res.json()
        check("api-streams", body)
        assert body["maps"] == [{"map": "users", "keys": 1, "tombstones": 1}]
        assert body["dataspaces"] == [{"dataspace": "demo", "assertions": 0, "observers": 0}]
        assert body["documents"] == [
            {
                "document": "room",
                "members": 0,
                "entries": 2,
                "ops": 2,
                "values": [
                    {"name": "clicks", "kind": "pn", "value": 2},
                    {"name": "title", "kind": "lww", "value": "hi"},
                ],
                "more": 0,
            }
        ]
        async with http.ws_connect(f"{srv.ws_url}/yjs") as editor:
            assert await open_hocuspocus(editor, "notes") == yjs_messages.authenticated(False)
            notes = yjs_messages.address_prefix("notes")
            await editor.send_bytes(notes + yjs_messages.sync_update(edit(Doc(), "hi")))
            assert await next_body(editor, notes) == yjs_messages.sync_status(True)
            async with http.get(f"{srv.url}/api/streams") as res:
                body = await res.json()
        check("api-streams", body)
        assert body["yjs"] == [
            {"document": "notes", "connections": 1, "awareness": 0, "updates": 1}
        ]
        await topgun.close()
        assert client.ws is not None
        await client.ws.close()


def test_dataspace_rows_list_only_dataspaces_the_identity_may_use() -> None:
    from octosync.server.listings import dataspace_rows
    from octosync.syndicate import Relay

    relay = Relay(b"k" * 32)
    for name in ("lobby", "secret"):
        relay.dataspace(name)
    assert dataspace_rows(None, ANONYMOUS_DEV) == []  # the face was never used
    assert [r["dataspace"] for r in dataspace_rows(relay, ANONYMOUS_DEV)] == ["lobby", "secret"]
    member = ClaimGrants.of("m", streams={"dataspace:lobby": frozenset({"publish"})})
    assert dataspace_rows(relay, member) == [
        {"dataspace": "lobby", "assertions": 0, "observers": 0}
    ]
    assert dataspace_rows(relay, ClaimGrants("nobody")) == []


def test_document_rows_show_values_by_kind_within_node_grants_and_bounds() -> None:
    from octosync.crdt.plane import PlaneReplica
    from octosync.crdt.shared import SharedState
    from octosync.hub.crdt_streams import CrdtStreams, PlaneStream
    from octosync.hub.node_views import NodeRules
    from octosync.server import listings

    writer = SharedState(5, lambda: 1000)
    ops = [writer.add("clicks", 3), writer.add("clicks", -1), writer.set("title", "t")]
    ops += [writer.set_field("todo", "a", {"done": True}), writer.set_field("todo", "b", 1)]
    ops.append(writer.delete_field("todo", "b"))
    plane = CrdtStreams(lambda: 1000)
    doc = plane.streams["d"] = PlaneStream("d", PlaneReplica())
    doc.replica.merge(ops)
    (row,) = listings.document_rows(plane, ANONYMOUS_DEV)
    assert row["values"] == [
        {"name": "clicks", "kind": "pn", "value": 2},
        {"name": "title", "kind": "lww", "value": "t"},
        {"name": "todo", "kind": "map", "value": {"a": {"done": True}}},
    ]
    narrowed = ClaimGrants(
        "n", {"streams": {"d": frozenset({"read"})}}, nodes={"d": NodeRules(read=("title/*",))}
    )
    (row,) = listings.document_rows(plane, narrowed)
    assert row["values"] == [{"name": "title", "kind": "lww", "value": "t"}]
    big = SharedState(6, lambda: 1000)
    doc.replica.merge([big.set_field("m", f"f{i}", i) for i in range(listings.MAX_SHOWN_ENTRIES)])
    (row,) = listings.document_rows(plane, ANONYMOUS_DEV)
    assert (row["values"], row["entries"]) == (None, listings.MAX_SHOWN_ENTRIES + 4)
    many = CrdtStreams(lambda: 1000)
    wide = many.streams["w"] = PlaneStream("w", PlaneReplica())
    wide.replica.merge([big.set(f"r{i}", i) for i in range(listings.MAX_SHOWN_VALUES + 3)])
    (row,) = listings.document_rows(many, ANONYMOUS_DEV)
    assert isinstance(row["values"], list)
    assert (len(row["values"]), row["more"]) == (listings.MAX_SHOWN_VALUES, 3)
