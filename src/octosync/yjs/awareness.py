"""Awareness (cursors, names, selections): per document, never journaled, bounded.

y-protocols' rule, applied as its ``applyAwarenessUpdate`` does: an entry ``(client, clock,
state)`` replaces what is known of ``client`` when its clock is newer, or when it is a null
state at the same clock (a removal). The server keeps which connection sent each client's
states, so a connection that closes has its clients removed the y-protocols way (clock + 1,
null state) for everyone else. A connection speaks for at most ``max_clients`` clients, a
state is at most ``max_state_bytes`` of JSON (checked: a peer's ``JSON.parse`` must not
throw), and another connection's client is not taken over: its entries are skipped, not
refused, because y-websocket's provider sends on every change it hears, others' included.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import msgspec

from octosync.errors import MalformedYjsMessage, YjsUpdateTooLarge
from octosync.yjs.encoding import Reader, write_var_string, write_var_uint

NULL = "null"


class Entry(msgspec.Struct, frozen=True):
    """One client's awareness state at ``clock`` (JSON text; ``"null"``: removed)."""

    client: int
    clock: int
    state: str


def decode_entries(payload: bytes, *, max_state_bytes: int, max_entries: int) -> list[Entry]:
    """An awareness update's entries, each state checked to be JSON within the bound."""
    reader = Reader(payload)
    n = reader.var_uint("$.awareness.length")
    if n > max_entries:
        raise YjsUpdateTooLarge(
            f"{n} awareness entries in one message, at most {max_entries}",
            path="$.awareness.length",
        )
    entries = []
    for i in range(n):
        client = reader.var_uint(f"$.awareness[{i}].client")
        clock = reader.var_uint(f"$.awareness[{i}].clock")
        raw = reader.var_bytes(f"$.awareness[{i}].state")
        if len(raw) > max_state_bytes:
            raise YjsUpdateTooLarge(
                f"an awareness state of {len(raw)} bytes, at most {max_state_bytes}",
                path=f"$.awareness[{i}].state",
            )
        try:
            msgspec.json.decode(raw)
            state = raw.decode()
        except (msgspec.DecodeError, UnicodeDecodeError):
            raise MalformedYjsMessage(
                "an awareness state that is not JSON", path=f"$.awareness[{i}].state"
            ) from None
        entries.append(Entry(client, clock, state))
    reader.end("$.awareness")
    return entries


def encode_entries(entries: list[Entry]) -> bytes:
    out = bytearray()
    write_var_uint(out, len(entries))
    for entry in entries:
        write_var_uint(out, entry.client)
        write_var_uint(out, entry.clock)
        write_var_string(out, entry.state)
    return bytes(out)


@dataclass(slots=True)
class _Known:
    clock: int
    state: str
    owner: int


@dataclass(slots=True)
class DocumentAwareness:
    """The awareness states of one document's connections."""

    max_clients: int = 8
    """Clients one connection may speak for."""
    max_removed: int = 1024
    """Clocks of removed clients remembered (so a late, older state does not come back)."""
    known: dict[int, _Known] = field(default_factory=dict)
    removed: OrderedDict[int, int] = field(default_factory=OrderedDict)
    owned: dict[int, set[int]] = field(default_factory=dict)

    def apply(self, conn: int, entries: list[Entry]) -> list[Entry]:
        """Take ``conn``'s entries; returns those that changed something (to fan out).
        Refuses the whole message (nothing taken) when it breaks a bound."""
        mine = self.owned.get(conn, set())
        known = self.known
        new = {
            e.client
            for e in entries
            if e.client not in mine and e.state != NULL and e.client not in known
        }
        if len(mine | new) > self.max_clients:
            raise YjsUpdateTooLarge(
                f"a connection speaks for at most {self.max_clients} awareness clients",
                path="$.awareness",
            )
        taken = []
        for entry in entries:
            held = known.get(entry.client)
            if held is not None and held.owner != conn:
                continue  # another connection's client (y-websocket relays what it hears)
            current = held.clock if held is not None else self.removed.get(entry.client, 0)
            removal = entry.state == NULL
            if not (
                current < entry.clock or (removal and held is not None and current == entry.clock)
            ):
                continue
            if removal:
                if held is None:
                    self._forget(entry.client, entry.clock)
                    continue
                del known[entry.client]
                mine.discard(entry.client)
                self._forget(entry.client, entry.clock)
            else:
                known[entry.client] = _Known(entry.clock, entry.state, conn)
                self.removed.pop(entry.client, None)
                mine.add(entry.client)
            taken.append(entry)
        if mine:
            self.owned[conn] = mine
        else:
            self.owned.pop(conn, None)
        return taken

    def leave(self, conn: int) -> list[Entry]:
        """``conn`` closed: its clients' removals (clock + 1, null state), to fan out."""
        gone = []
        for client in sorted(self.owned.pop(conn, ())):
            known = self.known.pop(client, None)
            if known is not None:
                clock = known.clock + 1
                self._forget(client, clock)
                gone.append(Entry(client, clock, NULL))
        return gone

    def states(self) -> list[Entry]:
        """Every state held (a query's answer, a joiner's first awareness)."""
        return [Entry(c, k.clock, k.state) for c, k in sorted(self.known.items())]

    def _forget(self, client: int, clock: int) -> None:
        self.removed[client] = clock
        self.removed.move_to_end(client)
        while len(self.removed) > self.max_removed:
            self.removed.popitem(last=False)
