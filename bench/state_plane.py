"""State-plane benchmark: cell writes through batch + flush + delta build + encode.

Graph: N cells (i64), M memos (each the sum of 3 cells), S signals (each the sum of 3
memos); one value-mirror Publisher that may read everything. Every figure is printed beside
a plain-Python baseline measured in the same run: a dict of values diffed against a shadow
dict after each batch, turned into the same kind of op list and encoded with the same
encoder. Run ``python bench/state_plane.py`` (full) or ``--quick`` (small, for checking).
"""

from __future__ import annotations

import argparse
import importlib
import random
import struct
import time
from collections.abc import Callable
from typing import Any

import msgspec

from octosync import Context
from octosync.graph import Cell
from octosync.ipc.messages import CellSet, Delta
from octosync.ipc.mirror import Mirror
from octosync.ipc.permissions import PeerPermissions
from octosync.ipc.publisher import Mode, Publisher
from octosync.wire import json as wire_json

_I64 = struct.Struct(">q")


def _dialects() -> dict[str, Callable[[Any], bytes]]:
    """The wire dialects present in this checkout (each module has ``encode``)."""
    found: dict[str, Callable[[Any], bytes]] = {}
    for name in ("json", "json_tagged", "msgpack"):
        try:
            module = importlib.import_module(f"octosync.wire.{name}")
        except ImportError:
            continue
        found[name] = module.encode
    return found


class Graph:
    def __init__(
        self, cells: int, memos: int, signals: int, seed: int, mode: Mode = "value"
    ) -> None:
        rng = random.Random(seed)
        self.ctx = Context()
        ctx = self.ctx
        with ctx.batch():
            self.cells: list[Cell[int]] = [ctx.cell(i, type_tag="i64") for i in range(cells)]
            self.memos = []
            for _ in range(memos):
                deps = rng.sample(self.cells, 3)
                self.memos.append(
                    ctx.memo(lambda d=deps: d[0].get() + d[1].get() + d[2].get(), type_tag="i64")
                )
            for _ in range(signals):
                deps_m = rng.sample(self.memos, 3)
                ctx.signal(lambda d=deps_m: d[0].get() + d[1].get() + d[2].get(), type_tag="i64")
        self.pub = Publisher(ctx, permissions=PeerPermissions.allow_all(), mode=mode)
        self.snapshot = self.pub.snapshot()
        self.pub.drain()


def writes(cells: int, ops: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(cells), 1_000_000 + i) for i in range(ops)]


def run_graph(
    g: Graph, plan: list[tuple[int, int]], batch: int, keep: bool = False
) -> tuple[float, list[Delta]]:
    """Time the writes; ``keep`` retains the deltas (for the byte and mirror figures only,
    since holding hundreds of thousands of objects slows the garbage collector)."""
    cells = g.cells
    ctx = g.ctx
    pub = g.pub
    encode = wire_json.encode
    kept: list[Delta] = []
    start = time.perf_counter()
    for i in range(0, len(plan), batch):
        with ctx.batch():
            for index, value in plan[i : i + batch]:
                cells[index].set(value)
        for delta in pub.drain():
            encode(delta)
            if keep:
                kept.append(delta)
    return time.perf_counter() - start, kept


def run_baseline(cells: int, plan: list[tuple[int, int]], batch: int) -> float:
    """A dict of values, diffed per batch against a shadow copy, encoded as cell_set ops."""
    state = {i: i for i in range(cells)}
    shadow = dict(state)
    encoder = msgspec.json.Encoder()
    pack = _I64.pack
    epoch = 0
    start = time.perf_counter()
    for i in range(0, len(plan), batch):
        touched = []
        for index, value in plan[i : i + batch]:
            state[index] = value
            touched.append(index)
        ops = []
        for index in dict.fromkeys(touched):
            value = state[index]
            if shadow[index] != value:
                shadow[index] = value
                ops.append(CellSet(index, pack(value)))
        if ops:
            encoder.encode(Delta(base_epoch=epoch, epoch=epoch + 1, ops=tuple(ops)))
            epoch += 1
    return time.perf_counter() - start


def count_ops(deltas: list[Delta]) -> int:
    return sum(len(d.ops) for d in deltas)


def mirror_apply(snapshot: Any, deltas: list[Delta]) -> float:
    mirror = Mirror()
    mirror.apply(snapshot)
    start = time.perf_counter()
    for delta in deltas:
        mirror.apply(delta)
    elapsed = time.perf_counter() - start
    assert mirror.in_sync
    assert mirror.last_epoch == deltas[-1].epoch
    return elapsed


def dict_apply(snapshot: Any, deltas: list[Delta]) -> float:
    values = {n.slot_id: n.payload for n in snapshot.nodes}
    start = time.perf_counter()
    last = snapshot.epoch
    for delta in deltas:
        if delta.base_epoch != last:
            raise AssertionError("gap")
        for op in delta.ops:
            values[op.slot_id] = op.payload  # type: ignore[union-attr]
        last = delta.epoch
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, to check it runs")
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--memos", type=int, default=1_000)
    parser.add_argument("--signals", type=int, default=100)
    parser.add_argument("--ops", type=int, default=300_000, help="cell writes per batch size")
    args = parser.parse_args()
    if args.quick:
        args.cells, args.memos, args.signals, args.ops = 2_000, 200, 20, 6_000

    print(
        f"graph: {args.cells} cells, {args.memos} memos, {args.signals} signals; "
        f"{args.ops} writes per batch size; value-mirror publisher, allow_all, json dialect"
    )
    header = f"{'figure':<34}{'octosync':>14}{'dict baseline':>16}{'ratio':>8}"
    print(header)
    print("-" * len(header))
    batch100: list[Delta] = []
    snapshot = None
    for batch in (1, 10, 100):
        g = Graph(args.cells, args.memos, args.signals, seed=1)
        plan = writes(args.cells, args.ops, seed=batch)
        elapsed, _ = run_graph(g, plan, batch)
        base = run_baseline(args.cells, plan, batch)
        ours = args.ops / elapsed
        theirs = args.ops / base
        print(
            f"{'cell writes/s, batch ' + str(batch):<34}{ours:>14,.0f}{theirs:>16,.0f}"
            f"{ours / theirs:>8.2f}"
        )
        if batch == 100:  # replay, untimed, keeping the deltas
            g = Graph(args.cells, args.memos, args.signals, seed=1)
            batch100, snapshot = run_graph(g, plan, batch, keep=True)[1], g.snapshot
    g = Graph(args.cells, args.memos, args.signals, seed=1, mode="lazy")
    plan = writes(args.cells, args.ops, seed=100)
    elapsed, _ = run_graph(g, plan, 100)
    base = run_baseline(args.cells, plan, 100)
    ours, theirs = args.ops / elapsed, args.ops / base
    print(
        f"{'cell writes/s, batch 100, lazy':<34}{ours:>14,.0f}{theirs:>16,.0f}{ours / theirs:>8.2f}"
    )
    ops = count_ops(batch100)
    cell_sets = sum(isinstance(op, CellSet) for d in batch100 for op in d.ops)
    print(f"  (batch 100: {len(batch100)} deltas, {ops} ops of which {cell_sets} cell_set)")
    for name, encode in _dialects().items():
        size = sum(len(encode(d)) for d in batch100)
        base_size = sum(
            len(msgspec.json.encode({str(op.slot_id): op.payload for op in d.ops}))  # type: ignore[union-attr]
            for d in batch100
        )
        print(
            f"{'bytes/op, ' + name:<34}{size / ops:>14.1f}{base_size / ops:>16.1f}"
            f"{(size / ops) / (base_size / ops):>8.2f}"
        )
    assert snapshot is not None
    elapsed = mirror_apply(snapshot, batch100)
    base = dict_apply(snapshot, batch100)
    print(
        f"{'mirror apply ops/s':<34}{ops / elapsed:>14,.0f}{ops / base:>16,.0f}"
        f"{base / elapsed:>8.2f}"
    )


if __name__ == "__main__":
    main()
