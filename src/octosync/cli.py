"""Command line: ``octosync serve`` and, as they land, journal and pipeline commands."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from octosync import __version__, extras
from octosync.cli_mistakes import one_line
from octosync.errors import ConfigError, ListenError, OctosyncError
from octosync.paths import data_dir
from octosync.store import cli as store_cli

INSECURE_BANNER = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
!!  octosync is running with --insecure-dev: connections WITHOUT a token get  !!
!!  read, publish and write on EVERY stream. Never expose this to a network.  !!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
"""


def _serve(args: argparse.Namespace) -> int:
    from octosync.server.config import ServerConfig, apply_flags, flags, load_config_file

    config = ServerConfig()
    if args.config:
        config = load_config_file(Path(args.config), config)
    given = {flag.name: getattr(args, _dest(flag.name)) for _s, _n, _k, flag in flags()}
    config = apply_flags(config, given, Path.cwd())  # checked as their TOML keys are
    config = replace(config, insecure_dev=args.insecure_dev, journal=not args.no_journal)
    from octosync.server.tls import server_context

    server_context(config.tls_cert, config.tls_key)  # a bad certificate: one line, before binding
    if config.cluster_url is not None:
        extras.require("cluster", "serve --cluster")
        from octosync.links import cluster_cli

        cluster_cli.check_serve_options(config.cluster_url, config.node_id)
    if config.chain_config is not None:
        extras.require("cluster", "serve --chain-config")
    try:
        config.check_exposure()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    data_dir(config.data_dir, "--data", create=True)
    from octosync.server.faces import serving_line  # the server, once the input is good
    from octosync.server.run import Started, serve_forever

    def ready(started: Started) -> None:
        # Only once every port is bound: a failed bind prints its one error line and nothing else.
        if config.insecure_dev:
            print(INSECURE_BANNER, file=sys.stderr, flush=True)
        elif not config.auth.configured:
            print(
                "octosync: no JWT key configured (--config with [auth]); every connection will "
                "be refused as Unauthorized. Use --insecure-dev for local development.",
                file=sys.stderr,
            )
        if config.cluster_url is not None:
            print(
                f"octosync: node {config.node_id or '(default id)'} joined the cluster at "
                f"{config.cluster_url}",
                file=sys.stderr,
                flush=True,
            )
        line = serving_line(config, started.port, started.tcp_ports, started.unix_sockets)
        print(line, flush=True)

    import asyncio

    asyncio.run(serve_forever(config, ready))
    return 0


def _dest(flag: str) -> str:
    """argparse's attribute for ``--flag-name``."""
    return flag.removeprefix("--").replace("-", "_")


def _stream_name(stream: str) -> str:
    """The stream argument, refused when it is plainly a server address put first."""
    if "://" in stream:
        raise ConfigError(
            f"{stream!r} is an address, not a stream name: name the stream first and give the "
            "server with --url (e.g. octosync watch scoreboard --url ws://HOST:PORT/lazily)",
            path="stream",
        )
    return stream


OTHER_FACES = ("wvp", "signal", "topgun", "dataspace", "chain")
"""The faces that do not speak the lazily protocol ``watch`` and ``publish-demo`` use."""


def lazily_url(url: str) -> str:
    """``--url``, refused in one line when it cannot be a ``/lazily`` endpoint: no scheme
    (``127.0.0.1:8765``), another face's path (``/wvp``), or no path at all."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if "://" not in url:
        host = url.strip("/").split("/")[0] or "127.0.0.1:8765"
        raise ConfigError(f"--url {url!r} has no scheme: use ws://{host}/lazily (wss:// with TLS)")
    if parts.scheme not in ("ws", "wss", "http", "https"):
        raise ConfigError(
            f"--url {url!r}: {parts.scheme}:// is not a WebSocket scheme: use "
            f"ws://{parts.netloc}/lazily (wss:// with TLS)"
        )
    path = parts.path.rstrip("/")
    segments = path.split("/")
    face = segments[-1] if segments[-1] in OTHER_FACES else None
    if len(segments) > 1 and segments[-2] == "chain":
        face = "chain"
    if face is not None:
        raise ConfigError(
            f"--url {url!r} is the /{face} face; watch and publish-demo speak "
            f"/lazily: use {parts.scheme}://{parts.netloc}/lazily"
        )
    if not path.endswith("/lazily"):
        raise ConfigError(
            f"--url {url!r} does not end in /lazily: use {parts.scheme}://{parts.netloc}/lazily"
        )
    return url


def _retries(value: int) -> int | None:
    return None if value < 0 else value


def _watch(args: argparse.Namespace) -> int:
    from octosync.client.tools import watch

    stream = _stream_name(args.stream)
    url = lazily_url(args.url)
    wait = None if args.wait <= 0 else args.wait
    coro = watch(
        url, stream, token=args.token, limit=args.limit, wait=wait, retries=_retries(args.retries)
    )
    import asyncio

    asyncio.run(coro)
    return 0


def _publish_demo(args: argparse.Namespace) -> int:
    from octosync.client.tools import publish_demo

    stream = _stream_name(args.stream)
    url = lazily_url(args.url)
    coro = publish_demo(
        url,
        stream,
        token=args.token,
        ticks=args.ticks,
        interval=args.interval,
        retries=_retries(args.retries),
    )
    import asyncio

    asyncio.run(coro)
    return 0


def _token(args: argparse.Namespace) -> int:
    import warnings

    from jwt.warnings import InsecureKeyLengthWarning

    from octosync.server.auth import issue_token

    streams = {}
    for grant in args.grant:
        name, sep, actions = grant.partition("=")
        wanted = [a for a in actions.split(",") if a]
        unknown = sorted(set(wanted) - {"read", "publish", "write"})
        if not sep or not name or not wanted or unknown:
            raise ConfigError(
                f"--grant {grant!r}: expected STREAM=ACTIONS with ACTIONS among read, publish, "
                "write (as in scoreboard=read,publish)"
            )
        streams[name] = wanted
    if not streams and not args.no_grants:
        raise ConfigError(
            "a token without --grant grants nothing (every stream refuses it): "
            "add --grant STREAM=read,publish,write (repeatable), or --no-grants to mint it anyway"
        )
    extra = {} if args.ttl is None else {"exp": int(time.time()) + args.ttl}
    size = len(args.secret.encode())
    if size < MIN_HS256_SECRET:  # our one line instead of PyJWT's multi-line warning
        print(
            f"octosync token: warning: --secret is {size} bytes; HS256 wants at least "
            f"{MIN_HS256_SECRET} (a short secret can be guessed, and with it any token minted)",
            file=sys.stderr,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureKeyLengthWarning)
        print(issue_token(args.secret, args.sub, streams, **extra))
    return 0


MIN_HS256_SECRET = 32
"""Bytes of an HS256 secret below which ``octosync token`` warns (RFC 7518, section 3.2)."""


HINTS: dict[str, str] = {
    "Unauthorized": "pass a valid --token (octosync token --secret ... issues one)",
    "Forbidden": "the token lacks that grant; issue one with --grant STREAM=read,publish,write",
    "ForbiddenPublish": "another producer publishes this stream: stop it or use another name",
    "HandshakeFailed": "is --url a /lazily endpoint of octosync serve?",
}
"""What to do about a refusal the server sent, by its error code."""


def describe(exc: BaseException, args: argparse.Namespace) -> tuple[str, int]:
    """One line saying what went wrong and how to fix it, and the exit status."""
    import aiohttp

    url = getattr(args, "url", None)
    if isinstance(exc, ConfigError):
        return str(exc), 2
    if isinstance(exc, ListenError):  # a refusal at start, as a bad setting is
        return f"{exc.name}: {exc}", 2
    if isinstance(exc, ModuleNotFoundError) and (extra := extras.extra_of(exc.name)):
        return str(extras.missing_extra(extra, "this command")), 2
    if isinstance(exc, OctosyncError):
        hint = HINTS.get(exc.name)
        if hint:  # a refusal from the server: its code and message, then what to do
            return f"{exc.name}: {exc.message} ({hint})", 1
        return f"{exc.name}: {exc}", 1
    if isinstance(exc, aiohttp.WSServerHandshakeError):
        return (
            f"{url}: the server refused the WebSocket upgrade (HTTP {exc.status} {exc.message}); "
            "is the path /lazily?",
            1,
        )
    if isinstance(exc, aiohttp.InvalidURL):
        return f"--url {url!r} is not a URL (expected ws://HOST:PORT/lazily)", 2
    if isinstance(exc, aiohttp.ClientConnectorCertificateError) and url:
        why = getattr(exc.certificate_error, "verify_message", None) or exc.certificate_error
        return (
            f"{url}: the server's TLS certificate is not trusted here (certificate verify "
            f"failed: {why}); point SSL_CERT_FILE at the CA that signed it",
            1,
        )
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError) and url:
        cause = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
        why = os.strerror(cause.errno) if cause.errno else str(cause)
        return f"cannot reach {url}: {why}; is octosync serve running there?", 1
    if isinstance(exc, aiohttp.ClientError | ConnectionError | TimeoutError) and url:
        return f"lost the connection to {url}: {exc or type(exc).__name__}", 1
    return f"unexpected {type(exc).__name__}: {exc} (run again with --debug for the traceback)", 1


DEFAULT_URL = "ws://127.0.0.1:8765/lazily"


def _stream_client(parser: argparse.ArgumentParser) -> None:
    """The arguments every command that connects to a stream takes."""
    parser.add_argument("stream", help="stream name")
    parser.add_argument(
        "--url", default=DEFAULT_URL, help=f"the server's lazily endpoint (default {DEFAULT_URL})"
    )
    parser.add_argument(
        "--token",
        default=None,
        help="JWT from 'octosync token' (needed unless the server runs --insecure-dev)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=10,
        help="reconnect attempts after losing the server, each one said on stderr (10; "
        "-1: forever)",
    )


def _mint(args: argparse.Namespace) -> int:
    from octosync.server.dataspace_key import load_or_create_secret

    try:
        secret = load_or_create_secret(Path(args.data))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read or create the dataspace key in {args.data}: {exc}"
        ) from None
    from octosync.syndicate import mint_text

    print(mint_text(secret, args.name))
    return 0


OPTIONAL_COMMANDS = (
    ("pipeline", "octosync.pipeline.cli", "PySpark jobs over the journal"),
    ("chain", "octosync.links.cli", "Octoprotocol chain replication"),
    ("cluster", "octosync.links.cluster_cli", "octosync servers as a cluster over NATS"),
)
"""Commands whose modules import an extra's packages: (command, module, help)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; when ``command`` (the first word of a run) is one of the
    optional commands, the others are left out: importing them (NATS, aiohttp) cost a pipeline
    job against a running Connect server a tenth of its time. ``octosync --help`` lists all."""
    parser = argparse.ArgumentParser(
        prog="octosync", description="Live state shared between one server and many clients."
    )
    parser.add_argument("--version", action="version", version=f"octosync {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (anywhere on the line)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the server", description="Run the server.")
    serve.add_argument(
        "--config", default=None, help="TOML file: [server] [auth] [hub] [signaling] [storage]"
    )
    serve.add_argument(
        "--insecure-dev", action="store_true", help="allow anonymous use (loopback only)"
    )
    serve.add_argument(
        "--no-journal", action="store_true", help="do not journal accepted stream frames"
    )
    if command is None or command == "serve" or command.startswith("-"):
        _setting_flags(serve)
    serve.set_defaults(func=_serve)
    watch = sub.add_parser(
        "watch",
        help="print a stream's mirrored state as JSON lines",
        description="Print a stream's mirrored state as one JSON line per state.",
    )
    _stream_client(watch)
    watch.add_argument("--limit", type=int, default=None, help="stop after N states")
    watch.add_argument(
        "--wait",
        type=float,
        default=10.0,
        help="seconds to wait for the stream's first state before saying nobody publishes it "
        "(10; 0: forever)",
    )
    watch.set_defaults(func=_watch)
    demo = sub.add_parser(
        "publish-demo",
        help="publish a demo scoreboard that keeps scoring",
        description="Publish a scoreboard (home, away, total) that scores a point per interval.",
    )
    _stream_client(demo)
    demo.add_argument("--ticks", type=int, default=None, help="stop after N points")
    demo.add_argument("--interval", type=float, default=1.0, help="seconds between points (1)")
    demo.set_defaults(func=_publish_demo)
    token = sub.add_parser(
        "token",
        help="issue an HS256 JWT granting stream actions",
        description="Issue an HS256 JWT granting read, publish or write per stream.",
    )
    token.add_argument("--secret", required=True, help="the server's [auth] hs256_secret")
    token.add_argument("--sub", default="dev", help="subject (who the token is for)")
    token.add_argument(
        "--grant", action="append", default=[], help="STREAM=read,publish,write (repeatable)"
    )
    token.add_argument(
        "--ttl", type=int, default=None, help="seconds until the token expires (default: never)"
    )
    token.add_argument(
        "--no-grants", action="store_true", help="mint a token that grants nothing (for tests)"
    )
    token.set_defaults(func=_token)
    dataspace = sub.add_parser("dataspace", help="the dataspace face (Syndicate protocol)")
    dataspace_sub = dataspace.add_subparsers(dest="dataspace_command", required=True)
    mint = dataspace_sub.add_parser("mint", help="print a sturdy ref to dataspace NAME")
    mint.add_argument("name", help="the dataspace the ref opens")
    mint.add_argument("--data", default="./var", help="data directory holding dataspace.key")
    mint.set_defaults(func=_mint)
    store_cli.register(sub)
    named = command in {name for name, _, _ in OPTIONAL_COMMANDS}
    for name, module, help_text in OPTIONAL_COMMANDS:
        if not named or name == command:
            _register_optional(sub, module, name, help_text)
    return one_line(parser)


def _setting_flags(serve: argparse.ArgumentParser) -> None:
    """The settings that are flags too, from their one declaration (``server.config``):
    each is checked as its TOML key is, when ``_serve`` applies it."""
    from octosync.server.config import ServerConfig, flags

    defaults = ServerConfig()
    for section, name, key, flag in flags():
        default = None if key.field is None else getattr(defaults, key.field)
        shown = "" if default is None else f"default {default}; "
        said = f"{flag.help or key.doc} ({shown}[{section}] {name})"
        serve.add_argument(flag.name, default=None, metavar=flag.metavar, help=said)


def _register_optional(sub: Any, module: str, command: str, help_text: str) -> None:
    """Register ``command`` from ``module``; when an extra it needs is not installed, register
    a stand-in that accepts any arguments and says, in one line, what to install."""
    try:
        register = importlib.import_module(module).register
    except ModuleNotFoundError as exc:
        extra = extras.extra_of(exc.name)
        if extra is None:
            raise
        stand_in = sub.add_parser(
            command,
            help=f"{help_text} (needs the {extra} extra: {extras.install_hint(extra)})",
            add_help=False,
            prefix_chars="\0",  # no options: every word goes to ``words``
        )
        stand_in.add_argument("words", nargs=argparse.REMAINDER)

        def refuse(args: argparse.Namespace) -> int:
            raise extras.missing_extra(extra, "this command")

        stand_in.set_defaults(func=refuse)
        return
    register(sub)


def _command(args: argparse.Namespace) -> str:
    """The command as typed (``journal export``), for the error line."""
    words = [args.command]
    for sub in ("journal_command", "pipeline_command", "chain_command", "cluster_command"):
        if getattr(args, sub, None):
            words.append(getattr(args, sub))
    return " ".join(words)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a mistake ends in one line on stderr and a non-zero exit."""
    words = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in words
    words = [w for w in words if w != "--debug"]
    args = build_parser(words[0] if words else None).parse_args(words)
    try:
        result: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if debug:
            raise
        line, status = describe(exc, args)
        print(f"octosync {_command(args)}: {line}", file=sys.stderr)
        return status
    return result


if __name__ == "__main__":
    sys.exit(main())
