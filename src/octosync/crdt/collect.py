"""Collecting a list's tombstones once they are causally stable.

A removed list element keeps its entries (``lp``, ``lv``, ``ld``) so that an edit made without
seeing the removal cannot bring it back. Once every writer of the document has seen the
removal, no such edit can still come, and the element may go. The server decides when: it
knows what each writer has seen (the frontiers writers report) and publishes the *stability
watermark*, per peer the lowest stamp every member has seen from it (never above what the
server itself holds from that peer), as the entry ``NAME/gc``. Every replica that applies that
entry drops the same elements, so collection is deterministic: an element goes when

- its removal entry holds ``true`` and is stamped at or below the watermark for its writer, and
- its id's mint stamp (``PEER.WALL.LOGICAL``) is at or below the watermark for ``PEER``.

The second condition is what makes a late op detectable: an element entry whose element the
server no longer holds, with a mint stamp at or below the watermark, names a collected element
(every member had seen its creation, so a live one would be held), and is refused
(``ElementCollected``) rather than recreating half an element.

Sans-I/O: entries in, decisions out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from octosync.crdt.plane import PlaneReplica, StampKey, stamp_key
from octosync.errors import CrdtValueError
from octosync.ipc.messages import CrdtOp, WireStamp

GC_TAG = "gc"
SERVER_PEER = 0
"""The peer the server stamps its ``NAME/gc`` entries with (no client has it: ids are 1..2**53)."""
MAX_WATERMARK_PEERS = 10_000
"""Peers one watermark names at most (a document with more writers collects nothing more)."""
ELEMENT_TAGS = ("lp", "lv", "ld")

Watermark = dict[int, StampKey]
_DECODE = msgspec.json.Decoder()


def encode(mark: Mapping[int, StampKey]) -> bytes:
    """A watermark as the ``NAME/gc`` entry holds it: ``[[peer, wall, logical], ...]``."""
    return msgspec.json.encode([[p, w, lg] for p, (w, lg, _) in sorted(mark.items())])


def decode(state: Any, path: str = "state") -> Watermark:
    """The watermark a ``NAME/gc`` entry holds (``CrdtValueError`` at ``path`` if malformed)."""
    try:
        value = _DECODE.decode(state) if isinstance(state, bytes) else state
    except msgspec.DecodeError as exc:
        raise CrdtValueError(f"a gc entry is not JSON: {exc}", path=path) from exc
    if not isinstance(value, list) or len(value) > MAX_WATERMARK_PEERS:
        raise CrdtValueError(
            f"a gc entry holds at most {MAX_WATERMARK_PEERS} [peer, wall, logical]", path=path
        )
    out: Watermark = {}
    for item in value:
        if not (
            isinstance(item, list)
            and len(item) == 3
            and all(type(x) is int and x >= 0 for x in item)
        ):
            raise CrdtValueError("a gc entry holds [peer, wall, logical] integers", path=path)
        out[item[0]] = (item[1], item[2], item[0])
    return out


def covers(mark: Mapping[int, StampKey], stamp: StampKey) -> bool:
    """Every member had seen ``stamp`` (its writer's watermark is at or past it)."""
    seen = mark.get(stamp[2])
    return seen is not None and stamp <= seen


def mint_stamp(element: str) -> StampKey | None:
    """The stamp an element id was minted with (``PEER.WALL.LOGICAL``), else None."""
    parts = element.split(".")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return (int(parts[1]), int(parts[2]), int(parts[0]))


def watermark(
    frontiers: Iterable[Mapping[int, StampKey]], held: Mapping[int, StampKey]
) -> Watermark:
    """The pointwise minimum of the members' frontiers, never above ``held`` (the server's
    own frontier: a member's frontier may name its own ops the server has not got yet). A
    peer some member has seen nothing from is left out (nothing of it is stable)."""
    out: Watermark = dict(held)
    out.pop(SERVER_PEER, None)
    for frontier in frontiers:
        for peer in list(out):
            seen = frontier.get(peer)
            if seen is None:
                del out[peer]
            elif seen < out[peer]:
                out[peer] = seen
    return out


def raised(old: Mapping[int, StampKey], new: Mapping[int, StampKey]) -> Watermark:
    """``old`` raised pointwise by ``new`` (a published watermark never goes down: an element
    it collected stays collected, and late ops naming it stay refused)."""
    out = dict(old)
    for peer, seen in new.items():
        if peer not in out or seen > out[peer]:
            out[peer] = seen
    return out


def collectable(removals: Iterable[tuple[str, CrdtOp]], mark: Mapping[int, StampKey]) -> list[str]:
    """The elements whose removal ``(element, ld op)`` is stable under ``mark``."""
    out = []
    for element, op in removals:
        minted = mint_stamp(element)
        if (
            op.state == b"true"
            and minted is not None
            and covers(mark, minted)
            and covers(mark, stamp_key(op.stamp))
        ):
            out.append(element)
    return out


def gc_op(
    node: int, name: str, mark: Mapping[int, StampKey], after: WireStamp | None, now: int
) -> CrdtOp:
    """The server's ``NAME/gc`` entry publishing ``mark``, stamped above ``after``."""
    if after is None or now > after.wall_time:
        stamp = WireStamp(wall_time=now, logical=0, peer=SERVER_PEER)
    else:
        stamp = WireStamp(wall_time=after.wall_time, logical=after.logical + 1, peer=SERVER_PEER)
    return CrdtOp(slot_id=node, stamp=stamp, state=encode(mark), key=f"{name}/{GC_TAG}")


def purge(replica: PlaneReplica, gc: CrdtOp) -> list[CrdtOp]:
    """Drop from ``replica`` the entries of list elements that ``gc`` (a ``NAME/gc`` entry)
    makes collectable; returns the dropped entries. Bounded by the replica's size."""
    name = (gc.key or "").split("/", 1)[0]
    try:
        mark = decode(gc.state)
    except CrdtValueError:
        return []
    prefix = f"{name}/ld/"
    removals = [
        (op.key[len(prefix) :], op)
        for op in replica.held()
        if op.slot_id == gc.slot_id and op.key is not None and op.key.startswith(prefix)
    ]
    dropped = []
    for element in collectable(removals, mark):
        for tag in ELEMENT_TAGS:
            op = replica.drop(gc.slot_id, f"{name}/{tag}/{element}")
            if op is not None:
                dropped.append(op)
    return dropped
