"""Collecting a text's tombstones: the server compacts the chunks their writers have left.

A deleted character stays as a tombstone because an edit made without seeing the deletion may
still name it as its origin. Once every member of the document has seen the deletion (the
stability watermark of ``collect``), no new edit names it; it may then go, unless a character
that stays names it (its position would be lost). Runs make that cheap to decide: a character
inside a run names the one before it, so what goes of a run is always a suffix.

A text's entries only grow while their writer writes them, so the server takes a chunk over
only once its writer has moved past it (the server holds a higher chunk of the same writer:
clocks only rise, so the writer never writes the lower one again). It writes the chunk again
itself, stamped by peer 0 (a *rewrite*): its runs without the collected characters, ``[]``
when none is left. A deletion chunk its writer has left is rewritten without the ranges whose
characters are all gone. Every replica that takes a rewrite drops what it lacks
(``TextCrdt.compact``), so each holds the same characters; a writer's op on a rewritten chunk,
or naming a collected character as an origin, is refused (``ElementCollected``).

Which characters go, for a run of a left chunk whose entry every member has seen: the longest
suffix that stably deleted ranges cover and that no kept character names. Runs are visited
from the highest clock down (a character's namers have higher clocks), so whether a run keeps
its origin named is known before the origin's own run is visited. Sans-I/O: entries in,
rewrites out; bounded by the text's size.
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
from octosync.errors import CrdtValueError
from octosync.ipc.messages import CrdtOp, WireStamp

TEXT_TAGS = ("tx", "td")
_DECODE = msgspec.json.Decoder()
_RUNS = msgspec.json.Decoder(list[tuple[int, str, int, int]])
_RANGES = msgspec.json.Decoder(list[tuple[int, int, int]])
_JSON = msgspec.json.Encoder()

Interval = tuple[int, int]
"""``[lo, hi)`` clocks of one peer."""


def is_rewrite(op: CrdtOp) -> bool:
    """``op`` is the server's compaction of a text chunk (stamped by peer 0)."""
    return op.stamp.peer == collect.SERVER_PEER


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
    """One run as the pass sees it: how much of it is kept, and its origin (which changes
    when the characters between it and its origin's origin are all collected)."""

    __slots__ = ("clock", "keep", "left", "origin", "peer", "text")

    def __init__(self, clock: int, peer: int, text: str, origin: Id, left: bool) -> None:
        self.clock, self.peer, self.text, self.origin, self.left = clock, peer, text, origin, left
        self.keep = len(text)


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


def _cut(
    run: _Run, deleted: list[Interval], children: dict[Id, list[_Run]], within: _Within
) -> None:
    """Decide how much of ``run`` (of a chunk its writer has left, every member has seen)
    stays: its longest suffix of stably deleted characters goes when nothing kept names a
    character of it, or only its last character is named, by runs the server may rewrite,
    which then name the suffix's parent instead. That keeps the order: the suffix's parent
    has no kept child ordered before it (a greater id), so its new children, whose ids are
    greater still, land where the suffix was. Otherwise what is named stays."""
    end = run.clock + len(run.text)
    gone = _covering(deleted, end - 1)
    start = end if gone is None else max(run.clock, gone[0])
    if start == end:
        return
    last = (run.peer, end - 1)
    named = [at for at in range(start, end - 1) if (run.peer, at) in children]
    heirs = children.get(last, [])
    parent = (run.peer, start - 1) if start > run.clock else run.origin
    first = (start, run.peer)
    if not named and (
        not heirs
        or (
            all(h.left for h in heirs)
            and not any((s.clock, s.peer) > first for s in children.get(parent, []))
            and not (
                start == run.clock
                and parent != START
                and within.next_of(parent)
                and (parent[1] + 1, parent[0]) > first
            )
        )
    ):
        run.keep = start - run.clock
        if heirs:
            for h in heirs:
                h.origin = parent
            children.setdefault(parent, []).extend(heirs)
            del children[last]
        return
    highest = max([at for at in (*named, end - 1) if (run.peer, at) in children], default=None)
    run.keep = (start if highest is None else highest + 1) - run.clock


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

    def stable(op: CrdtOp) -> bool:
        return is_rewrite(op) or collect.covers(mark, stamp_key(op.stamp))

    spans: dict[int, list[Interval]] = {}
    for d in td:
        if stable(d.op):
            for peer, clock, n in d.rows:
                spans.setdefault(peer, []).append((clock, clock + n))
    deleted = {peer: _merged(v) for peer, v in spans.items()}

    runs: list[_Run] = []
    for c in tx:
        left = c.number < top_tx[c.peer] and stable(c.op)
        for clock, text, opeer, oclock in c.rows:
            runs.append(_Run(clock, c.peer, text, (opeer, oclock), left))
    within = _Within(runs)
    runs.sort(key=lambda r: (r.clock, r.peer), reverse=True)
    children: dict[Id, list[_Run]] = {}
    """A character id -> the kept runs naming it as their origin."""
    for run in runs:  # namers first: a character's namers have higher clocks
        if run.left:
            _cut(run, deleted.get(run.peer, []), children, within)
        if run.keep:  # the start's children too: they are siblings of what names it
            children.setdefault(run.origin, []).append(run)

    by_chunk: dict[tuple[int, int], list[_Run]] = {}
    for run in runs:
        by_chunk.setdefault((run.peer, run.clock // CHUNK), []).append(run)
    out: list[tuple[CrdtOp, bytes]] = []
    held: dict[int, list[Interval]] = {}
    for c in tx:
        now_rows = sorted(by_chunk.get((c.peer, c.number), []), key=lambda r: r.clock)
        rows = [(r.clock, r.text[: r.keep], *r.origin) for r in now_rows if r.keep]
        for clock, text, _, _ in rows:
            held.setdefault(c.peer, []).append((clock, clock + len(text)))
        if rows != c.rows:
            out.append((c.op, _JSON.encode(rows)))
    held = {peer: _merged(v) for peer, v in held.items()}
    for d in td:
        if d.number >= top_td[d.peer] or not stable(d.op):
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
        stable = is_rewrite(op) or collect.covers(mark, stamp_key(op.stamp))
        seen.append((op.key or "", stamp_key(op.stamp) if stable else None))
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
                try:
                    rewritten = te.decode_runs(_DECODE.decode(op.state), opeer, key[1], "", True)
                    kept = [(c, c + len(t)) for c, t, _, _ in rewritten]
                except (msgspec.DecodeError, CrdtValueError):
                    kept = None
            chunks[key] = kept
        kept = chunks[key]
        if kept is not None and _covering(kept, oclock) is None:
            return i
    return None
