"""CRDT data plane: HLC, registers, counters, maps, Merkle sync, op records."""

from octosync.crdt.fold import MapStore, SnapshotRow, fold
from octosync.crdt.hlc import HLC, ClockDriftWarning
from octosync.crdt.merkle import MerkleTree
from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp

__all__ = [
    "HLC",
    "ClockDriftWarning",
    "MapStore",
    "MerkleTree",
    "OpKind",
    "OpRecord",
    "SnapshotRow",
    "Timestamp",
    "fold",
]
