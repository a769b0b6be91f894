"""What a message handler sees of the core (``TopGunCore`` is one): its tables and the few
steps they share (fan-out, lock grants, the inline index step), named here so the handlers'
modules need not import the core that dispatches to them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from octosync.crdt.hlc import HLC
from octosync.topgun.counters import CounterTable
from octosync.topgun.effects import Effects
from octosync.topgun.event_journal import JournalSource, JournalSubscriptions
from octosync.topgun.hybrid import LiveHybrid
from octosync.topgun.hybrid_query import LiveHybridQueries
from octosync.topgun.locks import Grant, LockTable
from octosync.topgun.maps import Maps
from octosync.topgun.partitions import PartitionTable
from octosync.topgun.queries import QueryTable
from octosync.topgun.query_pages import QueryPages
from octosync.topgun.search import FullText
from octosync.topgun.vectors import VectorIndexes
from octosync.wire import topgun as tg


class CoreView(Protocol):
    clock: Callable[[], int]
    hlc: HLC
    maps: Maps
    persistent: bool
    replicated: bool
    acks_replicated: bool
    gc_horizon_ms: int
    sql: bool
    pages: QueryPages
    queries: QueryTable
    search: FullText
    vectors: VectorIndexes
    hybrid: LiveHybrid
    hybrid_queries: LiveHybridQueries
    journal: JournalSource | None
    journal_subs: JournalSubscriptions
    topics: dict[str, set[int]]
    locks: LockTable
    counters: CounterTable
    partitions: PartitionTable
    nodes: Callable[[], Iterable[tuple[str, str]]] | None

    def value_of(self, name: str, key: str) -> bytes | None: ...

    def fan_out(self, fx: Effects, sender: int, events: list[tg.ServerEventPayload]) -> None: ...

    def granted(self, fx: Effects, grants: list[Grant]) -> None: ...

    def index_inline_step(self, fx: Effects) -> None: ...
