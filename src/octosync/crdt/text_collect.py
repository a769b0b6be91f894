"""Collecting a text's tombstones: the server compacts the chunks their writers have left.

A deleted character stays as a tombstone because an edit made without seeing the deletion may
still name it as its origin. Once every member of the document has seen the deletion (the
stability watermark of ``collect``), no new edit names it; it may then go, once what names it
names something else that keeps its place. A character inside a run names the one before it,
so what names a deleted stretch of a run is the rest of the run and the runs typed after its
last character: they are renamed to the stretch's parent when the order allows (``_cut``).

A text's entries only grow while their writer writes them, so the server takes a chunk over
only once its writer has moved past it (the server holds a higher chunk of the same writer:
clocks only rise, so the writer never writes the lower one again). It writes the chunk again
itself, stamped by peer 0 (a *rewrite*): its runs without the collected characters, ``[]``
when none is left. A deletion chunk its writer has left is rewritten without the ranges whose
characters are all gone. Every replica that takes a rewrite drops what it lacks
(``TextCrdt.compact``), so each holds the same characters; a writer's op on a rewritten chunk,
or naming a collected character as an origin, is refused (``ElementCollected``).

Runs of left chunks whose entry every member has seen are cut; runs are visited from the
highest clock down (a character's namers have higher clocks), so what names a character is
settled before the character's own run is visited. Sans-I/O: entries in, rewrites out;
bounded by the text's size.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

import msgspec

from octosync.crdt import collect
from octosync.crdt import text_entries as te
from octosync.crdt.plane import StampKey, stamp_key
from octosync.crdt.text import CHUNK
from octosync.ipc.messages import CrdtOp, WireStamp

TEXT_TAGS = ("tx", "td")
_RUNS = msgspec.json.Decoder(list[tuple[int, str, int, int]])
_RANGES = msgspec.json.Decoder(list[tuple[int, int, int]])
_JSON = msgspec.json.Encoder()

Interval = tuple[int, int]
"""``[lo, hi)`` clocks of one peer."""


def is_rewrite(op: CrdtOp) -> bool:
    """``op`` is the server's compaction of a text chunk (stamped by peer 0)."""
    return op.stamp.peer == collect.SERVER_PEER


def _stable(op: CrdtOp, mark: Mapping[int, StampKey]) -> bool:
    """Every member has seen ``op``'s entry (a rewrite only holds what every member had)."""
    return is_rewrite(op) or collect.covers(mark, stamp_key(op.stamp))


def _merged(intervals: list[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _covering(intervals: list[Interval], clock: int) -> Interval | None:
    """The interval of sorted, disjoint ``intervals`` holding ``clock``."""
    i = bisect.bisect_right(intervals, (clock, 1 << 62)) - 1
    if i >= 0 and intervals[i][0] <= clock < intervals[i][1]:
        return intervals[i]
    return None


def _meets(intervals: list[Interval], lo: int, hi: int) -> bool:
    """Whether ``[lo, hi)`` meets one of sorted, disjoint ``intervals``."""
    i = bisect.bisect_right(intervals, (hi, -1)) - 1
    return i >= 0 and intervals[i][1] > lo


class _Runs(NamedTuple):
    op: CrdtOp
    peer: int
    number: int
    rows: list[te.RunRow]


class _Ranges(NamedTuple):
    op: CrdtOp
    peer: int
    number: int
    rows: list[te.RangeRow]


def _parse(name: str, ops: Iterable[CrdtOp]) -> tuple[list[_Runs], list[_Ranges]]:
    """The text's ``tx`` and ``td`` chunks (an unreadable entry is left as it is)."""
    tx: list[_Runs] = []
    td: list[_Ranges] = []
    for op in ops:
        parts = (op.key or "").split("/")
        if len(parts) != 4 or parts[0] != name or parts[1] not in TEXT_TAGS:
            continue
        if not isinstance(op.state, bytes):
            continue
        try:  # what the server holds passed its write check: only the shape is read here
            peer, number = int(parts[2]), int(parts[3])
            if parts[1] == "tx":
                tx.append(_Runs(op, peer, number, _RUNS.decode(op.state)))
            else:
                td.append(_Ranges(op, peer, number, _RANGES.decode(op.state)))
        except (ValueError, msgspec.DecodeError):
            continue
    return tx, td


Id = tuple[int, int]
START: Id = (0, 0)


class _Run:
    """One run as the pass sees it, and what stays of it: ``pieces``, the kept stretches in
    clock order, each with its origin (the run's own for the first, unless its start went)."""

    __slots__ = ("clock", "left", "origin", "peer", "pieces", "text")

    def __init__(self, clock: int, peer: int, text: str, origin: Id, left: bool) -> None:
        self.clock, self.peer, self.text, self.origin, self.left = clock, peer, text, origin, left
        self.pieces = [_Piece(peer, clock, len(text), origin, left)]


class _Piece:
    """A kept stretch of a run; its origin changes when what it named is collected."""

    __slots__ = ("clock", "left", "length", "origin", "peer")

    def __init__(self, peer: int, clock: int, length: int, origin: Id, left: bool) -> None:
        self.peer, self.clock, self.length, self.origin, self.left = (
            peer,
            clock,
            length,
            origin,
            left,
        )


class _Within:
    """Whether a character's next clock is in the same run (its implicit child)."""

    def __init__(self, runs: list[_Run]) -> None:
        spans: dict[int, list[Interval]] = {}
        for r in runs:
            spans.setdefault(r.peer, []).append((r.clock, r.clock + len(r.text)))
        self._spans = {peer: sorted(v) for peer, v in spans.items()}

    def next_of(self, char: Id) -> bool:
        span = _covering(self._spans.get(char[0], []), char[1])
        return span is not None and char[1] + 1 < span[1]


def _stretches(deleted: list[Interval], lo: int, hi: int) -> list[Interval]:
    """The stably deleted stretches of clocks ``lo .. hi - 1``, from the highest down."""
    i = max(bisect.bisect_right(deleted, (lo, 1 << 62)) - 1, 0)
    out = []
    while i < len(deleted) and deleted[i][0] < hi:
        a, b = deleted[i]
        if b > lo:
            out.append((max(a, lo), min(b, hi)))
        i += 1
    return out[::-1]


def _cut(
    run: _Run, deleted: list[Interval], children: dict[Id, list[_Piece]], within: _Within
) -> None:
    """Decide what stays of ``run`` (of a chunk its writer has left, every member has seen),
    a stably deleted stretch at a time from its end. A stretch ``[a, b)`` goes when nothing
    kept names a character of it but its last, ``b - 1``; what named that (the next character
    of the run, a piece of its own from then on, and runs the server may rewrite) then names
    the stretch's *parent* instead (the character before it, or the run's origin). That keeps
    the order as long as no kept child of the parent has an id between the stretch's first
    and the greatest of the renamed: siblings are ordered by descending id, so the renamed
    land exactly where the stretch was. When a character inside the stretch is named, what
    precedes it is a stretch of its own."""
    peer, end = run.peer, run.clock + len(run.text)
    pieces: list[_Piece] = []
    top = end  # what is kept of the run so far ends here
    todo = _stretches(deleted, run.clock, end)[::-1]  # popped from the highest down
    while todo:
        a, b = todo.pop()
        named = [at for at in range(a, b - 1) if (peer, at) in children]
        if named:  # what precedes the last named character is a stretch of its own
            if named[-1] > a:
                todo.append((a, named[-1]))
            a = named[-1] + 1
        heirs = children.get((peer, b - 1), [])
        parent = (peer, a - 1) if a > run.clock else run.origin
        first = (a, peer)
        keys = [(h.clock, h.peer) for h in heirs] + ([(b, peer)] if b < top else [])
        if keys:  # something is renamed: no child of the parent may come between
            last = max(keys)
            siblings = [(s.clock, s.peer) for s in children.get(parent, [])]
            if a == run.clock and parent != START and within.next_of(parent):
                siblings.append((parent[1] + 1, parent[0]))
            if not all(h.left for h in heirs) or any(first < k < last for k in siblings):
                continue
        if b < top:  # the rest of the run after the stretch: a piece naming the parent
            piece = _Piece(peer, b, top - b, parent, True)
            pieces.append(piece)
            children.setdefault(parent, []).append(piece)
        for h in heirs:
            h.origin = parent
        if heirs:
            children.setdefault(parent, []).extend(heirs)
            del children[(peer, b - 1)]
        top = a
    if top > run.clock:
        pieces.append(_Piece(peer, run.clock, top - run.clock, run.origin, True))
    run.pieces = pieces[::-1]


def compact(
    name: str,
    ops: Iterable[CrdtOp],
    mark: Mapping[int, StampKey],
    after: WireStamp | None,
    now: int,
) -> list[CrdtOp]:
    """The rewrites that collect text ``name``'s stable tombstones (``ops``: the entries the
    server holds of it; ``mark``: the stability watermark; ``after``: the latest stamp peer 0
    wrote in the document, the rewrites' stamps go above it and above what they replace)."""
    tx, td = _parse(name, ops)
    top_tx: dict[int, int] = {}
    for c in tx:
        top_tx[c.peer] = max(top_tx.get(c.peer, -1), c.number)
    top_td: dict[int, int] = {}
    for d in td:
        top_td[d.peer] = max(top_td.get(d.peer, -1), d.number)

    spans: dict[int, list[Interval]] = {}
    for d in td:
        if _stable(d.op, mark):
            for peer, clock, n in d.rows:
                spans.setdefault(peer, []).append((clock, clock + n))
    deleted = {peer: _merged(v) for peer, v in spans.items()}

    runs: list[_Run] = []
    for c in tx:
        left = c.number < top_tx[c.peer] and _stable(c.op, mark)
        for clock, text, opeer, oclock in c.rows:
            runs.append(_Run(clock, c.peer, text, (opeer, oclock), left))
    within = _Within(runs)
    runs.sort(key=lambda r: (r.clock, r.peer), reverse=True)
    children: dict[Id, list[_Piece]] = {}
    """A character id -> the kept pieces naming it as their origin (the start's too: they are
    siblings of what names it)."""
    for run in runs:  # namers first: a character's namers have higher clocks
        if run.left:
            _cut(run, deleted.get(run.peer, []), children, within)
        if run.pieces and run.pieces[0].clock == run.clock:
            children.setdefault(run.origin, []).append(run.pieces[0])

    by_chunk: dict[tuple[int, int], list[_Run]] = {}
    for run in runs:
        by_chunk.setdefault((run.peer, run.clock // CHUNK), []).append(run)
    out: list[tuple[CrdtOp, bytes]] = []
    held: dict[int, list[Interval]] = {}
    for c in tx:
        now_rows = sorted(by_chunk.get((c.peer, c.number), []), key=lambda r: r.clock)
        rows = [
            (p.clock, r.text[p.clock - r.clock : p.clock - r.clock + p.length], *p.origin)
            for r in now_rows
            for p in r.pieces
        ]
        for clock, text, _, _ in rows:
            held.setdefault(c.peer, []).append((clock, clock + len(text)))
        if rows != c.rows:
            out.append((c.op, _JSON.encode(rows)))
    held = {peer: _merged(v) for peer, v in held.items()}
    for d in td:
        if d.number >= top_td[d.peer] or not _stable(d.op, mark):
            continue
        ranges = [r for r in d.rows if _meets(held.get(r[0], []), r[1], r[1] + r[2])]
        if ranges != d.rows:
            out.append((d.op, _JSON.encode(ranges)))
    if not out:
        return []
    top = max([stamp_key(op.stamp) for op, _ in out] + ([stamp_key(after)] if after else []))
    wall, logical = (now, 0) if now > top[0] else (top[0], top[1] + 1)
    rewrites = []
    for op, state in out:
        stamp = WireStamp(wall_time=wall, logical=logical, peer=collect.SERVER_PEER)
        rewrites.append(CrdtOp(slot_id=op.slot_id, stamp=stamp, state=state, key=op.key))
        logical += 1
    return rewrites


def signature(ops: Iterable[CrdtOp], mark: Mapping[int, StampKey]) -> int:
    """What a compaction pass of a text's entries ``ops`` depends on, in one number: the
    entries every member has seen (what can go) and each writer's highest chunk (which chunks
    are left). Cheap: stamps and keys only, no state decoded."""
    seen: list[tuple[str, StampKey | None]] = []
    for op in ops:
        seen.append((op.key or "", stamp_key(op.stamp) if _stable(op, mark) else None))
    return hash(tuple(sorted(seen, key=lambda e: e[0])))


def collected_origin(
    name: str, rows: list[te.RunRow], lookup: Callable[[str], CrdtOp | None]
) -> int | None:
    """The index of the first run of ``rows`` whose origin the server collected (its chunk
    was rewritten without it), else None."""
    chunks: dict[tuple[int, int], list[Interval] | None] = {}
    for i, (_, _, opeer, oclock) in enumerate(rows):
        if opeer == 0:
            continue
        key = (opeer, oclock // CHUNK)
        if key not in chunks:
            op = lookup(f"{name}/tx/{opeer}/{key[1]}")
            kept: list[Interval] | None = None
            if op is not None and is_rewrite(op) and isinstance(op.state, bytes):
                try:  # the server's own rewrite: only its shape is read
                    kept = [(c, c + len(t)) for c, t, _, _ in _RUNS.decode(op.state)]
                except msgspec.DecodeError:
                    kept = None
            chunks[key] = kept
        kept = chunks[key]
        if kept is not None and _covering(kept, oclock) is None:
            return i
    return None
