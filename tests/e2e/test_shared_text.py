"""Shared text over real sockets: concurrent typists converge character by character, a late
joiner gets the text as chunk entries, a writer cannot forge or shrink another's chunks, every
acknowledged keystroke survives ``kill -9``, and two authors' concurrent trace carried through
the server ends at its final text."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from octosync.client.shared import SharedDocument
from octosync.crdt.shared import node_of
from octosync.crdt.text import TextEdit
from octosync.hub.crdt_streams import FEATURE
from octosync.ipc.messages import CrdtOp, CrdtSync, WireStamp
from octosync.wire import DIALECTS
from tests.browser.support import JS_CLIENT, node_command
from tests.conftest import trace_file
from tests.e2e.helpers import TIMEOUT, handshake, recv_json, serve, spawn_server
from tests.text_traces import AGENT_PEER, causal_writes, load

_JSON = DIALECTS["json"]


class Mirror:
    """A plain string kept up to date from a text's change events, as an editor would."""

    def __init__(self) -> None:
        self.text = ""

    def apply(self, edits: list[TextEdit]) -> None:
        for e in edits:
            self.text = self.text[: e.index] + e.insert + self.text[e.index + e.delete :]


async def test_three_typists_at_one_point_keep_every_character(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv:
        docs = [SharedDocument(srv.ws_url, "notes") for _ in range(3)]
        for doc in docs:
            await doc.start()
            await doc.synced(TIMEOUT)
        docs[0].text("body").insert(0, "[]")
        await docs[0].synced(TIMEOUT)
        for doc in docs:
            await doc.wait_until(lambda d=doc: d.text("body").value == "[]", TIMEOUT)
        mirrors = [Mirror() for _ in docs]
        for doc, mirror in zip(docs, mirrors, strict=True):
            doc.text("body").on_change(mirror.apply)

        async def typist(doc: SharedDocument, letter: str) -> None:
            for _ in range(30):
                doc.text("body").insert(1, letter)  # everyone at the same point
                await asyncio.sleep(0)

        await asyncio.gather(*(typist(d, c) for d, c in zip(docs, "abc", strict=True)))
        for doc in docs:
            await doc.synced(TIMEOUT)
        for doc in docs:
            await doc.wait_until(lambda d=doc: len(d.text("body").value) == 92, TIMEOUT)
        texts = {d.text("body").value for d in docs}
        assert len(texts) == 1
        text = texts.pop()
        assert text[0] == "["
        assert text[-1] == "]"
        assert sorted(text[1:-1]) == sorted("a" * 30 + "b" * 30 + "c" * 30)
        for doc, at in zip(docs, (1, 40, 80), strict=True):  # concurrent deletions
            doc.text("body").delete(at, 10)
        for doc in docs:
            await doc.synced(TIMEOUT)
        for doc in docs:
            await doc.wait_until(lambda d=doc: len(d.text("body").value) == 62, TIMEOUT)
        text = docs[0].text("body").value
        assert {d.text("body").value for d in docs} == {text}
        for doc, mirror in zip(docs, mirrors, strict=True):
            assert mirror.text == text  # the change events replay to the text
            await doc.close()
        late = SharedDocument(srv.ws_url, "notes")
        async with late:
            await late.synced(TIMEOUT)
            assert late.text("body").value == text


async def test_a_writer_cannot_forge_or_shrink_anothers_chunks(tmp_path: Path) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        author = SharedDocument(srv.ws_url, "notes", peer=5)
        async with author:
            author.text("body").insert(0, "hello world")
            await author.synced(TIMEOUT)
            ws = await http.ws_connect(f"{srv.ws_url}/lazily")
            await ws.send_str(handshake("notes", peer_id=6, features=[FEATURE]).decode())
            await recv_json(ws)
            while "frontier" not in (await recv_json(ws)):
                pass
            slot = node_of("body")
            stamp = WireStamp(2**40, 0, 6)
            forged = CrdtOp(slot, stamp, b'[[1,"HELLO",0,0]]', key="body/tx/5/0")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(forged,))))
            error = await recv_json(ws)
            assert (error["code"], error["path"]) == ("Forbidden", "ops[0].key")
            mine = CrdtOp(slot, stamp, b'[[1,"xy",0,0]]', key="body/tx/6/0")
            shorter = CrdtOp(slot, WireStamp(2**40, 1, 6), b'[[1,"x",0,0]]', key="body/tx/6/0")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(mine, shorter))))
            error = await recv_json(ws)
            assert (error["code"], error["path"]) == ("CrdtValueError", "ops[1].state")
            cross = CrdtOp(slot, stamp, b'[[60,"abcdefgh",0,0]]', key="body/tx/6/0")
            await ws.send_bytes(_JSON.encode(CrdtSync(ops=(cross,))))
            error = await recv_json(ws)
            assert (error["code"], error["path"]) == ("CrdtValueError", "ops[0].state[0]")
            await ws.close()
            late = SharedDocument(srv.ws_url, "notes", peer=8)
            async with late:
                await late.synced(TIMEOUT)
                assert late.text("body").value == "hello world"  # nothing of those frames
                keys = {op.key for op in late.cells.state.replica.ops()}
                assert keys == {"body/tx/5/0"}


async def test_every_acknowledged_keystroke_survives_kill_9(tmp_path: Path) -> None:
    async with spawn_server(tmp_path) as srv:
        writer = SharedDocument(srv.url, "notes")
        async with writer:
            body = writer.text("body")
            for i in range(150):
                body.insert(len(body), chr(ord("a") + i % 26))
                if i % 10 == 0:
                    await asyncio.sleep(0)
            await writer.synced(TIMEOUT)
            acknowledged = body.value
            for i in range(100):  # typed on: some acknowledged, some not, when it dies
                body.insert(i, "#")
                body.delete(len(body) - 1, 1)
                await asyncio.sleep(0)
            srv.proc.kill()
            srv.proc.wait()
            typed = body.value
    async with spawn_server(tmp_path) as srv2:
        reader = SharedDocument(srv2.url, "notes")
        async with reader:
            await reader.synced(TIMEOUT)
            restarted = reader.text("body").value
            # nothing the server acknowledged is gone: every kept # and letter is in order
            assert restarted.replace("#", "") == acknowledged[: len(restarted.replace("#", ""))]
            assert len(restarted) in (150, 151)  # each step one # in and one letter out
            writer.url = srv2.url
            async with writer:
                await writer.synced(TIMEOUT)
            await reader.wait_until(lambda: reader.text("body").value == typed, TIMEOUT)


@pytest.mark.slow
async def test_two_authors_concurrent_trace_through_the_server_ends_at_its_content(
    tmp_path: Path,
) -> None:
    trace = load(trace_file("friendsforever.json.gz"))
    writes = causal_writes(trace)
    async with serve(tmp_path) as srv:
        authors = [SharedDocument(srv.ws_url, "ff", peer=AGENT_PEER + a) for a in range(2)]
        for doc in authors:
            await doc.start()
            await doc.synced(TIMEOUT)
            doc.text("t")
        for step, (agent, ws) in enumerate(writes):
            doc = authors[agent]
            state = doc.cells.state
            for rest, body in ws:
                # each author's editor is the trace's version; its writes go through the client
                op = CrdtOp(node_of("t"), state.stamp(), body, key=f"t/{rest}")
                doc.cells.merge([op])
                doc._local(op)
            if step % 200 == 0:
                await doc.synced(TIMEOUT)
        for doc in authors:
            await doc.synced(TIMEOUT)
        want = trace["endContent"]
        for doc in authors:
            await doc.wait_until(lambda d=doc: d.text("t").value == want, 120)
        late = SharedDocument(srv.ws_url, "ff")
        async with late:
            await late.synced(TIMEOUT)
            assert late.text("t").value == want


JS_TYPIST = """
import {{ connect }} from {module};
const client = connect({url});
const doc = client.openDocument({stream});
await doc.synced();
const body = doc.text("body");
for (let i = 0; i < {keys}; i += 1) {{
  body.insert(Math.min(i % 7, body.length), i % 5 === 0 ? "\\u00e9" : "j");
  if (i % 9 === 8) body.delete(0, 1);
  await new Promise((r) => setTimeout(r, 2));
}}
await doc.synced();
const want = {total};
while (body.length !== want) await new Promise((r) => setTimeout(r, 20));
const entries = [...doc.entries.values()].map((op) => [op.key, new TextDecoder().decode(op.bytes)]);
console.log(JSON.stringify({{ text: body.toString(), entries }}));
client.close();
"""


async def test_a_js_typist_and_a_python_typist_end_with_one_text(tmp_path: Path) -> None:
    """octosync.js under Node and the Python client type into one text through a real server
    at once (inserts and deletions): both end with the same text and the same entries."""
    keys = 90
    total = 2 * (keys - keys // 9)
    script = tmp_path / "typist.mjs"
    async with serve(tmp_path) as srv:
        script.write_text(
            JS_TYPIST.format(
                module=json.dumps((JS_CLIENT / "octosync.js").as_uri()),
                url=json.dumps(srv.ws_url),
                stream=json.dumps("shared"),
                keys=keys,
                total=total,
            )
        )
        js = await asyncio.create_subprocess_exec(
            *node_command(),
            str(script),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with SharedDocument(srv.ws_url, "shared") as doc:
            await doc.synced(TIMEOUT)
            body = doc.text("body")
            for i in range(keys):
                body.insert(min(i % 5, len(body)), "p")
                if i % 9 == 8:
                    body.delete(len(body) - 1, 1)
                await asyncio.sleep(0.002)
            await doc.synced(TIMEOUT)
            out, err = await asyncio.wait_for(js.communicate(), 120)
            assert js.returncode == 0, err.decode()[-3000:]
            theirs = json.loads(out.decode().strip().splitlines()[-1])
            await doc.wait_until(lambda: len(body) == total, TIMEOUT)
            assert body.value == theirs["text"]
            assert "\u00e9" in body.value
            assert "p" in body.value
            ours = sorted(
                [op.key, op.state.decode()]
                for op in doc.cells.state.replica.ops()
                if isinstance(op.state, bytes)
            )
            assert sorted(theirs["entries"]) == ours
