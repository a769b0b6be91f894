"""Dataspace face benchmark: real syndicate-py clients in other processes, through octosync.

The server (``octosync serve --dataspace-port``) runs in its own process. Observer processes
install ``--observers`` observers between them, observer ``i`` watching ``<Item i $t>``
assertions and ``<Tick i $t>`` messages; publisher processes assert and retract ``<Item k t>``
(``k`` cycles over the observers, ``t`` the send time on CLOCK_MONOTONIC, shared by every
process here) in turns of ``--batch`` pairs, each turn followed by a sync, ``--window`` turns in
flight. Measured, all in the same run:

- ``face``: assert+retract pairs/s and messages/s that publishers got synced through the face,
  with the observers' deliveries counted; then latency from assert to observer delivery
  (p50/p99) with the publishers paced at ``--rate`` pairs/s in total;
- ``ceiling``: the same pairs and messages through the in-process ``Dataspace`` (this process,
  no wire, no actors): what the index costs;
- ``package``: the face again with the server on the ``preserves`` package's codec instead of
  its fast path (``wire.preserves_fast``), the before of the same run;
- ``peer``: syndicate-py's own in-process actor machinery doing the same deliveries (a turn that
  publishes and retracts to the observer's entity, or sends to it) with no network and no index:
  what the client library's turns cost per event.

    python bench/dataspace_face.py            # 100 observers, 2 publishers, 5 s phases, TCP
    python bench/dataspace_face.py --quick    # 20 observers, 1 publisher, 2 s phases
    python bench/dataspace_face.py --transport ws
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# --- roles run in child processes (syndicate-py programs) ------------------------------------


def connect(address: str, ref_text: str, on_ds: Any) -> None:
    """Resolve ``ref_text`` at ``address`` with syndicate-py, then ``on_ds(ds)`` (the interop
    tests' peer program does the connecting, so both use the same client code)."""
    sys.path.insert(0, str(ROOT))
    from tests.e2e.syndicate_peer import connect as peer_connect

    peer_connect(address, ref_text, on_ds)


def report_on_stdin_eof(stats: dict[str, Any]) -> None:
    """The parent closes our stdin to ask for the figures; print them and exit."""

    def wait() -> None:
        sys.stdin.read()
        stats["cpu_s"] = time.process_time()
        print(json.dumps(stats), flush=True)
        os._exit(0)

    threading.Thread(target=wait, daemon=True).start()


def role_observer(args: argparse.Namespace) -> None:
    from syndicate import patterns as P  # noqa: N812
    from syndicate import turn
    from syndicate.dataspace import during, on_message

    stats: dict[str, Any] = {"adds": 0, "removes": 0, "messages": 0, "latencies": []}
    report_on_stdin_eof(stats)

    def on_ds(ds: Any) -> None:
        for i in range(args.first, args.first + args.count):

            @during(ds, P.rec("Item", P.lit(i), P.CAPTURE))
            def item(t: float) -> Any:
                stats["adds"] += 1
                if stats.get("timing"):
                    stats["latencies"].append(time.monotonic() - t)

                def gone() -> None:
                    stats["removes"] += 1

                return gone

            @on_message(ds, P.rec("Tick", P.lit(i), P.CAPTURE))
            def tick(t: float) -> None:
                stats["messages"] += 1

            @on_message(ds, P.rec("Timing", P.lit(i)))
            def timing() -> None:
                stats["timing"] = True

        turn.sync(ds, lambda: print("ready", flush=True))

    connect(args.address, args.ref, on_ds)


def role_publisher(args: argparse.Namespace) -> None:
    from syndicate import Record, Symbol, turn

    item, tick = Symbol("Item"), Symbol("Tick")
    stats: dict[str, Any] = {"pairs": 0, "messages": 0}
    report_on_stdin_eof(stats)
    n = args.observers

    def on_ds(ds: Any) -> None:
        facet = turn.active_facet()
        deadline = time.monotonic() + args.seconds
        print("ready", flush=True)  # the parent times the phase from here
        k = [args.offset]

        def throughput(kind: str) -> None:
            if time.monotonic() >= deadline:
                return
            for _ in range(args.batch):
                i = k[0] % n
                k[0] += 1
                if kind == "pairs":
                    h = turn.publish(ds, Record(item, [i, time.monotonic()]))
                    turn.retract(h)
                else:
                    turn.send(ds, Record(tick, [i, time.monotonic()]))

            def synced() -> None:
                if time.monotonic() < deadline:
                    stats[kind] += args.batch
                throughput(kind)

            turn.sync(ds, synced)

        if args.phase in ("pairs", "messages"):
            for _ in range(args.window):
                throughput(args.phase)
            return

        # latency: paced pairs, ``args.rate`` per second from this publisher
        for i in range(n):
            turn.send(ds, Record(Symbol("Timing"), [i]))
        step = 0.005

        async def pace(_facet: Any) -> bool:
            start = time.monotonic()
            ticks = 0
            while time.monotonic() < deadline:
                ticks += 1
                due = int(ticks * step * args.rate)  # exactly ``rate`` pairs per second

                def burst(due: int = due) -> None:
                    for _ in range(due - stats["pairs"]):
                        i = k[0] % n
                        k[0] += 1
                        h = turn.publish(ds, Record(item, [i, time.monotonic()]))
                        turn.retract(h)
                    stats["pairs"] = due

                turn.external(facet, burst)
                await asyncio.sleep(max(0.0, start + ticks * step - time.monotonic()))
            return True

        facet.linked_task(pace)

    connect(args.address, args.ref, on_ds)


def role_peer(args: argparse.Namespace) -> None:
    """syndicate-py in-process: the same deliveries as turns to the observers' entities."""
    from syndicate import Record, Symbol, actor, turn
    from syndicate.during import During

    n, pairs, messages = args.observers, args.pairs, args.pairs
    counts = {"adds": 0, "removes": 0, "messages": 0}
    result: dict[str, float] = {}

    @actor.run_system(name="peer", configure_logging=False)
    def boot() -> None:
        turn.prevent_inert_check()

        def on_add(*_: Any) -> Any:
            counts["adds"] += 1

            def gone() -> None:
                counts["removes"] += 1

            return gone

        def on_msg(*_: Any) -> None:
            counts["messages"] += 1

        refs = [turn.ref(During().add_handler(on_add).msg_handler(on_msg)) for _ in range(n)]
        item, tick = Symbol("Item"), Symbol("Tick")
        batch = args.batch
        state = {"done": 0, "t0": time.process_time()}

        def pairs_batch() -> None:
            for j in range(batch):
                i = (state["done"] + j) % n
                h = turn.publish(refs[i], Record(item, [i, 0.0]))
                turn.retract(h)
            state["done"] += batch
            turn.sync(refs[0], pairs_batch if state["done"] < pairs else pairs_done)

        def pairs_done() -> None:
            result["pairs_s"] = pairs / (time.process_time() - state["t0"])
            state["done"] = 0
            state["t0"] = time.process_time()
            messages_batch()

        def messages_batch() -> None:
            for j in range(batch):
                i = (state["done"] + j) % n
                turn.send(refs[i], Record(tick, [i, 0.0]))
            state["done"] += batch
            turn.sync(refs[0], messages_batch if state["done"] < messages else messages_done)

        def messages_done() -> None:
            result["messages_s"] = messages / (time.process_time() - state["t0"])
            assert counts["adds"] == counts["removes"] == pairs, counts
            assert counts["messages"] == messages, counts
            print(json.dumps(result), flush=True)
            os._exit(0)

        pairs_batch()


# --- the parent --------------------------------------------------------------------------------


def ceiling(observers: int, pairs: int) -> dict[str, float]:
    """The in-process index: the same pairs and messages, CPU time of this process."""
    import gc

    from octosync.dataspace import Dataspace, Record, capture
    from octosync.dataspace.values import Symbol

    ds = Dataspace()
    counts = [0, 0, 0]
    item, tick = Symbol("Item"), Symbol("Tick")
    for i in range(observers):
        ds.observe(
            Record(item, i, capture()),
            lambda c: counts.__setitem__(0, counts[0] + 1),
            lambda c: counts.__setitem__(1, counts[1] + 1),
        )
        ds.observe(
            Record(tick, i, capture()), on_message=lambda c: counts.__setitem__(2, counts[2] + 1)
        )
    items = [Record(item, k % observers, float(k)) for k in range(pairs)]
    ticks = [Record(tick, k % observers, float(k)) for k in range(pairs)]
    gc.disable()
    try:
        t0 = time.process_time()
        for v in items:
            ds.retract(ds.assert_(v))  # noqa: PT009
        t1 = time.process_time()
        for v in ticks:
            ds.send(v)
        t2 = time.process_time()
    finally:
        gc.enable()
    assert counts == [pairs, pairs, pairs], counts
    return {"pairs_s": pairs / (t1 - t0), "messages_s": pairs / (t2 - t1)}


def spawn(role: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE), "--role", role, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )


def collect(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.close()
    line = proc.stdout.readline()
    proc.wait(timeout=10)
    result: dict[str, Any] = json.loads(line)
    return result


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_face(args: argparse.Namespace, codec: str = "fast") -> dict[str, Any]:
    """The face phases against a fresh server; ``codec``: ``fast`` (the server's Preserves
    fast path) or ``package`` (the ``preserves`` package's codec, the baseline)."""
    from octosync.server.dataspace_key import load_or_create_secret
    from octosync.syndicate import mint_text

    data = Path(tempfile.mkdtemp(prefix="octosync-bench-"))
    ref = mint_text(load_or_create_secret(data), "bench")
    http, port = free_port(), free_port()
    journal = [] if args.journal else ["--no-journal"]
    server = subprocess.Popen(
        [sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev", *journal,
         "--port", str(http), "--dataspace-port", str(port), "--data", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        env={**os.environ, "OCTOSYNC_PRESERVES": codec},
    )  # fmt: skip
    assert server.stdout is not None
    assert "serving" in server.stdout.readline()
    if args.transport == "tcp":
        address = f'<tcp "127.0.0.1" {port}>'
    else:
        address = f'<ws "ws://127.0.0.1:{http}/dataspace">'
    common = ["--address", address, "--ref", ref, "--observers", str(args.observers),
              "--clients", args.clients]  # fmt: skip
    out: dict[str, Any] = {}
    try:
        per = -(-args.observers // args.observer_procs)
        observers = []
        for first in range(0, args.observers, per):
            count = min(per, args.observers - first)
            observers.append(
                spawn("observer", *common, "--first", str(first), "--count", str(count))
            )
        for o in observers:
            assert o.stdout is not None
            assert o.stdout.readline().strip() == "ready"
        for phase in ("pairs", "messages", "latency"):
            cpu0 = cpu_seconds(server.pid)
            pubs = [
                spawn("publisher", *common, "--phase", phase, "--seconds", str(args.seconds),
                      "--batch", str(args.batch), "--window", str(args.window),
                      "--rate", str(args.rate / args.publishers), "--offset", str(p))
                for p in range(args.publishers)
            ]  # fmt: skip
            for p in pubs:  # connected: a slow start must not eat into the phase
                assert p.stdout is not None
                assert p.stdout.readline().strip() == "ready"
            time.sleep(args.seconds + 1.0)
            done = [collect(p) for p in pubs]
            cpu = cpu_seconds(server.pid) - cpu0
            out[phase] = {
                "per_s": sum(d[phase if phase != "latency" else "pairs"] for d in done)
                / args.seconds,
                "server_cpu_s": cpu,
                "publisher_cpu_s": sum(d["cpu_s"] for d in done),
            }
        stats = [collect(o) for o in observers]
        latencies = [x for s in stats for x in s["latencies"]]
        out["latency"]["p50_ms"] = 1000 * percentile(latencies, 0.50)
        out["latency"]["p99_ms"] = 1000 * percentile(latencies, 0.99)
        out["latency"]["samples"] = len(latencies)
        out["delivered"] = {k: sum(s[k] for s in stats) for k in ("adds", "removes", "messages")}
        out["observer_cpu_s"] = sum(s["cpu_s"] for s in stats)
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=10)
        if server.returncode is None:
            server.kill()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--role", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--transport", choices=("tcp", "ws"), default="tcp")
    parser.add_argument(
        "--clients", choices=("lean", "syndicate"), default="lean",
        help="publishers and observers: raw-socket clients (bench/dataspace_lean.py, TCP only) "
        "or syndicate-py programs",
    )  # fmt: skip
    parser.add_argument(
        "--journal",
        action="store_true",
        help="the server journals every assertion, retraction and message (as serve does)",
    )
    parser.add_argument("--observers", type=int, default=100)
    parser.add_argument("--observer-procs", type=int, default=2)
    parser.add_argument("--publishers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--rate", type=float, default=1000.0, help="pairs/s in the latency phase")
    parser.add_argument("--pairs", type=int, default=50_000, help="in-process runs")
    for name in ("--address", "--ref", "--phase"):
        parser.add_argument(name, default="", help=argparse.SUPPRESS)
    for name in ("--first", "--count", "--offset"):
        parser.add_argument(name, type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role in ("observer", "publisher") and args.clients == "lean":
        sys.path.insert(0, str(HERE.parent))
        import dataspace_lean

        return dataspace_lean.run(args.role, args, report_on_stdin_eof)
    if args.role == "observer":
        return role_observer(args)
    if args.role == "publisher":
        return role_publisher(args)
    if args.role == "peer":
        return role_peer(args)
    if args.quick:
        args.observers, args.publishers, args.seconds, args.pairs = 20, 1, 2.0, 10_000
    if args.clients == "lean" and args.transport != "tcp":
        parser.error("the lean clients speak TCP only: --clients syndicate for --transport ws")
    load = os.getloadavg()[0]
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs (other work skews these figures)")
    print(f"dataspace face: {args.observers} observers, {args.publishers} publishers, "
          f"{args.transport}, {args.clients} clients, {args.seconds:g} s per phase, "
          f"batches of {args.batch}, window {args.window}, "
          f"journal {'on' if args.journal else 'off'}", flush=True)  # fmt: skip
    baseline = run_face(args, "package")
    face = run_face(args, "fast")
    top = ceiling(args.observers, args.pairs)
    peer_proc = spawn("peer", "--observers", str(args.observers), "--pairs", str(args.pairs),
                      "--batch", str(args.batch))  # fmt: skip
    assert peer_proc.stdout is not None
    peer = json.loads(peer_proc.stdout.readline())
    peer_proc.wait(timeout=30)
    pairs, msgs, lat = face["pairs"], face["messages"], face["latency"]
    pair_us = 1e6 * pairs["server_cpu_s"] / max(1.0, pairs["per_s"] * args.seconds)
    msg_us = 1e6 * msgs["server_cpu_s"] / max(1.0, msgs["per_s"] * args.seconds)
    print(
        f"  face     pairs/s {pairs['per_s']:>10,.0f}   messages/s {msgs['per_s']:>10,.0f}"
        f"   (server CPU {pair_us:,.0f} us per pair, {msg_us:,.0f} us per message)"
    )
    b_pairs, b_msgs = baseline["pairs"], baseline["messages"]
    b_pair_us = 1e6 * b_pairs["server_cpu_s"] / max(1.0, b_pairs["per_s"] * args.seconds)
    b_msg_us = 1e6 * b_msgs["server_cpu_s"] / max(1.0, b_msgs["per_s"] * args.seconds)
    print(
        f"  package  pairs/s {b_pairs['per_s']:>10,.0f}   messages/s {b_msgs['per_s']:>10,.0f}"
        f"   (server CPU {b_pair_us:,.0f} us per pair, {b_msg_us:,.0f} us per message;"
        " the same face on the preserves package's codec)"
    )
    print(
        f"  fast path: server CPU per pair {b_pair_us / max(pair_us, 1e-9):.2f}x less, "
        f"per message {b_msg_us / max(msg_us, 1e-9):.2f}x less; p99 at 1,000 pairs/s "
        f"{baseline['latency']['p99_ms']:.2f} ms -> {lat['p99_ms']:.2f} ms"
    )
    print(
        f"  ceiling  pairs/s {top['pairs_s']:>10,.0f}   messages/s {top['messages_s']:>10,.0f}"
        "   (in-process Dataspace, CPU time)"
    )
    print(
        f"  peer     pairs/s {peer['pairs_s']:>10,.0f}   messages/s {peer['messages_s']:>10,.0f}"
        "   (syndicate-py turns in-process, no index, CPU time)"
    )
    print(
        f"  ratios   face/ceiling {pairs['per_s'] / top['pairs_s']:.2f} pairs, "
        f"{msgs['per_s'] / top['messages_s']:.2f} messages; "
        f"face/peer {pairs['per_s'] / peer['pairs_s']:.2f} pairs, "
        f"{msgs['per_s'] / peer['messages_s']:.2f} messages"
    )
    print(
        f"  latency  at {lat['per_s']:,.0f} pairs/s: p50 {lat['p50_ms']:.2f} ms, "
        f"p99 {lat['p99_ms']:.2f} ms ({lat['samples']} samples)"
    )
    print(
        f"  observers got {face['delivered']['adds']:,} adds, {face['delivered']['removes']:,}"
        f" removes, {face['delivered']['messages']:,} messages "
        f"(observer processes' CPU {face['observer_cpu_s']:.1f} s in all phases)"
    )
    print("  CPU per phase: " + ", ".join(
        f"{k} server {face[k]['server_cpu_s']:.1f} s publishers {face[k]['publisher_cpu_s']:.1f} s"
        for k in ("pairs", "messages", "latency")))  # fmt: skip
    target_pairs, target_p99 = 20_000, 20.0
    print(f"  targets  >= {target_pairs:,} pairs/s: "
          f"{'met' if pairs['per_s'] >= target_pairs else 'NOT met'}; p99 < {target_p99:g} ms "
          f"at 1,000 pairs/s: {'met' if lat['p99_ms'] < target_p99 else 'NOT met'}")  # fmt: skip
    lost = sum(lost_deliveries(run, args.seconds) for run in (face, baseline))
    print(f"  deliveries lost {lost}")
    if lost:
        raise SystemExit(1)


def lost_deliveries(run: dict[str, Any], seconds: float) -> int:
    """Pairs and messages that publishers got synced but no observer saw, plus assertions
    added and never removed (every assertion is retracted in the same turn)."""
    got = run["delivered"]
    synced_pairs = round((run["pairs"]["per_s"] + run["latency"]["per_s"]) * seconds)
    synced_messages = round(run["messages"]["per_s"] * seconds)
    return (
        max(0, synced_pairs - got["adds"])
        + max(0, synced_messages - got["messages"])
        + abs(got["adds"] - got["removes"])
    )


if __name__ == "__main__":
    main()
