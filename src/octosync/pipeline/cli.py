"""``octosync pipeline compact|verify|report|cluster``: registered on the main parser by
``register``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from octosync import extras
from octosync.errors import ConfigError, OctosyncError, PipelineError
from octosync.paths import data_dir
from octosync.pipeline.jobs._stages import stderr_progress
from octosync.pipeline.layout import SERVER_COMPACTION_SUBDIR, STREAM_CHECKPOINT_SUBDIR
from octosync.pipeline.spark import DEFAULT_MASTER, build_session, parse_conf


def remote_url(args: argparse.Namespace) -> str | None:
    """Where a job runs: ``--remote``, else the Connect server ``pipeline server up`` started
    under ``--journal`` when it is running and no ``--master`` was given, else None (a
    session of its own).

    On that server a batch job without ``--conf`` joins the server's shared session, which
    earlier jobs have warmed (a new session's first plan costs about a second more); a
    stream (whose query lives as long as its session) and a job with settings of its own get
    a session of their own."""
    if args.remote is not None:
        return None if args.remote == "local" else str(args.remote)
    if args.master is not None:
        return None
    from octosync.pipeline.connect import running_url

    shared = args.pipeline_command != "stream" and not args.conf
    return running_url(Path(args.journal), shared=shared)


def _session(args: argparse.Namespace) -> Any:
    """Check the inputs first (seconds before Spark could say so), then start Spark or
    connect to the running Spark Connect server."""
    from octosync.pipeline.cluster import java_path
    from octosync.pipeline.inputs import check_input

    extras.require("pipeline", "this command")
    journal = data_dir(Path(args.journal), "--journal", create=False)
    out = getattr(args, "out", None)
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise ConfigError(f"--out {out} is a file; point --out at a directory")
    check_input(journal)
    conf = parse_conf(args.conf)
    url = remote_url(args)
    if url is not None:  # a Connect client: the server has the JVM
        from octosync.pipeline.connect import remote_session

        return remote_session(url, conf, timeout=args.master_timeout)
    java_path()  # no Java: one line now, not the JVM gateway's error naming a --master
    master = args.master or DEFAULT_MASTER
    local = master.startswith("local")
    return build_session(
        master,
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
        f"{done - job_started:.2f}s job, {done - started:.2f}s with Spark start-up"
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
    docs = f"{len(result.documents)} shared document{'' if len(result.documents) == 1 else 's'}"
    print(
        f"{result.document_edits} edits of {docs}, {result.ops} TopGun ops, "
        f"{result.conflicts} concurrent writes, {streams}: {result.index}"
    )
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


def _stream(args: argparse.Namespace) -> int:
    from octosync.pipeline.jobs import stream

    journal = Path(args.journal)
    out = Path(args.out) if args.out else journal / SERVER_COMPACTION_SUBDIR
    checkpoint = Path(args.checkpoint) if args.checkpoint else journal / STREAM_CHECKPOINT_SUBDIR
    query = stream.start(
        _session(args),
        journal,
        out,
        checkpoint,
        interval=args.interval,
        once=args.once,
        max_records=args.max_records_per_batch,
        progress=stderr_progress("stream"),
        **({} if args.driver_fold is None else {"driver_fold": args.driver_fold}),
    )
    try:
        if args.once:
            stream.wait_until_done(query)
        query.awaitTermination()
        failure = query.exception()
    except KeyboardInterrupt:
        query.stop()
        failure = None
    except Exception as exc:  # a Connect server that went away, among others
        failure = exc
    stream.record_progress(journal, checkpoint)  # what the last batches committed
    if failure is not None:
        first = str(failure).strip().splitlines()[0] if str(failure).strip() else "failed"
        raise PipelineError(f"the streaming query stopped: {first}", path=str(journal))
    meta = stream.read_meta(out)
    print(f"{meta.get('ops', 0)} ops up to seq {meta.get('as_of_seq', 0)} compacted in {out}")
    return 0


def _server_up(args: argparse.Namespace) -> int:
    from octosync.pipeline import connect

    data = data_dir(Path(args.data), "--data", create=True)
    state = connect.up(
        data,
        master=args.master,
        port=args.port,
        conf=parse_conf(args.conf),
        driver_memory=args.driver_memory,
        timeout=args.timeout,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(f"spark connect server up at {state.url} (master {state.master})")
    print(
        f"pipeline commands with --journal {args.data} now run on it; others: --remote "
        f"{state.job_url}"
    )
    print(f"stop: octosync pipeline server down --data {args.data}")
    return 0


def _server_down(args: argparse.Namespace) -> int:
    from octosync.pipeline import connect

    print(connect.down(Path(args.data), grace=args.grace))
    return 0


def _server_status(args: argparse.Namespace) -> int:
    from octosync.pipeline import connect

    state, line = connect.status(Path(args.data))
    print(f"spark connect server at {state.url}")
    print(f"  {line}")
    return 0 if "running" in line else 1


def _guarded(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = func(args)
        except ConfigError:
            raise  # the main command line says it, with exit status 2
        except OctosyncError as exc:
            words = " ".join(
                w
                for w in (
                    args.pipeline_command,
                    getattr(args, "cluster_command", None),
                    getattr(args, "server_command", None),
                )
                if w
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
        p.add_argument(
            "--master",
            default=None,
            help=f"Spark master URL for a session of the job's own ({DEFAULT_MASTER})",
        )
        p.add_argument(
            "--remote",
            default=None,
            metavar="sc://HOST:PORT",
            help="run as a client of this Spark Connect server ('local': never; default: the "
            "server `pipeline server up` started under --journal, when it runs)",
        )
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
            help="give up on a --master or --remote that has not answered in this time (60)",
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

    s = job("stream", "keep a compaction and op counts up with the journal (streaming)", _stream)
    s.add_argument(
        "--out", default=None, help="the compaction, kept current (default: JOURNAL/compacted)"
    )
    s.add_argument(
        "--checkpoint",
        default=None,
        help="the query's offsets and commits (default: JOURNAL/stream-checkpoint)",
    )
    s.add_argument(
        "--interval", type=float, default=1.0, metavar="SECONDS", help="between batches (1)"
    )
    s.add_argument("--once", action="store_true", help="one batch of what is there, then exit")
    s.add_argument(
        "--max-records-per-batch",
        type=int,
        default=None,
        metavar="N",
        help="at most N journal seqs per batch (200,000)",
    )
    s.add_argument(
        "--driver-fold",
        type=int,
        default=None,
        metavar="N",
        help="fold a batch on the driver when the records it joins plus its ops are at most N "
        "(1,000,000); larger ones, and every one with 0, by Spark's compaction",
    )

    _register_cluster(psub)
    _register_server(psub)


def _daemon_commands(
    psub: Any, group: str, help_text: str, data_help: str
) -> Callable[[str, str, Any], argparse.ArgumentParser]:
    """``pipeline GROUP up|down|status``: returns the maker of one subcommand with ``--data``."""
    parser = psub.add_parser(group, help=help_text)
    sub = parser.add_subparsers(dest=f"{group}_command", required=True)

    def command(name: str, help_text: str, func: Any) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
        p.add_argument("--data", default="./var", help=data_help)
        p.set_defaults(func=_guarded(func))
        return p

    return command


def _register_cluster(psub: Any) -> None:
    command = _daemon_commands(
        psub,
        "cluster",
        "a Spark standalone cluster on loopback, from the installed pyspark",
        "data dir; the cluster's pids, ports and logs go to DATA/spark-cluster",
    )

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


def _register_server(psub: Any) -> None:
    command = _daemon_commands(
        psub,
        "server",
        "a long-lived Spark Connect server on loopback, from the installed pyspark",
        "data dir; the server's state and log go to DATA/spark-connect",
    )

    up = command("up", "start the server on 127.0.0.1; jobs on DATA then run on it", _server_up)
    up.add_argument(
        "--master",
        default=DEFAULT_MASTER,
        help=f"where it runs jobs: local[N], a cluster's spark:// URL, or 'cluster': the one "
        f"`pipeline cluster up` started under --data ({DEFAULT_MASTER})",
    )
    up.add_argument("--port", type=int, default=15002, help="gRPC port (15002; 0 picks a free one)")
    up.add_argument("--driver-memory", default="2g", help="the server JVM's heap (2g)")
    up.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting"
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up when the server has not answered in this time (120)",
    )
    down = command("down", "stop the server (SIGTERM, then SIGKILL after --grace)", _server_down)
    down.add_argument(
        "--grace",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="wait this long after SIGTERM before SIGKILL (15)",
    )
    command(
        "status",
        "whether the server runs and answers (exit status 1 when it does not)",
        _server_status,
    )
