"""Large payloads through a server: shared memory against inline bytes, in one run.

A producer publishes one ``bytes`` cell of SIZE bytes and rewrites it ROUNDS times; one
subscriber waits for each new value. Measured twice against the same server process (its
journal on, as deployed): with ``shared-blob`` negotiated on both sessions (the payload
crosses by POSIX shared memory, checked by its FNV-1a-64 checksum on the way in and out; the
server journals the bytes) and without it (the payload is inline in each JSON frame, as
every other peer receives it). Prints ms per update and the inline/shared ratio, plus the
machine's load average.

    python bench/shared_blob.py            # 64 MiB, 5 rounds
    python bench/shared_blob.py --quick    # 4 MiB, 2 rounds
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import octosync
from _harness import TOKEN, Server
from octosync.graph import Context

MIB = 1024 * 1024


async def run_mode(srv: Server, size: int, rounds: int, *, shared: bool) -> float:
    """Mean seconds from a write to the subscriber holding the new value."""
    options = {"token": TOKEN, "max_frame_size": 4 * size, "shared_blobs": shared}
    options["shm_capacity"] = 3 * size
    stream = f"blob-{'shm' if shared else 'inline'}"
    ctx = Context()
    cell = ctx.cell(bytes([0]) * size, type_tag="bytes")
    async with (
        octosync.connect(f"{srv.ws}/lazily", **options) as producer,
        octosync.connect(f"{srv.ws}/lazily", **options) as viewer,
    ):
        await producer.publish(stream, ctx)
        sub = await viewer.subscribe(stream)
        await asyncio.wait_for(anext(sub), 120)
        took = []
        for r in range(1, rounds + 1):
            value = bytes([r]) * size
            start = time.perf_counter()
            cell.set(value)
            state = await asyncio.wait_for(
                sub.wait_for(lambda s, r=r: s.values[cell.id][:1] == bytes([r])), 120
            )
            took.append(time.perf_counter() - start)
            assert state.values[cell.id] == value
        assert sub.resyncs == 0
    return sum(took) / len(took)


async def main(size: int, rounds: int, journal: bool = True) -> None:
    extra = {} if journal else {"journal": False}
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(Path(tmp), max_frame_size=5 * size, shm_capacity=3 * size, **extra)
        try:
            async with aiohttp.ClientSession() as http:
                await srv.ready(http)
            inline = await run_mode(srv, size, rounds, shared=False)
            shared = await run_mode(srv, size, rounds, shared=True)
        finally:
            errors = srv.stop()
    if "Traceback" in errors:
        print(errors, file=sys.stderr)
        raise SystemExit(1)
    mib = size / MIB
    print(f"payload {mib:.0f} MiB, {rounds} updates each, load average {os.getloadavg()[0]:.2f}")
    print(f"shared-blob  {shared * 1000:8.1f} ms/update  {mib / shared:8.1f} MiB/s")
    print(f"inline JSON  {inline * 1000:8.1f} ms/update  {mib / inline:8.1f} MiB/s")
    print(f"shared-blob / inline: {inline / shared:.1f}x faster")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-journal", action="store_true", help="the server keeps no journal")
    args = parser.parse_args()
    size, rounds = (4 * MIB, 2) if args.quick else (args.size_mib * MIB, args.rounds)
    asyncio.run(main(size, rounds, not args.no_journal))
