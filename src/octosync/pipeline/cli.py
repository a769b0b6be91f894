"""``octosync pipeline compact|verify|report|cluster``: registered on the main parser by
``register``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from octosync import extras
from octosync.errors import ConfigError, OctosyncError
from octosync.paths import data_dir
from octosync.pipeline.jobs._stages import stderr_progress
from octosync.pipeline.spark import DEFAULT_MASTER, build_session, parse_conf


def _session(args: argparse.Namespace) -> Any:
    """Check the inputs first (seconds before Spark could say so), then start Spark."""
    from octosync.pipeline.cluster import java_path
    from octosync.pipeline.inputs import check_input

    extras.require("pipeline", "this command")
    journal = data_dir(Path(args.journal), "--journal", create=False)
    out = getattr(args, "out", None)
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise ConfigError(f"--out {out} is a file; point --out at a directory")
    check_input(journal)
    java_path()  # no Java: one line now, not the JVM gateway's error naming a --master
    conf = parse_conf(args.conf)
    local = args.master.startswith("local")
    return build_session(
        args.master,
        conf,
        app_name=f"octosync-{args.pipeline_command}",
        verbose=args.verbose,
        start_timeout=None if local else args.master_timeout,
    )


def _compact(args: argparse.Namespace) -> int:
    from octosync.pipeline.jobs import compact

    started = time.perf_counter()
    spark = _session(args)
    job_started = time.perf_counter()
    result = compact.run(
        spark,
        Path(args.journal),
        Path(args.out),
        as_of_seq=args.as_of,
        gc_horizon_millis=args.gc_horizon_millis,
        progress=stderr_progress("compact"),
    )
    done = time.perf_counter()
    print(
        f"compacted {result.ops} ops (up to seq {result.as_of_seq}) into {result.rows} rows in "
        f"{done - job_started:.1f}s job, {done - started:.1f}s with Spark start-up"
    )
    for name, root in sorted(result.roots.items()):
        print(f"  {name}: merkle root {root}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from octosync.pipeline.jobs import verify

    result = verify.run(_session(args), Path(args.journal), progress=stderr_progress("verify"))
    if args.json:
        from msgspec import json as mjson

        print(json.dumps(json.loads(mjson.encode(result)), indent=2))
    else:
        print(result.render())
    return 0 if result.ok else 1


def _report(args: argparse.Namespace) -> int:
    from octosync.pipeline.jobs import report

    result = report.run(
        _session(args),
        Path(args.journal),
        Path(args.out),
        top=args.top,
        conflict_window_ms=args.conflict_window_ms,
        progress=stderr_progress("report"),
    )
    streams = f"{len(result.streams)} stream{'' if len(result.streams) == 1 else 's'}"
    print(f"{result.ops} ops, {result.conflicts} concurrent writes, {streams}: {result.index}")
    return 0


def _cluster_up(args: argparse.Namespace) -> int:
    from octosync.pipeline import cluster

    data = data_dir(Path(args.data), "--data", create=True)
    state = cluster.up(
        data,
        workers=args.workers,
        cores=args.worker_cores,
        memory=args.worker_memory,
        port=args.port,
        webui_port=args.webui_port,
        timeout=args.timeout,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(
        f"spark standalone cluster up: {len(state.workers)} workers "
        f"({state.cores} core(s), {state.memory} each); master web UI "
        f"http://{cluster.HOST}:{state.master.webui_port}/"
    )
    print(f"use: --master {state.url} --conf spark.executor.memory={state.memory}")
    print(f"stop: octosync pipeline cluster down --data {args.data}")
    return 0


def _cluster_down(args: argparse.Namespace) -> int:
    from octosync.pipeline import cluster

    for line in cluster.down(Path(args.data), grace=args.grace):
        print(line)
    return 0


def _cluster_status(args: argparse.Namespace) -> int:
    from octosync.pipeline import cluster

    state, lines = cluster.status(Path(args.data))
    print(f"cluster at {state.url}")
    for line in lines:
        print(f"  {line}")
    return 0


def _guarded(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = func(args)
        except ConfigError:
            raise  # the main command line says it, with exit status 2
        except OctosyncError as exc:
            words = " ".join(
                w for w in (args.pipeline_command, getattr(args, "cluster_command", None)) if w
            )
            print(f"octosync pipeline {words}: {exc}", file=sys.stderr)
            return 2
        return code

    return run


def register(sub: Any) -> None:
    pipeline = sub.add_parser("pipeline", help="PySpark jobs over the journal")
    psub = pipeline.add_subparsers(dest="pipeline_command", required=True)

    def job(name: str, help_text: str, func: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = psub.add_parser(name, help=help_text)
        p.add_argument("--journal", default="./var", help="data dir with the journal, or an export")
        p.add_argument("--master", default=DEFAULT_MASTER, help="Spark master URL")
        p.add_argument(
            "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting"
        )
        p.add_argument(
            "-v", "--verbose", action="store_true", help="show Spark's own log and progress bars"
        )
        p.add_argument(
            "--master-timeout",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="give up on a --master that has not answered in this time (60)",
        )
        p.set_defaults(func=_guarded(func))
        return p

    c = job("compact", "fold all ops into per-map state with Merkle roots", _compact)
    c.add_argument("--out", required=True, help="output directory (replaced atomically)")
    c.add_argument("--as-of", type=int, default=None, metavar="SEQ", help="fold ops up to this seq")
    c.add_argument(
        "--gc-horizon-millis",
        type=int,
        default=None,
        help="drop tombstones older than this HLC time",
    )
    v = job("verify", "replay stream frames: gaps, duplicates, hash mismatches", _verify)
    v.add_argument("--json", action="store_true", help="machine-readable output")
    r = job("report", "ops per minute, conflicts, hot keys: HTML with PNG charts", _report)
    r.add_argument("--out", required=True, help="directory for index.html, charts and CSVs")
    r.add_argument("--top", type=int, default=20, help="hot keys to list (20)")
    r.add_argument(
        "--conflict-window-ms",
        type=int,
        default=1_000,
        help="writes to one key from different origins this close count as a conflict (1000)",
    )

    _register_cluster(psub)


def _register_cluster(psub: Any) -> None:
    cluster = psub.add_parser(
        "cluster", help="a Spark standalone cluster on loopback, from the installed pyspark"
    )
    csub = cluster.add_subparsers(dest="cluster_command", required=True)

    def command(name: str, help_text: str, func: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = csub.add_parser(name, help=help_text)
        p.add_argument(
            "--data",
            default="./var",
            help="data dir; the cluster's pids, ports and logs go to DATA/spark-cluster",
        )
        p.set_defaults(func=_guarded(func))
        return p

    up = command(
        "up", "start a master and workers on 127.0.0.1; prints the --master URL", _cluster_up
    )
    up.add_argument("--workers", type=int, default=2, help="workers to start (2)")
    up.add_argument("--worker-cores", type=int, default=1, help="cores each worker offers (1)")
    up.add_argument("--worker-memory", default="1g", help="memory each worker offers (1g)")
    up.add_argument("--port", type=int, default=None, help="master port (default: a free port)")
    up.add_argument(
        "--webui-port", type=int, default=None, help="master web UI port (default: a free port)"
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        metavar="SECONDS",
        help="give up when the workers have not registered in this time (90)",
    )
    down = command("down", "stop the cluster (SIGTERM, then SIGKILL after --grace)", _cluster_down)
    down.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="wait this long after SIGTERM before SIGKILL (10)",
    )
    command("status", "the cluster's processes and what the master says of them", _cluster_status)
