"""What a node holds, sans-I/O: a shared document or a TopGun map is held while its clients use
it.

In a cluster with ``hold = "interest"`` JetStream is the store of record for shared documents
and TopGun maps (one subject per document or map, a compacted snapshot of each), so a node
needs in memory only those its own clients use. :class:`Holdings` decides, for one kind of
held thing (named by a string), from members joining and leaving and an injected clock (the
text below says "document"; a map is held the same way, ``cluster/map_interest.py`` says who
its members are and which messages wait):

- **hold**: the first member of a document the node does not hold makes the node load it
  (:class:`Load`: the snapshot, then the document's subject from the snapshot's position);
  until the load ends the document is *loading*, and its members' frames wait (the plane never
  checks or applies a write against a partial copy).
- **loaded**: the load caught up with the subject; waiting members get the document and their
  frames are taken in order.
- **idle**: the last member left; after ``idle`` seconds with none the node lets the document
  go (:class:`Release`: drop it from memory, stop receiving its subject). A member that comes
  back before that keeps it held, with no load.
- **load timeout**: a load not done within ``load_timeout`` seconds fails its waiting members
  with a typed error, and the document is let go (the next member loads it again).

The I/O side (``links/cluster_held.py``) performs the loads and releases; the plane
(``server/plane.py``) parks members and frames of documents that are not loaded.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from octosync.errors import DecodeError

HOLD_CHOICES = ("interest", "all")
"""``[cluster] hold``: documents and maps held by interest, or all of them on every node."""


class Phase(Enum):
    LOADING = "loading"
    HELD = "held"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class HoldTiming:
    idle: float = 30.0
    """Seconds a document with no member stays held before the node lets it go."""
    load_timeout: float = 10.0
    """Seconds a load may take before its waiting members are failed."""


@dataclass(frozen=True, slots=True)
class Load:
    """Load ``name``: its snapshot, then its subject from the snapshot's position."""

    name: str


@dataclass(frozen=True, slots=True)
class Release:
    """Let ``name`` go: drop it from memory and stop receiving its subject (``failed``: its
    load timed out; its waiting members are failed)."""

    name: str
    failed: bool = False


@dataclass(slots=True)
class Holding:
    phase: Phase
    since: float
    """When the load started (loading) or the last member left (idle)."""
    members: set[int] = field(default_factory=set)


@dataclass(slots=True)
class HoldStats:
    """For ``/metrics`` (``octosync_cluster_documents_*``)."""

    loads: int = 0
    loaded: int = 0
    releases: int = 0
    load_failures: int = 0


@dataclass(slots=True)
class HeldStats:
    """The snapshots the I/O side writes, for ``/metrics`` (``octosync_cluster_documents_*``)."""

    snapshots: int = 0
    """Snapshots this node wrote."""
    snapshots_too_large: int = 0
    snapshot_conflicts: int = 0
    """Snapshots not written because another holder wrote a newer one."""


class Holdings:
    """The interest table of one node for one kind (documents or maps): everything of that
    kind it holds, its phase and its members."""

    def __init__(self, clock: Callable[[], float], timing: HoldTiming | None = None) -> None:
        self.clock = clock
        self.timing = timing or HoldTiming()
        self._docs: dict[str, Holding] = {}
        self.stats = HoldStats()

    def phase(self, name: str) -> Phase | None:
        held = self._docs.get(name)
        return None if held is None else held.phase

    def ready(self, name: str) -> bool:
        """Loaded: its members' frames may be taken."""
        held = self._docs.get(name)
        return held is not None and held.phase is not Phase.LOADING

    def held(self) -> list[str]:
        """The documents in memory here (loaded, with members or idle), sorted."""
        return sorted(n for n, h in self._docs.items() if h.phase is not Phase.LOADING)

    def loading(self) -> list[str]:
        return sorted(n for n, h in self._docs.items() if h.phase is Phase.LOADING)

    def members(self, name: str) -> frozenset[int]:
        held = self._docs.get(name)
        return frozenset() if held is None else frozenset(held.members)

    def joined(self, conn: int, name: str) -> Load | None:
        """A member joined ``name`` (again: no change): a load when the node does not hold it."""
        held = self._docs.get(name)
        if held is None:
            self._docs[name] = Holding(Phase.LOADING, self.clock(), {conn})
            self.stats.loads += 1
            return Load(name)
        held.members.add(conn)
        if held.phase is Phase.IDLE:
            held.phase = Phase.HELD
        return None

    def left(self, conn: int, name: str) -> None:
        """A member left; the last one starts the idle timer (a loading document finishes its
        load first)."""
        held = self._docs.get(name)
        if held is None:
            return
        held.members.discard(conn)
        if not held.members and held.phase is Phase.HELD:
            held.phase = Phase.IDLE
            held.since = self.clock()

    def loaded(self, name: str) -> bool:
        """The load of ``name`` caught up: True when it was loading (its waiting members may go
        on); with no member left it is idle from now."""
        held = self._docs.get(name)
        if held is None or held.phase is not Phase.LOADING:
            return False
        self.stats.loaded += 1
        held.phase = Phase.HELD if held.members else Phase.IDLE
        held.since = self.clock()
        return True

    def failed(self, name: str) -> Release | None:
        """The load of ``name`` could not be done (no answer from JetStream): let it go."""
        held = self._docs.get(name)
        if held is None or held.phase is not Phase.LOADING:
            return None
        return self._release(name, failed=True)

    def due(self, busy: Callable[[str], bool] = lambda _name: False) -> list[Release]:
        """What the clock decides now: idle documents past ``idle``, loads past
        ``load_timeout``. An idle document that is ``busy`` (writes of it still being stored)
        is idle again from now instead: its writers' acknowledgements merge into it."""
        now = self.clock()
        out: list[Release] = []
        for name, held in sorted(self._docs.items()):
            if held.phase is Phase.IDLE and now - held.since >= self.timing.idle:
                if busy(name):
                    held.since = now
                else:
                    out.append(self._release(name))
            elif held.phase is Phase.LOADING and now - held.since >= self.timing.load_timeout:
                out.append(self._release(name, failed=True))
        return out

    def _release(self, name: str, *, failed: bool = False) -> Release:
        del self._docs[name]
        if failed:
            self.stats.load_failures += 1
        else:
            self.stats.releases += 1
        return Release(name, failed)


# --- names on the wire ----------------------------------------------------------------------


def token(name: str) -> str:
    """A document or map name as one NATS subject token and KV key: URL-safe base64 without padding
    (letters, digits, ``-`` and ``_``: never ``.``, ``*``, ``>`` or white space)."""
    return base64.urlsafe_b64encode(name.encode()).rstrip(b"=").decode("ascii")


def name_of(tok: str) -> str:
    """The name a :func:`token` stands for."""
    try:
        raw = base64.b64decode(tok + "=" * (-len(tok) % 4), altchars=b"-_", validate=True)
        return raw.decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise DecodeError(f"not a document token: {tok!r}", path="subject") from exc
