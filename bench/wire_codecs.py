"""Wire codecs and mirror apply: throughput per dialect, beside plain-Python baselines.

    python bench/wire_codecs.py            # full figures (10,000-op deltas, several rounds)
    python bench/wire_codecs.py --quick    # a small run to check the script works

Figures: encode and decode ops/s and bytes per op for each dialect (baseline: ``json.dumps`` /
``json.loads`` of the same ops as plain dicts), Mirror.apply ops/s for ``cell_set`` deltas
(baseline: applying the same writes to a plain dict of values), and TopGun ``OP_BATCH`` decode
ops per CPU second, millis sent as float64 (as TopGun's client sends them) and as integers
(baseline: the same bytes decoded untyped, to dicts, checking nothing).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from types import ModuleType

import msgspec

from octosync.ipc.messages import CellSet, Delta, NodeSnapshot, Snapshot
from octosync.ipc.mirror import Applied, Mirror
from octosync.wire import json as wire_json
from octosync.wire import topgun

DIALECTS: dict[str, ModuleType] = {"json": wire_json}
try:  # the other dialects, when present
    from octosync.wire import json_tagged, msgpack

    DIALECTS["json_tagged"] = json_tagged
    DIALECTS["msgpack"] = msgpack
except ImportError:  # pragma: no cover
    pass


def best_rate(
    ops: int, fn: Callable[[], object], rounds: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Operations per second of the fastest of ``rounds`` runs (least disturbed by others)."""
    best = float("inf")
    for _ in range(rounds):
        start = clock()
        fn()
        best = min(best, clock() - start)
    return ops / best


def make_deltas(nodes: int, ops_per_delta: int, count: int) -> list[Delta]:
    return [
        Delta(
            e,
            e + 1,
            tuple(
                CellSet((e * ops_per_delta + i) % nodes, (e * ops_per_delta + i).to_bytes(8, "big"))
                for i in range(ops_per_delta)
            ),
        )
        for e in range(count)
    ]


def bench_codecs(deltas: list[Delta], rounds: int) -> None:
    ops = sum(len(d.ops) for d in deltas)
    plain = [
        {
            "type": "delta",
            "base_epoch": d.base_epoch,
            "epoch": d.epoch,
            "ops": [
                {"op": "cell_set", "slot_id": o.slot_id, "payload": o.payload.hex()} for o in d.ops
            ],  # type: ignore[union-attr]
        }
        for d in deltas
    ]
    base_enc = best_rate(ops, lambda: [json.dumps(p) for p in plain], rounds)
    plain_raw = [json.dumps(p) for p in plain]
    base_dec = best_rate(ops, lambda: [json.loads(r) for r in plain_raw], rounds)
    base_bytes = sum(len(r) for r in plain_raw) / ops
    print(
        f"baseline json.dumps/loads of dicts: encode {base_enc:,.0f} ops/s, "
        f"decode {base_dec:,.0f} ops/s, {base_bytes:.1f} bytes/op"
    )
    for name, mod in DIALECTS.items():
        enc = best_rate(ops, lambda m=mod: [m.encode(d) for d in deltas], rounds)
        raw = [mod.encode(d) for d in deltas]
        dec = best_rate(ops, lambda m=mod, r=raw: [m.decode(x) for x in r], rounds)
        per_op = sum(len(r) for r in raw) / ops
        print(
            f"{name:12s} encode {enc:12,.0f} ops/s ({enc / base_enc:4.1f}x)  "
            f"decode {dec:12,.0f} ops/s ({dec / base_dec:4.1f}x)  {per_op:5.1f} bytes/op"
        )


def bench_mirror(nodes: int, deltas: list[Delta], rounds: int) -> None:
    ops = sum(len(d.ops) for d in deltas)
    snap = Snapshot(0, tuple(NodeSnapshot(i, "i64", "resolved", bytes(8)) for i in range(nodes)))

    def run_mirror() -> None:
        m = Mirror()
        m.apply(snap)
        for d in deltas:
            m.apply(d)

    def run_baseline() -> None:
        values = {i: bytes(8) for i in range(nodes)}
        epoch = 0
        for d in deltas:
            if d.base_epoch != epoch:
                raise AssertionError("gap")
            for op in d.ops:
                values[op.slot_id] = op.payload  # type: ignore[union-attr]
            epoch = d.epoch

    check = Mirror()
    check.apply(snap)
    assert all(isinstance(check.apply(d), Applied) for d in deltas)
    rate = best_rate(ops, run_mirror, rounds)
    base = best_rate(ops, run_baseline, rounds)
    print(
        f"mirror apply  {rate:12,.0f} ops/s   baseline dict apply {base:12,.0f} ops/s "
        f"(ratio {rate / base:.2f})  [{nodes} nodes, {len(deltas)} deltas x "
        f"{len(deltas[0].ops)} cell_set]"
    )


def make_op_batches(ops_per_batch: int, count: int, *, float_millis: bool) -> list[bytes]:
    """``OP_BATCH`` frames of PUTs shaped as TopGun's client sends them: each op carries its
    HLC twice (the record's and the op's), millis as float64 when ``float_millis``."""
    frames = []
    for b in range(count):
        ops = []
        for i in range(ops_per_batch):
            millis = 1_700_000_000_000 + b * ops_per_batch + i
            stamp = {"millis": float(millis) if float_millis else millis, "counter": i % 7}
            stamp["nodeId"] = "client-7f3a"
            record = {"value": {"n": i, "name": f"user {i}"}, "timestamp": stamp}
            ops.append(
                {
                    "id": str(b * ops_per_batch + i),
                    "mapName": "users",
                    "opType": "PUT",
                    "key": f"user:{i}",
                    "record": record,
                    "timestamp": stamp,
                    "synced": False,
                }
            )
        frames.append(msgspec.msgpack.encode({"type": "OP_BATCH", "payload": {"ops": ops}}))
    return frames


def bench_topgun_decode(ops_per_batch: int, count: int, rounds: int) -> None:
    ops = ops_per_batch * count
    for label, float_millis in (("float64 millis", True), ("integer millis", False)):
        frames = make_op_batches(ops_per_batch, count, float_millis=float_millis)
        first = topgun.decode(frames[0])
        assert isinstance(first, topgun.OpBatch)
        assert type(first.payload.ops[0].timestamp.millis) is int  # type: ignore[union-attr]
        # CPU time of this thread: on a machine shared with other work, wall time measures them
        cpu = time.thread_time
        rate = best_rate(ops, lambda f=frames: [topgun.decode(x) for x in f], rounds, cpu)
        base = best_rate(ops, lambda f=frames: [msgspec.msgpack.decode(x) for x in f], rounds, cpu)
        print(
            f"topgun OP_BATCH decode, {label}: {rate:12,.0f} ops per CPU second   baseline "
            f"untyped {base:12,.0f} (ratio {rate / base:.2f})  [{count} x {ops_per_batch} PUTs]"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    args = parser.parse_args()
    nodes, per_delta, count, rounds = (1000, 100, 20, 1) if args.quick else (10_000, 100, 1000, 5)
    deltas = make_deltas(nodes, per_delta, count)
    bench_codecs(deltas, rounds)
    bench_mirror(nodes, deltas, rounds)
    bench_topgun_decode(100, 20 if args.quick else 200, rounds)


if __name__ == "__main__":
    main()
