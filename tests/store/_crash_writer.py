"""Appends to a journal forever, printing each acknowledged seq; the crash test kills it -9."""

from __future__ import annotations

import sys
from pathlib import Path

from octosync.crdt.op import OpKind, OpRecord
from octosync.crdt.timestamp import Timestamp
from octosync.store.journal import GroupCommitWriter
from octosync.store.records import StreamFrame


def main() -> None:
    data, durability = Path(sys.argv[1]), sys.argv[2]
    writer = GroupCommitWriter(data, durability=durability)  # type: ignore[arg-type]
    i = 0
    while True:  # bounded by the parent, which kills this process
        batch = [
            OpRecord(
                "m",
                f"k{i % 50}",
                OpKind.PUT,
                b"\xa5hello" * 20,
                Timestamp(i, 0, "w"),
                "w",
                f"w:{i}",
            ),
            StreamFrame(stream="s", base_epoch=i, epoch=i + 1, snapshot=False, payload=b"x" * 300),
        ]
        futures = [writer.submit(batch[:1]), writer.submit(batch[1:])]
        for fut in futures:
            for seq in fut.result():
                sys.stdout.write(f"{seq}\n")
        sys.stdout.flush()
        i += 1


if __name__ == "__main__":
    main()
