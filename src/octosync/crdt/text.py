"""A character CRDT for shared text (lazily-spec's Fugue/RGA free-text CRDT), kept as runs.

Every character has an id ``(peer, clock)``: ``clock`` is a Lamport counter (each insert takes
clocks above every clock its replica has seen), so a character's clock is above its left
origin's. The text is the pre-order walk of the origin tree with siblings in descending
``(clock, peer)`` order; an RGA replica gets that order by placing a character after its origin
and skipping every following character with a greater ``(clock, peer)``. Concurrent inserts at
one point therefore both stay, in the same order everywhere; a deletion only marks its
characters (a tombstone), so later inserts can still name them as origins.

Storage is by run, not by character: a *run* is consecutive clocks of one peer where each
character's origin is the one before it (what typing produces), held as one ``Span`` with its
text as a ``str``. Spans live in blocks of at most ``BLOCK`` spans, each block knowing how many
visible characters it holds, and the last edit's block is remembered, so an index lookup near
the previous edit costs a few steps, not a walk of the whole text. No span crosses a
``CHUNK``-clock boundary, so a character id is found by scanning the few spans of its chunk.

A run whose origin has not arrived is held (at most ``MAX_HELD`` characters) until it does;
a deletion of characters not yet seen is remembered and applied when they arrive. Sans-I/O:
``insert``/``delete`` return the runs and id ranges to send, ``integrate``/``remove`` apply
received ones, and every call that changes the visible text returns it as index-based edits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import msgspec

from octosync.errors import CrdtValueError, LimitExceeded

CHUNK = 64
"""Clocks per chunk: no run crosses a multiple of this (the wire's chunk entries, too)."""
BLOCK = 32
"""Spans per block before it splits in two."""
MAX_CLOCK = 4_000_000
"""The highest character clock a text may reach (its size, deleted characters included)."""
MAX_HELD = MAX_CLOCK
"""Characters held waiting for their origin, at most: a late joiner may get a whole text's
chunks in any order, so as many as a text may have."""

Id = tuple[int, int]
"""``(peer, clock)``; ``(0, 0)`` is the start of the text (no peer is 0)."""
START: Id = (0, 0)


class TextEdit(msgspec.Struct, frozen=True):
    """One change of the visible text: at ``index``, ``delete`` characters went and
    ``insert`` came (applied in order, each on the text the previous one left)."""

    index: int
    delete: int = 0
    insert: str = ""


class Run(NamedTuple):
    """Consecutive characters of one peer: the first's origin is ``origin``, each next one's
    the character before it. Clocks ``clock .. clock + len(text) - 1``, within one chunk.
    (A tuple: a late joiner makes thousands of these.)"""

    peer: int
    clock: int
    text: str
    origin: Id


class Span:
    __slots__ = ("block", "clock", "dead", "peer", "text")

    def __init__(self, peer: int, clock: int, text: str, dead: bool, block: Block) -> None:
        self.peer = peer
        self.clock = clock
        self.text = text
        self.dead = dead
        self.block = block


class Block:
    __slots__ = ("size", "spans")

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.size = 0
        """Visible characters in ``spans``."""


def _cut(clock: int, text: str, dead: int) -> list[tuple[int, str, bool]]:
    """``text`` (clocks from ``clock``) as ``(clock, text, dead)`` pieces: bit ``i`` of
    ``dead`` set means character ``i`` is deleted."""
    out: list[tuple[int, str, bool]] = []
    start, n = 0, len(text)
    while start < n:
        is_dead = (dead >> start) & 1
        rest = (~dead if is_dead else dead) >> start  # bits where the state changes
        step = (rest & -rest).bit_length() - 1 if rest else n - start
        step = min(step, n - start)
        out.append((clock + start, text[start : start + step], bool(is_dead)))
        start += step
    return out


class TextCrdt:
    """One replica of a shared text (``peer`` mints its character ids)."""

    def __init__(self, peer: int, block: int = BLOCK) -> None:
        self.peer = peer
        self.block = block
        """Spans a block holds before it splits (half of its most)."""
        self.clock = 0
        """The highest clock seen (local or received)."""
        self._blocks = [Block()]
        self._len = 0
        self._where: dict[Id, list[Span]] = {}
        """``(peer, clock // CHUNK)`` -> the spans whose clocks lie in that chunk."""
        self._held: dict[Id, list[Run]] = {}
        """Runs waiting for their origin, by the origin's ``(peer, clock // CHUNK)``."""
        self._held_chars = 0
        self._tombs: dict[Id, int] = {}
        """Deletions that came before (some of) their characters, by ``(peer, chunk)``: bit
        ``i`` set deletes the chunk's ``i``-th clock as it arrives."""
        self._closed: dict[Id, int] = {}
        """``(peer, chunk)`` the server compacted -> the bits of the clocks it kept: a
        deletion of any other character of it is of a collected one, never to come again."""
        self._cb = 0
        self._cs = 0
        """The last block an index lookup ended in, and its first visible index."""
        self._cache: str | None = ""
        self._placed = 0
        """The block the last received run went in (its successor's origin is often there)."""
        self.events = True
        """Whether received edits are reported (finding an edit's index costs a walk of the
        blocks before it; a text nobody watches skips it)."""

    # --- reading ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    def __str__(self) -> str:
        return self.to_string()

    def to_string(self) -> str:
        if self._cache is None:
            self._cache = "".join(s.text for b in self._blocks for s in b.spans if not s.dead)
        return self._cache

    @property
    def held(self) -> int:
        """Characters received whose origin has not arrived yet."""
        return self._held_chars

    def spans(self) -> int:
        """Spans held (deleted ones included): what the text costs to keep."""
        return sum(len(b.spans) for b in self._blocks)

    def tombstones(self) -> int:
        """Deleted characters still held."""
        return sum(len(s.text) for b in self._blocks for s in b.spans if s.dead)

    def knows(self, peer: int, clock: int) -> bool:
        return self._find(peer, clock) is not None

    # --- local edits --------------------------------------------------------------------------

    def insert(self, index: int, text: str) -> list[Run]:
        """Insert ``text`` before the character at ``index``; returns the runs to send."""
        if type(index) is not int or not 0 <= index <= self._len:
            raise CrdtValueError(f"insert index {index!r} is outside 0..{self._len}", path="index")
        if not isinstance(text, str):
            raise CrdtValueError("a text insert takes a str", path="text")
        if not text:
            return []
        if self.clock + len(text) > MAX_CLOCK:
            raise LimitExceeded(
                f"the text would pass {MAX_CLOCK} characters written (deleted ones count)",
                path="text",
            )
        self._cache = None
        if index == 0:
            origin, bi, si = START, 0, 0
            self._cb, self._cs = 0, 0
        else:
            bi, si, off = self._locate(index - 1)
            span = self._blocks[bi].spans[si]
            origin = (span.peer, span.clock + off)
            if off < len(span.text) - 1:
                self._split(span, off + 1)
            bi = self._block_index(span.block)
            si = span.block.spans.index(span) + 1
        runs: list[Run] = []
        clock = self.clock + 1
        self.clock += len(text)
        done = 0
        while done < len(text):
            room = CHUNK - clock % CHUNK
            piece = text[done : done + room]
            runs.append(Run(self.peer, clock, piece, origin))
            bi, si = self._place_local(bi, si, piece, clock, origin)
            origin = (self.peer, clock + len(piece) - 1)
            clock += len(piece)
            done += len(piece)
        self._len += len(text)
        return runs

    def _place_local(self, bi: int, si: int, piece: str, clock: int, origin: Id) -> tuple[int, int]:
        """Put a fresh run at ``(bi, si)`` (extending the span before it when it continues it);
        returns the position just after it."""
        block = self._blocks[bi]
        if si > 0:
            prev = block.spans[si - 1]
            if (
                prev.peer == self.peer
                and not prev.dead
                and prev.clock + len(prev.text) == clock
                and (prev.peer, clock - 1) == origin
                and clock % CHUNK != 0
            ):
                prev.text += piece
                block.size += len(piece)
                return bi, si
        span = Span(self.peer, clock, piece, False, block)
        block.spans.insert(si, span)
        block.size += len(piece)
        self._where.setdefault((self.peer, clock // CHUNK), []).append(span)
        return self._after_insert(bi, si + 1)

    def delete(self, index: int, count: int = 1) -> list[tuple[int, int, int]]:
        """Delete ``count`` characters from ``index``; returns the ``(peer, clock, length)`` id
        ranges to send."""
        if type(index) is not int or type(count) is not int or count < 0:
            raise CrdtValueError("a text delete takes an index and a count >= 0", path="count")
        if not index >= 0 or index + count > self._len:
            raise CrdtValueError(
                f"delete of {count} at {index} is outside the text's {self._len} characters",
                path="index",
            )
        if count == 0:
            return []
        self._cache = None
        out: list[tuple[int, int, int]] = []
        bi, si, off = self._locate(index)
        span: Span | None = self._blocks[bi].spans[si]
        assert span is not None
        if off:
            self._split(span, off)
            span = self._next(span)
        left = count
        while left and span is not None:
            if span.dead:
                span = self._next(span)
                continue
            if len(span.text) > left:
                self._split(span, left)
            n = len(span.text)
            span.dead = True
            span.block.size -= n
            self._len -= n
            left -= n
            last = out[-1] if out else None
            if last and last[0] == span.peer and last[1] == span.clock + n:
                out[-1] = (span.peer, span.clock, last[2] + n)
            elif last and last[0] == span.peer and last[1] + last[2] == span.clock:
                out[-1] = (span.peer, last[1], last[2] + n)
            else:
                out.append((span.peer, span.clock, n))
            span = self._next(span)
        return out

    # --- received edits -----------------------------------------------------------------------

    def integrate(self, run: Run) -> list[TextEdit]:
        """Apply a received run (or the part of it not yet known); a run whose origin is
        unknown is held until the origin arrives."""
        edits: list[TextEdit] = []
        self._integrate_all([run], edits)
        return edits

    def integrate_sorted(self, rows: list[tuple[int, int, str, int, int]]) -> list[TextEdit]:
        """Apply received runs given as ``(clock, peer, text, origin peer, origin clock)`` rows
        in ``(clock, peer)`` order (plain tuples: a late joiner passes thousands)."""
        edits: list[TextEdit] = []
        for clock, peer, text, opeer, oclock in rows:
            self._integrate_all([(peer, clock, text, (opeer, oclock))], edits)
        return edits

    def _integrate_all(self, todo: list[tuple[int, int, str, Id]], edits: list[TextEdit]) -> None:
        while todo:
            r = todo.pop()
            placed = self._integrate_one(r, edits)
            if placed is None:
                continue
            peer, first, last = placed
            for chunk in range(first // CHUNK, last // CHUNK + 1):
                waiting = self._held.get((peer, chunk))
                if not waiting:
                    continue
                ready = [w for w in waiting if first <= w.origin[1] <= last]
                if ready:
                    self._held[(peer, chunk)] = [w for w in waiting if w not in ready]
                    self._held_chars -= sum(len(w.text) for w in ready)
                    todo.extend(ready)

    def _integrate_one(
        self, run: tuple[int, int, str, Id], edits: list[TextEdit]
    ) -> tuple[int, int, int] | None:
        peer, clock, text, origin = run
        end = clock + len(text)
        # skip what is already known (a chunk only ever grows, so that is a prefix)
        while clock < end:
            span = self._find(peer, clock)
            if span is None:
                break
            known_to = min(end, span.clock + len(span.text))
            text = text[known_to - clock :]
            origin = (peer, known_to - 1)
            clock = known_to
        if clock >= end:
            return None
        if origin != START and self._find(*origin) is None:
            if self._held_chars + len(text) > MAX_HELD:
                raise LimitExceeded(
                    f"over {MAX_HELD} characters wait for origins that never came", path="held"
                )
            key = (origin[0], origin[1] // CHUNK)
            self._held.setdefault(key, []).append(Run(peer, clock, text, origin))
            self._held_chars += len(text)
            return None
        self._cache = None
        if clock + len(text) - 1 > self.clock:
            self.clock = clock + len(text) - 1
        if origin == START:
            bi, si = 0, 0
        else:
            o = self._find(*origin)
            assert o is not None
            off = origin[1] - o.clock
            if off < len(o.text) - 1:
                self._split(o, off + 1)
            bi = self._block_index(o.block)
            si = o.block.spans.index(o) + 1
        key = (clock, peer)
        while True:  # RGA: skip every following character with a greater (clock, peer)
            block = self._blocks[bi]
            if si >= len(block.spans):
                if bi + 1 >= len(self._blocks):
                    break
                bi, si = bi + 1, 0
                continue
            nxt = block.spans[si]
            if (nxt.clock, nxt.peer) > key:
                si += 1
                continue
            break
        block = self._blocks[bi]
        where = self._where.setdefault((peer, clock // CHUNK), [])
        tombs = self._tombs.get((peer, clock // CHUNK), 0) >> (clock % CHUNK)
        tombs &= (1 << len(text)) - 1
        if tombs:  # deletions that came before their characters: placed dead at once
            pieces = _cut(clock, text, tombs)
            spans = [Span(peer, c, t, dead, block) for c, t, dead in pieces]
            alive = "".join(t for _, t, dead in pieces if not dead)
        else:
            spans = [Span(peer, clock, text, False, block)]
            alive = text
        block.spans[si:si] = spans
        where.extend(spans)
        block.size += len(alive)
        self._len += len(alive)
        if self.events and alive:
            edits.append(TextEdit(self._index_of(bi, si), 0, alive))
        self._placed = self._after_insert(bi, si + len(spans))[0]
        self._cb, self._cs = 0, 0
        return peer, clock, clock + len(text) - 1

    def remove(self, ranges: Iterable[tuple[int, int, int]]) -> list[TextEdit]:
        """Apply received deletions of ``(peer, clock, length)`` id ranges (characters not
        seen yet are deleted when they arrive)."""
        edits: list[TextEdit] = []
        for peer, clock, length in ranges:
            end = clock + length
            while clock < end:
                upto = min(end, (clock // CHUNK + 1) * CHUNK)
                if self._kill(peer, clock, upto - clock, edits) < upto - clock:
                    self._tomb(peer, clock, upto - clock)
                clock = upto
        return edits

    def _kill(self, peer: int, clock: int, length: int, edits: list[TextEdit]) -> int:
        """Mark the known characters of one chunk's id range deleted; returns how many of the
        range are known (deleted before or now)."""
        known = 0
        for span in list(self._where.get((peer, clock // CHUNK), ())):
            lo = max(clock, span.clock)
            hi = min(clock + length, span.clock + len(span.text))
            if lo >= hi:
                continue
            known += hi - lo
            if span.dead:
                continue
            if lo > span.clock:
                self._split(span, lo - span.clock)
                span = self._find(peer, lo)  # type: ignore[assignment]
            if span.clock + len(span.text) > hi:
                self._split(span, hi - span.clock)
            block = span.block
            n = len(span.text)
            if self.events:
                bi = self._blocks.index(block)
                edits.append(TextEdit(self._index_of(bi, block.spans.index(span)), n, ""))
            span.dead = True
            block.size -= n
            self._len -= n
            self._cache = None
            self._cb, self._cs = 0, 0
        return known

    def compact(self, peer: int, chunk: int, kept: Iterable[tuple[int, int]]) -> list[TextEdit]:
        """The server collected chunk ``(peer, chunk)``'s stable tombstones: drop every
        character of it held here outside ``kept`` (``(clock, length)`` runs; what is gone is
        deleted, and no kept character names it as its origin, so the order of the rest does
        not change). A visible one (a replica that had not seen its deletion) is reported as
        deleted. The chunk is closed: its writer never writes it again."""
        key = (peer, chunk)
        keep = sorted(kept)
        mask = 0
        for lo, n in keep:
            mask |= ((1 << n) - 1) << (lo % CHUNK)
        self._closed[key] = mask
        tombs = self._tombs.pop(key, 0) & mask  # kept characters may still be on their way
        if tombs:
            self._tombs[key] = tombs
        edits: list[TextEdit] = []
        for span in list(self._where.get(key, ())):
            start, end = span.clock, span.clock + len(span.text)
            cut = start  # drop [cut, next kept start) pieces, left to right
            for lo, n in [*keep, (end, 0)]:
                hi = lo + n
                if hi <= cut:
                    continue
                gap_end = min(lo, end)
                if gap_end > cut:
                    self._drop(peer, cut, gap_end - cut, edits)
                cut = max(cut, hi)
                if cut >= end:
                    break
        return edits

    def forget_held(self, chunks: set[Id]) -> None:
        """Drop the runs of the chunks ``(peer, chunk)`` still waiting for their origin: the
        server's rewrites of the chunks are integrated instead (their runs are what stays, and
        a run whose origin was collected names the origin it has now). One pass over what is
        held, whatever the number of chunks."""
        if not self._held or not chunks:
            return
        for key, waiting in list(self._held.items()):
            stay = [r for r in waiting if (r.peer, r.clock // CHUNK) not in chunks]
            if len(stay) != len(waiting):
                self._held_chars -= sum(len(r.text) for r in waiting) - sum(
                    len(r.text) for r in stay
                )
                if stay:
                    self._held[key] = stay
                else:
                    del self._held[key]

    def _drop(self, peer: int, clock: int, length: int, edits: list[TextEdit]) -> None:
        """Take characters ``clock .. clock + length - 1`` of ``peer`` (all in one span) out."""
        found = self._find(peer, clock)
        assert found is not None
        if clock > found.clock:
            self._split(found, clock - found.clock)
            found = self._find(peer, clock)
            assert found is not None
        span = found
        if span.clock + len(span.text) > clock + length:
            self._split(span, length)
        block = span.block
        bi = self._block_index(block)
        si = block.spans.index(span)
        if not span.dead:
            if self.events:
                edits.append(TextEdit(self._index_of(bi, si), len(span.text), ""))
            block.size -= len(span.text)
            self._len -= len(span.text)
        del block.spans[si]
        where = self._where[(peer, clock // CHUNK)]
        where.remove(span)
        if not where:
            del self._where[(peer, clock // CHUNK)]
        if not block.spans and len(self._blocks) > 1:
            del self._blocks[bi]
        self._cache = None
        self._cb, self._cs, self._placed = 0, 0, 0

    def _tomb(self, peer: int, clock: int, length: int) -> None:
        key = (peer, clock // CHUNK)
        bits = ((1 << length) - 1) << (clock % CHUNK)
        bits &= self._closed.get(key, -1)  # of a compacted chunk, only what it kept may come
        if bits:
            self._tombs[key] = self._tombs.get(key, 0) | bits

    # --- structure ----------------------------------------------------------------------------

    def _find(self, peer: int, clock: int) -> Span | None:
        for span in self._where.get((peer, clock // CHUNK), ()):
            if span.clock <= clock < span.clock + len(span.text):
                return span
        return None

    def _locate(self, index: int) -> tuple[int, int, int]:
        """The visible character at ``index``: ``(block, span, offset)``."""
        blocks = self._blocks
        bi, start = self._cb, self._cs
        if bi >= len(blocks):
            bi, start = 0, 0
        while index < start:
            bi -= 1
            start -= blocks[bi].size
        while index >= start + blocks[bi].size:
            start += blocks[bi].size
            bi += 1
        self._cb, self._cs = bi, start
        at = index - start
        for si, span in enumerate(blocks[bi].spans):
            if span.dead:
                continue
            n = len(span.text)
            if at < n:
                return bi, si, at
            at -= n
        raise AssertionError("block sizes disagree with their spans")

    def _index_of(self, bi: int, si: int) -> int:
        """The visible index of the span at ``(bi, si)``."""
        blocks = self._blocks
        index = sum(blocks[i].size for i in range(bi))
        for span in blocks[bi].spans[:si]:
            if not span.dead:
                index += len(span.text)
        return index

    def _split(self, span: Span, at: int) -> None:
        """Cut ``span`` in two at offset ``at`` (0 < at < len)."""
        block = span.block
        tail = Span(span.peer, span.clock + at, span.text[at:], span.dead, block)
        span.text = span.text[:at]
        si = block.spans.index(span)
        block.spans.insert(si + 1, tail)
        self._where[(span.peer, span.clock // CHUNK)].append(tail)
        self._after_insert(self._block_index(block), si + 2)

    def _block_index(self, block: Block) -> int:
        blocks = self._blocks
        for hint in (self._cb, self._placed, self._placed + 1, self._placed - 1):
            if 0 <= hint < len(blocks) and blocks[hint] is block:
                return hint
        return blocks.index(block)

    def _next(self, span: Span) -> Span | None:
        """The span after ``span`` in text order."""
        block = span.block
        si = block.spans.index(span) + 1
        if si < len(block.spans):
            return block.spans[si]
        bi = self._block_index(block) + 1
        return self._blocks[bi].spans[0] if bi < len(self._blocks) else None

    def _after_insert(self, bi: int, si: int) -> tuple[int, int]:
        """Split block ``bi`` if it grew too long; returns where position ``(bi, si)`` is now."""
        block = self._blocks[bi]
        if len(block.spans) <= self.block * 2:
            return bi, si
        half = len(block.spans) // 2
        new = Block()
        new.spans = block.spans[half:]
        del block.spans[half:]
        for s in new.spans:
            s.block = new
            if not s.dead:
                new.size += len(s.text)
        block.size -= new.size
        self._blocks.insert(bi + 1, new)
        if self._cb > bi:
            self._cb += 1
        if si >= half:
            return bi + 1, si - half
        return bi, si
