"""lazily-py (the spec's Python binding) as a real writer on a multi-writer stream.

A lazily-py process (``lazily_peer.py``: its own ``CrdtPlaneRuntime`` and ``lazily.ipc``
codecs over the lazily TCP face), octosync's Python client and its JS client (under Node) add
to one counter at the same time through a real server; all three end with the same entries
and the counter holds every click; lazily-py also publishes, follows and writes a shared
document on the lazily Unix socket. lazily-py needs Python 3.12+ (``tests.lazily_peer`` finds
one and builds its venv, or the test skips with one line: a failure under
``OCTOSYNC_REQUIRE_PEERS=1``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from octosync.client.shared import SharedDocument
from tests.browser.support import JS_CLIENT, node_command
from tests.e2e.helpers import (
    Follower,
    delta,
    follow_until,
    free_port,
    serve,
    snap,
    spawn_server,
    ws_lazily,
)
from tests.lazily_peer import require_lazily_python

pytestmark = pytest.mark.peer

PEER = Path(__file__).with_name("lazily_peer.py")
CLICKS = 40
ENTRIES = 6
"""Three counter entries (one per writer), the title, the note and the todo field."""
STREAM = "interop"


JS_WRITER = """
import {{ connect }} from {module};
const client = connect({url});
const doc = client.openDocument({stream});
await doc.synced();
for (let i = 0; i < {clicks}; i += 1) {{
  doc.counter("clicks").add(1);
  await new Promise((r) => setTimeout(r, 1));
}}
doc.map("todo").set("js", true);
await doc.synced();
while (doc.counter("clicks").value !== {total} || doc.entries.size < {entries}) {{
  await new Promise((r) => doc.on("change", r));
}}
const entries = [...doc.entries.values()].map((op) => [
  op.slot_id, op.key, [op.stamp.wall_time, op.stamp.logical, op.stamp.peer], [...op.bytes],
]);
console.log(JSON.stringify({{ counter: doc.counter("clicks").value, entries }}));
client.close();
process.exit(0);
"""


def entries_of(doc: SharedDocument) -> list[list[object]]:
    return sorted(
        [o.slot_id, o.key, [o.stamp.wall_time, o.stamp.logical, o.stamp.peer], list(o.state)]  # type: ignore[arg-type]
        for o in doc.cells.state.replica.ops()
    )


async def test_lazily_py_python_and_js_writers_converge_on_every_click(tmp_path: Path) -> None:
    lazily_python = require_lazily_python()
    node = node_command()
    tcp = free_port()
    total = 3 * CLICKS
    async with spawn_server(tmp_path, "--tcp-port", str(tcp)) as srv:
        script = tmp_path / "writer.mjs"
        script.write_text(
            JS_WRITER.format(
                module=json.dumps((JS_CLIENT / "octosync.js").as_uri()),
                url=json.dumps(srv.url),
                stream=json.dumps(STREAM),
                clicks=CLICKS,
                total=total,
                entries=ENTRIES,
            )
        )
        lazily = await asyncio.create_subprocess_exec(
            str(lazily_python),
            str(PEER),
            str(tcp),
            STREAM,
            "424242",
            str(CLICKS),
            str(total),
            str(ENTRIES),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        js = await asyncio.create_subprocess_exec(
            *node, str(script), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        async with SharedDocument(srv.url, STREAM) as doc:
            for _ in range(CLICKS):
                doc.counter("clicks").add(1)
                await asyncio.sleep(0.001)
            doc.register("note").set("from python")
            await doc.synced(60)
            await doc.wait_until(lambda: doc.counter("clicks").value == total, 60)
            lazily_out, lazily_err = await asyncio.wait_for(lazily.communicate(), 90)
            js_out, js_err = await asyncio.wait_for(js.communicate(), 90)
            assert lazily.returncode == 0, lazily_err.decode()[-3000:]
            assert js.returncode == 0, js_err.decode()[-3000:]
            await doc.wait_until(lambda: len(doc.cells.state.replica) == ENTRIES, 30)
            ours = entries_of(doc)
    peer = json.loads(lazily_out.decode().strip().splitlines()[-1])
    browser = json.loads(js_out.decode().strip().splitlines()[-1])
    assert peer["errors"] == []
    assert peer["counter"] == browser["counter"] == total
    assert len(ours) == ENTRIES
    assert sorted(peer["entries"]) == ours
    assert sorted(browser["entries"]) == ours


STATE_PEER = Path(__file__).with_name("lazily_state_peer.py")


async def lazily_run(python: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        str(python), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def finished(proc: asyncio.subprocess.Process) -> str:
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()[-3000:]
    return out.decode().strip().splitlines()[-1] if out.strip() else ""


async def test_lazily_py_publishes_and_follows_streams_on_the_unix_socket(
    tmp_path: Path,
) -> None:
    lazily_python = require_lazily_python()
    sock = tmp_path / "lazily.sock"
    where = f"unix:{sock}"
    async with serve(tmp_path, lazily_socket=str(sock)) as srv, aiohttp.ClientSession() as http:
        ws, _ = await ws_lazily(http, srv.ws_url, "from-lazily")
        follower = await lazily_run(
            lazily_python, str(STATE_PEER), "follow", where, "from-lazily", "2"
        )
        await finished(
            await lazily_run(lazily_python, str(STATE_PEER), "publish", where, "from-lazily")
        )
        seen = json.loads(await finished(follower))
        assert seen == {"epoch": 2, "values": {"1": b"one".hex(), "2": b"two".hex()}}
        ours = await follow_until(ws, Follower(), 2)  # and a WebSocket subscriber alike
        assert ours.values == {1: b"one", 2: b"two"}
        producer, _ = await ws_lazily(http, srv.ws_url, "to-lazily", publish=True)
        await producer.send_bytes(snap(0, {5: b"five", 6: b"6"}))
        await producer.send_bytes(delta(0, 6, b"six"))
        follower = await lazily_run(
            lazily_python, str(STATE_PEER), "follow", where, "to-lazily", "1"
        )
        seen = json.loads(await finished(follower))
        assert seen == {"epoch": 1, "values": {"5": b"five".hex(), "6": b"six".hex()}}
        await producer.close()
        await ws.close()


async def test_lazily_py_writes_a_shared_document_on_the_unix_socket(tmp_path: Path) -> None:
    lazily_python = require_lazily_python()
    sock = tmp_path / "lazily.sock"
    total = 2 * CLICKS
    entries = 4  # two counter entries (lazily-py's and ours), its title and our note
    async with serve(tmp_path, lazily_socket=str(sock)) as srv:
        peer = await lazily_run(
            lazily_python,
            str(PEER),
            f"unix:{sock}",
            STREAM,
            "515151",
            str(CLICKS),
            str(total),
            str(entries),
        )
        async with SharedDocument(srv.ws_url, STREAM) as doc:
            for _ in range(CLICKS):
                doc.counter("clicks").add(1)
                await asyncio.sleep(0.001)
            doc.register("note").set("from python")
            await doc.synced(60)
            await doc.wait_until(lambda: doc.counter("clicks").value == total, 60)
            result = json.loads(await finished(peer))
            await doc.wait_until(lambda: len(doc.cells.state.replica) == entries, 30)
            assert doc.register("title").value == "from lazily-py"
            ours = entries_of(doc)
    assert result["errors"] == []
    assert result["counter"] == total
    assert sorted(result["entries"]) == ours
