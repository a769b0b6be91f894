"""CRDT data plane benchmark: fold throughput, Merkle update cost, divergent-replica sync.

Every figure is printed with a baseline measured in the same run:

* LWW / OR ops merged per second by ``MapStore.apply`` (Zipf keys, 3 origin nodes), against a
  bare ``dict`` store of the same records (the floor any fold pays);
* Merkle update cost per write, against computing the key's FNV-1a route alone, and the same
  writes as one ``update_many`` batch (the fold's flush path);
* Merkle sync of two replicas that differ in ``--diff`` keys, once with plain TopGun leaf
  replies and once with leaf digests: round trips, records and bytes on the wire (both
  directions), each against sending the full state as one message of the same record format.

Run ``python bench/crdt.py`` for the issue's sizes (1M ops over 100k keys; 1M-key replicas)
or ``--quick`` for a fast check.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import msgspec
import numpy as np

from octosync.crdt import (
    HLC,
    LWWMap,
    MapStore,
    MerkleTree,
    OpKind,
    OpRecord,
    Timestamp,
    run_sync,
)
from octosync.crdt.hashing import fnv1a32
from octosync.crdt.sync import SyncRequester, SyncResponder, to_wire
from octosync.crdt.sync_messages import SyncRespLeaf, SyncRespLeafPayload
from octosync.wire.topgun import encode

NODES = ("node-a", "node-b", "node-c")


def zipf_keys(n_ops: int, n_keys: int, seed: int, s: float = 1.1) -> list[str]:
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_keys + 1) ** s
    ranks = rng.choice(n_keys, size=n_ops, p=weights / weights.sum())
    return [f"key-{r}" for r in ranks.tolist()]


def lww_records(n_ops: int, n_keys: int) -> list[OpRecord]:
    keys = zipf_keys(n_ops, n_keys, seed=1)
    rng = np.random.default_rng(2)
    origins = rng.integers(0, len(NODES), size=n_ops).tolist()
    removes = (rng.random(n_ops) < 0.1).tolist()
    out: list[OpRecord] = []
    enc = msgspec.msgpack.encode
    millis = 1_700_000_000_000
    for i, key in enumerate(keys):
        millis += i % 2
        node = NODES[origins[i]]
        ts_counter = i % 3
        ts = Timestamp(millis, ts_counter, node)
        if removes[i]:
            out.append(OpRecord("bench", key, OpKind.REMOVE, b"", ts, node, f"op-{i}"))
        else:
            out.append(OpRecord("bench", key, OpKind.PUT, enc(i), ts, node, f"op-{i}"))
    rng.shuffle(out)  # arrival order is not timestamp order
    return out


def or_records(n_ops: int, n_keys: int) -> list[OpRecord]:
    keys = zipf_keys(n_ops, n_keys, seed=3)
    rng = np.random.default_rng(4)
    remove_draw = rng.random(n_ops).tolist()
    last_tag: dict[str, str] = {}
    out: list[OpRecord] = []
    enc = msgspec.msgpack.encode
    for i, key in enumerate(keys):
        node = NODES[i % 3]
        ts = Timestamp(1_700_000_000_000 + i, 0, node)
        if remove_draw[i] < 0.2 and key in last_tag:
            out.append(
                OpRecord("bench", key, OpKind.OR_REMOVE, enc([last_tag[key]]), ts, node, f"r-{i}")
            )
        else:
            tag = f"t-{i}"
            last_tag[key] = tag
            out.append(OpRecord("bench", key, OpKind.OR_ADD, enc(i % 97), ts, node, tag))
    return out


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_fold(name: str, records: list[OpRecord]) -> None:
    store = MapStore()
    t_fold = timed(lambda: store.apply_all(records))
    t_root = timed(lambda: store.merkle_root("bench"))
    plain: dict[tuple[str, str], OpRecord] = {}

    def baseline() -> None:
        for r in records:
            plain[(r.map, r.key)] = r

    t_base = timed(baseline)
    n = len(records)
    print(
        f"{name:4} fold   {n:>9,} ops  {n / t_fold:>12,.0f} ops/s   "
        f"(+ Merkle flush of {len(store.merkle('bench')):,} keys {t_root * 1e3:,.0f} ms)   "
        f"baseline dict {n / t_base:>12,.0f} ops/s   ratio {t_fold / t_base:.1f}x"
    )


def bench_merkle(n_keys: int, n_writes: int) -> None:
    keys = [f"key-{i % n_keys}" for i in range(n_writes)]
    stamps = [Timestamp(1_700_000_000_000 + i, 0, "node-a") for i in range(n_writes)]
    tree = MerkleTree()
    t_tree = timed(lambda: [tree.update(k, ts) for k, ts in zip(keys, stamps, strict=True)])
    t_hash = timed(lambda: [fnv1a32(k) for k in keys])
    batch = MerkleTree()
    items = list(zip(keys, stamps, strict=True))
    t_batch = timed(lambda: batch.update_many(items))
    assert batch.root() == tree.root()
    print(
        f"Merkle update   {n_writes:>9,} writes over {n_keys:,} keys  "
        f"{t_tree / n_writes * 1e6:6.2f} µs/write   baseline route hash "
        f"{t_hash / n_writes * 1e6:5.2f} µs   ratio {t_tree / t_hash:.1f}x\n"
        f"      update_many (one batch, vectorised FNV): {t_batch / n_writes * 1e6:6.2f} µs/write"
        f"   {t_tree / t_batch:.1f}x faster than one by one"
    )


class StepClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


def bench_sync(n_keys: int, n_diff: int, depth: int) -> None:
    """Both leaf modes pull into fresh copies of the same replica, so they see the same diff."""
    clock = StepClock()
    a = LWWMap(HLC("a", clock), depth)
    t_build = timed(lambda: [a.set(f"user:{i}", {"n": i}) for i in range(n_keys)])
    holder: list[LWWMap] = []
    t_copy = timed(lambda: holder.append(a.copy(HLC("b", clock))))
    b = holder[0]
    rng = np.random.default_rng(5)
    for i in rng.choice(n_keys, size=n_diff, replace=False).tolist():
        b.set(f"user:{i}", {"n": -i})
    assert a.merkle.root() != b.merkle.root()

    # Baseline: the whole of b as one leaf message (the cheapest full transfer in this format).
    start = time.perf_counter()
    everything = [to_wire(k, r) for k, r in b.records()]
    full_bytes = len(encode(SyncRespLeaf(SyncRespLeafPayload("users", "", everything))))
    t_full = time.perf_counter() - start
    print(
        f"sync  depth {depth}, {n_keys:,} keys, {n_diff} differ; full state: {len(b):,} records "
        f"in one message, {full_bytes:,} B (encode {t_full:,.1f} s)"
    )
    for label, digests in (("plain TopGun leaves", False), ("leaf digests", True)):
        target = a.copy(HLC("a", clock))
        requester = SyncRequester("users", target, leaf_digests=digests)
        start = time.perf_counter()
        stats = run_sync(requester, SyncResponder("users", b), encode=encode)
        t_sync = time.perf_counter() - start
        assert target.merkle.root() == b.merkle.root(), "replicas did not converge"
        print(
            f"      {label:19}: {stats.round_trips} round trips, {stats.messages:,} messages, "
            f"{stats.records:,} records, {stats.bytes_sent:,} B both ways in {t_sync * 1e3:,.0f} ms"
            f"   ratio {stats.bytes_sent / full_bytes:.4%} of full state"
        )
    print(
        f"      building one replica: {t_build:,.1f} s ({n_keys / t_build:,.0f} writes/s), "
        f"copy {t_copy:,.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds not minutes")
    parser.add_argument("--ops", type=int, default=None)
    parser.add_argument("--keys", type=int, default=None)
    parser.add_argument("--sync-keys", type=int, default=None)
    parser.add_argument("--diff", type=int, default=100)
    parser.add_argument(
        "--depths", type=int, nargs="+", default=[3, 4], help="Merkle depths for the sync run"
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=("fold", "merkle", "sync"),
        default=["fold", "merkle", "sync"],
        help="which parts to run",
    )
    args = parser.parse_args()
    ops = args.ops or (100_000 if args.quick else 1_000_000)
    keys = args.keys or (10_000 if args.quick else 100_000)
    sync_keys = args.sync_keys or (50_000 if args.quick else 1_000_000)

    print(f"octosync CRDT benchmark (ops={ops:,}, keys={keys:,}, sync keys={sync_keys:,})")
    if "fold" in args.sections:
        bench_fold("LWW", lww_records(ops, keys))
        bench_fold("OR", or_records(ops, keys))
    if "merkle" in args.sections:
        bench_merkle(keys, min(ops, 200_000))
    if "sync" in args.sections:
        for depth in args.depths:
            bench_sync(sync_keys, args.diff, depth)


if __name__ == "__main__":
    main()
