"""Takes device events into a link replica forever, committing after each with the durability
given, and prints each committed device sequencer; the crash test SIGKILLs it at any moment."""

from __future__ import annotations

import sys
from pathlib import Path

from octosync.chain.link import ChainLink
from octosync.chain.records import DeviceEvent
from octosync.store.chain import LinkStore


def main() -> None:
    store = LinkStore(Path(sys.argv[1]), durability=sys.argv[2])  # type: ignore[arg-type]
    link = ChainLink()
    d = 0
    while True:  # bounded by the parent, which kills this process
        d += 1
        link.receive_device_event("a", DeviceEvent(d, "tick", f"payload-{d}"))
        store.commit(link, epoch=1)
        sys.stdout.write(f"{d}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
