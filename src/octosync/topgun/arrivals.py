"""The order in which keys of a map changed on this server, for TopGun's HTTP sync.

A record's own timestamp is the writer's clock: a client that was offline writes with old
timestamps, so "records newer than the client's last sync" would miss its writes. HTTP sync
resumes by arrival instead: every change of a followed map takes the next number, and a
client's ``lastSyncTimestamp`` carries the number it has seen (``millis``), this process's
boot (``counter``) and :data:`MARK` (``nodeId``); any other value (a first sync, another
server process) starts from the beginning. A map is followed from the first HTTP sync that
asks for it (its existing keys numbered then, in key order); at most :data:`MAX_FOLLOWED`.
"""

from __future__ import annotations

from collections.abc import Iterable

from octosync.crdt.sync_messages import WireTimestamp
from octosync.errors import LimitExceeded

MARK = "octosync-arrivals"
MAX_FOLLOWED = 1024


class Arrivals:
    def __init__(self, boot: int) -> None:
        self.boot = boot % 2**31
        self.seq = 0
        self.maps: dict[str, dict[str, int]] = {}
        """Followed map -> key -> number of its last change (dict order: arrival order)."""

    def follow(self, name: str, keys: Iterable[str]) -> None:
        if name in self.maps:
            return
        if len(self.maps) >= MAX_FOLLOWED:
            raise LimitExceeded(f"at most {MAX_FOLLOWED} maps followed by HTTP sync")
        numbered: dict[str, int] = {}
        for key in sorted(keys):
            self.seq += 1
            numbered[key] = self.seq
        self.maps[name] = numbered

    def written(self, name: str, keys: Iterable[str]) -> None:
        numbered = self.maps.get(name)
        if numbered is None:
            return
        for key in keys:
            self.seq += 1
            numbered.pop(key, None)
            numbered[key] = self.seq

    def since(self, name: str, mark: WireTimestamp, limit: int) -> tuple[list[str], WireTimestamp]:
        """The keys of a followed map changed after ``mark``, in arrival order, at most
        ``limit``; and the mark to resume from."""
        numbered = self.maps[name]
        after = int(mark.millis) if mark.node_id == MARK and mark.counter == self.boot else 0
        newer: list[tuple[str, int]] = []
        for key, seq in reversed(numbered.items()):
            if seq <= after:
                break
            newer.append((key, seq))
        newer.reverse()
        shown = newer[:limit]
        reached = shown[-1][1] if len(newer) > limit else self.seq
        return [k for k, _ in shown], WireTimestamp(reached, self.boot, MARK)
