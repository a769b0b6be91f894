"""Command line: ``octosync serve`` and, as they land, journal and pipeline commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from octosync.pipeline import cli as pipeline_cli
from octosync.server.app import ServerConfig, build_app
from octosync.store import cli as store_cli


def _serve(args: argparse.Namespace) -> int:
    config = ServerConfig(
        host=args.host, port=args.port, data_dir=Path(args.data), insecure_dev=args.insecure_dev
    )
    config.data_dir.mkdir(parents=True, exist_ok=True)
    print(f"octosync serving on http://{config.host}:{config.port} (data in {config.data_dir})")
    web.run_app(build_app(config), host=config.host, port=config.port, print=None)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="octosync")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--data", default="./var", help="data directory (journal, snapshots)")
    serve.add_argument("--insecure-dev", action="store_true", help="allow anonymous use")
    serve.set_defaults(func=_serve)
    store_cli.register(sub)
    pipeline_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
