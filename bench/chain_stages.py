"""Where an event's time goes in one chain link: each stage of a middle link's batches, timed.

One middle link (``Membership`` around a ``ChainLink``) in this process, its replica in a real
SQLite file (``LinkStore``, the durability given), no sockets: a batch of events arrives from
upstream as encoded frames, is decoded, ingested, committed and only then sent down (encoded);
then the tail's acknowledgement comes back up and is relayed at once (it covers only what this
link committed before it sent it), and a state change consuming the batch is committed and
relayed.
Each stage's time is divided by the events of the batch, for several batch sizes (a link
takes whatever queued while its previous batch ran, so its batches grow with the load). The
socket reads and writes are not here: ``bench/chain.py`` measures the whole chain.

Usage::

    python bench/chain_stages.py                       # batches of 1, 8 and 64; full and normal
    python bench/chain_stages.py --durability full --batches 8 --events 4000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from octosync.chain.config import Member
from octosync.chain.link import ChainLink
from octosync.chain.link_frames import Forward
from octosync.chain.membership import Membership, Peer
from octosync.chain.records import ChainAck, ChainStateMachine, Event, StateChange
from octosync.store.chain import Durability, LinkStore
from octosync.wire import chain_link
from octosync.wire.framing import FrameDecoder

UP, DOWN = 1, 2
STAGES = ("decode", "ingest", "commit", "send down", "relay ack", "state up")


def middle_link() -> Membership:
    link = ChainLink(ChainStateMachine(), has_upstream=True, has_downstream=True)
    core = Membership(Member("n2", "127.0.0.1", 1), link=link)
    core.up, core.peers[UP] = UP, Peer(kind="up", peer="n1")
    core.down, core.peers[DOWN] = DOWN, Peer(kind="down", peer="n3", attached=True)
    return core


def encoded_batch(first: int, size: int) -> bytes:
    return b"".join(
        chain_link.encode(Forward(0, Event(f"device{c % 20}", c, c, "move", '{"dx":1}')))
        for c in range(first, first + size)
    )


def run(size: int, events: int, durability: Durability, folder: Path) -> dict[str, float]:
    """Microseconds per event in each stage, over ``events`` events in batches of ``size``."""
    store = LinkStore(folder / f"n2-{durability}-{size}.sqlite", durability=durability)
    core = middle_link()
    decoder = FrameDecoder(chain_link.MAX_FRAME)
    spent = dict.fromkeys(STAGES, 0.0)
    first, sequencer = 1, 1
    clock = time.perf_counter
    try:
        for _ in range(max(1, events // size)):
            wire = encoded_batch(first, size)
            t0 = clock()
            frames = [chain_link.decode(p) for p in decoder.feed(wire)]
            t1 = clock()
            for frame in frames:
                core.receive(UP, frame)
            t2 = clock()
            store.commit(core.link, 0)
            t3 = clock()
            b"".join(chain_link.encode(d.frame) for d in core.flush())
            t4 = clock()
            kill = tuple(range(first, first + size))
            up = chain_link.encode(Forward(0, ChainAck(first + size - 1))) + chain_link.encode(
                Forward(
                    0, StateChange(change={"moves": first}, event_kill=kill, sequencer=sequencer)
                )
            )
            t5 = clock()
            for frame in [chain_link.decode(p) for p in decoder.feed(up)]:
                core.receive(DOWN, frame)
            b"".join(chain_link.encode(d.frame) for d in core.flush_relayed())
            t6 = clock()
            store.commit(core.link, 0)
            b"".join(chain_link.encode(d.frame) for d in core.flush())
            t7 = clock()
            for stage, took in zip(
                STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t6 - t5, t7 - t6), strict=True
            ):
                spent[stage] += took
            first += size
            sequencer += 1
    finally:
        store.close()
    done = max(1, events // size) * size
    return {stage: 1e6 * took / done for stage, took in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--durability", choices=["full", "normal", "both"], default="both")
    parser.add_argument("--batches", default="1,8,64", help="events per batch, comma-separated")
    parser.add_argument("--events", type=int, default=4000, help="events per batch size")
    args = parser.parse_args()
    kinds: list[Durability] = ["full", "normal"] if args.durability == "both" else [args.durability]
    print(f"load: {os.getloadavg()[0]:.1f} (1-min average), {os.cpu_count()} cores")
    print("one middle link, microseconds per event in each stage of its batches:")
    print("| durability | batch | " + " | ".join(STAGES) + " | total |")
    print("| --- | ---: | " + " | ".join("---:" for _ in STAGES) + " | ---: |")
    with tempfile.TemporaryDirectory(prefix="octosync-chain-stages-") as tmp:
        for durability in kinds:
            for size in (int(x) for x in args.batches.split(",")):
                us = run(size, args.events, durability, Path(tmp))
                cells = " | ".join(f"{us[s]:.1f}" for s in STAGES)
                print(f"| {durability} | {size} | {cells} | {sum(us.values()):.1f} |")


if __name__ == "__main__":
    main()
