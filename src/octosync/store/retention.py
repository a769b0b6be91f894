"""Keep the journal bounded: checkpoint the streams that changed, export, trim what both cover.

One ``JournalKeeper.round()`` (the server runs one every ``checkpoint_interval`` seconds in a
worker thread, so the event loop never waits on SQLite or Parquet):

1. fold the frames appended since the last round into the ``JournalState`` recovery built;
2. store a checkpoint for every stream with new frames (one transaction);
3. export the new records to the Parquet dataset, when an export directory is set;
4. trim below ``min(export watermark, checkpoint coverage) + 1`` when trimming is on (without
   an export directory, below ``checkpoint coverage + 1``: nothing is archived, and what a
   checkpoint covers is not needed to restart); op records only below the newest compaction's
   ``as_of_seq + 1`` (``ops_covered``), because TopGun's maps restart from that compaction plus
   the op records after it.

Under a steady stream the journal then holds about one round of records (plus the rows not
yet exported), and SQLite reuses the freed pages, so the file stops growing. A base install has
no pyarrow, so no export: its server still trims what is checkpointed (``trim=True``, no
``export_dir``). ``trim=False`` keeps every record: the journal is the archive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import msgspec

from octosync.hub.core import Hub
from octosync.store.journal import Durability, Journal
from octosync.store.plane_compaction import compact_planes
from octosync.store.recovery import JournalState, RecoveryReport
from octosync.store.yjs_compaction import compact_yjs

log = logging.getLogger(__name__)


class RoundReport(msgspec.Struct, frozen=True):
    frames_folded: int
    checkpoints: int
    exported: int
    trimmed: int
    through_seq: int
    trimmed_before: int
    plane_records_compacted: int = 0
    """Shared documents' journal records replaced by the entries they merge to (and Yjs
    documents' by the one update they merge to)."""


class JournalKeeper:
    """Recovery at start-up, then periodic checkpoint / export / trim rounds."""

    def __init__(
        self,
        journal: Journal,
        state: JournalState,
        *,
        export_dir: Path | None = None,
        trim: bool = True,
        ops_covered: Callable[[], int] | None = None,
        plane_compact_records: int | None = None,
    ) -> None:
        """``ops_covered()``: the last seq whose op records a compaction holds (0: none);
        ``plane_compact_records``: compact a shared document's history (and a Yjs document's)
        once it has this many records (``store.plane_compaction``, ``store.yjs_compaction``;
        None: never)."""
        self.journal = journal
        self.state = state
        self.export_dir = export_dir
        self.trim = trim
        self.ops_covered = ops_covered
        self.plane_compact_records = plane_compact_records

    @classmethod
    def start(
        cls,
        hub: Hub,
        data_dir: Path,
        *,
        export_dir: Path | None = None,
        trim: bool = True,
        durability: Durability = "full",
        ops_covered: Callable[[], int] | None = None,
        plane_compact_records: int | None = None,
    ) -> tuple[JournalKeeper, RecoveryReport]:
        """Open the journal, rebuild every stream into ``hub``; blocking (run it in a thread)."""
        journal = Journal(data_dir, durability=durability)
        state = JournalState.load(journal, max_replay_diffs=hub.config.max_replay_diffs)
        report = state.restore_into(hub)
        keeper = cls(
            journal,
            state,
            export_dir=export_dir,
            trim=trim,
            ops_covered=ops_covered,
            plane_compact_records=plane_compact_records,
        )
        return keeper, report

    def round(self) -> RoundReport:
        folded = self.state.advance(self.journal)
        due = self.state.checkpoints_due()
        self.journal.put_checkpoints(due)
        self.state.mark_checkpointed(due)
        exported = 0
        watermark = 0
        if self.export_dir is not None:
            from octosync.store.export import export, read_watermark  # pyarrow: only if asked

            exported = export(self.journal, self.export_dir).records
            watermark = read_watermark(self.export_dir)
        trimmed = 0
        covered = self.state.covered_through()
        archived = covered if self.export_dir is None else watermark  # no archive: checkpoints
        before = min(archived, covered) + 1
        ops_before = 1 if self.ops_covered is None else self.ops_covered() + 1
        moved = before > self.journal.trimmed_before() or (
            min(before, ops_before) > self.journal.ops_trimmed_before()
        )
        if self.trim and moved:
            trimmed = self.journal.trim(
                before, exported_through=archived, ops_before=ops_before
            ).deleted
        compacted = 0
        if self.plane_compact_records is not None:
            exported_to = None if self.export_dir is None else watermark
            compacted = compact_planes(
                self.journal, min_records=self.plane_compact_records, through=exported_to
            )
            compacted += compact_yjs(
                self.journal, min_records=self.plane_compact_records, through=exported_to
            )
        return RoundReport(
            folded,
            len(due),
            exported,
            trimmed,
            self.state.through_seq,
            self.journal.trimmed_before(),
            compacted,
        )

    async def run_every(self, interval: float) -> None:
        """Rounds until cancelled; a failed round is retried at the next interval."""
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.round)
            except Exception:
                log.exception("journal maintenance round failed; retrying in %.1fs", interval)

    def close(self) -> None:
        self.journal.close()
