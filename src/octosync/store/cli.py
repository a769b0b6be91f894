"""``octosync journal export|generate|checkpoint|trim``: registered by ``register(sub)``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from octosync.errors import OctosyncError
from octosync.paths import data_dir


def _export(args: argparse.Namespace) -> int:
    from octosync.store.export import export
    from octosync.store.journal import Journal

    def progress(seq: int, stop: int) -> None:
        print(f"exported up to seq {seq} of {stop}", file=sys.stderr, flush=True)

    data = data_dir(Path(args.data), "--data", create=False)
    try:
        with Journal(data, readonly=True) as journal:
            result = export(journal, Path(args.to), chunk=args.chunk, progress=progress)
    except OctosyncError as exc:
        print(f"octosync journal export: {exc}", file=sys.stderr)
        return 2
    if result.records:
        print(
            f"exported seq {result.first_seq}..{result.last_seq}: "
            f"{result.records} records, {result.files} files"
        )
    else:
        print(f"nothing new to export (watermark at seq {result.last_seq})")
    return 0


def _generate(args: argparse.Namespace) -> int:
    from octosync.store.journal import Journal
    from octosync.store.synthetic import generate_records

    started = time.perf_counter()
    data = data_dir(Path(args.data), "--data", create=True)
    try:
        records = generate_records(args.ops, seed=args.seed)
        with Journal(data, durability=args.durability) as journal:
            first = journal.latest_seq() + 1
            for i in range(0, len(records), 10_000):
                journal.append(records[i : i + 10_000])
            last = journal.latest_seq()
    except OctosyncError as exc:
        print(f"octosync journal generate: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - started
    print(f"appended {len(records)} ops as seq {first}..{last} to {args.data} in {elapsed:.1f}s")
    return 0


def _checkpoint(args: argparse.Namespace) -> int:
    from octosync.store.journal import Journal
    from octosync.store.recovery import JournalState

    data = data_dir(Path(args.data), "--data", create=False)
    try:
        with Journal(data) as journal:
            state = JournalState.load(journal)
            due = state.checkpoints_due()
            journal.put_checkpoints(due)
    except OctosyncError as exc:
        print(f"octosync journal checkpoint: {exc}", file=sys.stderr)
        return 2
    print(f"checkpointed {len(due)} streams through seq {state.through_seq}")
    return 0


def _trim(args: argparse.Namespace) -> int:
    from octosync.store.export import read_watermark
    from octosync.store.journal import Journal

    data = data_dir(Path(args.data), "--data", create=False)
    try:
        watermark = read_watermark(Path(args.exported_to)) if args.exported_to else 0
        with Journal(data) as journal:
            result = journal.trim(args.before, exported_through=watermark)
    except OctosyncError as exc:
        print(f"octosync journal trim: {exc}", file=sys.stderr)
        return 2
    held = "" if result.held_at is None else " (a registered stream has read only that far)"
    print(f"trimmed {result.deleted} records below seq {result.before}{held}")
    return 0


def register(sub: Any) -> None:
    journal = sub.add_parser(
        "journal", help="the durable journal: export, generate, checkpoint, trim"
    )
    jsub = journal.add_subparsers(dest="journal_command", required=True)
    exp = jsub.add_parser("export", help="export new records to a Parquet dataset")
    exp.add_argument("--data", default="./var", help="data directory holding the journal")
    exp.add_argument("--to", required=True, help="dataset directory (keeps its watermark)")
    exp.add_argument("--chunk", type=int, default=100_000, help="records per file set")
    exp.set_defaults(func=_export)
    gen = jsub.add_parser("generate", help="append a synthetic op history")
    gen.add_argument("--data", default="./var", help="data directory holding the journal")
    gen.add_argument("--ops", type=int, required=True, help="number of op records")
    gen.add_argument("--seed", type=int, default=0, help="random seed (same seed, same history)")
    gen.add_argument(
        "--durability",
        choices=["full", "normal"],
        default="normal",
        help="fsync every commit (full) or at checkpoints (normal, the default)",
    )
    gen.set_defaults(func=_generate)
    ckp = jsub.add_parser("checkpoint", help="checkpoint every stream with frames since its last")
    ckp.add_argument("--data", default="./var", help="data directory holding the journal")
    ckp.set_defaults(func=_checkpoint)
    trim = jsub.add_parser(
        "trim", help="delete records below a seq (refused unless exported and checkpointed)"
    )
    trim.add_argument("--data", default="./var", help="data directory holding the journal")
    trim.add_argument("--before", type=int, required=True, help="delete records with seq < SEQ")
    trim.add_argument(
        "--exported-to",
        default=None,
        help="the export dataset whose watermark says what is exported (none: nothing is)",
    )
    trim.set_defaults(func=_trim)
