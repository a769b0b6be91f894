"""Shared documents in the journal: their edits (who wrote what, when) and their merged state.

Each way a server journals shared documents is a dataset of its own (``plane``: the CRDT
plane's ops, one row per op) and one ``DocumentKind`` in ``KINDS``: how its rows become edits
``(document, face, writer, recorded_ms)``, one per distinct edit, how a document's rows fold to
its values ``(document, name, kind, value)``, and what ``verify`` checks in them. ``report``,
``compact`` and ``verify`` go through ``KINDS``, so another kind (another face's documents) is
one more entry here and a dataset in ``store.datasets``.

The plane's merge is the replica's own (``crdt.plane``): per entry ``(stream, node, key)`` the
op with the greatest ``(wall_time, logical, peer)``, then the greatest state bytes; the values
are read from the winners by ``crdt.shared.document_values``, as every replica reads them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from pyspark.sql import Window
from pyspark.sql import functions as sf

from octosync.crdt.shared import document_values
from octosync.ipc.messages import CrdtOp, WireStamp
from octosync.pipeline.transforms.ops import DataFrame

EDIT_COLUMNS = ("document", "face", "writer", "recorded_ms")
Value = tuple[str, str, str, Any]
"""``(document, name, kind, value)``."""

PLANE_OP = ("stream", "node", "key", "wall_time", "logical", "peer", "state")
"""What makes a plane op itself: a compaction's record repeats ops exported before."""
ENTRY = ("stream", "node", "key")


def distinct_plane_ops(rows: DataFrame) -> DataFrame:
    """Each plane op once, with the first seq and time the server journaled it."""
    return rows.groupBy(*PLANE_OP).agg(
        sf.min("seq").alias("seq"), sf.min("recorded_ms").alias("recorded_ms")
    )


def plane_edits(rows: DataFrame) -> DataFrame:
    """One row per distinct plane op: the writer is the replica that stamped it."""
    return distinct_plane_ops(rows).select(
        sf.col("stream").alias("document"),
        sf.lit("lazily").alias("face"),
        sf.col("peer").cast("string").alias("writer"),
        "recorded_ms",
    )


def plane_winners(rows: DataFrame) -> DataFrame:
    """The op each entry converges to: ``(stream, node, key, wall_time, logical, peer,
    state)``, the greatest stamp and then the greatest state bytes (``crdt.plane.wins``)."""
    won = sf.max(sf.struct("wall_time", "logical", "peer", "state")).alias("won")
    return rows.groupBy(*ENTRY).agg(won).select(*ENTRY, *(f"won.{c}" for c in PLANE_OP[3:]))


def values_of_winners(winners: Iterable[Any]) -> list[Value]:
    """Each document's values, read from its winning ops (rows of ``plane_winners``)."""
    by_document: dict[str, list[CrdtOp]] = defaultdict(list)
    for r in winners:
        stamp = WireStamp(wall_time=r["wall_time"], logical=r["logical"], peer=r["peer"])
        op = CrdtOp(slot_id=r["node"], stamp=stamp, state=bytes(r["state"]), key=r["key"])
        by_document[r["stream"]].append(op)
    return [
        (document, name, kind, value)
        for document in sorted(by_document)
        for name, kind, value in document_values(by_document[document])
    ]


def plane_values(rows: DataFrame) -> list[Value]:
    """The documents' merged values (one action: the winners, at most the entries the
    server holds, are folded on the driver)."""
    return values_of_winners(plane_winners(rows).collect())


def plane_problems(rows: DataFrame) -> DataFrame:
    """``(document, seq, problem, detail)``: a counter entry whose tallies went down from one
    op to the next in stamp order (increments lost), or a per-replica entry (``NAME/pn/PEER``,
    ``NAME/mv/PEER``) stamped by another replica (a writer changed what it does not own)."""
    ops = distinct_plane_ops(rows)
    owner = sf.regexp_extract(sf.col("key"), r"^[^/]+/(?:pn|mv)/([0-9]+)$", 1)
    foreign = ops.where((owner != "") & (owner != sf.col("peer").cast("string"))).select(
        sf.col("stream").alias("document"),
        "seq",
        sf.lit("foreign_entry").alias("problem"),
        sf.format_string("entry %s written by replica %d", sf.col("key"), sf.col("peer")).alias(
            "detail"
        ),
    )
    order = Window.partitionBy(*ENTRY).orderBy("wall_time", "logical", "peer", "state")
    tallies = (
        ops.where(sf.col("key").rlike(r"^[^/]+/pn/[0-9]+$"))
        .withColumn("tally", sf.from_json(sf.col("state").cast("string"), "array<bigint>"))
        .withColumn("before", sf.lag("tally").over(order))
    )
    went_down = (sf.col("tally")[0] < sf.col("before")[0]) | (
        sf.col("tally")[1] < sf.col("before")[1]
    )
    regressed = tallies.where(sf.col("before").isNotNull() & went_down).select(
        sf.col("stream").alias("document"),
        "seq",
        sf.lit("counter_regressed").alias("problem"),
        sf.format_string(
            "%s went from %s to %s",
            sf.col("key"),
            sf.col("before").cast("string"),
            sf.col("tally").cast("string"),
        ).alias("detail"),
    )
    return foreign.unionByName(regressed)


class DocumentKind(NamedTuple):
    """One way shared documents are journaled, for the jobs."""

    dataset: str
    """Its dataset in ``store.datasets`` (the export's directory)."""
    edits: Callable[[DataFrame], DataFrame]
    """Its rows as ``EDIT_COLUMNS``, one per distinct edit."""
    values: Callable[[DataFrame], list[Value]]
    """Its documents' merged values."""
    problems: Callable[[DataFrame], DataFrame]
    """``(document, seq, problem, detail)`` for ``verify``."""
    entries: Callable[[DataFrame], DataFrame]
    """The converged state ``compact`` writes, with a ``stream`` column naming the document."""


KINDS: tuple[DocumentKind, ...] = (
    DocumentKind("plane", plane_edits, plane_values, plane_problems, plane_winners),
)


def document_summary(edits: DataFrame) -> DataFrame:
    """Per document: ``(document, face, edits, writers, first_ms, last_ms)``."""
    return (
        edits.groupBy("document", "face")
        .agg(
            sf.count("*").alias("edits"),
            sf.countDistinct("writer").alias("writers"),
            sf.min("recorded_ms").alias("first_ms"),
            sf.max("recorded_ms").alias("last_ms"),
        )
        .orderBy("document", "face")
    )


def edits_per_writer(edits: DataFrame) -> DataFrame:
    """``(document, writer, edits)``, busiest first."""
    return (
        edits.groupBy("document", "writer")
        .agg(sf.count("*").alias("edits"))
        .orderBy("document", sf.desc("edits"), "writer")
    )


Read = Callable[[str], DataFrame]
"""A dataset's rows by its name (the job reads the export)."""


def all_edits(read: Read) -> DataFrame:
    """The edits of every kind of shared document, as ``EDIT_COLUMNS``."""
    frames = [kind.edits(read(kind.dataset)) for kind in KINDS]
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def all_values(read: Read) -> list[Value]:
    """Every shared document's merged values, by document, name and kind."""
    return sorted(
        (v for kind in KINDS for v in kind.values(read(kind.dataset))), key=lambda v: v[:3]
    )


def all_problems(read: Read) -> DataFrame:
    frames = [kind.problems(read(kind.dataset)) for kind in KINDS]
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out
