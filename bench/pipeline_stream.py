"""How far ``pipeline stream``'s compaction lags a journal growing at ``--rate`` ops/s.

Two runs on the same machine, one after the other, each on a fresh journal growing at the same
rate for the same time: micro-batches folded on the driver (the default), and the baseline,
every micro-batch compacted by Spark (``--driver-fold 0``: what every batch did before). For
each tenth of a second's appends, the lag is the time from its commit until
``compaction.json`` covers it; printed as p50, p99 and max, with the ratio of the p99s.

    python bench/pipeline_stream.py                 # 20,000 ops/s for 20 s
    python bench/pipeline_stream.py --rate 5000 --seconds 10
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from pipeline import load, stream_lag  # bench/pipeline.py, beside this file


def percentiles(lags: list[float]) -> tuple[float, float, float]:
    lags = sorted(lags)
    return lags[len(lags) // 2], lags[min(len(lags) - 1, int(len(lags) * 0.99))], lags[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=int, default=20_000, help="ops/s appended (20,000)")
    ap.add_argument("--seconds", type=float, default=20.0, help="seconds of appends (20)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="octosync-stream-bench-"))
    try:
        runs = [("driver fold", ())]
        if not args.skip_baseline:
            runs.append(("baseline: Spark compaction per batch", ("--driver-fold", "0")))
        p99s = []
        for name, extra in runs:
            lags, n = stream_lag(tmp, args.master, args.rate, args.seconds, *extra)
            p50, p99, top = percentiles(lags)
            p99s.append(p99)
            print(
                f"pipeline stream ({args.master}, 0.5 s trigger, {name}): journal growing by "
                f"{args.rate:,} ops/s for {args.seconds:g} s ({n:,} ops): lag p50 {p50:.1f}s, "
                f"p99 {p99:.1f}s, max {top:.1f}s (target p99 <= 5 s); {load()}",
                flush=True,
            )
        if len(p99s) == 2:
            print(f"p99 lag: baseline / driver fold = {p99s[1] / p99s[0]:.1f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
