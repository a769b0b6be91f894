"""Names of what the pipeline writes, in one place: the compaction's output directory (read back
by ``resume``), the export a job makes of a journal, and the standalone cluster's state."""

from __future__ import annotations

from typing import Final

SNAPSHOT_DIR: Final = "snapshot"
"""One row per key: ``map, key, value, millis, counter, node, tombstone``."""
MERKLE_DIR: Final = "merkle"
"""Every non-zero Merkle node: ``map, path, level, hash``."""
RECORDS_DIR: Final = "records"
"""The op records that still carry state, in the ops schema."""
DOCUMENTS_DIR: Final = "documents"
"""Each shared document kind's converged entries (``documents/plane/``: the winning op per
entry, ``stream, node, key, wall_time, logical, peer, state``)."""
DOCUMENT_VALUES_FILE: Final = "documents.json"
"""Each shared document's merged values: ``{document: {name: {kind: value}}}``."""
META_FILE: Final = "compaction.json"
"""``as_of_seq``, counts, the GC horizon and each map's Merkle root."""

SERVER_COMPACTION_SUBDIR: Final = "compacted"
"""Where ``octosync serve`` looks for the compaction its TopGun maps restart from
(``<data dir>/compacted``: ``pipeline compact --journal DATA --out DATA/compacted``)."""

EXPORT_SUBDIR: Final = "export"
"""Where a job exports a journal directory before reading it."""
CLUSTER_SUBDIR: Final = "spark-cluster"
"""Pid files, logs and work directories of ``octosync pipeline cluster up``."""
CONNECT_SUBDIR: Final = "spark-connect"
"""State file and log of ``octosync pipeline server up`` (the Spark Connect server)."""
STREAM_CHECKPOINT_SUBDIR: Final = "stream-checkpoint"
"""The offsets and commits of ``octosync pipeline stream`` (Structured Streaming's checkpoint)."""
