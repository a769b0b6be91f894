"""Search indexing on the server's indexer thread, over real sockets: a write acknowledged is
found by SEARCH and VECTOR_SEARCH once the published index watermark (``/metrics``) reaches
it, and a live search sees a key enter and leave in write order."""

from __future__ import annotations

import asyncio
import struct
import threading
from pathlib import Path

import aiohttp

from octosync.topgun.embedding import HashingEmbedder
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv
from tests.e2e.helpers import TIMEOUT, serve
from tests.e2e.test_topgun_face import _device, recv
from tests.topgun.helpers import batch, put


async def metric(http: aiohttp.ClientSession, url: str, name: str) -> int:
    async with http.get(f"{url}/metrics") as resp:
        text = await resp.text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"{name} ")]
    return int(float(line.split()[1]))


async def caught_up(http: aiohttp.ClientSession, url: str) -> int:
    """Wait for the index watermark to reach every write handed to the indexes so far."""
    written = await metric(http, url, "octosync_topgun_index_written_total")
    async with asyncio.timeout(TIMEOUT):
        while await metric(http, url, "octosync_topgun_index_watermark") < written:
            await asyncio.sleep(0.01)  # polling the published watermark, not a timed check
    return written


async def reply(ws: aiohttp.ClientWebSocketResponse, kind: type[tg.Message]) -> tg.Message:
    while not isinstance(msg := await recv(ws), kind):
        pass
    return msg


async def test_an_acknowledged_write_is_found_once_the_watermark_reaches_it(
    tmp_path: Path,
) -> None:
    maps = {"topgun_search": ("docs",), "topgun_vectors": ("docs",)}
    async with serve(tmp_path, **maps) as srv, aiohttp.ClientSession() as http:
        writer = await _device(http, srv.ws_url)
        reader = await _device(http, srv.ws_url)
        n = 0
        for round_ in range(20):  # a few batches, written faster than one commit gap
            ops = []
            for j in range(25):
                n += 1
                ops.append(
                    put(str(n), f"d{n}", {"t": f"filler {round_} {j}"}, 1000 + n, map_name="docs")
                )
            await writer.send_bytes(tg.encode(batch(*ops)))
            await reply(writer, tg.OpAck)
        n += 1
        last = put(str(n), "needle", {"t": "zanzibar quartz"}, 1000 + n, map_name="docs")
        await writer.send_bytes(tg.encode(batch(last)))
        await reply(writer, tg.OpAck)
        written = await caught_up(http, srv.url)
        assert written >= n
        indexer = [t.name for t in threading.enumerate() if t.name.startswith("octosync-indexer")]
        assert indexer, "indexing did not run on the indexer thread"

        await reader.send_bytes(tg.encode(sv.Search(sv.SearchPayload("q", "docs", "zanzibar"))))
        found = await reply(reader, sv.SearchResp)
        assert isinstance(found, sv.SearchResp)
        assert [r.key for r in found.payload.results] == ["needle"]
        axis = HashingEmbedder().embed("zanzibar quartz") or []
        ask = rq.VectorSearchPayload("v", "docs", struct.pack(f"<{len(axis)}f", *axis), 1)
        await reader.send_bytes(tg.encode(rq.VectorSearch(ask)))
        near = await reply(reader, rq.VectorSearchResp)
        assert isinstance(near, rq.VectorSearchResp)
        assert [r.key for r in near.payload.results] == ["needle"]
        assert near.payload.total_candidates == n


async def test_a_live_search_sees_a_key_enter_and_leave_in_write_order(tmp_path: Path) -> None:
    async with (
        serve(tmp_path, topgun_search=("docs",)) as srv,
        aiohttp.ClientSession() as http,
    ):
        writer = await _device(http, srv.ws_url)
        watcher = await _device(http, srv.ws_url)
        sub = sv.SearchSub(sv.SearchSubPayload("live", "docs", "zebra"))
        await watcher.send_bytes(tg.encode(sub))
        first = await reply(watcher, sv.SearchResp)
        assert isinstance(first, sv.SearchResp)
        assert first.payload.results == []
        texts = ["a zebra", "no stripes", "zebra again", "plain"]
        for i, text in enumerate(texts, start=1):
            op = put(str(i), "k", {"t": text}, 100 + i, map_name="docs")
            await writer.send_bytes(tg.encode(batch(op)))
            await reply(writer, tg.OpAck)
            await caught_up(http, srv.url)  # each write in a commit of its own
        kinds = []
        while len(kinds) < 4:
            update = await reply(watcher, sv.SearchUpdate)
            assert isinstance(update, sv.SearchUpdate)
            assert update.payload.key == "k"
            kinds.append(update.payload.change_type)
        assert kinds == ["ENTER", "LEAVE", "ENTER", "LEAVE"]
