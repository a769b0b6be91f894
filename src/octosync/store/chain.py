"""SQLite persistence for Octoprotocol: a device's state machine and a link's replica.

Both stores write each change in one transaction, so a crash (SIGKILL, power loss with
``synchronous=FULL``) leaves the last committed machine: for a device, the seed's "reset to a
prior state"; for a link, everything it acknowledged or forwarded (links persist before they
send). WAL mode lets a status reader look while the owner writes.

Tables, per file: ``events`` (one row per held event), ``meta`` (one row: sequencers, trim,
state as MsgPack). Saving writes only what changed since the last save.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal

import msgspec

from octosync.chain.json_tree import JsonTree
from octosync.chain.link import ChainLink, Dirty
from octosync.chain.records import ChainStateMachine, DeviceEvent, DeviceStateMachine, Event
from octosync.errors import StorageError
from octosync.store.data_lock import DataDirLock

Durability = Literal["full", "normal"]
_encode = msgspec.msgpack.encode
_trims = msgspec.msgpack.Decoder(dict[str, int])


def _connect(path: Path, durability: Durability) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={durability.upper()}")
        conn.execute("PRAGMA busy_timeout=10000")
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open {path}: {exc}") from exc
    return conn


def _hold(path: Path, what: str) -> DataDirLock:
    """One process per file: two links (or devices) with one name and folder would each
    write their own machine over the other's, and a restart would load the wrong one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    return DataDirLock.hold(lock, f"{what} {path.resolve()}", f"another {what} of that name?")


def _decode_state(blob: bytes) -> JsonTree:
    return msgspec.msgpack.decode(blob)


class DeviceStore:
    """One device's ``DeviceStateMachine``: events, next sequencer and state, saved together."""

    def __init__(self, path: Path, *, durability: Durability = "full") -> None:
        self.path = path
        self._lock = _hold(path, "device")
        self._conn = _connect(path, durability)
        with self._conn:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS events "
                "(seq INTEGER PRIMARY KEY, name TEXT NOT NULL, payload TEXT NOT NULL)"
            )
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 1), "
                "next_seq INTEGER NOT NULL, state BLOB NOT NULL, state_seq INTEGER NOT NULL)"
            )
        self._saved: set[int] = set(self.load().events)

    def load(self) -> DeviceStateMachine:
        """The last committed machine (a fresh one if nothing was ever saved)."""
        try:
            rows = self._conn.execute("SELECT seq, name, payload FROM events ORDER BY seq")
            events = {s: DeviceEvent(s, n, p) for s, n, p in rows}
            meta = self._conn.execute("SELECT next_seq, state, state_seq FROM meta").fetchone()
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read {self.path}: {exc}") from exc
        if meta is None:
            return DeviceStateMachine(events)
        return DeviceStateMachine(events, meta[0], _decode_state(meta[1]), meta[2])

    def save(self, machine: DeviceStateMachine) -> None:
        """Commit ``machine`` in one transaction (only the events that changed are written)."""
        keys = set(machine.events)
        gone = self._saved - keys
        new = keys - self._saved
        try:
            with self._conn:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany("DELETE FROM events WHERE seq = ?", [(s,) for s in gone])
                self._conn.executemany(
                    "INSERT INTO events VALUES (?, ?, ?)",
                    [(s, machine.events[s].name, machine.events[s].payload) for s in sorted(new)],
                )
                self._conn.execute(
                    "INSERT OR REPLACE INTO meta VALUES (1, ?, ?, ?)",
                    (
                        machine.next_device_sequencer,
                        _encode(machine.state),
                        machine.state_sequencer,
                    ),
                )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot write {self.path}: {exc}") from exc
        self._saved = keys

    def close(self) -> None:
        self._conn.close()
        self._lock.release()


class Prepared(msgspec.Struct, frozen=True):
    rows: list[tuple[int, str, int, str, str, int]]
    trim: int
    meta: tuple[int, int, bytes, int, int, bytes, int]
    wipe: bool


def _prepare(dirty: Dirty, link: ChainLink, epoch: int, *, wipe: bool) -> Prepared:
    rows = [
        (c, e.device, e.device_sequencer, e.name, e.payload, int(e.tombstone))
        for c, e in dirty.upserts.items()
        if c >= dirty.trim
    ]
    meta = (
        link.next_chain,
        link.trim,
        _encode(link.state),
        link.next_state,
        link.acked_through,
        _encode(link.device_trims),
        epoch,
    )
    return Prepared(rows, dirty.trim, meta, wipe)


class LinkStore:
    """One link's replica; ``commit`` writes a link's ``Dirty`` and meta in one transaction."""

    def __init__(self, path: Path, *, durability: Durability = "full") -> None:
        self.path = path
        self._lock = _hold(path, "chain link")
        self._conn = _connect(path, durability)
        with self._conn:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS events (c INTEGER PRIMARY KEY, device TEXT NOT NULL, "
                "d INTEGER NOT NULL, name TEXT NOT NULL, payload TEXT NOT NULL, "
                "tombstone INTEGER NOT NULL)"
            )
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 1), "
                "next_chain INTEGER NOT NULL, trim INTEGER NOT NULL, state BLOB NOT NULL, "
                "next_state INTEGER NOT NULL, acked_through INTEGER NOT NULL, "
                "device_trims BLOB NOT NULL, epoch INTEGER NOT NULL)"
            )

    def load(self) -> tuple[ChainStateMachine, int]:
        """The last committed replica and the configuration epoch it was written under."""
        try:
            rows = self._conn.execute("SELECT * FROM events ORDER BY c").fetchall()
            meta = self._conn.execute(
                "SELECT next_chain, trim, state, next_state, acked_through, device_trims, epoch "
                "FROM meta"
            ).fetchone()
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read {self.path}: {exc}") from exc
        if meta is None:
            return ChainStateMachine(), 0
        events = {c: Event(dev, d, c, n, p, bool(t)) for c, dev, d, n, p, t in rows}
        machine = ChainStateMachine(
            events=events,
            device_trims=_trims.decode(meta[5]),
            next_chain_sequencer=meta[0],
            trim=meta[1],
            state=_decode_state(meta[2]),
            next_state_sequencer=meta[3],
            acked_through=meta[4],
        )
        return machine, meta[6]

    def replace(self, machine: ChainStateMachine, epoch: int) -> None:
        """Overwrite everything with ``machine`` (a link joining with a copy of the tail)."""
        link = ChainLink(machine)
        self.write(_prepare(Dirty(dict(machine.events), machine.trim), link, epoch, wipe=True))

    def prepare(self, link: ChainLink, epoch: int) -> Prepared | None:
        """Take what ``link`` changed since the last call, as rows (on the link's thread)."""
        dirty = link.take_dirty()
        if dirty is None:
            return None
        return _prepare(dirty, link, epoch, wipe=False)

    def commit(self, link: ChainLink, epoch: int) -> bool:
        """Persist what ``link`` changed since the last commit; False if nothing had."""
        prepared = self.prepare(link, epoch)
        if prepared is None:
            return False
        self.write(prepared)
        return True

    def write(self, prepared: Prepared) -> None:
        """One transaction (may run on another thread than ``prepare``)."""
        try:
            with self._conn:
                self._conn.execute("BEGIN IMMEDIATE")
                if prepared.wipe:
                    self._conn.execute("DELETE FROM events")
                else:
                    self._conn.execute("DELETE FROM events WHERE c < ?", (prepared.trim,))
                self._conn.executemany(
                    "INSERT OR REPLACE INTO events VALUES (?,?,?,?,?,?)", prepared.rows
                )
                self._conn.execute(
                    "INSERT OR REPLACE INTO meta VALUES (1, ?, ?, ?, ?, ?, ?, ?)", prepared.meta
                )
        except sqlite3.Error as exc:
            raise StorageError(f"cannot write {self.path}: {exc}") from exc

    def close(self) -> None:
        self._conn.close()
        self._lock.release()
