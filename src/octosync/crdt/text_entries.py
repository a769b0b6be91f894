"""A shared text's plane entries: each writer's runs and deletions in grow-only chunks.

========================  ==================================================================
entry key                 state (JSON)
========================  ==================================================================
``NAME/tx/PEER/CHUNK``    ``[[clock, text, origin_peer, origin_clock], ...]``: the runs
                          ``PEER`` inserted with clocks in ``CHUNK*64 .. CHUNK*64+63``, by
                          clock; ``[0, 0]`` as origin is the start of the text
``NAME/td/PEER/N``        ``[[peer, clock, length], ...]``: the ``N``-th batch of at most 64
                          character id ranges ``PEER`` deleted
========================  ==================================================================

Both are written only by the peer they name (so ids are minted only under their writer's own
peer, by construction) and only ever grow: a ``tx`` chunk keeps every run it held (a run may
get longer), a ``td`` chunk keeps every id it covered. The plane keeps each entry's latest
write, so merging is the plane's idempotent, commutative last-writer-wins, and a late joiner of
a text of ``n`` characters gets about ``n / 64`` entries, not one op per keystroke. A keystroke
rewrites one chunk of at most 64 characters. Runs are stored maximal (a run that continues the
one before it, same chunk, is one run), so every writer encodes one history to the same bytes.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import msgspec

from octosync.bounds import MAX_SAFE_INTEGER
from octosync.crdt.text import BLOCK, CHUNK, MAX_CLOCK, TextCrdt, TextEdit
from octosync.errors import CrdtValueError

RANGES_PER_CHUNK = 64
"""Deleted id ranges in one ``td`` entry."""
MAX_TX_CHUNKS = MAX_CLOCK // CHUNK
MAX_TD_CHUNKS = MAX_CLOCK // RANGES_PER_CHUNK
_JSON = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder()

RunRow = tuple[int, str, int, int]
RangeRow = tuple[int, int, int]


def _peer(n: object) -> bool:
    return type(n) is int and 0 < n <= MAX_SAFE_INTEGER


def chunk_segment(segment: str, limit: int, path: str) -> int:
    """A chunk number key segment: canonical decimal from 0 to ``limit``."""
    if not (
        segment.isascii()
        and segment.isdigit()
        and len(segment) <= 8
        and (segment == "0" or not segment.startswith("0"))
        and int(segment) <= limit
    ):
        raise CrdtValueError(
            f"{segment!r} is not a chunk number (decimal, 0 to {limit}, no leading zero)",
            path=path,
        )
    return int(segment)


def decode_runs(
    value: Any, peer: int, chunk: int, path: str, rewrite: bool = False
) -> list[RunRow]:
    """A ``tx`` entry's state, strictly: maximal runs by clock inside the chunk, each after
    its origin (an origin's clock is below the run's, so origins never form a cycle). Only the
    server's ``rewrite`` of a chunk (``text_collect``) may hold no run."""
    if not isinstance(value, list) or not (value or rewrite) or len(value) > CHUNK:
        raise CrdtValueError(f"a text chunk holds 1 to {CHUNK} runs", path=path)
    lo, hi = chunk * CHUNK, (chunk + 1) * CHUNK
    out: list[RunRow] = []
    end = lo
    for i, row in enumerate(value):
        where = f"{path}[{i}]"
        if not (isinstance(row, list) and len(row) == 4):
            raise CrdtValueError("a run is [clock, text, origin_peer, origin_clock]", path=where)
        clock, text, opeer, oclock = row
        if not (type(clock) is int and isinstance(text, str) and text):
            raise CrdtValueError("a run is [clock, non-empty text, ...]", path=where)
        if clock < max(end, 1) or clock + len(text) > hi:
            raise CrdtValueError(
                f"run clocks {clock}..{clock + len(text) - 1} are not in chunk {chunk}'s "
                f"{max(lo, 1)}..{hi - 1} after the run before",
                path=where,
            )
        start = opeer == 0 and oclock == 0
        if not start and not (_peer(opeer) and type(oclock) is int and 0 < oclock < clock):
            raise CrdtValueError(
                "a run's origin is [0, 0] (the start) or a character id with a lower clock",
                path=where,
            )
        if out and clock == end and (opeer, oclock) == (peer, end - 1):
            raise CrdtValueError("a run that continues the one before is one run", path=where)
        out.append((clock, text, opeer, oclock))
        end = clock + len(text)
    return out


def runs_grow(old: list[RunRow], new: list[RunRow]) -> bool:
    """Every run held stays, with the same origin, and at most gets longer."""
    got = {r[0]: r for r in new}
    for clock, text, opeer, oclock in old:
        r = got.get(clock)
        if r is None or (r[2], r[3]) != (opeer, oclock) or not r[1].startswith(text):
            return False
    return True


def decode_ranges(value: Any, path: str, rewrite: bool = False) -> list[RangeRow]:
    """A ``td`` entry's state, strictly (only the server's ``rewrite`` may hold no range)."""
    if not isinstance(value, list) or not (value or rewrite) or len(value) > RANGES_PER_CHUNK:
        raise CrdtValueError(f"a deletion chunk holds 1 to {RANGES_PER_CHUNK} ranges", path=path)
    out: list[RangeRow] = []
    for i, row in enumerate(value):
        if not (
            isinstance(row, list)
            and len(row) == 3
            and _peer(row[0])
            and type(row[1]) is int
            and type(row[2]) is int
            and row[1] > 0
            and row[2] > 0
            and row[1] + row[2] - 1 <= MAX_CLOCK
        ):
            raise CrdtValueError(
                f"a deleted range is [peer, clock, length] with clocks in 1..{MAX_CLOCK}",
                path=f"{path}[{i}]",
            )
        out.append((row[0], row[1], row[2]))
    return out


def ranges_grow(old: list[RangeRow], new: list[RangeRow]) -> bool:
    """Every id ``old`` covers, ``new`` covers."""
    merged: dict[int, list[tuple[int, int]]] = {}
    for peer, clock, n in sorted(new):
        spans = merged.setdefault(peer, [])
        if spans and clock <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], clock + n))
        else:
            spans.append((clock, clock + n))
    for peer, clock, n in old:
        if not any(a <= clock and clock + n <= b for a, b in merged.get(peer, ())):
            return False
    return True


WHOLE_EDIT_RUNS = 32
"""A received batch of more runs than this reports its change as one edit (the changed middle
of the text): finding each run's index would cost a walk of the blocks before it."""


def changed_middle(before: str, after: str) -> TextEdit | None:
    """The one edit turning ``before`` into ``after``: the part between their common prefix
    and common suffix replaced (None when they are equal)."""
    if before == after:
        return None
    n = min(len(before), len(after))
    lo, hi = 0, n
    while lo < hi:  # the longest common prefix, by halving (string compares run in C)
        mid = (lo + hi + 1) // 2
        if before[:mid] == after[:mid]:
            lo = mid
        else:
            hi = mid - 1
    prefix = lo
    lo, hi = 0, n - prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if before[len(before) - mid :] == after[len(after) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    suffix = lo
    return TextEdit(prefix, len(before) - prefix - suffix, after[prefix : len(after) - suffix])


class SharedText:
    """One replica of a shared text and the entries its edits write (sans-I/O)."""

    __slots__ = ("_mine", "_td", "_td_chunk", "crdt", "edits", "peer")

    def __init__(self, peer: int, block: int = BLOCK) -> None:
        self.peer = peer
        self.crdt = TextCrdt(peer, block)
        self._mine: dict[int, list[RunRow]] = {}
        """This peer's ``tx`` chunks as last written or received."""
        self._td: dict[int, list[RangeRow]] = {}
        """This peer's ``td`` chunks."""
        self._td_chunk = 0
        self.edits: list[TextEdit] = []
        """Changes of the visible text not yet taken (local and received), kept only while
        ``listening`` (so a text nobody watches keeps no history)."""

    def __str__(self) -> str:
        return self.crdt.to_string()

    @property
    def listening(self) -> bool:
        """Whether change events are kept (in ``edits``) for someone to take."""
        return self.crdt.events

    @listening.setter
    def listening(self, on: bool) -> None:
        self.crdt.events = on

    # --- local edits: return (key rest, state) to write ---------------------------------------

    def insert(self, index: int, text: str) -> list[tuple[str, bytes]]:
        runs = self.crdt.insert(index, text)
        if text and self.listening:
            self.edits.append(TextEdit(index, 0, text))
        touched: dict[int, None] = {}
        for run in runs:
            chunk = run.clock // CHUNK
            rows = self._mine.setdefault(chunk, [])
            origin = run.origin
            if (
                rows
                and rows[-1][0] + len(rows[-1][1]) == run.clock
                and origin
                == (
                    self.peer,
                    run.clock - 1,
                )
            ):
                last = rows[-1]
                rows[-1] = (last[0], last[1] + run.text, last[2], last[3])
            else:
                rows.append((run.clock, run.text, origin[0], origin[1]))
            touched[chunk] = None
        return [(f"tx/{self.peer}/{c}", _JSON.encode(self._mine[c])) for c in touched]

    def delete(self, index: int, count: int = 1) -> list[tuple[str, bytes]]:
        ranges = self.crdt.delete(index, count)
        if ranges and self.listening:
            self.edits.append(TextEdit(index, count, ""))
        touched: dict[int, None] = {}
        for peer, clock, n in ranges:
            rows = self._td.setdefault(self._td_chunk, [])
            last = rows[-1] if rows else None
            if last and last[0] == peer and last[1] == clock + n:
                rows[-1] = (peer, clock, last[2] + n)
            elif last and last[0] == peer and last[1] + last[2] == clock:
                rows[-1] = (peer, last[1], last[2] + n)
            else:
                if len(rows) >= RANGES_PER_CHUNK:
                    self._td_chunk += 1
                    rows = self._td.setdefault(self._td_chunk, [])
                rows.append((peer, clock, n))
            touched[self._td_chunk] = None
        return [(f"td/{self.peer}/{c}", _JSON.encode(self._td[c])) for c in touched]

    # --- received entries ---------------------------------------------------------------------

    def receive(self, rest: str, state: bytes) -> None:
        """Apply one entry's winning state (``tx/PEER/CHUNK`` or ``td/PEER/N``)."""
        self.receive_many([(rest, state)])

    def receive_many(
        self, entries: list[tuple[str, bytes]], rewritten: Collection[str] = ()
    ) -> None:
        """Apply entries' winning states, runs in clock order (an origin's clock is below its
        run's, so a batch holding both places both at once instead of holding the run). An
        entry that does not decode is skipped (a server refuses those before storing them).
        ``rewritten`` names the entries whose winning write is the server's compaction of a
        closed chunk (``text_collect``): what such a ``tx`` chunk lacks is collected."""
        runs: list[tuple[int, int, str, int, int]] = []
        deletions: list[RangeRow] = []
        compacted: list[tuple[int, int, list[RunRow]]] = []
        for rest, state in entries:
            rewrite = rest in rewritten
            try:
                tag, peer_s, chunk_s = rest.split("/")
                peer, chunk = int(peer_s), int(chunk_s)
                value = _DECODE.decode(state)
                if tag == "tx":
                    rows = decode_runs(value, peer, chunk, "state", rewrite)
                else:
                    ranges = decode_ranges(value, "state", rewrite)
            except (ValueError, msgspec.DecodeError, CrdtValueError):
                continue
            if rewrite:  # a closed chunk: its writer never writes it again
                if peer == self.peer:
                    (self._mine if tag == "tx" else self._td).pop(chunk, None)
                if tag == "tx":
                    compacted.append((peer, chunk, rows))
            if tag == "tx":
                if not rewrite and peer == self.peer and runs_grow(self._mine.get(chunk, []), rows):
                    self._mine[chunk] = rows
                runs.extend([(c, peer, t, op, oc) for c, t, op, oc in rows])
            else:
                if (
                    not rewrite
                    and peer == self.peer
                    and ranges_grow(self._td.get(chunk, []), ranges)
                ):
                    self._td[chunk] = list(ranges)
                    self._td_chunk = max(self._td_chunk, chunk)
                deletions.extend(ranges)
        runs.sort()
        listening = self.listening
        whole = listening and len(runs) > WHOLE_EDIT_RUNS
        before = self.crdt.to_string() if whole else ""
        if whole:  # a joiner's batch: one edit for the whole change, not one per run
            self.crdt.events = False
        try:
            self.crdt.forget_held({(peer, chunk) for peer, chunk, _ in compacted})
            edits = self.crdt.integrate_sorted(runs)
            if listening and not whole:
                self.edits.extend(edits)
            if deletions:
                edits = self.crdt.remove(deletions)
                if listening and not whole:
                    self.edits.extend(edits)
            for peer, chunk, rows in compacted:
                edits = self.crdt.compact(peer, chunk, [(c, len(t)) for c, t, _, _ in rows])
                if listening and not whole:
                    self.edits.extend(edits)
        finally:
            if whole:
                self.crdt.events = True
                edit = changed_middle(before, self.crdt.to_string())
                if edit is not None:
                    self.edits.append(edit)

    def take_edits(self) -> list[TextEdit]:
        edits, self.edits = self.edits, []
        return edits
