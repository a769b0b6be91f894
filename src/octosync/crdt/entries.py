"""The entry layout of a shared document, and what a writer may put in each entry.

Every value of a shared document is a set of plane entries keyed ``NAME/KIND/...`` under node
``node_of(NAME)`` (``crdt/shared.py`` reads and writes them). The plane itself only keeps the
last writer's entry, so the rules that make a kind a CRDT are the writer's to keep: a counter
entry belongs to the peer it names and its tallies never go down, or one writer could erase
another's increments. A server checks every op a writer sends against this table before the
frame is journaled (``hub.crdt_streams``), and refuses the whole frame on the first op that
breaks it, so nothing of a refused frame is applied.

An entry is checked only when it claims this layout: a key whose second segment names a kind
here, under the node id ``node_of`` gives its first. Other entries (no key, one segment, an
unknown kind, another node) are opaque plane entries, last writer wins, as any lazily plane
peer writes them; a document's readers never read them as its values.

Each kind declares how many key segments follow the kind, which of them (if any) names the
entry's owner, how its JSON state is decoded, and (for a kind whose state only grows) whether
a replacement may go down. Sans-I/O: the caller passes the entry it holds now.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from octosync.bounds import MAX_SAFE_INTEGER
from octosync.crdt import collect, text_collect
from octosync.crdt import text_entries as te
from octosync.crdt.plane import PlaneReplica, wins
from octosync.crdt.seq import check_position, id_peer
from octosync.errors import CrdtValueError, ElementCollected, Forbidden
from octosync.ipc.messages import CrdtOp

PEER_SEGMENT_MAX = len(str(MAX_SAFE_INTEGER))
FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
_DECODE = msgspec.json.Decoder()


def node_of(name: str) -> int:
    """The node id every replica gives to ``name``'s entries: the low 48 bits of FNV-1a-64
    over its UTF-8 bytes (plain arithmetic, so a browser computes it the same way)."""
    h = FNV64_OFFSET
    for byte in name.encode():
        h = ((h ^ byte) * FNV64_PRIME) & 0xFFFF_FFFF_FFFF_FFFF
    return h & 0xFFFF_FFFF_FFFF


def _json(state: bytes, path: str) -> Any:
    try:
        return _DECODE.decode(state)
    except msgspec.DecodeError as exc:
        raise CrdtValueError(f"entry state is not JSON: {exc}", path=path) from exc


def _tally(n: object) -> bool:
    return type(n) is int and 0 <= n <= MAX_SAFE_INTEGER


def parse_peer(segment: str) -> int | None:
    """A key segment as a peer id: canonical decimal in 1..2**53 (no sign, no leading zero),
    else None. Canonical, so one peer has exactly one entry of a counter."""
    if not (
        0 < len(segment) <= PEER_SEGMENT_MAX and segment.isascii() and segment.isdigit()
    ) or segment.startswith("0"):
        return None
    peer = int(segment)
    return peer if peer <= MAX_SAFE_INTEGER else None


def _any(value: Any, path: str) -> Any:
    return value


def _counter(value: Any, path: str) -> tuple[int, int]:
    if not (isinstance(value, list) and len(value) == 2 and all(_tally(x) for x in value)):
        raise CrdtValueError(
            "a counter entry holds [p, n]: two integers from 0 to 2**53", path=path
        )
    return value[0], value[1]


def _multi(value: Any, path: str) -> Any:
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], dict)):
        raise CrdtValueError("a multi-value entry holds [value, {peer: count}]", path=path)
    for peer, count in value[1].items():
        if parse_peer(peer) is None or not _tally(count):
            raise CrdtValueError(
                f"a multi-value entry's version vector maps peer ids to counts, not "
                f"{peer!r}: {count!r}",
                path=path,
            )
    return value


def _field(value: Any, path: str) -> Any:
    if not (isinstance(value, list) and len(value) <= 1):
        raise CrdtValueError("a map field's entry holds [value], or [] once deleted", path=path)
    return value


def _position(value: Any, path: str) -> Any:
    return check_position(value, path)


def _removed(value: Any, path: str) -> Any:
    if value is not True:
        raise CrdtValueError("a list element's removed entry holds true", path=path)
    return value


def _watermark(value: Any, path: str) -> Any:
    return collect.decode(value, path)


def _counter_grows(old: Any, new: Any) -> bool:
    return bool(new[0] >= old[0] and new[1] >= old[1])


def _text_runs(value: Any, rest: tuple[str, ...], path: str) -> Any:
    chunk = te.chunk_segment(rest[1], te.MAX_TX_CHUNKS, path.rsplit(".", 1)[0] + ".key")
    return te.decode_runs(value, int(rest[0]), chunk, path)


def _text_runs_grow(old: Any, new: Any) -> bool:
    return te.runs_grow(old, new)


def _text_ranges(value: Any, rest: tuple[str, ...], path: str) -> Any:
    te.chunk_segment(rest[1], te.MAX_TD_CHUNKS, path.rsplit(".", 1)[0] + ".key")
    return te.decode_ranges(value, path)


def _text_ranges_grow(old: Any, new: Any) -> bool:
    return te.ranges_grow(old, new)


@dataclass(frozen=True, slots=True)
class Kind:
    """One value kind's entries: ``NAME/<tag>/<segments...>``."""

    tag: str
    segments: int
    """How many key segments follow the tag."""
    owner: int | None
    """Which of them names the peer that owns the entry (None: any writer may write it)."""
    state: Callable[[Any, str], Any]
    """Checks the decoded JSON state (raising ``CrdtValueError`` at the path given) and
    returns what ``grows`` compares."""
    grows: Callable[[Any, Any], bool] | None = None
    """For a kind whose entries only grow: whether ``new`` may replace ``old``."""
    fields: tuple[str, ...] = ()
    """The segments' names, for error messages (``PEER`` for the owner)."""
    keyed: Callable[[Any, tuple[str, ...], str], Any] | None = None
    """For a kind whose state depends on its key (a text chunk's clocks lie in the chunk its
    key names): checks the state given the segments after the tag, instead of ``state``."""
    minted: int | None = None
    """Which segment (if any) is an element id minted under a peer (``PEER.WALL.LOGICAL``):
    only that peer creates the element; once it exists, any writer writes its entries."""
    server_only: bool = False
    """Only the server writes it (a writer's op of this kind refuses its frame)."""

    def decode(self, value: Any, rest: tuple[str, ...], path: str) -> Any:
        if self.keyed is not None:
            return self.keyed(value, rest, path)
        return self.state(value, path)

    @property
    def shape(self) -> str:
        return "/".join(("NAME", self.tag, *self.fields))


KINDS: dict[str, Kind] = {
    k.tag: k
    for k in (
        Kind("lww", 0, None, _any),
        Kind("pn", 1, 0, _counter, _counter_grows, ("PEER",)),
        Kind("mv", 1, 0, _multi, None, ("PEER",)),
        Kind("map", 1, None, _field, None, ("FIELD",)),
        # shared text (crdt/text_entries.py): each writer's runs and deletions, grow-only
        Kind("tx", 2, 0, _any, _text_runs_grow, ("PEER", "CHUNK"), _text_runs),
        Kind("td", 2, 0, _any, _text_ranges_grow, ("PEER", "N"), _text_ranges),
        # a list (crdt/seq.py): each element's position, value and removal, three LWW registers
        Kind("lp", 1, None, _position, None, ("ID",), minted=0),
        Kind("lv", 1, None, _any, None, ("ID",), minted=0),
        Kind("ld", 1, None, _removed, None, ("ID",), minted=0),
        # a list's collected tombstones (crdt/collect.py): the server's stability watermark
        Kind("gc", 0, None, _watermark, server_only=True),
        # presence and awareness (hub/presence.py): each peer's own value, never journaled
        Kind("pr", 1, 0, _any, None, ("PEER",)),
        Kind("aw", 1, 0, _any, None, ("PEER",)),
    )
}
"""Every kind of a shared document's values, by the tag its keys carry."""

EPHEMERAL_KINDS = frozenset({"pr", "aw"})
"""Presence and awareness: a server keeps these apart and never journals them."""


@dataclass(frozen=True, slots=True)
class Layout:
    """A key of this layout: its value's name, kind and the segments after the kind."""

    name: str
    kind: Kind
    rest: tuple[str, ...]


def is_gc(op: CrdtOp) -> bool:
    """``op`` is a list's ``NAME/gc`` entry (``crdt/collect.py``), under ``NAME``'s node."""
    name, _, tag = (op.key or "").partition("/")
    return tag == collect.GC_TAG and op.slot_id == node_of(name)


def merge_collecting(replica: PlaneReplica, ops: Iterable[CrdtOp]) -> list[CrdtOp]:
    """Merge ``ops`` as a document's replica does: after the batch, each ``NAME/gc`` entry
    that won drops what it collects. Returns the ops that won."""
    changed = replica.merge(ops)
    for op in changed:
        if is_gc(op):
            collect.purge(replica, op)
    return changed


def layout_of(op: CrdtOp) -> Layout | None:
    """The layout ``op``'s entry claims, or None for an opaque plane entry."""
    if op.key is None:
        return None
    parts = op.key.split("/")
    if len(parts) < 2:
        return None
    kind = KINDS.get(parts[1])
    if kind is None or op.slot_id != node_of(parts[0]):
        return None
    return Layout(parts[0], kind, tuple(parts[2:]))


def check_op(
    op: CrdtOp,
    writer: int,
    held: CrdtOp | None,
    path: str,
    lookup: Callable[[str], CrdtOp | None] | None = None,
) -> None:
    """Refuse an op ``writer`` may not send: a malformed key or state of a known kind, an entry
    another peer owns, a grow-only entry made smaller, or an element of another peer's that
    does not exist. ``held`` is the entry the receiver holds now (or the frame's earlier op for
    the same entry); an op that would not replace it changes nothing and is let through (a
    resend after a lost acknowledgement). ``lookup`` finds another entry of the same node by
    key, as ``held`` was found (without it, no element of another peer's exists)."""
    layout = layout_of(op)
    if layout is None:
        return
    kind = layout.kind
    if not layout.name or len(layout.rest) != kind.segments or not all(layout.rest):
        raise CrdtValueError(
            f"a {kind.tag} entry's key is {kind.shape}, not {op.key!r}", path=f"{path}.key"
        )
    if kind.server_only:
        raise Forbidden(f"entry {op.key!r} is written by the server only", path=f"{path}.key")
    if kind.owner is not None:
        owner = parse_peer(layout.rest[kind.owner])
        if owner is None:
            raise CrdtValueError(
                f"{layout.rest[kind.owner]!r} in key {op.key!r} is not a peer id "
                f"(decimal, 1 to 2**53, no leading zero)",
                path=f"{path}.key",
            )
        if owner != writer:
            raise Forbidden(
                f"entry {op.key!r} belongs to peer {owner}; this writer is peer {writer}",
                path=f"{path}.key",
            )
    if kind.minted is not None:
        element = layout.rest[kind.minted]
        minter = id_peer(element)
        if minter is None:
            raise CrdtValueError(
                f"{element!r} in key {op.key!r} is not an element id (PEER.WALL.LOGICAL, "
                f"canonical decimals)",
                path=f"{path}.key",
            )
        if held is None and not _exists(layout.name, element, lookup):
            _refuse_collected(layout.name, element, lookup, path)
            if minter != writer:
                raise Forbidden(
                    f"element {element!r} is minted by peer {minter}: only it creates it, and "
                    f"this writer is peer {writer}",
                    path=f"{path}.key",
                )
    if not isinstance(op.state, bytes):
        raise CrdtValueError("a CRDT op's state must be inline bytes", path=f"{path}.state")
    new = kind.decode(_json(op.state, f"{path}.state"), layout.rest, f"{path}.state")
    if kind.tag in text_collect.TEXT_TAGS and (held is None or wins(op, held)):
        _refuse_compacted(layout.name, kind.tag, op, held, new, lookup, path)
    if kind.grows is None or held is None or held == op or not wins(op, held):
        return
    try:
        old = kind.decode(_json(_inline(held), path), layout.rest, path)
    except CrdtValueError:
        return  # what is held is unreadable (written before these checks): anything replaces it
    if not kind.grows(old, new):
        raise CrdtValueError(
            f"entry {op.key!r} may only grow: {old!r} cannot become {new!r}",
            path=f"{path}.state",
        )


def _exists(name: str, element: str, lookup: Callable[[str], CrdtOp | None] | None) -> bool:
    """Whether its minting peer created list element ``element`` (its position or value is
    held): then any writer may move, set or remove it."""
    if lookup is None:
        return False
    return any(lookup(f"{name}/{tag}/{element}") is not None for tag in ("lp", "lv"))


def _refuse_collected(
    name: str,
    element: str,
    lookup: Callable[[str], CrdtOp | None] | None,
    path: str,
) -> None:
    """An entry of an element not held whose mint stamp the published watermark covers names
    a collected element (a live one would be held): refused, never half recreated."""
    gc = None if lookup is None else lookup(f"{name}/{collect.GC_TAG}")
    minted = collect.mint_stamp(element)
    if gc is None or minted is None:
        return
    try:
        mark = collect.decode(gc.state)
    except CrdtValueError:
        return
    if collect.covers(mark, minted):
        raise ElementCollected(
            f"list element {element!r} of {name!r} was removed and collected; re-take the document",
            path=f"{path}.key",
        )


def _refuse_compacted(
    name: str,
    tag: str,
    op: CrdtOp,
    held: CrdtOp | None,
    new: Any,
    lookup: Callable[[str], CrdtOp | None] | None,
    path: str,
) -> None:
    """A text chunk the server compacted (its writer had moved past it) is not written again,
    and a run may not name a character the server collected as its origin: the writer had
    not seen the deletion every member had, so it re-takes the document instead."""
    if held is not None and text_collect.is_rewrite(held):
        raise ElementCollected(
            f"text chunk {op.key!r} was compacted by the server; re-take the document",
            path=f"{path}.key",
        )
    if lookup is None or tag != "tx":
        return
    at = text_collect.collected_origin(name, new, lookup)
    if at is not None:
        raise ElementCollected(
            f"a run of {op.key!r} names a character of {name!r} that was deleted and "
            f"collected; re-take the document",
            path=f"{path}.state[{at}]",
        )


def _inline(op: CrdtOp) -> bytes:
    return op.state if isinstance(op.state, bytes) else b""
