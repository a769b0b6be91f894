"""One direction of a connection's OID table (a membrane): wire OIDs <-> local refs, counted.

Each symbol counts the live assertions (either way) that mention it; at zero it is forgotten,
so an OID names an object only while something on the connection still holds it. Pins are
taken after a whole turn was checked (``grab``) and released when the assertion that took
them is retracted (``drop``).
"""

from __future__ import annotations

from collections.abc import Iterable

from octosync.syndicate.values import Ref


class WireSymbol:
    __slots__ = ("count", "membrane", "oid", "ref")

    def __init__(self, membrane: Membrane, oid: int, ref: Ref, count: int = 0) -> None:
        self.membrane = membrane
        self.oid = oid
        self.ref = ref
        self.count = count

    def __repr__(self) -> str:
        return f"WireSymbol({self.oid}, count={self.count})"


class Membrane:
    __slots__ = ("by_oid", "by_ref")

    def __init__(self) -> None:
        self.by_oid: dict[int, WireSymbol] = {}
        self.by_ref: dict[Ref, WireSymbol] = {}

    def add(self, oid: int, ref: Ref, count: int = 0) -> WireSymbol:
        ws = WireSymbol(self, oid, ref, count)
        self.by_oid[oid] = ws
        self.by_ref[ref] = ws
        return ws

    def forget(self, ws: WireSymbol) -> None:
        if self.by_oid.get(ws.oid) is ws:
            del self.by_oid[ws.oid]
            del self.by_ref[ws.ref]

    def __len__(self) -> int:
        return len(self.by_oid)


def grab(pins: Iterable[WireSymbol]) -> None:
    for ws in pins:
        ws.count += 1


def drop(pins: Iterable[WireSymbol]) -> None:
    """Release pins; a symbol nothing holds any more is forgotten by its membrane."""
    for ws in pins:
        ws.count -= 1
        if ws.count <= 0:
            ws.membrane.forget(ws)
