"""``/yjs`` over real sockets: confirmation after the commit, a late joiner's one update,
awareness removed when a connection closes, tokens per document, and bad input refused with
the document unchanged while others keep being served."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pycrdt import Doc

from octosync.server.auth import AuthConfig, issue_token
from octosync.store.journal import Journal
from octosync.store.yjs_compaction import yjs_updates
from octosync.yjs import messages as m
from octosync.yjs.awareness import Entry, encode_entries
from tests.e2e.helpers import serve
from tests.e2e.yjs_client import edit, next_body, open_hocuspocus, read_document, view

SECRET = "yjs-face-test-secret-yjs-face-test-secret"
NOTES = m.address_prefix("notes")


async def test_hocuspocus_hears_synced_only_once_the_update_is_journaled(tmp_path: Path) -> None:
    async with serve(tmp_path, journal=True) as srv, aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{srv.ws_url}/yjs")
        assert await open_hocuspocus(ws, "notes") == m.authenticated(False)
        doc: Doc[Any] = Doc()
        for word in ("one ", "two "):
            update = edit(doc, word)
            await ws.send_bytes(NOTES + m.sync_update(update))
            assert await next_body(ws, NOTES) == m.sync_status(True)
            with Journal(tmp_path) as journal:  # the confirmation came after the commit
                assert update in list(yjs_updates(journal, "notes", journal.latest_seq()))
        await ws.close()


async def test_a_late_joiner_gets_the_whole_document_as_one_update(tmp_path: Path) -> None:
    """Thirty confirmed edits; a reader that has nothing asks once and gets one step 2."""
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        writer: Doc[Any] = Doc()
        async with http.ws_connect(f"{srv.ws_url}/yjs") as ws:
            await open_hocuspocus(ws, "notes")
            for i in range(30):
                await ws.send_bytes(NOTES + m.sync_update(edit(writer, f"{i};", key=f"k{i}")))
                assert await next_body(ws, NOTES) == m.sync_status(True)
        assert view(await read_document(http, srv.ws_url, "notes")) == view(writer)


async def test_awareness_reaches_the_others_and_is_removed_when_its_connection_closes(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        a = await http.ws_connect(f"{srv.ws_url}/yjs/notes")
        b = await http.ws_connect(f"{srv.ws_url}/yjs")
        await next_body(a)
        await open_hocuspocus(b, "notes")
        cursor = encode_entries([Entry(7, 2, '{"cursor":4}')])
        await a.send_bytes(m.awareness(cursor))
        assert await next_body(b, NOTES) == m.awareness(cursor)
        await a.close()
        gone = encode_entries([Entry(7, 3, "null")])
        assert await next_body(b, NOTES) == m.awareness(gone)
        await b.send_bytes(NOTES + bytes((m.QUERY_AWARENESS,)))
        assert await next_body(b, NOTES) == m.awareness(encode_entries([]))
        await b.close()


async def test_stateless_strings_go_to_the_other_hocuspocus_connections_only(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        a = await http.ws_connect(f"{srv.ws_url}/yjs")
        b = await http.ws_connect(f"{srv.ws_url}/yjs")
        y = await http.ws_connect(f"{srv.ws_url}/yjs/notes")
        await next_body(y)
        for ws in (a, b):
            await open_hocuspocus(ws, "notes")
        await a.send_bytes(NOTES + m.stateless('{"ping":1}'))
        assert await next_body(b, NOTES) == m.stateless('{"ping":1}')
        await a.send_bytes(NOTES + bytes((m.CLOSE,)))  # a detaches from notes
        await b.send_bytes(NOTES + m.stateless("back"))
        await y.send_bytes(m.sync_step1(b"\x00"))  # y-websocket heard no stateless message
        assert m.decode_y_websocket(await next_body(y)) == m.SyncStep2(m.EMPTY_UPDATE)
        await a.send_bytes(NOTES + m.sync_step1(b"\x00"))  # dropped: a closed notes
        await a.send_bytes(m.address_prefix("x") + m.sync_step1(b"\x00"))  # never opened
        assert await open_hocuspocus(a, "notes") == m.authenticated(False)  # only this answers
        for ws in (a, b, y):
            await ws.close()


def tokens() -> dict[str, str]:
    return {
        "writer": issue_token(SECRET, "w", {}, yjs={"notes": ["read", "write"]}),
        "reader": issue_token(SECRET, "r", {}, yjs={"notes": ["read"]}),
        "team": issue_token(SECRET, "t", {}, yjs={"*": ["read", "write"]}),
    }


async def test_tokens_grant_read_and_write_per_document(tmp_path: Path) -> None:
    token = tokens()
    async with (
        serve(tmp_path, insecure_dev=False, auth=AuthConfig(hs256_secret=SECRET)) as srv,
        aiohttp.ClientSession() as http,
    ):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(f"{srv.ws_url}/yjs/notes")
        assert refused.value.status == 401
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(f"{srv.ws_url}/yjs/secret?token={token['reader']}")
        assert refused.value.status == 403
        writer: Doc[Any] = Doc()
        async with http.ws_connect(f"{srv.ws_url}/yjs/notes?token={token['writer']}") as w:
            await next_body(w)
            await w.send_bytes(m.sync_update(edit(writer, "kept", key="k")))
            await asyncio.sleep(0)
        before = view(await read_document(http, srv.ws_url, "notes", token["writer"]))
        assert before == view(writer)
        # y-websocket: a reader's update closes it with 1008 (the protocol has no error message)
        intruder: Doc[Any] = Doc()
        async with http.ws_connect(f"{srv.ws_url}/yjs/notes?token={token['reader']}") as r:
            await next_body(r)
            await r.send_bytes(m.sync_step2(m.EMPTY_UPDATE))  # nothing new: fine
            await r.send_bytes(m.sync_update(edit(intruder, "nope", key="k")))
            denied = await next_body(r)  # y-protocols' permission denied, then the close
            assert denied == m.y_permission_denied(
                "$.update: 'notes' is read-only for this connection"
            )
            closed = await r.receive(timeout=5)
            assert (closed.type, r.close_code) == (aiohttp.WSMsgType.CLOSE, 1008)
        # Hocuspocus: opened read-only, an update answered SyncStatus false, in-band
        async with http.ws_connect(f"{srv.ws_url}/yjs") as h:
            assert await open_hocuspocus(h, "notes", token["reader"]) == m.authenticated(True)
            await h.send_bytes(NOTES + m.sync_update(edit(intruder, "no", key="k")))
            assert await next_body(h, NOTES) == m.sync_status(False)
            denied = await open_hocuspocus(h, "secret", token["reader"])
            assert denied == m.permission_denied("no read grant on document 'secret'")
            bad = await open_hocuspocus(h, "other", "not-a-jwt")
            assert bad[:2] == bytes((m.AUTH, m.AUTH_DENIED))
            team = m.address_prefix("team-a")
            assert await open_hocuspocus(h, "team-a", token["team"]) == m.authenticated(False)
            await h.send_bytes(team + m.sync_update(edit(Doc(), "ours")))
            assert await next_body(h, team) == m.sync_status(True)
        after = view(await read_document(http, srv.ws_url, "notes", token["writer"]))
        assert after == before


async def test_a_hocuspocus_socket_lasts_as_long_as_its_shortest_token(tmp_path: Path) -> None:
    lasting = issue_token(SECRET, "a", {}, yjs={"*": ["read"]})
    brief = issue_token(SECRET, "b", {}, yjs={"*": ["read"]}, exp=int(time.time()) + 2)
    async with (
        serve(tmp_path, insecure_dev=False, auth=AuthConfig(hs256_secret=SECRET)) as srv,
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{srv.ws_url}/yjs") as ws,
    ):
        assert await open_hocuspocus(ws, "one", lasting) == m.authenticated(True)
        assert await open_hocuspocus(ws, "two", brief) == m.authenticated(True)
        closed = await ws.receive(timeout=15)  # the second token's expiry closes the socket
        assert (closed.type, ws.close_code) == (aiohttp.WSMsgType.CLOSE, 1008)


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (m.sync_update(b"\x05\x01\x02"), 1002),  # pycrdt cannot read it
        (bytes((m.SYNC, 9, 0)), 1002),  # an unknown sync message
        (b"\x09", 1002),  # an unknown message type
        (m.awareness(encode_entries([Entry(1, 1, "{nope")])), 1002),  # a state that is not JSON
        (m.sync_update(b"\x00" * (600 << 10)), 1009),  # past the update limit (half a frame)
    ],
)
async def test_bad_input_closes_that_connection_only_and_changes_nothing(
    tmp_path: Path, frame: bytes, code: int
) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        writer: Doc[Any] = Doc()
        w = await http.ws_connect(f"{srv.ws_url}/yjs/notes")
        reader = await http.ws_connect(f"{srv.ws_url}/yjs")
        await next_body(w)
        await open_hocuspocus(reader, "notes")
        await w.send_bytes(m.sync_update(edit(writer, "before")))
        before = view(await read_document(http, srv.ws_url, "notes"))
        async with http.ws_connect(f"{srv.ws_url}/yjs/notes") as bad:
            await next_body(bad)
            await bad.send_bytes(frame)
            closed = await bad.receive(timeout=5)
            assert (closed.type, bad.close_code) == (aiohttp.WSMsgType.CLOSE, code)
        async with http.ws_connect(f"{srv.ws_url}/yjs") as bad:  # Hocuspocus alike
            await open_hocuspocus(bad, "notes")
            await bad.send_bytes(NOTES + frame)
            closed = await bad.receive(timeout=5)
            assert (closed.type, bad.close_code) == (aiohttp.WSMsgType.CLOSE, code)
        assert view(await read_document(http, srv.ws_url, "notes")) == before
        update = edit(writer, "after")  # the others are still served
        await w.send_bytes(m.sync_update(update))
        while True:
            body = await next_body(reader, NOTES)
            if body == m.sync_update(update):
                break
        await w.close()
        await reader.close()
