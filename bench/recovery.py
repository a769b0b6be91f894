"""Start-up recovery: rebuild every stream's latest state from a journal into a fresh hub.

Builds a journal of ``--streams`` lazily streams and ``--frames`` frames in all (a snapshot per
stream, then deltas interleaved across streams in accept order, as a busy server writes them),
checkpoints every stream once, appends ``--tail`` more frames per stream, then times:

- recovery as the server does it: each stream's checkpoint plus the frames after it, restored
  into a ``Hub`` (what ``serve`` does before it opens its port);
- the baseline in the same run: the same journal replayed from its first frame with no
  checkpoint (start-up time that grows with the journal's length).

Both must leave every stream at the same snapshot (checked). The journal lives in a temporary
directory (about 1 GB per 10 million frames) unless ``--data`` names one.

    python bench/recovery.py                       # 1,000 streams, 1,000,000 frames
    python bench/recovery.py --frames 10000000     # the figure in README
    python bench/recovery.py --quick               # 100 streams, 50,000 frames
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import msgspec

from octosync.hub import Hub, HubConfig
from octosync.ipc.messages import CellSet, Delta, NodeSnapshot, Snapshot
from octosync.store.journal import Journal
from octosync.store.records import KIND_FRAME, EncodedRecord, StreamFrame
from octosync.store.recovery import JournalState

NODES = 16
_encode = msgspec.msgpack.Encoder().encode


def _record(stream: str, msg: Snapshot | Delta) -> EncodedRecord:
    base = msg.epoch if isinstance(msg, Snapshot) else msg.base_epoch
    frame = StreamFrame(stream, base, msg.epoch, isinstance(msg, Snapshot), _encode(msg))
    return EncodedRecord(KIND_FRAME, stream, _encode(frame))


def build(journal: Journal, streams: int, frames: int, start_epoch: int, snapshot: bool) -> None:
    """Append ``frames`` frames round-robin over the streams, in transactions of 100,000."""
    names = [f"stream-{i:05d}" for i in range(streams)]
    batch: list[EncodedRecord] = []
    if snapshot:
        nodes = tuple(NodeSnapshot(n, "u64", "resolved", b"\0" * 8) for n in range(NODES))
        batch = [_record(s, Snapshot(0, nodes, roots=(0,))) for s in names]
        frames -= streams
    per_stream = frames // streams
    for k in range(per_stream):
        epoch = start_epoch + k
        for i, s in enumerate(names):
            value = (epoch * 31 + i).to_bytes(8, "big")
            batch.append(
                _record(s, Delta(epoch, epoch + 1, (CellSet((epoch + i) % NODES, value),)))
            )
        if len(batch) >= 100_000:
            journal.append_encoded(batch)
            batch = []
    journal.append_encoded(batch)


def recover(journal: Journal, *, use_checkpoints: bool) -> tuple[float, Hub, JournalState]:
    hub = Hub(HubConfig(), clock=time.monotonic)
    started = time.perf_counter()
    state = JournalState.load(journal, use_checkpoints=use_checkpoints)
    state.restore_into(hub)
    return time.perf_counter() - started, hub, state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument(
        "--tail", type=int, default=10, help="frames per stream after the checkpoint"
    )
    parser.add_argument("--data", default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.streams, args.frames = 100, 50_000
    with tempfile.TemporaryDirectory(prefix="octosync-recovery-") as tmp:
        data = Path(args.data or tmp)
        with Journal(data, durability="normal") as journal:
            if journal.latest_seq() == 0:
                t0 = time.perf_counter()
                build(journal, args.streams, args.frames, 0, snapshot=True)
                print(f"built {journal.latest_seq():,} frames in {time.perf_counter() - t0:.1f}s")
            t0 = time.perf_counter()
            state = JournalState.load(journal)
            due = state.checkpoints_due()
            journal.put_checkpoints(due)
            print(f"checkpointed {len(due):,} streams in {time.perf_counter() - t0:.1f}s")
            epoch = state.epoch_of("stream-00000") or 0
            build(journal, args.streams, args.streams * args.tail, epoch, snapshot=False)
            total = journal.latest_seq()
            fast, hub_fast, st_fast = recover(journal, use_checkpoints=True)
            slow, hub_slow, st_slow = recover(journal, use_checkpoints=False)
        for s in hub_fast.stream_ids():
            assert hub_fast.latest_snapshot(s) == hub_slow.latest_snapshot(s), s
        assert len(hub_fast.stream_ids()) == args.streams
        print(f"journal: {args.streams:,} streams, {total:,} frames")
        print(
            f"recovery from checkpoints: {fast:.2f}s "
            f"({st_fast.checkpoints_used:,} checkpoints + {st_fast.frames_folded:,} frames)"
        )
        print(f"baseline, full replay:     {slow:.2f}s ({st_slow.frames_folded:,} frames)")
        print(f"speed-up: {slow / fast:.0f}x")


if __name__ == "__main__":
    main()
