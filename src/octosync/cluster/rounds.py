"""What TopGun maps (``cluster/maps.py``) and shared documents (``cluster/planes.py``) share in
crossing the cluster through a JetStream op stream, sans-I/O: the position a node has taken the
stream up to (:class:`Position`), its counters (:class:`LogStats`), and the anti-entropy rounds
(:class:`Rounds`): a name written on this node within ``settle`` seconds is left out (its roots
differ only by what is in flight), and roots go out once per ``interval``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

W = TypeVar("W")


@dataclass(slots=True)
class LogStats:
    """What the I/O side counts, for ``/metrics``."""

    published: int = 0
    """Op stream messages this node published and JetStream stored (acked)."""
    republished: int = 0
    """Publishes sent again after no ack came in time."""
    failed: int = 0
    """Messages given up on after ``replicate_timeout`` (their writers were reset)."""
    batches_in: int = 0
    repaired: int = 0
    """Records or ops pulled by anti-entropy that changed something here."""
    walks: int = 0
    resubscribed: int = 0
    undecodable: int = 0
    unreplayed: int = 0
    """Stream messages gone (age limit, purge) before this node took them."""


class Position:
    """How far a node took the op stream. ``node``: the name this process signs its batches
    with (one per run): its own batches are skipped, an earlier run's are not (their records may
    have been stored in JetStream before that run's journal had them)."""

    def __init__(self, node: str, position: int = 0) -> None:
        self.node = node
        self.position = position
        """The highest stream sequence taken (applied, or skipped as this process's own)."""

    def admit(self, seq: int, node: str) -> bool:
        """Take the message at ``seq``, published by ``node``: whether to apply it (not when
        the sequence was passed already, nor for this process's own)."""
        if seq <= self.position:
            return False
        self.position = seq
        return node != self.node


class Rounds(Generic[W]):
    """The rounds, and the pulls (walks, ``W``) under way: at most one per name."""

    def __init__(self, node: str, clock: Callable[[], float], interval: float, settle: float):
        self.node = node
        self.clock = clock
        self.interval = interval
        self.settle = settle
        self._written: dict[str, float] = {}
        self._walks: dict[str, W] = {}
        self._next = clock() + interval

    def _finish(self, name: str, walk: W) -> None:
        """``walk`` of ``name`` ended (applied, nothing differed, or no answer): ``name`` may
        be pulled again."""
        if self._walks.get(name) is walk:
            del self._walks[name]

    def walking(self) -> list[str]:
        return sorted(self._walks)

    def _heard(
        self,
        peer: str,
        roots: Mapping[str, int],
        differs: Callable[[str, int], bool],
        walk: Callable[[str], W],
    ) -> list[W]:
        """A peer's roots: a new walk for each settled name whose root ``differs`` here (none
        for a name being pulled already, nor for this node's own roots)."""
        if peer == self.node:
            return []
        walks = []
        for name in sorted(roots):
            if name in self._walks or not self.settled(name) or not differs(name, roots[name]):
                continue
            walks.append(walk(name))
            self._walks[name] = walks[-1]
        return walks

    def written(self, names: Iterable[str]) -> None:
        """These names changed on this node now (a local write or an applied batch)."""
        now = self.clock()
        for name in names:
            self._written[name] = now

    def settled(self, name: str) -> bool:
        at = self._written.get(name)
        return at is None or self.clock() - at >= self.settle

    def due(self) -> bool:
        """Time to broadcast this node's roots (then not again for ``interval``)."""
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + self.interval
        for name, at in list(self._written.items()):
            if now - at >= self.settle:
                del self._written[name]
        return True
