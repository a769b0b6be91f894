"""One shared, bounded log of encoded frames per (stream, view), with a cursor per subscriber.

Fan-out appends a frame once, whatever the number of subscribers: nobody's queue is touched.
A subscriber's backlog is the log from its cursor to the end, so the per-subscriber bounds of
an outbox (frames and bytes) become the log's own bounds: the log keeps only the newest frames
within them, and a subscriber whose cursor would fall off the front has overflowed. Members
are indexed by cursor, so an append touches only the members that were caught up (they need a
wake-up, once per drain) and a trim only the ones it leaves behind (they need a reset). Members
at the same cursor drain the same bytes: the joined backlog is built once per cursor position
and shared until the log changes. Frames every member has passed are dropped at once, so a log
whose members are caught up holds nothing.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Hashable, Set
from typing import Generic, TypeVar

from octosync.hub.outbox import OutboxLimits

M = TypeVar("M", bound=Hashable)


class FrameLog(Generic[M]):
    __slots__ = ("_at", "_base", "_bytes", "_cursor", "_frames", "_joined", "limits")

    def __init__(self, limits: OutboxLimits) -> None:
        self.limits = limits
        self._frames: deque[bytes] = deque()
        self._base = 0
        """Sequence number of ``_frames[0]``."""
        self._bytes = 0
        self._at: dict[int, set[M]] = {}
        self._cursor: dict[M, int] = {}
        self._joined: dict[int, bytes] = {}

    @property
    def end(self) -> int:
        """Sequence number the next frame gets; a caught-up member's cursor."""
        return self._base + len(self._frames)

    def __len__(self) -> int:
        return len(self._frames)

    def __contains__(self, member: object) -> bool:
        return member in self._cursor

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def add(self, member: M) -> None:
        """Follow the log from now on (after the member was sent a snapshot)."""
        self.remove(member)
        end = self.end
        self._cursor[member] = end
        self._at.setdefault(end, set()).add(member)

    def remove(self, member: M) -> None:
        cursor = self._cursor.pop(member, None)
        if cursor is not None:
            members = self._at[cursor]
            members.discard(member)
            if not members:
                del self._at[cursor]
                self._drop_passed()

    def backlog(self, member: M) -> int:
        """Frames waiting for ``member`` (0 when it is caught up or not a member)."""
        cursor = self._cursor.get(member)
        return 0 if cursor is None else self.end - cursor

    def total_backlog(self) -> int:
        """Frames waiting summed over members (what separate outboxes would hold)."""
        end = self.end
        return sum((end - cursor) * len(members) for cursor, members in self._at.items())

    def append(self, frame: bytes) -> tuple[Set[M], list[tuple[M, int]]]:
        """Add a frame: ``(members that were caught up, [(member, frames missed)] overflowed)``.

        The first set is the log's own (do not keep it); its members stay in the log. Overflowed
        members have left the log: their backlog no longer fits the bounds.
        """
        frames = self._frames
        if not self._at:
            return frozenset(), []  # nobody to keep it for
        caught_up: Set[M] = self._at.get(self.end) or frozenset()
        frames.append(frame)
        self._bytes += len(frame)
        if self._joined:
            self._joined.clear()
        lost: list[tuple[M, int]] = []
        max_frames, max_bytes = self.limits.max_frames, self.limits.max_bytes
        # A lone frame always stays, so one snapshot larger than the byte bound still goes out.
        while len(frames) > max_frames or (self._bytes > max_bytes and len(frames) > 1):
            self._bytes -= len(frames.popleft())
            gone = self._base
            self._base += 1
            left = self._at.pop(gone, None)
            if left:
                missed = self.end - gone
                for member in left:
                    del self._cursor[member]
                    lost.append((member, missed))
        if lost:
            self._drop_passed()
        return caught_up, lost

    def take(self, member: M) -> list[bytes]:
        """The member's backlog, frame by frame; it is then caught up."""
        cursor = self._cursor.get(member)
        if cursor is None or cursor == self.end:
            return []
        data = list(itertools.islice(self._frames, cursor - self._base, None))
        self._move_to_end(member, cursor)
        return data

    def take_joined(self, member: M) -> tuple[bytes, int]:
        """The member's backlog as one bytes object, shared by every member at that cursor,
        and its frame count."""
        cursor = self._cursor.get(member)
        if cursor is None or cursor == self.end:
            return b"", 0
        frames = self._frames
        start = cursor - self._base
        joined = self._joined.get(cursor)
        if joined is None:
            if start == len(frames) - 1:
                joined = frames[-1]
            else:
                joined = b"".join(itertools.islice(frames, start, None))
            self._joined[cursor] = joined
        n = len(frames) - start
        self._move_to_end(member, cursor)
        return joined, n

    def _move_to_end(self, member: M, cursor: int) -> None:
        end = self.end
        members = self._at[cursor]
        members.discard(member)
        self._cursor[member] = end
        caught_up = self._at.get(end)
        if caught_up is None:
            self._at[end] = {member}
        else:
            caught_up.add(member)
        if not members:
            del self._at[cursor]
            if cursor == self._base:
                self._drop_passed()

    def _drop_passed(self) -> None:
        """Drop the frames before the furthest-behind member's cursor (amortised O(1))."""
        frames, at = self._frames, self._at
        while frames and self._base not in at:
            self._bytes -= len(frames.popleft())
            self._base += 1
