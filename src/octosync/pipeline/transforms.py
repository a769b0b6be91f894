"""Pure DataFrame -> DataFrame transforms for the jobs; each is unit-tested on its own.

Determinism: every "pick one record" step takes ``max`` of a struct that starts with the full
HLC order ``(millis, counter, node, op_id)``; ``op_id`` is unique per record, so two records can
tie only when they are the same record delivered twice. No ``first``, ``max_by`` or
``dropDuplicates``, whose choice on ties depends on partitioning.

Hashing (FNV-1a-32 over UTF-16 code units, MurmurHash3's ``fmix32``) runs vectorised with
numpy on Arrow batches (``mapInArrow``, uint64 arithmetic, exact for 32-bit values); the sums
are Spark long sums taken modulo 2**32 (each term is below 2**32, so no long overflows, which
Spark 4's ANSI mode would turn into an error). Spark SQL lambdas did the same hashing exactly,
but ran interpreted and made the Merkle stage the slowest of the job.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from functools import partial
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as sf

from octosync.crdt.hashing import fnv1a32
from octosync.crdt.op import OpKind

DataFrame = Any  # pyspark.sql.DataFrame; pyspark ships no stubs mypy can use here

MERKLE_DEPTH = 3
MASK32 = 0xFFFFFFFF
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193

SNAPSHOT_COLUMNS = ["map", "key", "value", "millis", "counter", "node", "tombstone"]
LWW_OPS = (OpKind.PUT.value, OpKind.REMOVE.value)
OR_OPS = (OpKind.OR_ADD.value, OpKind.OR_REMOVE.value)


# --- 32-bit hashing, vectorised on Arrow batches --------------------------------------------


def fnv1a32_array(texts: pa.Array) -> np.ndarray:
    """FNV-1a-32 over UTF-16 code units of every string, as uint64 values below 2**32.

    ASCII columns (the common case) hash their UTF-8 bytes directly, which are their code
    units, one character position at a time across all rows; other columns go row by row
    through ``crdt.hashing.fnv1a32``. Products stay below 2**57, so uint64 is exact.
    """
    texts = texts.cast(pa.large_string())
    n = len(texts)
    if n == 0 or not pc.all(pc.string_is_ascii(texts)).as_py():
        return np.array([fnv1a32(t) for t in texts.to_pylist()], dtype=np.uint64)
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[texts.offset : texts.offset + n + 1]
    data = np.frombuffer(texts.buffers()[2], dtype=np.uint8)
    lengths = np.diff(offsets)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    rows = np.arange(n)
    for j in range(int(lengths.max())):
        rows = rows[lengths[rows] > j]
        units = data[offsets[rows] + j].astype(np.uint64)
        h[rows] = ((h[rows] ^ units) * np.uint64(_FNV_PRIME)) & np.uint64(MASK32)
    return h


def fmix32_array(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's fmix32 on uint64 values below 2**32 (products wrap mod 2**64, and only
    their low 32 bits are kept, so the result is exact)."""
    h = values.astype(np.uint64)
    mask = np.uint64(MASK32)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & mask
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & mask
    return h ^ (h >> np.uint64(16))


def _hash_batches(
    batches: Iterator[pa.RecordBatch], source: str, target: str, how: str
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        column = batch.column(source)
        if how == "fnv":
            out = fnv1a32_array(column)
        elif how == "fmix":
            out = fmix32_array(column.to_numpy(zero_copy_only=False))
        else:  # "route": the key's leaf path, 8 hex digits of FNV-1a (callers cut the prefix)
            hashes = fnv1a32_array(column)
            out = pa.array([f"{int(v):08x}" for v in hashes], pa.string())
            yield batch.append_column(target, out)
            continue
        yield batch.append_column(target, pa.array(out.astype(np.int64), pa.int64()))


def _with_hash(df: DataFrame, source: str, target: str, how: str) -> DataFrame:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    kind = StringType() if how == "route" else LongType()
    schema = StructType([*df.schema.fields, StructField(target, kind)])
    return df.mapInArrow(partial(_hash_batches, source=source, target=target, how=how), schema)


def with_fnv1a32(df: DataFrame, source: str, target: str) -> DataFrame:
    """Adds ``target`` = FNV-1a-32 (UTF-16 code units) of the string column ``source``."""
    return _with_hash(df, source, target, "fnv")


def with_fmix32(df: DataFrame, source: str, target: str) -> DataFrame:
    """Adds ``target`` = fmix32 of the 32-bit column ``source`` (held in a long)."""
    return _with_hash(df, source, target, "fmix")


def with_route(df: DataFrame, source: str, target: str) -> DataFrame:
    """Adds ``target`` = FNV-1a-32 of ``source`` as 8 lowercase hex digits (the Merkle route)."""
    return _with_hash(df, source, target, "route")


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
    # broadcast: one entry per key is small next to the ops, which then never shuffle in full
    candidates = lww.join(sf.broadcast(newest), ["map", "key"]).where(
        sf.col("millis") == sf.col("_newest")
    )
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


FAMILIES = ("lww", "or", "counter")
FAMILY_OPS = {"lww": LWW_OPS, "or": OR_OPS, "counter": (OpKind.INC.value,)}


def families_of(op_names: Iterable[str]) -> set[str]:
    """Which op families occur, from the distinct ``op`` values of a journal."""
    present = set(op_names)
    return {f for f, kinds in FAMILY_OPS.items() if present.intersection(kinds)}


def compact(
    ops: DataFrame,
    *,
    gc_horizon_millis: int | None = None,
    lww: DataFrame | None = None,
    families: Collection[str] = FAMILIES,
) -> DataFrame:
    """All op records folded into the converged state of every map (snapshot columns).
    ``lww``: :func:`lww_state` of ``ops`` when the caller already has it (computed once);
    ``families``: the op families present (a job skips the stages of absent ones)."""
    parts = []
    if "lww" in families:
        parts.append(lww_state(ops) if lww is None else lww)
    if "or" in families:
        parts.append(or_map_state(ops))
    if "counter" in families:
        parts.append(counter_state(ops))
    if not parts:
        return lww_state(ops)  # empty, with the right schema
    state = parts[0]
    for part in parts[1:]:
        state = state.unionByName(part)
    return drop_tombstones_before(state, gc_horizon_millis).select(*SNAPSHOT_COLUMNS)


# --- Merkle tree -------------------------------------------------------------------------------


def _sum32(df: DataFrame, keys: list[str], column: str, alias: str) -> DataFrame:
    return df.groupBy(*keys).agg(sf.pmod(sf.sum(column), sf.lit(2**32)).alias(alias))


def _set_hash(ops: DataFrame, kinds: tuple[str, ...]) -> DataFrame:
    """Per key of one op family: sum of fmix32(FNV-1a("key:op_id")) over distinct op ids."""
    ids = (
        ops.where(sf.col("op").isin(*kinds))
        .select("map", "key", "op_id")
        .distinct()
        .select("map", "key", sf.concat_ws(":", "key", "op_id").alias("item"))
    )
    mixed = with_fmix32(with_fnv1a32(ids, "item", "h"), "h", "mixed")
    return _sum32(mixed, ["map", "key"], "mixed", "entry")


def entry_hashes(
    ops: DataFrame,
    lww: DataFrame | None = None,
    families: Collection[str] = FAMILIES,
    *,
    gc_horizon_millis: int | None = None,
) -> DataFrame:
    """``(map, key, entry)``: the 32-bit Merkle entry hash of every key, as ``crdt/`` defines it.

    LWW keys: FNV-1a of ``"key:millis:counter:node"`` of the winner (TopGun's leaf item); OR and
    counter keys: the record-set hash of their distinct op ids; a key with several op families:
    the sum of its families' hashes mod 2**32. ``lww``, ``families`` and the GC horizon as in
    :func:`compact`: a collected tombstone takes its family's part out of the key's hash.
    """
    lww = drop_tombstones_before(lww_state(ops) if lww is None else lww, gc_horizon_millis)
    lww = lww.select(
        "map",
        "key",
        sf.concat_ws(
            ":", "key", sf.col("millis").cast("string"), sf.col("counter").cast("string"), "node"
        ).alias("item"),
    )
    parts = with_fnv1a32(lww, "item", "entry").select("map", "key", "entry")
    if "or" in families:
        or_part = _set_hash(ops, OR_OPS)
        if gc_horizon_millis is not None:
            kept = drop_tombstones_before(or_map_state(ops), gc_horizon_millis)
            or_part = or_part.join(kept.select("map", "key"), ["map", "key"], "left_semi")
        parts = parts.unionByName(or_part)
    if "counter" in families:
        parts = parts.unionByName(_set_hash(ops, FAMILY_OPS["counter"]))
    return _sum32(parts, ["map", "key"], "entry", "entry")


def merkle_tree(entries: DataFrame, depth: int = MERKLE_DEPTH) -> DataFrame:
    """Every non-zero Merkle node ``(map, path, level, hash)``, leaves (``level == depth``) up to
    the root (``path == ""``). A key routes to the leaf named by the first ``depth`` hex digits
    of FNV-1a(key); a node's hash is the sum of fmix32 of its children (leaf: of its entries)
    mod 2**32. Zero-hash nodes are left out, as ``crdt.MerkleTree`` does."""
    routed = with_fmix32(with_route(entries, "key", "route"), "entry", "mixed")
    level = _sum32(
        routed.select("map", sf.col("route").substr(1, depth).alias("path"), "mixed"),
        ["map", "path"],
        "mixed",
        "hash",
    ).select("map", "path", sf.lit(depth).alias("level"), "hash")

    def upper_levels(leaves: pa.Table) -> pa.Table:  # a real function: Spark reads its hints
        return _upper_levels(leaves, depth)

    upper = level.groupBy("map").applyInArrow(
        upper_levels, "map string, path string, level int, hash long"
    )
    return level.unionByName(upper).where(sf.col("hash") != 0)


def _upper_levels(leaves: pa.Table, depth: int) -> pa.Table:
    """One map's inner nodes from its leaves (at most 16**depth rows): each level up sums the
    fmix32 of its children by path prefix."""
    name = leaves.column("map")[0].as_py() if leaves.num_rows else ""
    paths = np.array(leaves.column("path").to_pylist(), dtype=object)
    hashes = leaves.column("hash").to_numpy().astype(np.uint64)
    out_paths: list[str] = []
    out_levels: list[int] = []
    out_hashes: list[int] = []
    for d in range(depth - 1, -1, -1):
        prefixes = np.array([p[:d] for p in paths], dtype=object)
        uniq, inverse = np.unique(prefixes, return_inverse=True)
        sums = np.zeros(len(uniq), dtype=np.uint64)
        np.add.at(sums, inverse, fmix32_array(hashes))
        paths, hashes = uniq, sums & np.uint64(MASK32)
        out_paths.extend(str(p) for p in paths)
        out_levels.extend([d] * len(paths))
        out_hashes.extend(int(h) for h in hashes)
    return pa.table(
        {
            "map": pa.array([name] * len(out_paths), pa.string()),
            "path": pa.array(out_paths, pa.string()),
            "level": pa.array(out_levels, pa.int32()),
            "hash": pa.array(out_hashes, pa.int64()),
        }
    )


def merkle_roots(tree: DataFrame) -> DataFrame:
    """``(map, root)`` from a tree built by :func:`merkle_tree`."""
    return tree.where(sf.col("level") == 0).select("map", sf.col("hash").alias("root"))


def state_records(
    ops: DataFrame, winners: DataFrame | None = None, families: Collection[str] = FAMILIES
) -> DataFrame:
    """The op records that still carry state: each LWW key's winner plus every distinct OR and
    INC op. Folding these in-process gives the same state as folding all ops, so a store
    restarts from them and the journal's tail (seq > the compaction's ``as_of_seq``).
    ``winners``: :func:`lww_winners` of ``ops`` when the caller already has it; ``families`` as
    in :func:`compact`."""
    winners = lww_winners(ops) if winners is None else winners
    if "or" not in families and "counter" not in families:
        return winners
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
