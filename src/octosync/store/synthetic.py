"""A realistic synthetic op history, built column-wise with numpy (10M ops in seconds).

Shape: keys drawn with Zipf skew, several origins each with its own HLC (physical clock plus a
per-origin skew, counters for events in the same millisecond), interleaved so that origins
write the same hot keys at overlapping times, a share of deletes, and a share of exact duplicate
deliveries (same op id). Besides the LWW map, small OR-Map and PN-counter maps can be mixed in.

The result is an Arrow table in ``store.op_table.RECORD_SCHEMA`` (the export's op columns minus
``seq`` and ``recorded_ms``, which the journal or the caller assigns), so benchmarks write it
straight to Parquet and ``octosync journal generate`` appends it to a journal.
"""

from __future__ import annotations

from typing import Final

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.store.op_table import RECORD_SCHEMA, iter_op_records

LWW_MAP: Final = "players"
OR_MAP: Final = "tags"
COUNTER_MAP: Final = "scores"
BASE_MILLIS: Final = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _zipf_choice(rng: np.random.Generator, n_keys: int, size: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n_keys + 1, dtype=np.float64) ** s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(size), side="right")
    ranks = np.minimum(ranks, n_keys - 1)
    return rng.permutation(n_keys)[ranks]  # the hottest key is not simply "k0"


def _int32_msgpack(values: np.ndarray) -> pa.Array:
    """MsgPack ``int 32`` (0xd2 + 4 bytes big-endian) per value, as one Arrow binary array."""
    n = len(values)
    raw = np.empty((n, 5), dtype=np.uint8)
    raw[:, 0] = 0xD2
    raw[:, 1:] = values.astype(">i4").view(np.uint8).reshape(n, 4)
    offsets = np.arange(0, 5 * n + 1, 5, dtype=np.int32)
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw.tobytes())]
    )


def _hlc_counters(millis: np.ndarray) -> np.ndarray:
    """For a non-decreasing millis array: 0, 1, 2, ... within each run of equal millis."""
    idx = np.arange(len(millis))
    starts = np.r_[True, millis[1:] != millis[:-1]]
    run_start = np.maximum.accumulate(np.where(starts, idx, 0))
    return (idx - run_start).astype(np.int32)


def generate_lww_table(
    n_ops: int,
    *,
    n_keys: int = 100_000,
    n_origins: int = 5,
    delete_fraction: float = 0.10,
    duplicate_fraction: float = 0.01,
    zipf_s: float = 1.1,
    ops_per_ms: float = 2.0,
    max_skew_ms: int = 250,
    map_name: str = LWW_MAP,
    seed: int = 0,
) -> pa.Table:
    """``n_ops`` LWW ops (PUT/REMOVE) as an Arrow table; duplicates are included in ``n_ops``."""
    rng = np.random.default_rng(seed)
    n_unique = max(1, n_ops - int(n_ops * duplicate_fraction))
    origin = rng.integers(0, n_origins, size=n_unique)
    physical = BASE_MILLIS + (np.arange(n_unique) / ops_per_ms).astype(np.int64)
    skew = rng.integers(-max_skew_ms, max_skew_ms + 1, size=n_origins)
    millis = physical + skew[origin]
    counter = np.zeros(n_unique, dtype=np.int32)
    per_origin_seq = np.zeros(n_unique, dtype=np.int64)
    for o in range(n_origins):  # each origin's HLC: monotone millis, counters within a ms
        at = np.flatnonzero(origin == o)
        m = np.maximum.accumulate(millis[at])
        millis[at] = m
        counter[at] = _hlc_counters(m)
        per_origin_seq[at] = np.arange(len(at))
    keys = _zipf_choice(rng, n_keys, n_unique, zipf_s)
    is_delete = rng.random(n_unique) < delete_fraction
    amounts = rng.integers(-(2**31), 2**31 - 1, size=n_unique)
    dup = rng.integers(0, n_unique, size=n_ops - n_unique)
    order = np.concatenate([np.arange(n_unique), dup])
    # duplicates arrive a little later than the original: insert them at random places
    arrival = np.concatenate([np.arange(n_unique), dup + rng.integers(1, 1000, len(dup))])
    order = order[np.argsort(arrival, kind="stable")]
    origin, millis, counter = origin[order], millis[order], counter[order]
    keys, is_delete, per_origin_seq = keys[order], is_delete[order], per_origin_seq[order]
    amounts = amounts[order]

    origin_names = pa.array([f"node-{o}" for o in range(n_origins)])
    node = origin_names.take(pa.array(origin))
    key = pc.binary_join_element_wise("k", pc.cast(pa.array(keys), pa.string()), "")
    op_id = pc.binary_join_element_wise(node, pc.cast(pa.array(per_origin_seq), pa.string()), ":")
    put_values = _int32_msgpack(amounts)
    empty = pa.array([b""], pa.binary()).take(pa.array(np.zeros(len(order), dtype=np.int64)))
    deletes = pa.array(is_delete)
    return pa.table(
        {
            "map": pa.array(np.full(len(order), map_name, dtype=object), pa.string()),
            "key": key,
            "op": pc.if_else(deletes, OpKind.REMOVE.value, OpKind.PUT.value),
            "value": pc.if_else(deletes, empty, put_values),
            "millis": pa.array(millis, pa.int64()),
            "counter": pa.array(counter, pa.int32()),
            "node": node,
            "origin": node,
            "op_id": op_id,
        },
        schema=RECORD_SCHEMA,
    )


def generate_records(n_ops: int, *, seed: int = 0, n_keys: int | None = None) -> list[OpRecord]:
    """A mixed history for demos: ~80% LWW (PUT/REMOVE), ~10% OR-Map, ~10% PN counters."""
    rng = np.random.default_rng(seed + 1)
    n_or = n_ops // 10
    n_inc = n_ops // 10
    n_lww = n_ops - n_or - n_inc
    keys = n_keys if n_keys is not None else max(10, n_ops // 20)
    rate = max(n_lww / 3_600_000, 0.01)  # spread over about an hour, as a live service would
    table = generate_lww_table(n_lww, n_keys=keys, seed=seed, ops_per_ms=rate)
    records = list(iter_op_records(table.to_batches()))
    last_millis = BASE_MILLIS + int(n_lww / rate) + 1
    records.extend(_or_and_counter_ops(rng, n_or, n_inc, last_millis))
    order = rng.permutation(len(records))  # journals are not in HLC order
    return [records[i] for i in order]


def _or_and_counter_ops(
    rng: np.random.Generator, n_or: int, n_inc: int, span_ms: int
) -> list[OpRecord]:
    out: list[OpRecord] = []
    live: dict[str, list[str]] = {}
    for i in range(n_or):
        node = f"node-{int(rng.integers(0, 3))}"
        ts = Timestamp(int(rng.integers(BASE_MILLIS, span_ms + 1)), i, node)
        key = f"room{int(rng.integers(0, 20))}"
        tags = live.setdefault(key, [])
        if tags and rng.random() < 0.3:
            observed = [
                tags[int(j)] for j in rng.choice(len(tags), size=min(2, len(tags)), replace=False)
            ]
            out.append(
                OpRecord(
                    OR_MAP,
                    key,
                    OpKind.OR_REMOVE,
                    msgspec.msgpack.encode(observed),
                    ts,
                    node,
                    f"{node}:or{i}",
                )
            )
        else:
            tag = f"{node}:or{i}"
            tags.append(tag)
            out.append(
                OpRecord(
                    OR_MAP, key, OpKind.OR_ADD, msgspec.msgpack.encode(f"user{i}"), ts, node, tag
                )
            )
    for i in range(n_inc):
        node = f"node-{int(rng.integers(0, 3))}"
        ts = Timestamp(int(rng.integers(BASE_MILLIS, span_ms + 1)), i, node)
        amount = int(rng.integers(-5, 20))
        key = f"team{int(rng.integers(0, 8))}"
        out.append(
            OpRecord(
                COUNTER_MAP,
                key,
                OpKind.INC,
                msgspec.msgpack.encode(amount),
                ts,
                node,
                f"{node}:inc{i}",
            )
        )
    return out
