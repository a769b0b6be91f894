"""Pure DataFrame -> DataFrame transforms for the jobs, one module per family; each is
unit-tested on its own.

``ops`` (op families, the HLC order, per-key summary), ``lww``, ``or_map``, ``counter`` (one
state per CRDT family), ``state`` (the compacted snapshot and the records that carry it),
``merkle`` (entry hashes, leaves, the tree), ``values`` (MsgPack on Arrow batches), ``hashing``
(TopGun's 32-bit hashes as Spark SQL and Arrow-batched kernels from ``crdt.hashing``),
``frames`` (stream replay for ``verify``), ``activity`` and ``traffic`` (what ``report``
charts: CRDT ops, and the hub's stream frames).

Determinism: every "pick one record" step takes ``max`` of a struct that starts with the full
HLC order ``(millis, counter, node, op_id)``; ``op_id`` is unique per record, so two records can
tie only when they are the same record delivered twice. No ``first``, ``max_by`` or
``dropDuplicates``, whose choice on ties depends on partitioning.
"""
