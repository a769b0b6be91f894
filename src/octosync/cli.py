"""Command line: ``octosync serve`` and, as they land, journal and pipeline commands."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from octosync.links import cli as chain_cli
from octosync.pipeline import cli as pipeline_cli
from octosync.server.config import ServerConfig, load_config_file
from octosync.server.run import Started, serve_forever
from octosync.store import cli as store_cli

INSECURE_BANNER = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!!  octosync is running with --insecure-dev: connections WITHOUT a token get  !!
!!  read, publish and write on EVERY stream. Never expose this to a network.  !!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""


def _serve(args: argparse.Namespace) -> int:
    config = ServerConfig()
    if args.config:
        config = load_config_file(Path(args.config), config)
    overrides = {
        "host": args.host,
        "port": args.port,
        "tcp_port": args.tcp_port,
        "data_dir": Path(args.data) if args.data else None,
    }
    config = replace(config, **{k: v for k, v in overrides.items() if v is not None})
    config = replace(config, insecure_dev=args.insecure_dev, journal=not args.no_journal)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    if config.insecure_dev:
        print(INSECURE_BANNER, file=sys.stderr, flush=True)
    elif not config.auth.configured:
        print(
            "octosync: no JWT key configured (--config with [auth]); every connection will be "
            "refused as Unauthorized. Use --insecure-dev for local development.",
            file=sys.stderr,
        )
    try:
        config.check_exposure()
    except ValueError as exc:
        print(f"octosync: {exc}", file=sys.stderr)
        return 2
    faces = "/lazily /wvp /signal /metrics /healthz"

    def ready(started: Started) -> None:
        tcp = f", lazily over TCP on {config.host}:{started.tcp_port}" if started.tcp_port else ""
        print(
            f"octosync serving {faces} on http://{config.host}:{started.port}{tcp} "
            f"(data in {config.data_dir})",
            flush=True,
        )

    try:
        asyncio.run(serve_forever(config, ready))
    except OSError as exc:
        print(
            f"octosync: cannot listen on {config.host}:{config.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    return 0


def _watch(args: argparse.Namespace) -> int:
    from octosync.client.tools import watch

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(watch(args.url, args.stream, token=args.token, limit=args.limit))
    return 0


def _publish_demo(args: argparse.Namespace) -> int:
    from octosync.client.tools import publish_demo

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            publish_demo(
                args.url, args.stream, token=args.token, ticks=args.ticks, interval=args.interval
            )
        )
    return 0


def _token(args: argparse.Namespace) -> int:
    from octosync.server.auth import issue_token

    streams = {}
    for grant in args.grant:
        name, _, actions = grant.partition("=")
        streams[name] = [a for a in actions.split(",") if a]
    print(issue_token(args.secret, args.sub, streams))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="octosync")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the server")
    serve.add_argument("--host", default=None, help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="HTTP/WebSocket port (8765)")
    serve.add_argument("--data", default=None, help="data directory (default ./var)")
    serve.add_argument("--tcp-port", type=int, default=None, help="lazily over plain TCP")
    serve.add_argument("--config", default=None, help="TOML file: [server] [auth] [hub] ...")
    serve.add_argument("--insecure-dev", action="store_true", help="allow anonymous use")
    serve.add_argument(
        "--no-journal", action="store_true", help="do not journal accepted stream frames"
    )
    serve.set_defaults(func=_serve)
    default_url = "ws://127.0.0.1:8765/lazily"
    watch = sub.add_parser("watch", help="print a stream's mirrored state as JSON lines")
    watch.add_argument("stream")
    watch.add_argument("--url", default=default_url)
    watch.add_argument("--token", default=None)
    watch.add_argument("--limit", type=int, default=None, help="stop after N states")
    watch.set_defaults(func=_watch)
    demo = sub.add_parser("publish-demo", help="publish a demo scoreboard that keeps scoring")
    demo.add_argument("stream")
    demo.add_argument("--url", default=default_url)
    demo.add_argument("--token", default=None)
    demo.add_argument("--ticks", type=int, default=None, help="stop after N points")
    demo.add_argument("--interval", type=float, default=1.0)
    demo.set_defaults(func=_publish_demo)
    token = sub.add_parser("token", help="issue an HS256 JWT granting stream actions")
    token.add_argument("--secret", required=True)
    token.add_argument("--sub", default="dev")
    token.add_argument(
        "--grant", action="append", default=[], help="STREAM=read,publish,write (repeatable)"
    )
    token.set_defaults(func=_token)
    store_cli.register(sub)
    pipeline_cli.register(sub)
    chain_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
