"""TopGun search benchmark, in-process through ``TopGunCore`` (the server's own rules, no
sockets): vector search (HNSW, usearch) against exact brute force in NumPy, full-text search
(BM25, tantivy) against a linear scan, and how long a live search takes to follow a write.

- **Vectors**: ``--vectors`` records (default 100,000) with a 64-number ``vector`` field are
  written as client batches; then ``--queries`` VECTOR_SEARCH requests (k=10) are answered,
  timed one by one (queries/s, p99), and recall@10 is measured against the exact top 10 by
  cosine over the same vectors (NumPy: one matrix product per query, the peer, timed the same
  way).
- **Full text**: ``--docs`` records (default 20,000) of 12 words drawn from a 2,000-word
  vocabulary; SEARCH requests for one or two words (limit 10), against a linear scan that
  counts the query's words in every record (Python, the peer).
- **Live search**: ``--live`` subscriptions (SEARCH_SUB, limit 10) on the full-text map; one
  write batch of 100 records, then the flush that sends their ``SEARCH_UPDATE``s, timed.
- **Served**: the same documents in a real server (its own process, journal on): SEARCH over
  a socket, queries/s and p99 alone and while ``--writers`` clients keep writing, a canary
  PING's round trip meanwhile, and how long a live search takes to show a write; each run
  twice, the server indexing on its event loop (``topgun_index_inline``, the same-run
  baseline) and on its indexer thread, first with a full-text index, then with a vector
  index as well.

Usage::

    python bench/topgun_search.py            # 100,000 vectors, 20,000 documents
    python bench/topgun_search.py --quick    # 10,000 vectors, 5,000 documents
    python bench/topgun_search.py --served-only --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import struct
import time
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from octosync.crdt.sync_messages import WireLWWRecord, WireTimestamp
from octosync.server.auth import ClaimGrants
from octosync.server.topgun_wire import encode
from octosync.topgun import TopGunCore
from octosync.topgun.search import COMMIT_GAP_MS
from octosync.wire import topgun as tg
from octosync.wire import topgun_requests as rq
from octosync.wire import topgun_services as sv

DIM = 64
NOW = 1_700_000_000_000
CLOCK = NOW + 10**9
"""The server's clock starts here, later than every op's timestamp (no drift warnings)."""


def clock() -> int:
    """Milliseconds that pass (the search index commits at most every COMMIT_GAP_MS)."""
    return CLOCK + int(time.monotonic() * 1000)


def put(n: int, map_name: str, key: str, value: Any) -> tg.ClientOp:
    stamp = WireTimestamp(NOW + n, 0, "bench")
    raw = msgspec.Raw(msgspec.msgpack.encode(value))
    return tg.ClientOp(
        map_name=map_name, key=key, id=str(n), op_type="PUT",
        record=WireLWWRecord(raw, stamp), timestamp=stamp,
    )  # fmt: skip


def write_all(core: TopGunCore, map_name: str, values: list[Any], start: int = 1) -> float:
    """Seconds to write ``values`` as batches of 500 and flush until all is indexed."""
    t0 = time.perf_counter()
    for i in range(0, len(values), 500):
        ops = [
            put(start + j, map_name, f"k{j}", values[j])
            for j in range(i, min(i + 500, len(values)))
        ]
        core.handle(1, tg.OpBatch(tg.OpBatchPayload(ops)))
        core.flush()
    while core.has_pending_events():
        core.flush()
    return time.perf_counter() - t0


def timed(calls: list[Callable[[], Any]]) -> tuple[list[Any], list[float]]:
    results, times = [], []
    for call in calls:
        t0 = time.perf_counter()
        results.append(call())
        times.append(time.perf_counter() - t0)
    return results, times


def rate(times: list[float]) -> str:
    qps = len(times) / sum(times)
    p99 = sorted(times)[max(0, int(len(times) * 0.99) - 1)]
    return f"{qps:,.0f} queries/s, p99 {p99 * 1000:.2f} ms"


def answer(core: TopGunCore, message: tg.Message) -> Any:
    (out,) = core.handle(1, message).out
    return tg.decode(encode(out.message))  # as the server sends it


def vectors(n: int, queries: int) -> None:
    rng = np.random.default_rng(11)
    points = rng.standard_normal((n, DIM)).astype(np.float32)
    core = TopGunCore(clock, persistent=False, vector_maps=("vec",))
    core.connect(1, ClaimGrants(subject="bench", everything=True))
    took = write_all(core, "vec", [{"vector": [float(x) for x in p]} for p in points])
    print(f"vectors: {n:,} written and indexed in {took:.1f} s")
    asks = rng.standard_normal((queries, DIM)).astype(np.float32)
    unit = points / np.linalg.norm(points, axis=1, keepdims=True)
    truth, brute = timed(
        [lambda q=q: set(np.argsort(-(unit @ (q / np.linalg.norm(q))))[:10]) for q in asks]
    )
    print(f"  brute force (peer):          {rate(brute)}")
    for ef in (None, 512):
        found, hnsw = timed([lambda q=q, ef=ef: answer(core, search(q, ef)) for q in asks])
        hits = sum(
            len(t & {int(r.key[1:]) for r in f.payload.results})
            for t, f in zip(truth, found, strict=True)
        )
        label = "default" if ef is None else str(ef)
        print(
            f"  HNSW (k=10, ef {label:>7}):   {rate(hnsw)}; recall@10 {hits / (10 * queries):.3f};"
            f" {sum(brute) / sum(hnsw):.1f}x brute force"
        )


def search(q: Any, ef: int | None) -> rq.VectorSearch:
    vector = struct.pack("<64f", *q)
    return rq.VectorSearch(rq.VectorSearchPayload("v", "vec", vector, 10, ef_search=ef))


def full_text(n: int, queries: int, live: int) -> None:
    rng = np.random.default_rng(12)
    vocab = [f"w{i}" for i in range(2000)]
    weights = 1.0 / np.arange(1, len(vocab) + 1)  # Zipf-like: a few common words
    weights /= weights.sum()
    docs = [" ".join(rng.choice(vocab, 12, p=weights)) for _ in range(n)]
    core = TopGunCore(clock, persistent=False, search_maps=("txt",))
    core.connect(1, ClaimGrants(subject="bench", everything=True))
    took = write_all(core, "txt", [{"body": d} for d in docs])
    print(f"full text: {n:,} documents written and indexed in {took:.1f} s")
    words = [" ".join(rng.choice(vocab[:300], rng.integers(1, 3))) for _ in range(queries)]
    _found, bm25 = timed(
        [lambda w=w: answer(core, sv.Search(sv.SearchPayload("r", "txt", w))) for w in words]
    )
    split = [set(d.split()) for d in docs]

    def scan(w: str) -> list[int]:
        terms = w.split()
        scored = [(sum(t in s for t in terms), i) for i, s in enumerate(split)]
        return [i for c, i in sorted(scored, reverse=True)[:10] if c]

    _, linear = timed([lambda w=w: scan(w) for w in words])
    print(f"  BM25 (limit 10):    {rate(bm25)}")
    print(f"  linear scan (peer): {rate(linear)}")
    print(f"  speed BM25 / scan {sum(linear) / sum(bm25):.1f}x")
    for i in range(live):
        sub = sv.SearchSub(sv.SearchSubPayload(f"s{i}", "txt", vocab[i % 50]))
        core.handle(1, sub)
    time.sleep(COMMIT_GAP_MS / 1000)  # the index may commit at the next flush
    batch = [{"body": " ".join(rng.choice(vocab[:50], 12))} for _ in range(100)]
    ops = [put(n + 10 + j, "txt", f"new{j}", v) for j, v in enumerate(batch)]
    t0 = time.perf_counter()
    core.handle(1, tg.OpBatch(tg.OpBatchPayload(ops)))
    fx = core.flush()
    spent = time.perf_counter() - t0
    updates = sum(1 for o in fx.out if isinstance(o.message, sv.SearchUpdate))
    print(f"  live search: {live} subscriptions follow a batch of 100 writes in "
          f"{spent * 1000:.1f} ms ({updates} SEARCH_UPDATE)")  # fmt: skip


class _Tag(msgspec.Struct):
    type: str


_TAG = msgspec.msgpack.Decoder(_Tag)


def writers_process(ws_url: str, writers: int, halt: Any, ready: Any, written: Any) -> None:
    """The writers, in a process of their own (the bench's loop measures the server, not
    its own writers): each writes batches of 100 and waits for its ack, until ``halt``."""

    async def run() -> None:
        import aiohttp

        from hostile import topgun, write_map

        rng = np.random.default_rng(14)
        vocab = [f"w{i}" for i in range(2000)]
        where = argparse.Namespace(ws=ws_url)
        async with aiohttp.ClientSession() as http:
            sockets = [await topgun(http, where) for _ in range(writers)]  # type: ignore[arg-type]
            ready.set()

            async def writing(w: int, ws: Any) -> None:
                n = 0
                while not halt.is_set():
                    batch = {
                        f"x{w}-{n + j}": {"body": " ".join(rng.choice(vocab, 12))}
                        for j in range(100)
                    }
                    await write_map(ws, "docs", batch, 10_000_000 * (w + 1) + n)
                    await until_ack(ws)  # a closed loop: the next batch after the ack
                    n += 100
                    with written.get_lock():
                        written.value += 100
                await ws.close()

            await asyncio.gather(*(writing(w, ws) for w, ws in enumerate(sockets)))

    asyncio.run(run())


async def index_metrics(http: Any, base: str) -> tuple[int, int]:
    """The server's index counters: (writes handed to the indexes, the watermark)."""
    async with http.get(f"{base}/metrics") as resp:
        text = await resp.text()
    got = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("octosync_topgun_index_written_total", "octosync_topgun_index_watermark"):
            got[name] = int(float(value))
    return got["octosync_topgun_index_written_total"], got["octosync_topgun_index_watermark"]


async def catch_up(http: Any, base: str) -> int:
    """Wait until the index watermark reaches the writes so far; how far behind it was."""
    written, mark = await index_metrics(http, base)
    behind = written - mark
    while mark < written:
        await asyncio.sleep(0.05)
        _, mark = await index_metrics(http, base)
    return behind


async def until_ack(ws: Any) -> None:
    """Read until this connection's OP_ACK (other writers' events come in between)."""
    while _TAG.decode((await ws.receive()).data).type != "OP_ACK":
        pass


async def served(
    docs: int, seconds: float, writers: int, *, inline: bool, vectors: bool, index: bool = True
) -> dict[str, float]:
    """Against a real server (its own process, journal on): SEARCH queries/s and p99 alone,
    then while ``writers`` clients keep writing batches, with a canary connection sending a
    PING every 5 ms throughout (its round trip is how long the loop kept everyone waiting);
    then how long a live search takes to show a write (write sent -> SEARCH_UPDATE
    received). ``inline``: the server indexes on its event loop (``topgun_index_inline``,
    the baseline) instead of its indexer thread; ``vectors``: the map also has a vector
    index (every write embedded); without ``index`` no map is indexed (SEARCH is answered
    with its refusal at once): what the writes alone leave of the loop, the reference."""
    import tempfile
    from pathlib import Path

    import aiohttp

    from _harness import Server
    from hostile import topgun, write_map

    rng = np.random.default_rng(13)
    vocab = [f"w{i}" for i in range(2000)]
    figures: dict[str, float] = {}
    mode = "inline (on the loop)" if inline else "indexer thread"
    if not index:
        mode = "no index (the writes alone; SEARCH refused at once)"
    print(f"served, {mode}{', with a vector index' if vectors and index else ''}:")
    indexes: dict[str, Any] = {"topgun_search": ["docs"], "topgun_index_inline": inline}
    if vectors:
        indexes["topgun_vectors"] = ["docs"]
    if not index:
        indexes = {"topgun_search": ["elsewhere"]}
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(Path(tmp), **indexes)
        try:
            async with aiohttp.ClientSession() as http:
                await srv.ready(http)
                loader = await topgun(http, srv)
                await write_map(
                    loader,
                    "docs",
                    {f"d{i}": {"body": " ".join(rng.choice(vocab, 12))} for i in range(docs)},
                )
                await asyncio.sleep(2.0)  # the acks and the index catch up
                asker = await topgun(http, srv)
                canary = await topgun(http, srv)
                words = [" ".join(rng.choice(vocab[:300], 2)) for _ in range(100_000)]

                async def searching(label: str) -> list[float]:
                    times: list[float] = []
                    deadline = time.perf_counter() + seconds
                    i = 0
                    while time.perf_counter() < deadline:
                        ask = sv.Search(sv.SearchPayload(f"r{i}", "docs", words[i]))
                        t0 = time.perf_counter()
                        await asker.send_bytes(tg.encode(ask))
                        while (
                            tg.decode((await asker.receive()).data).__struct_config__.tag
                            != "SEARCH_RESP"
                        ):
                            pass
                        times.append(time.perf_counter() - t0)
                        i += 1
                    print(f"  SEARCH over a socket, {label}: {rate(times)}")
                    return times

                alone = await searching("alone")
                stop = asyncio.Event()
                pings: list[float] = []
                ctx = multiprocessing.get_context("spawn")
                halt, ready, written = ctx.Event(), ctx.Event(), ctx.Value("q", 0)
                proc = ctx.Process(
                    target=writers_process, args=(srv.ws, writers, halt, ready, written)
                )
                proc.start()
                await asyncio.get_running_loop().run_in_executor(None, ready.wait)

                async def pinging() -> None:
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        await canary.send_bytes(tg.encode(tg.Ping(timestamp=0)))
                        await canary.receive()  # its PONG (the canary follows no map)
                        pings.append(time.perf_counter() - t0)
                        await asyncio.sleep(0.005)

                tasks = [asyncio.create_task(pinging())]
                t0 = time.perf_counter()
                start = written.value
                loaded = await searching(f"{writers} writers writing")
                rate_w = (written.value - start) / (time.perf_counter() - t0)
                stop.set()
                halt.set()
                await asyncio.gather(*tasks)
                await asyncio.get_running_loop().run_in_executor(None, proc.join)
                pings.sort()
                p99 = pings[max(0, int(len(pings) * 0.99) - 1)] * 1000
                print(
                    f"  writes meanwhile: {rate_w:,.0f} ops/s; search speed loaded / alone "
                    f"{sum(alone) / len(alone) / (sum(loaded) / len(loaded)):.2f}; canary PING "
                    f"p50 {pings[len(pings) // 2] * 1000:.1f} ms, p99 {p99:.1f} ms, "
                    f"max {pings[-1] * 1000:.1f} ms ({len(pings)} pings)"
                )
                figures["qps"] = len(loaded) / sum(loaded)
                figures["p99"] = sorted(loaded)[max(0, int(len(loaded) * 0.99) - 1)] * 1000
                figures["writes"] = rate_w
                figures["ping_p99"] = p99
                if not index:
                    return figures
                t0 = time.perf_counter()
                behind = await catch_up(http, srv.http)
                print(
                    f"  after the writers stopped, the index took {time.perf_counter() - t0:.1f} s"
                    f" to catch up ({behind:,} writes behind then)"
                )
                watcher = await topgun(http, srv)
                every = sv.SearchOptions(limit=50)  # each of the 20 writes below is a hit
                await watcher.send_bytes(
                    tg.encode(sv.SearchSub(sv.SearchSubPayload("live", "docs", "zebra", every)))
                )
                await watcher.receive()  # its first SEARCH_RESP
                # a fresh writer: the loader, never read, may have been dropped as a slow reader
                poker = await topgun(http, srv)
                lags = []
                for i in range(20):
                    t0 = time.perf_counter()
                    await write_map(
                        poker, "docs", {f"z{i}": {"body": f"zebra {i}"}}, 90_000_000 + i
                    )

                    async def shown(key: str = f"z{i}") -> None:
                        while True:
                            m = tg.decode((await watcher.receive()).data)
                            if isinstance(m, sv.SearchUpdate) and m.payload.key == key:
                                return

                    await asyncio.wait_for(shown(), 30)
                    lags.append(time.perf_counter() - t0)
                lags.sort()
                median, worst = lags[len(lags) // 2] * 1000, lags[-1] * 1000
                print(
                    f"  live search: a write shows in SEARCH_UPDATE after {median:.1f} ms"
                    f" (median), {worst:.1f} ms (max of {len(lags)})"
                )
        finally:
            srv.stop()
    return figures


async def served_both(docs: int, seconds: float, writers: int, vectors: bool) -> None:
    """The served phases twice in one run: indexing inline (the baseline), then on the
    indexer thread; the ratios compare them. Before the first pair, the same load on a server
    that indexes nothing: the floor the indexes add to."""
    if not vectors:
        await served(docs, seconds, writers, inline=False, vectors=False, index=False)
    before = await served(docs, seconds, writers, inline=True, vectors=vectors)
    after = await served(docs, seconds, writers, inline=False, vectors=vectors)
    print(
        f"  indexer thread / inline: search under writers {after['qps'] / before['qps']:.1f}x "
        f"queries/s, p99 {before['p99']:.1f} -> {after['p99']:.1f} ms; canary PING p99 "
        f"{before['ping_p99']:.1f} -> {after['ping_p99']:.1f} ms; writes "
        f"{before['writes']:,.0f} -> {after['writes']:,.0f} ops/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--live", type=int, default=50)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0, help="per served search phase")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument(
        "--served-only", action="store_true", help="only the served phases (a real server)"
    )
    args = parser.parse_args()
    if args.quick:
        args.vectors, args.docs, args.queries, args.live = 10_000, 5_000, 50, 10
        args.seconds = 1.5
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} (1 min)")
    if not args.served_only:
        vectors(args.vectors, args.queries)
        full_text(args.docs, args.queries, args.live)
    print(f"served: {args.docs:,} documents, a server in its own process")
    for with_vectors in (False, True):
        asyncio.run(served_both(args.docs, args.seconds, args.writers, with_vectors))


if __name__ == "__main__":
    main()
