"""Hub core fan-out, no sockets: deltas to 1,000 subscribers per second, publish to write buffer.

Each drain is what the server's flusher does: ``take_bytes`` gives each woken subscriber its
backlog as one buffer (shared by every subscriber at the same log position). Baseline in the
same run: the naive loop that encodes each delta once per subscriber, appends it to a plain
per-subscriber list and joins each list per drain (what the shared log and bytes save).

    python bench/hub_core.py            # 1,000 subscribers, 2,000 deltas
    python bench/hub_core.py --quick    # 200 subscribers, 300 deltas
    python bench/hub_core.py --payload 1024   # where encoding once starts to pay
"""

from __future__ import annotations

import argparse
import time

from octosync.hub import Hub, HubConfig, OutFrame, ViewKey, lazily_frame
from octosync.ipc.messages import CellSet, Delta, NodeSnapshot, Snapshot
from octosync.wire import json as wire_json


def encode(frame: OutFrame) -> bytes:
    assert isinstance(frame.body, Snapshot | Delta)
    return wire_json.encode(frame.body)


def deltas(n: int, payload: int) -> list[Delta]:
    pad = b"x" * max(0, payload - 8)
    return [Delta(e, e + 1, (CellSet(0, e.to_bytes(8, "big") + pad),)) for e in range(n)]


def run_hub(subscribers: int, batch: list[Delta], drain_every: int) -> float:
    hub = Hub(HubConfig(), clock=time.monotonic, encoders={"json": encode})
    hub.connect(0, ViewKey("lazily", "json"))
    hub.publish(0, "s", lazily_frame(Snapshot(0, (NodeSnapshot(0, "bytes", "resolved", b""),))))
    woken: set[int] = set()
    for c in range(1, subscribers + 1):
        hub.connect(c, ViewKey("lazily", "json"), wake=woken.add)
        hub.subscribe(c, "s")
        hub.take(c)
    woken.clear()
    encodes_before = hub.stats.encodes
    start = time.perf_counter()
    for i, d in enumerate(batch):
        hub.publish(0, "s", lazily_frame(d))
        if i % drain_every == drain_every - 1:
            for c in woken:
                hub.take_bytes(c)
            woken.clear()
    elapsed = time.perf_counter() - start
    assert hub.stats.encodes - encodes_before == len(batch)  # once per delta, not per sub
    return len(batch) * subscribers / elapsed


def run_naive(subscribers: int, batch: list[Delta], drain_every: int) -> float:
    queues: list[list[bytes]] = [[] for _ in range(subscribers)]
    start = time.perf_counter()
    for i, d in enumerate(batch):
        for q in queues:
            q.append(wire_json.encode(d))
        if i % drain_every == drain_every - 1:
            for q in queues:
                b"".join(q)
                q.clear()
    elapsed = time.perf_counter() - start
    return len(batch) * subscribers / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--deltas", type=int, default=2000)
    parser.add_argument("--drain-every", type=int, default=10, help="deltas per write")
    parser.add_argument("--payload", type=int, default=8, help="bytes per cell_set payload")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.subscribers, args.deltas = 200, 300
    batch = deltas(args.deltas, args.payload)
    hub = run_hub(args.subscribers, batch, args.drain_every)
    naive = run_naive(args.subscribers, batch, args.drain_every)
    print(
        f"subscribers={args.subscribers} deltas={args.deltas} payload={args.payload}B "
        f"drain_every={args.drain_every}"
    )
    print(f"hub core (encode once, shared log):   {hub:14,.0f} deltas/s to write buffers")
    print(f"naive loop (encode per subscriber):   {naive:14,.0f} deltas/s")
    print(f"ratio: {hub / naive:.2f}x")


if __name__ == "__main__":
    main()
