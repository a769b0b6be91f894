"""The TopGun core's typed messages to MsgPack bytes: the server's side of the sans-I/O line.

Each message is encoded once, whatever the number of connections it goes to; the events of
one client batch are encoded once too, and shared by every message of a flush that carries
them (``Encoder`` remembers them for as long as it lives: one carry-out).
"""

from __future__ import annotations

from octosync.topgun.effects import AllSucceeded, EventRun, EventRuns, Outbound, Wire
from octosync.wire import topgun as tg


class Encoder:
    """Encodes the messages of one batch of effects, each event run once."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: dict[int, tuple[EventRun, tuple[int, bytes]]] = {}

    def __call__(self, message: Wire) -> bytes:
        if isinstance(message, EventRuns):
            return tg.join_event_runs([self._run(r) for r in message.runs])
        if isinstance(message, AllSucceeded):
            return tg.encode_all_succeeded(message.last_id, message.level, message.op_ids)
        return tg.encode(message)

    def _run(self, run: EventRun) -> tuple[int, bytes]:
        seen = self._runs.get(id(run))
        if seen is None:
            seen = self._runs[id(run)] = (run, (len(run.events), tg.encode_event_run(run.events)))
        return seen[1]


def encode(message: Wire) -> bytes:
    """One message's bytes."""
    return Encoder()(message)


def data(out: list[Outbound]) -> list[bytes]:
    """The bytes of each message, in order."""
    enc = Encoder()
    return [enc(ob.message) for ob in out]
