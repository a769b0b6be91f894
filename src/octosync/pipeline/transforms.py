"""Pure DataFrame -> DataFrame transforms for the jobs; each is unit-tested on its own.

Determinism: every "pick one record" step takes ``max`` of a struct that starts with the full
HLC order ``(millis, counter, node, op_id)``; ``op_id`` is unique per record, so two records can
tie only when they are the same record delivered twice. No ``first``, ``max_by`` or
``dropDuplicates``, whose choice on ties depends on partitioning.

Hashing is done in Spark SQL on 64-bit longs with every intermediate kept below 2**63 (Spark 4
runs ANSI mode, where an overflowing long is an error): FNV-1a-32 over UTF-16 code units, the
MurmurHash3 ``fmix32`` finalizer with multiplications split into 16-bit halves, and sums taken
modulo 2**32. No Python UDF is involved, so the JVM never waits on a Python worker for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import pyarrow as pa
from pyspark.sql import functions as sf

from octosync.crdt.op import OpKind

DataFrame = Any  # pyspark.sql.DataFrame; pyspark ships no stubs mypy can use here

MERKLE_DEPTH = 3
MASK32 = 0xFFFFFFFF
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193

SNAPSHOT_COLUMNS = ["map", "key", "value", "millis", "counter", "node", "tombstone"]
LWW_OPS = (OpKind.PUT.value, OpKind.REMOVE.value)
OR_OPS = (OpKind.OR_ADD.value, OpKind.OR_REMOVE.value)


# --- 32-bit hashing as Spark SQL expressions -------------------------------------------------


def fnv1a32_utf16_sql(text_sql: str) -> str:
    """FNV-1a-32 of a string column over its UTF-16 code units (JavaScript's ``charCodeAt``)."""
    hx = f"hex(encode({text_sql}, 'UTF-16BE'))"
    unit = "cast(conv(substring(__hx, __i * 4 + 1, 4), 16, 10) as bigint)"
    fold = (
        f"aggregate(sequence(0, length(__hx) div 4 - 1), cast({_FNV_OFFSET} as bigint), "
        f"(__acc, __i) -> ((__acc ^ {unit}) * {_FNV_PRIME}) & {MASK32})"
    )
    body = f"CASE WHEN length(__hx) = 0 THEN cast({_FNV_OFFSET} as bigint) ELSE {fold} END"
    return f"element_at(transform(array({hx}), __hx -> {body}), 1)"


def _mul32(x: str, constant: int) -> str:
    hi, lo = constant >> 16, constant & 0xFFFF
    return f"((shiftleft(({x} * {hi}) & 65535, 16) + {x} * {lo}) & {MASK32})"


def fmix32_sql(value_sql: str) -> str:
    """MurmurHash3's 32-bit finalizer; each stage binds its input once (no expression blow-up)."""
    stages = [
        "__h0 ^ shiftrightunsigned(__h0, 16)",
        _mul32("__h1", 0x85EBCA6B),
        "__h2 ^ shiftrightunsigned(__h2, 13)",
        _mul32("__h3", 0xC2B2AE35),
        "__h4 ^ shiftrightunsigned(__h4, 16)",
    ]
    expr = f"cast({value_sql} as bigint)"
    for i, stage in enumerate(stages):
        expr = f"element_at(transform(array({expr}), __h{i} -> {stage}), 1)"
    return expr


def fnv1a32_utf16(column: str) -> Any:
    return sf.expr(fnv1a32_utf16_sql(f"`{column}`"))


def fmix32(column: str) -> Any:
    return sf.expr(fmix32_sql(f"`{column}`"))


# --- value decoding (MsgPack) on Arrow batches ------------------------------------------------

_INT = msgspec.msgpack.Decoder(int)
_TAGS = msgspec.msgpack.Decoder(list[str])


def _decode_values(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        ops = batch.column("op").to_pylist()
        values = batch.column("value").to_pylist()
        ids = batch.column("op_id").to_pylist()
        amounts: list[int | None] = []
        tags: list[list[str] | None] = []
        for op, value, op_id in zip(ops, values, ids, strict=True):
            try:
                amounts.append(_INT.decode(value) if op == OpKind.INC.value else None)
                tags.append(_TAGS.decode(value) if op == OpKind.OR_REMOVE.value else None)
            except msgspec.DecodeError as exc:
                raise ValueError(f"op {op_id}: {op} value is not valid MsgPack: {exc}") from None
        yield batch.append_column("amount", pa.array(amounts, pa.int64())).append_column(
            "tags", pa.array(tags, pa.list_(pa.string()))
        )


def decode_values(ops: DataFrame) -> DataFrame:
    """Adds ``amount`` (INC) and ``tags`` (OR_REMOVE) decoded from the MsgPack ``value``."""
    from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

    schema = StructType(
        [
            *ops.schema.fields,
            StructField("amount", LongType()),
            StructField("tags", ArrayType(StringType())),
        ]
    )
    return ops.mapInArrow(_decode_values, schema)


def _msgpack_array_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 2**16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _encode_values(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    enc = msgspec.msgpack.Encoder()
    for batch in batches:
        totals = batch.column("total").to_pylist()
        items = batch.column("items").to_pylist()
        out: list[bytes | None] = []
        for total, elems in zip(totals, items, strict=True):
            if total is not None:
                out.append(enc.encode(total))
            elif elems is None:
                out.append(None)  # an OR key with no live element: a tombstone
            else:
                out.append(_msgpack_array_header(len(elems)) + b"".join(elems))
        names = [n for n in batch.schema.names if n not in ("total", "items")]
        yield pa.RecordBatch.from_arrays(
            [batch.column(n) for n in names] + [pa.array(out, pa.binary())], names=[*names, "value"]
        )


# --- folding ops into state -------------------------------------------------------------------


def _hlc_struct(*extra: str) -> Any:
    return sf.struct("millis", "counter", "node", "op_id", *extra)


def as_of(ops: DataFrame, seq: int | None) -> DataFrame:
    """The ops committed at or before ``seq`` (all of them when ``seq`` is None)."""
    return ops if seq is None else ops.where(sf.col("seq") <= seq)


def lww_winners(ops: DataFrame) -> DataFrame:
    """Per (map, key) of PUT/REMOVE ops, the whole op record greatest in the HLC order (then op
    id). Two phases keep it fast: the newest ``millis`` per key is a hash aggregate on a long,
    and only the records at that millisecond (about one per key) enter the struct ``max``,
    which Spark can only do by sorting."""
    lww = ops.where(sf.col("op").isin(*LWW_OPS))
    newest = lww.groupBy("map", "key").agg(sf.max("millis").alias("_newest"))
    candidates = lww.join(newest, ["map", "key"]).where(sf.col("millis") == sf.col("_newest"))
    rest = [c for c in ops.columns if c not in ("map", "key", "millis", "counter", "node", "op_id")]
    return (
        candidates.groupBy("map", "key")
        .agg(sf.max(_hlc_struct(*rest)).alias("w"))
        .select("map", "key", "w.*")
        .select(*ops.columns)
    )


def lww_rows(winners: DataFrame) -> DataFrame:
    """Snapshot rows of :func:`lww_winners`; a winning REMOVE is a tombstone, value null."""
    tomb = sf.col("op") == OpKind.REMOVE.value
    return winners.select(
        "map",
        "key",
        sf.when(tomb, sf.lit(None).cast("binary")).otherwise(sf.col("value")).alias("value"),
        "millis",
        "counter",
        "node",
        tomb.alias("tombstone"),
    )


def lww_state(ops: DataFrame) -> DataFrame:
    """LWW snapshot rows of ``ops``: :func:`lww_rows` of :func:`lww_winners`."""
    return lww_rows(lww_winners(ops))


def or_map_state(ops: DataFrame) -> DataFrame:
    """Observed-remove, add-wins: an OR_ADD (tagged by its op id) survives unless an OR_REMOVE
    of the same (map, key) lists its tag. A key's value is the MsgPack array of its surviving
    values ordered by tag; a key with none left is a tombstone. Either way the row is stamped
    with the greatest HLC of any OR op on the key."""
    or_ops = decode_values(ops.where(sf.col("op").isin(*OR_OPS)))
    adds = (
        or_ops.where(sf.col("op") == OpKind.OR_ADD.value)
        .select("map", "key", "op_id", "value")
        .distinct()
    )
    removed = (
        or_ops.where(sf.col("op") == OpKind.OR_REMOVE.value)
        .select("map", "key", sf.explode("tags").alias("op_id"))
        .distinct()
    )
    alive = adds.join(removed, ["map", "key", "op_id"], "left_anti")
    survivors = alive.groupBy("map", "key").agg(
        sf.array_sort(sf.collect_list(sf.struct("op_id", "value"))).alias("adds")
    )
    latest = or_ops.groupBy("map", "key").agg(sf.max(_hlc_struct()).alias("last"))
    joined = latest.join(survivors, ["map", "key"], "left")
    has = sf.col("adds").isNotNull()
    shaped = joined.select(
        "map",
        "key",
        sf.lit(None).cast("long").alias("total"),
        sf.transform("adds", lambda a: a["value"]).cast("array<binary>").alias("items"),
        sf.col("last.millis").alias("millis"),
        sf.col("last.counter").alias("counter"),
        sf.col("last.node").alias("node"),
        (~has).alias("tombstone"),
    )
    return _with_encoded_value(shaped)


def counter_state(ops: DataFrame) -> DataFrame:
    """PN counters: each op id counted once, amounts summed per origin, origins summed; the
    value is the MsgPack total, stamped with the greatest INC on the key."""
    incs = (
        decode_values(ops.where(sf.col("op") == OpKind.INC.value))
        .select("map", "key", "origin", "millis", "counter", "node", "op_id", "amount")
        .distinct()
    )
    per_origin = incs.groupBy("map", "key", "origin").agg(
        sf.sum("amount").alias("amount"), sf.max(_hlc_struct()).alias("last")
    )
    totals = per_origin.groupBy("map", "key").agg(
        sf.sum("amount").alias("total"), sf.max("last").alias("last")
    )
    shaped = totals.select(
        "map",
        "key",
        sf.col("total").cast("long").alias("total"),
        sf.lit(None).cast("array<binary>").alias("items"),
        sf.col("last.millis").alias("millis"),
        sf.col("last.counter").alias("counter"),
        sf.col("last.node").alias("node"),
        sf.lit(False).alias("tombstone"),
    )
    return _with_encoded_value(shaped)


def _with_encoded_value(shaped: DataFrame) -> DataFrame:
    from pyspark.sql.types import BinaryType, StructField, StructType

    keep = [f for f in shaped.schema.fields if f.name not in ("total", "items")]
    schema = StructType([*keep, StructField("value", BinaryType())])
    return shaped.mapInArrow(_encode_values, schema).select(*SNAPSHOT_COLUMNS)


def drop_tombstones_before(snapshot: DataFrame, horizon_millis: int | None) -> DataFrame:
    """Tombstone GC: drop tombstones older than the horizon (keep all when it is None)."""
    if horizon_millis is None:
        return snapshot
    return snapshot.where(~sf.col("tombstone") | (sf.col("millis") >= horizon_millis))


def compact(
    ops: DataFrame, *, gc_horizon_millis: int | None = None, lww: DataFrame | None = None
) -> DataFrame:
    """All op records folded into the converged state of every map (snapshot columns).
    ``lww``: :func:`lww_state` of ``ops`` when the caller already has it (computed once)."""
    lww = lww_state(ops) if lww is None else lww
    state = lww.unionByName(or_map_state(ops)).unionByName(counter_state(ops))
    return drop_tombstones_before(state, gc_horizon_millis).select(*SNAPSHOT_COLUMNS)


# --- Merkle tree -------------------------------------------------------------------------------


def _set_hash(ops: DataFrame, kinds: tuple[str, ...]) -> DataFrame:
    """Per key of one op family: sum of fmix32(FNV-1a("key:op_id")) over distinct op ids."""
    ids = (
        ops.where(sf.col("op").isin(*kinds))
        .select("map", "key", "op_id")
        .distinct()
        .select("map", "key", sf.concat_ws(":", "key", "op_id").alias("item"))
        .select("map", "key", fnv1a32_utf16("item").alias("h"))
        .select("map", "key", fmix32("h").alias("mixed"))
    )
    return ids.groupBy("map", "key").agg(sf.pmod(sf.sum("mixed"), sf.lit(2**32)).alias("entry"))


def entry_hashes(ops: DataFrame, lww: DataFrame | None = None) -> DataFrame:
    """``(map, key, entry)``: the 32-bit Merkle entry hash of every key, as ``crdt/`` defines it.

    LWW keys: FNV-1a of ``"key:millis:counter:node"`` of the winner (TopGun's leaf item); OR and
    counter keys: the record-set hash of their distinct op ids; a key with several op families:
    the sum of its families' hashes mod 2**32. ``lww`` as in :func:`compact`.
    """
    lww = (lww_state(ops) if lww is None else lww).select(
        "map",
        "key",
        sf.concat_ws(
            ":", "key", sf.col("millis").cast("string"), sf.col("counter").cast("string"), "node"
        ).alias("item"),
    )
    lww_entries = lww.select("map", "key", fnv1a32_utf16("item").alias("entry"))
    parts = lww_entries.unionByName(_set_hash(ops, OR_OPS)).unionByName(
        _set_hash(ops, (OpKind.INC.value,))
    )
    return parts.groupBy("map", "key").agg(sf.pmod(sf.sum("entry"), sf.lit(2**32)).alias("entry"))


def merkle_tree(entries: DataFrame, depth: int = MERKLE_DEPTH) -> DataFrame:
    """Every non-zero Merkle node ``(map, path, level, hash)``, leaves (``level == depth``) up to
    the root (``path == ""``). A key routes to the leaf named by the first ``depth`` hex digits
    of FNV-1a(key); a node's hash is the sum of fmix32 of its children (leaf: of its entries)
    mod 2**32. Zero-hash nodes are left out, as ``crdt.MerkleTree`` does."""
    route = sf.lower(sf.lpad(sf.hex(fnv1a32_utf16("key")), 8, "0"))
    level = (
        entries.select("map", route.substr(1, depth).alias("path"), fmix32("entry").alias("mixed"))
        .groupBy("map", "path")
        .agg(sf.pmod(sf.sum("mixed"), sf.lit(2**32)).alias("hash"))
        .select("map", "path", sf.lit(depth).alias("level"), "hash")
    )
    levels = [level]
    for d in range(depth - 1, -1, -1):
        level = (
            level.select(
                "map", sf.col("path").substr(1, d).alias("path"), fmix32("hash").alias("mixed")
            )
            .groupBy("map", "path")
            .agg(sf.pmod(sf.sum("mixed"), sf.lit(2**32)).alias("hash"))
            .select("map", "path", sf.lit(d).alias("level"), "hash")
        )
        levels.append(level)
    tree = levels[0]
    for lv in levels[1:]:
        tree = tree.unionByName(lv)
    return tree.where(sf.col("hash") != 0)


def merkle_roots(tree: DataFrame) -> DataFrame:
    """``(map, root)`` from a tree built by :func:`merkle_tree`."""
    return tree.where(sf.col("level") == 0).select("map", sf.col("hash").alias("root"))


def state_records(ops: DataFrame, winners: DataFrame | None = None) -> DataFrame:
    """The op records that still carry state: each LWW key's winner plus every distinct OR and
    INC op. Folding these in-process gives the same state as folding all ops, so a store
    restarts from them and the journal's tail (seq > the compaction's ``as_of_seq``).
    ``winners``: :func:`lww_winners` of ``ops`` when the caller already has it."""
    winners = lww_winners(ops) if winners is None else winners
    fields = [c for c in ops.columns if c not in ("map", "key", "op_id")]
    others = (
        ops.where(~sf.col("op").isin(*LWW_OPS))
        .groupBy("map", "key", "op_id")
        .agg(sf.max(sf.struct(*fields)).alias("w"))
        .select("map", "key", "op_id", "w.*")
    )
    return winners.unionByName(others).select(*ops.columns)


# --- stream frames -------------------------------------------------------------------------

PROBLEM_KINDS = (
    "no_snapshot",
    "gap",
    "duplicate_epoch",
    "overlap",
    "state_hash_mismatch",
)


def frame_problems(frames: DataFrame) -> DataFrame:
    """Replays each stream in epoch order and lists what is wrong:
    ``(stream, epoch, seq, problem, detail)``.

    The journal order splits a stream into generations, one per snapshot (a snapshot resets the
    stream). Within a generation, frames are replayed in epoch order (ties by seq): a delta must
    start where the previous frame ended (``base_epoch > previous`` is a ``gap``, ``<`` an
    ``overlap``), two frames ending at the same epoch are a ``duplicate_epoch``, and two frames
    that state the same epoch with different state hashes (including a resync snapshot and the
    frame just before it) are a ``state_hash_mismatch``. Deltas before any snapshot:
    ``no_snapshot``.
    """
    from pyspark.sql import Window

    by_seq = Window.partitionBy("stream").orderBy("seq")
    numbered = frames.select(
        "stream",
        "seq",
        "base_epoch",
        "epoch",
        "snapshot",
        "state_hash",
        sf.sum(sf.col("snapshot").cast("int"))
        .over(by_seq.rowsBetween(Window.unboundedPreceding, Window.currentRow))
        .alias("gen"),
        sf.lag("epoch").over(by_seq).alias("seq_prev_epoch"),
        sf.lag("state_hash").over(by_seq).alias("seq_prev_hash"),
    )
    by_epoch = Window.partitionBy("stream", "gen").orderBy("epoch", "seq")
    replay = numbered.select(
        "*",
        sf.lag("epoch").over(by_epoch).alias("prev_epoch"),
        sf.lag("state_hash").over(by_epoch).alias("prev_hash"),
    )
    delta = ~sf.col("snapshot")
    prev = sf.col("prev_epoch")
    same_epoch = prev.isNotNull() & (sf.col("epoch") == prev)

    def hashes_differ(other: str) -> Any:
        return (
            sf.col("state_hash").isNotNull()
            & sf.col(other).isNotNull()
            & (sf.col("state_hash") != sf.col(other))
        )

    checks = [
        ("no_snapshot", sf.col("gen") == 0, sf.lit("delta before any snapshot")),
        (
            "gap",
            delta & (sf.col("gen") > 0) & prev.isNotNull() & (sf.col("base_epoch") > prev),
            sf.format_string("epochs %d..%d missing", prev + 1, sf.col("base_epoch")),
        ),
        (
            "overlap",
            delta
            & (sf.col("gen") > 0)
            & ~same_epoch
            & (prev.isNull() | (sf.col("base_epoch") < prev)),
            sf.format_string("delta from %d, but the replay is at %s", sf.col("base_epoch"), prev),
        ),
        (
            "duplicate_epoch",
            delta & (sf.col("gen") > 0) & same_epoch,
            sf.format_string("epoch %d already replayed", sf.col("epoch")),
        ),
        (
            "state_hash_mismatch",
            (same_epoch & hashes_differ("prev_hash"))
            | (
                sf.col("snapshot")
                & (sf.col("epoch") == sf.col("seq_prev_epoch"))
                & hashes_differ("seq_prev_hash")
            ),
            sf.format_string("two different state hashes for epoch %d", sf.col("epoch")),
        ),
    ]
    found = None
    for name, condition, detail in checks:
        part = replay.where(condition).select(
            "stream", "epoch", "seq", sf.lit(name).alias("problem"), detail.alias("detail")
        )
        found = part if found is None else found.unionByName(part)
    return found


def stream_summary(frames: DataFrame, problems: DataFrame) -> DataFrame:
    """Per stream: frames, snapshots, epoch range, problem count and the first bad epoch."""
    counts = frames.groupBy("stream").agg(
        sf.count("*").alias("frames"),
        sf.sum(sf.col("snapshot").cast("int")).alias("snapshots"),
        sf.min("epoch").alias("min_epoch"),
        sf.max("epoch").alias("max_epoch"),
    )
    bad = problems.groupBy("stream").agg(
        sf.count("*").alias("problems"), sf.min("epoch").alias("first_bad_epoch")
    )
    return counts.join(bad, "stream", "left").select(
        "stream",
        "frames",
        "snapshots",
        "min_epoch",
        "max_epoch",
        sf.coalesce("problems", sf.lit(0)).alias("problems"),
        "first_bad_epoch",
    )


# --- report ------------------------------------------------------------------------------------


def distinct_ops(ops: DataFrame) -> DataFrame:
    """Each op once: duplicates are identical rows apart from their seq and append time."""
    return ops.drop("seq", "recorded_ms").distinct()


def ops_per_minute(ops: DataFrame, by: str) -> DataFrame:
    """``(minute, <by>, ops)``: ops per HLC minute (UTC) per map or per origin."""
    minute = sf.timestamp_millis(sf.col("millis") - sf.pmod(sf.col("millis"), sf.lit(60_000)))
    return (
        ops.groupBy(minute.alias("minute"), sf.col(by))
        .agg(sf.count("*").alias("ops"))
        .orderBy("minute", by)
    )


def write_conflicts(ops: DataFrame, window_ms: int = 1_000) -> DataFrame:
    """Concurrent writes: consecutive writes to one key (in HLC order) by different origins
    whose clocks are within ``window_ms`` -- neither can be sure it saw the other.
    ``(map, key, op_id, origin, other_origin, millis, other_millis)``."""
    from pyspark.sql import Window

    w = Window.partitionBy("map", "key").orderBy("millis", "counter", "node", "op_id")
    writes = ops.where(sf.col("op").isin(*LWW_OPS, *OR_OPS)).select(
        "map",
        "key",
        "op_id",
        "origin",
        "millis",
        sf.lag("origin").over(w).alias("other_origin"),
        sf.lag("millis").over(w).alias("other_millis"),
    )
    return writes.where(
        sf.col("other_origin").isNotNull()
        & (sf.col("origin") != sf.col("other_origin"))
        & (sf.col("millis") - sf.col("other_millis") <= window_ms)
    )


def conflicts_per_key(conflicts: DataFrame, top: int) -> DataFrame:
    return (
        conflicts.groupBy("map", "key")
        .agg(sf.count("*").alias("conflicts"))
        .orderBy(sf.desc("conflicts"), "map", "key")
        .limit(top)
    )


def hottest_keys(ops: DataFrame, top: int) -> DataFrame:
    """The ``top`` keys by number of ops, ties broken by map and key (deterministic)."""
    return (
        ops.groupBy("map", "key")
        .agg(sf.count("*").alias("ops"))
        .orderBy(sf.desc("ops"), "map", "key")
        .limit(top)
    )
