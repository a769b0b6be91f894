"""CRDT data plane: HLC, registers, counters, maps, Merkle sync, op records."""

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp

__all__ = ["OpKind", "OpRecord", "Timestamp"]
