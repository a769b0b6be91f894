"""CRDT data plane: HLC, registers, counters, maps, Merkle sync, op records."""

from octosync.crdt.fold import MapStore, SnapshotRow, fold
from octosync.crdt.hlc import HLC, ClockDriftWarning
from octosync.crdt.lww_map import LWWMap, LWWRecord
from octosync.crdt.merkle import MerkleTree
from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.or_map import ORMap, ORRecord
from octosync.crdt.registers import LWWRegister, MVRegister, PNCounter
from octosync.crdt.sync import SyncRequester, SyncResponder, SyncStats, run_sync
from octosync.crdt.timestamp import Timestamp

__all__ = [
    "HLC",
    "ClockDriftWarning",
    "LWWMap",
    "LWWRecord",
    "LWWRegister",
    "MVRegister",
    "MapStore",
    "MerkleTree",
    "ORMap",
    "ORRecord",
    "OpKind",
    "OpRecord",
    "PNCounter",
    "SnapshotRow",
    "SyncRequester",
    "SyncResponder",
    "SyncStats",
    "Timestamp",
    "fold",
    "run_sync",
]
