"""Emits device events forever, saving the machine after each and printing its sequencer.

The crash test kills this process with SIGKILL at an arbitrary moment.
"""

from __future__ import annotations

import sys
from pathlib import Path

from octosync.chain.device import DeviceClient
from octosync.chain.records import BootstrapComplete
from octosync.store.chain import DeviceStore


def main() -> None:
    store = DeviceStore(Path(sys.argv[1]))
    client = DeviceClient("w", store.load())
    client.connect()
    client.receive(BootstrapComplete(client.next_sequencer, change={"n": 0}))
    while True:  # bounded by the parent, which kills this process
        (event,) = client.emit("tick", f"payload-{client.next_sequencer}")
        if event.device_sequencer % 3 == 0:
            client.events.pop(event.device_sequencer - 2, None)  # some consumed
        client.state = {"n": event.device_sequencer}
        store.save(client.machine())
        sys.stdout.write(f"{event.device_sequencer}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
