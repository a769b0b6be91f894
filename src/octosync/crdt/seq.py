"""The move-aware sequence: an ordered list whose elements move without duplicating.

lazily-spec's "Move-aware sequence order": each element has an id, a *position*, a *value* and
a *removed* flag, each its own last-writer-wins register. The position is a fractional index (a
list of digits, compared lexicographically) with the peer that wrote it as the tiebreak, so the
order of any set of elements is a total order every replica computes alike. Inserting picks a
position between the neighbours; a move is one reassignment of the position register (never a delete
and a re-insert), so two concurrent moves of one element end at the later one, with one copy;
a move and a value edit touch different registers and both apply. Removal sets the removed
register (a tombstone): an edit or move made at the same time does not bring the element back.

An element's id is minted by the replica that inserts it, under its own peer
(``PEER.WALL.LOGICAL``: the insert's own stamp, unique because a replica's stamps only grow),
so no two replicas mint one id and a server can tell who may create an element.

Sans-I/O: positions, ids, the order and the change between two orders, no clock and no state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from octosync.bounds import MAX_SAFE_INTEGER
from octosync.errors import CrdtValueError, LimitExceeded
from octosync.ipc.messages import WireStamp

Position = tuple[int, ...]

BASE = 2**32
"""Each digit of a position is in ``0 .. BASE - 1``."""
STEP = 2**16
"""The widest gap an insert beside one bounded neighbour takes: appending (or prepending) over
and over uses one digit for ``BASE / STEP`` elements instead of halving the gap each time."""
MAX_DIGITS = 32
"""The longest position accepted or made: 32 digits hold over 2**20 inserts into one gap,
and bound what one entry costs a reader to compare."""


def check_position(value: Any, path: str) -> Position:
    """A position as JSON holds it: 1 to ``MAX_DIGITS`` integer digits in ``0 .. BASE - 1``,
    the last one above 0 (so there is always room before it)."""
    if not (
        isinstance(value, list)
        and 0 < len(value) <= MAX_DIGITS
        and all(type(d) is int and 0 <= d < BASE for d in value)
        and value[-1] > 0
    ):
        raise CrdtValueError(
            f"a list position holds 1 to {MAX_DIGITS} integers from 0 to 2**32 - 1, the last "
            f"above 0, not {_short(value)}",
            path=path,
        )
    return tuple(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def between(lo: Sequence[int] | None, hi: Sequence[int] | None) -> Position:
    """A position after ``lo`` and before ``hi`` (None: the start, or the end, of the list).

    Digit by digit: where the neighbours leave a gap of two or more, take one digit inside it
    (the middle when both sides are open, else ``STEP`` from the bounded side or half the gap);
    where they do not, copy ``lo``'s digit and go one deeper."""
    lo = tuple(lo or ())
    hi_t = None if hi is None else tuple(hi)
    if hi_t is not None and not lo < hi_t:
        raise CrdtValueError(f"no position between {lo} and {hi_t}", path="position")
    out: list[int] = []
    i = 0
    found = False
    while len(out) < MAX_DIGITS:
        lo_open = i >= len(lo)
        low = 0 if lo_open else lo[i]
        high = BASE if hi_t is None else (hi_t[i] if i < len(hi_t) else 0)
        gap = high - low
        if gap >= 2:
            step = min(gap // 2, STEP)
            if lo_open and hi_t is None:
                digit = low + gap // 2
            elif hi_t is None:
                digit = low + step
            elif lo_open:
                digit = high - step
            else:
                digit = low + step
            out.append(digit)
            found = True
            break
        out.append(low)
        if gap == 1:
            hi_t = None  # anything that starts with ``out`` is below ``hi`` now
        i += 1
    if not found:
        raise LimitExceeded(
            f"no room for a position of at most {MAX_DIGITS} digits between {lo} and {hi}",
            path="position",
        )
    return tuple(out)


def peer_digits(peer: int) -> Position:
    """A peer as the two digits that end every position it writes (the second odd, so never
    0): positions written by two peers never tie, even for concurrent inserts into one gap."""
    return (peer >> 31, ((peer & (2**31 - 1)) << 1) | 1)


def place(lo: Sequence[int] | None, hi: Sequence[int] | None, peer: int) -> Position:
    """The position ``peer`` gives an element between ``lo`` and ``hi``: ``between`` them,
    then the peer's digits (still between, since ``between`` never ends on a prefix of
    ``hi``)."""
    position = between(lo, hi) + peer_digits(peer)
    if len(position) > MAX_DIGITS:
        raise LimitExceeded(
            f"no room for a position of at most {MAX_DIGITS} digits between {lo} and {hi}",
            path="position",
        )
    return position


# --- ids ------------------------------------------------------------------------------------


def mint_id(stamp: WireStamp) -> str:
    """The id of an element inserted with ``stamp``: ``PEER.WALL.LOGICAL``."""
    return f"{stamp.peer}.{stamp.wall_time}.{stamp.logical}"


def _count(segment: str, least: int) -> int | None:
    if not (0 < len(segment) <= 16 and segment.isascii() and segment.isdigit()):
        return None
    if len(segment) > 1 and segment.startswith("0"):
        return None
    n = int(segment)
    return n if least <= n <= MAX_SAFE_INTEGER else None


def id_peer(element: str) -> int | None:
    """The peer that minted ``element`` (canonical ``PEER.WALL.LOGICAL``), else None."""
    parts = element.split(".")
    if len(parts) != 3:
        return None
    peer = _count(parts[0], 1)
    if peer is None or _count(parts[1], 0) is None or _count(parts[2], 0) is None:
        return None
    return peer


# --- the order ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Element:
    """One live element: its id, position (with the peer that wrote it) and value."""

    id: str
    position: Position
    peer: int
    value: Any

    @property
    def order(self) -> tuple[Position, int, str]:
        return (self.position, self.peer, self.id)


def order(
    positions: Mapping[str, tuple[Position, int]], values: Mapping[str, Sequence[Any]]
) -> list[Element]:
    """The live elements in list order, by ``(position, peer, id)``: those with a position and
    a value (``values`` holds ``[value]`` for each element that has one and is not removed)."""
    live = [
        Element(eid, pos, peer, held[0])
        for eid, (pos, peer) in positions.items()
        if len(held := values.get(eid, ())) == 1
    ]
    live.sort(key=lambda e: e.order)
    return live


# --- what changed ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListChange:
    """How a list went from one order to the next. Indexes of ``deleted`` and moves' ``from``
    are in the old list; of ``inserted``, moves' ``to`` and ``set`` in the new one."""

    inserted: tuple[tuple[int, Any], ...] = ()
    deleted: tuple[tuple[int, Any], ...] = ()
    moved: tuple[tuple[int, int, Any], ...] = ()
    set: tuple[tuple[int, Any], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.inserted or self.deleted or self.moved or self.set)

    def as_dict(self) -> dict[str, list[dict[str, Any]]]:
        """The change as both clients report it (JSON-shaped)."""
        return {
            "inserted": [{"index": i, "value": v} for i, v in self.inserted],
            "deleted": [{"index": i, "value": v} for i, v in self.deleted],
            "moved": [{"from": a, "to": b, "value": v} for a, b, v in self.moved],
            "set": [{"index": i, "value": v} for i, v in self.set],
        }


def _stayed(seq: list[int]) -> set[int] | range:
    """``_kept_in_order``, with the answers for one element moved found by sorting (in C):
    all stayed; all but the first (it moved back); all but the last (it moved forward). These
    are the run the patience sort finds too, so both clients report the same moves."""
    if seq == sorted(seq):
        return range(len(seq))
    if seq[1:] == sorted(seq[1:]):
        return range(1, len(seq))
    if seq[:-1] == sorted(seq[:-1]):
        return range(len(seq) - 1)
    return _kept_in_order(seq)


def _kept_in_order(seq: Sequence[int]) -> set[int]:
    """Indexes into ``seq`` of one longest increasing run (patience sorting): the elements that
    stayed in place while the others moved around them."""
    tails: list[int] = []
    prev = [-1] * len(seq)
    for i, x in enumerate(seq):
        lo, hi = 0, len(tails)
        while lo < hi:
            mid = (lo + hi) // 2
            if seq[tails[mid]] < x:
                lo = mid + 1
            else:
                hi = mid
        prev[i] = tails[lo - 1] if lo else -1
        if lo == len(tails):
            tails.append(i)
        else:
            tails[lo] = i
    kept: set[int] = set()
    k = tails[-1] if tails else -1
    while k >= 0:
        kept.add(k)
        k = prev[k]
    return kept


def _common_run(equal: Callable[[int], bool], most: int) -> int:
    """The greatest ``k`` up to ``most`` with ``equal(k)`` (which holds up to some ``k`` and
    then never again): a binary search of slice comparisons, which run in C."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if equal(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def diff(old: Iterable[tuple[str, Any]], new: Iterable[tuple[str, Any]]) -> ListChange:
    """What moved between two orders of ``(id, value)``: fewest moves (the elements outside a
    longest run that kept its relative order), then inserts, deletes and value changes. The
    elements both orders start and end with, unchanged, are found by comparing slices (an edit
    of one element leaves only the elements between its old and new place to look at)."""
    before, after = list(old), list(new)
    n = min(len(before), len(after))
    head = _common_run(lambda k: before[:k] == after[:k], n)
    tail = _common_run(lambda k: before[len(before) - k :] == after[len(after) - k :], n - head)
    old_at = {eid: i for i, (eid, _) in enumerate(before[head : len(before) - tail], head)}
    new_at = {eid: i for i, (eid, _) in enumerate(after[head : len(after) - tail], head)}
    common = [eid for eid in old_at if eid in new_at]
    kept = {common[i] for i in _stayed([new_at[e] for e in common])}
    pairs = sorted(((old_at[e], new_at[e]) for e in common), key=lambda p: p[1])
    return ListChange(
        inserted=tuple((i, after[i][1]) for e, i in new_at.items() if e not in old_at),
        deleted=tuple((i, before[i][1]) for e, i in old_at.items() if e not in new_at),
        moved=tuple((old_at[e], new_at[e], after[new_at[e]][1]) for e in common if e not in kept),
        set=tuple(
            (j, after[j][1])
            for i, j in pairs
            if before[i][1] is not after[j][1] and before[i][1] != after[j][1]
        ),
    )
