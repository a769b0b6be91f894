"""Skeleton index vs brute force: assert+retract pairs/s and messages/s.

For each observer count, the same observers (five pattern families with varied constants) are
installed in the indexed ``Dataspace`` and in ``BruteForceDataspace``. The index asserts then
retracts every one of the assertions and sends the messages; the brute force, whose cost per
event grows with the number of observers, runs a prefix of the same workload (its rate per
event does not depend on how many assertions are present). Both runs count the events they
delivered on the shared prefix, which must agree. Values are built before timing. Times are
CPU time of this process (``time.process_time``), so other load on the machine skews them less;
on a quiet machine they equal wall time for this single-threaded work. As ``timeit`` does,
the cyclic garbage collector is paused inside timed sections (for both sides), so a full
collection over the benchmark's own 100,000 pre-built values is not charged to whichever
operation happens to trigger it.

    python bench/dataspace.py            # 1,000 and 10,000 observers, 100,000 assertions
    python bench/dataspace.py --quick    # smaller, to check that it works
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Callable
from typing import Any

from octosync.dataspace import BruteForceDataspace, Dataspace, Record, _, capture


def patterns(n: int) -> list[Any]:
    """``n`` interests in five families, each with its own constants."""
    out: list[Any] = []
    for i in range(n):
        family = i % 5
        j = i // 5
        if family == 0:
            out.append(Record("present", f"user{j}", capture()))
        elif family == 1:
            out.append(Record("speak", capture(), f"room{j}", _))
        elif family == 2:
            out.append(Record("item", f"shop{j % 50}", j, capture()))
        elif family == 3:
            out.append([f"tag{j}", capture()])
        else:
            out.append(Record("move", Record("pos", j, capture()), _))
    return out


def values(n: int, observers: int, rng: random.Random) -> list[Any]:
    """``n`` distinct values; each hits the constants of about one observer."""
    span = max(1, observers // 5)
    out: list[Any] = []
    for i in range(n):
        family = rng.randrange(5)
        j = rng.randrange(span)
        if family == 0:
            out.append(Record("present", f"user{j}", i))
        elif family == 1:
            out.append(Record("speak", f"who{i}", f"room{j}", "hello"))
        elif family == 2:
            out.append(Record("item", f"shop{j % 50}", j, i))
        elif family == 3:
            out.append([f"tag{j}", i])
        else:
            out.append(Record("move", Record("pos", j, i), "east"))
    return out


class Counter:
    """Counts events; the bound methods are the observers' callbacks."""

    def __init__(self) -> None:
        self.events = 0

    def hit(self, _caps: tuple[Any, ...]) -> None:
        self.events += 1


def install(space: Dataspace | BruteForceDataspace, pats: list[Any], counter: Counter) -> None:
    for p in pats:
        space.observe(p, on_add=counter.hit, on_remove=counter.hit, on_message=counter.hit)


def timed(work: Callable[[], object]) -> float:
    """CPU seconds spent in ``work``, with the cyclic GC paused as ``timeit`` does."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.process_time()
        work()
        return time.process_time() - t0
    finally:
        gc.enable()


def pairs(space: Dataspace | BruteForceDataspace, vals: list[Any]) -> float:
    """Seconds to assert every value and then retract every handle."""
    assert_, retract = space.assert_, space.retract

    def work() -> None:
        handles = [assert_(v) for v in vals]
        for h in handles:
            retract(h)

    return timed(work)


def messages(space: Dataspace | BruteForceDataspace, vals: list[Any]) -> float:
    send: Callable[[Any], None] = space.send

    def work() -> None:
        for v in vals:
            send(v)

    return timed(work)


def run(observers: int, n_values: int, n_oracle: int, seed: int) -> dict[str, float]:
    """One row: index and oracle on the same observers and values."""
    rng = random.Random(seed)
    pats = patterns(observers)
    vals = values(n_values, observers, rng)
    head = vals[:n_oracle]

    index_count, oracle_count = Counter(), Counter()
    index, oracle = Dataspace(), BruteForceDataspace()
    install(index, pats, index_count)
    install(oracle, pats, oracle_count)

    # Agreement on the shared prefix, before timing the index on the whole workload.
    pairs(index, head)
    pairs(oracle, head)
    if index_count.events != oracle_count.events:
        raise SystemExit(
            f"index and oracle disagree: {index_count.events} != {oracle_count.events}"
        )
    index_count.events = 0

    t_index = pairs(index, vals)
    t_oracle = pairs(oracle, head)
    t_index_msg = messages(index, vals)
    t_oracle_msg = messages(oracle, head)
    return {
        "observers": observers,
        "index_pairs": n_values / t_index,
        "oracle_pairs": n_oracle / t_oracle,
        "index_msgs": n_values / t_index_msg,
        "oracle_msgs": n_oracle / t_oracle_msg,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, to check it works")
    parser.add_argument("--values", type=int, default=None, help="assertions per run")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--observers", type=int, nargs="*", help="observer counts to run")
    args = parser.parse_args()
    sizes = args.observers or ([1_000, 2_000] if args.quick else [1_000, 10_000])
    n_values = args.values or (10_000 if args.quick else 100_000)
    print(f"{n_values:,} assertions asserted then retracted, then sent as messages")
    header = (
        f"{'observers':>9} | {'index pairs/s':>13} | {'oracle pairs/s':>14} | {'ratio':>7} |"
        f" {'index msgs/s':>12} | {'oracle msgs/s':>13} | {'ratio':>7}"
    )
    print(header)
    print("-" * len(header))
    for observers in sizes:
        n_oracle = max(50, min(n_values, 2_000_000 // observers))
        r = run(observers, n_values, n_oracle, args.seed)
        print(
            f"{observers:>9,} | {r['index_pairs']:>13,.0f} | {r['oracle_pairs']:>14,.0f} |"
            f" {r['index_pairs'] / r['oracle_pairs']:>6.0f}x |"
            f" {r['index_msgs']:>12,.0f} | {r['oracle_msgs']:>13,.0f} |"
            f" {r['index_msgs'] / r['oracle_msgs']:>6.0f}x"
        )
    print("oracle rates are measured on a prefix of the same workload (its cost is per event)")


if __name__ == "__main__":
    main()
