"""Server configuration: command-line flags over an optional TOML file over defaults."""

from __future__ import annotations

import difflib
import ipaddress
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from octosync.errors import ConfigError, Unauthorized
from octosync.hub.limits import Limits
from octosync.pipeline.layout import SERVER_COMPACTION_SUBDIR
from octosync.server.auth import AuthConfig, ExchangeProvider, role_tables
from octosync.signaling import SignalingPolicy


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    data_dir: Path = Path("./var")
    insecure_dev: bool = False
    tcp_port: int | None = None
    dataspace_port: int | None = None
    """Syndicate's protocol over plain TCP (the dataspace face); None: WebSocket only."""
    wvp_socket: str | None = None
    """A Unix socket path on which WVP is served as bare JS-ABI packets; None: none."""
    lazily_socket: str | None = None
    """A Unix socket path on which lazily is served as on ``tcp_port`` (u32-framed, the
    state plane and shared documents); None: none."""
    shm_capacity: int = 256 * 1024 * 1024
    """Bytes of the shared-memory region that carries large payloads to subscribers that
    negotiated ``shared-blob`` (made on first use; tmpfs pages are taken as written)."""
    shm_threshold: int = 64 * 1024
    """Payloads of at least this many bytes go to such subscribers through shared memory."""
    chain_config: str | None = None
    """NATS URL of the chain configurations; set: ``/chain/{name}`` relays browser devices to
    each chain's head (``server.chain_face``). None: no chain face."""
    dataspace_secret: bytes | None = None
    """The sturdy-ref secret; None: ``<data_dir>/dataspace.key`` (made on first use)."""
    auth: AuthConfig = field(default_factory=AuthConfig)
    max_frame_size: int = 1024 * 1024
    outbox_max_bytes: int = 4 * 1024 * 1024
    outbox_max_frames: int = 1024
    socket_high_water: int = 64 * 1024
    retain_after_producer_leaves: float | None = 300.0
    coalesce_backlog: bool = False
    max_replay_diffs: int = 1024
    """Diffs a WVP stream keeps after its snapshot for late joiners (past it: ask for one)."""
    producer_lease: float | None = None
    verify_warp_hashes: bool = False
    """The hub follows each WVP warp's reference render graph and refuses a frame whose
    ``state_hash`` disagrees (``Desync``) before subscribers see it."""
    """Seconds a producer holds a stream without publishing before another may take it over
    with a snapshot; None: until it leaves or hands it over."""
    signaling: SignalingPolicy = field(default_factory=SignalingPolicy)
    shutdown_deadline: float = 5.0
    """Seconds to keep flushing after SIGTERM before connections are closed."""
    close_timeout: float = 2.0
    """Seconds a closing connection gets before its transport is aborted."""
    handshake_timeout: float = 5.0
    """Seconds a connection has for its face's handshake (after the upgrade, or on TCP)."""
    request_timeout: float = 10.0
    """Seconds a new HTTP connection has to send its first request."""
    heartbeat: float | None = 30.0
    """WebSocket ping interval; a peer that does not answer within it is dropped."""
    max_connections: int | None = None
    """Open connections in total; None: derived from the process's descriptor limit."""
    max_connections_per_address: int = 1024
    frames_per_second: float = 200_000.0
    """Input budget per connection (a faster peer is read more slowly)."""
    bytes_per_second: float = 64 * 1024 * 1024
    offload_decode_bytes: int = 64 * 1024
    """Frames at least this large are decoded on a worker thread (faces with costly decoders)."""
    journal: bool = False
    """Journal every accepted stream frame under ``data_dir`` (``serve`` turns it on)."""
    journal_durability: Literal["full", "normal"] = "full"
    checkpoint_interval: float = 30.0
    """Seconds between journal maintenance rounds (checkpoint, export, trim)."""
    journal_retention: bool = True
    """Export the journal to ``data_dir/export`` each round and trim what is exported and
    checkpointed, so the journal stays bounded; off: the journal keeps every record."""
    advertised_url: str | None = None
    """Where clients reach this server from outside, as a WebSocket base URL (the config file
    takes ``ws[s]://`` or ``http[s]://`` HOST[:PORT][/PATH]; ``advertised_ws``): TopGun's
    cluster clients are given its ``/topgun`` in the partition map. None: the bound host and
    port (``ws://HOST:PORT``)."""
    topgun_gc_age: float | None = 30 * 24 * 3600.0
    """Seconds after which TopGun tombstones are pruned (clients that last synced before
    that are told ``SYNC_RESET_REQUIRED``); None: never."""
    topgun_gc_interval: float = 3600.0
    """Seconds between TopGun tombstone GC rounds."""
    topgun_search: tuple[str, ...] = ()
    """TopGun maps with a full-text index (``SEARCH``, ``SEARCH_SUB``); ``*``: every map.
    Needs the ``search`` extra (tantivy)."""
    topgun_index_inline: bool = False
    """Index TopGun writes for search on the event loop, as each flush happens, instead of on
    the indexer thread (a benchmark's baseline: searches and every connection then wait for
    tokenizing, embedding and commits)."""
    topgun_sql: bool = False
    """Answer TopGun's ``SQL_QUERY`` (read-only, bounded; needs the ``sql`` extra, DuckDB)."""
    topgun_vectors: tuple[str, ...] = ()
    """TopGun maps with a vector index (``VECTOR_SEARCH``, hybrid ``semantic``); ``*``: every
    map. Needs the ``vector`` extra (usearch)."""
    cluster_url: str | None = None
    """NATS URL of the cluster to join (``--cluster``); None: a single process, no NATS."""
    node_id: str | None = None
    """This node's id in the cluster (``--node-id``); default: host name and process id."""
    map_replicas: int = 1
    """JetStream replicas of the cluster's TopGun op stream (1 for one NATS server)."""
    map_sync_interval: float = 30.0
    """Seconds between the cluster's anti-entropy rounds for TopGun maps."""
    map_settle: float = 2.0
    """A map written within this many seconds sits out an anti-entropy round."""
    map_acks: Literal["requested", "replicated"] = "requested"
    """``replicated``: every TopGun ack in a cluster waits until the cluster stored the batch
    (a client asking ``MEMORY`` or ``APPLIED``, as TopGun's client always does, is answered
    ``REPLICATED``); ``requested``: at the level the client asked."""
    map_replicate_timeout: float = 30.0
    """Seconds a TopGun batch may take to be stored in JetStream before its writer is reset."""
    map_log_max_age: float = 7 * 86400.0
    """Seconds the cluster's op streams (TopGun maps, shared documents) keep a message; a node
    away longer is brought up to date by anti-entropy."""
    cluster_hold: Literal["interest", "all"] = "interest"
    """``interest``: a node holds the shared documents its clients use, loaded from JetStream
    (the store of record) and let go when idle; ``all``: every node holds every document."""
    document_idle: float = 30.0
    """Seconds a shared document no client uses stays held before the node lets it go."""
    document_load_timeout: float = 10.0
    """Seconds a node may take to load a shared document before its waiting clients fail."""
    document_snapshot_interval: float = 10.0
    """Seconds between two snapshots of a changed document written by a node holding it."""
    topgun_queries_per_connection: int = 64
    topgun_queries_per_map: int = 1024
    plane_compact_records: int = 10_000
    """A shared document's journal records past which a maintenance round replaces them by
    the entries they merge to (``store.plane_compaction``)."""
    tls_cert: Path | None = None
    """PEM certificate (chain) for TLS on every listener; with ``tls_key``: every face over
    ``wss://`` and the TCP ports over TLS (``server.tls``). None: plain HTTP and TCP."""
    tls_key: Path | None = None
    """The certificate's PEM private key."""

    @property
    def scheme(self) -> str:
        """``wss`` when the HTTP port speaks TLS, else ``ws``."""
        return "ws" if self.tls_cert is None else "wss"

    def public_base(self, port: int) -> str:
        """The WebSocket base URL clients reach this server at (no trailing slash)."""
        if self.advertised_url is None:
            return f"{self.scheme}://{self.host}:{port}"
        return self.advertised_url

    @property
    def export_dir(self) -> Path | None:
        return self.data_dir / "export" if self.journal_retention else None

    @property
    def compaction_dir(self) -> Path:
        """The ``pipeline compact`` output TopGun's maps restart from, when there is one."""
        return self.data_dir / SERVER_COMPACTION_SUBDIR

    def with_auth_mode(self) -> ServerConfig:
        return replace(self, auth=replace(self.auth, insecure_dev=self.insecure_dev))

    def limits(self) -> Limits:
        """The one set of limits the faces, the hub and the journal check frames against."""
        return Limits(
            max_frame_bytes=self.max_frame_size,
            frames_per_second=self.frames_per_second,
            bytes_per_second=self.bytes_per_second,
            offload_decode_bytes=self.offload_decode_bytes,
        )

    def check_ports(self) -> None:
        """Each port is 0..65535 (0: any free port), said before anything tries to bind it."""
        for option, port in (
            ("port", self.port),
            ("tcp-port", self.tcp_port),
            ("dataspace-port", self.dataspace_port),
        ):
            if port is not None and not 0 <= port <= 65535:
                raise ConfigError(
                    f"{port} is not a port number: use 0..65535 (0 picks a free port)",
                    path=f"--{option} ([server] {option.replace('-', '_')})",
                )

    def check_exposure(self) -> None:
        """``--insecure-dev`` grants everything to anyone: refuse it on a non-loopback host."""
        if self.insecure_dev and not is_loopback(self.host):
            raise ValueError(
                f"--insecure-dev serves anonymous clients with every grant; it listens on "
                f"loopback only, not on {self.host!r} (configure [auth] to serve a network)"
            )


def chain_url(url: str) -> str:
    """``url`` if it names a NATS server (``nats://HOST:PORT``); ``ConfigError`` otherwise."""
    if not url.startswith(("nats://", "tls://")) or not url.split("://", 1)[1]:
        raise ConfigError(
            f"the chain configuration is a NATS URL (nats://HOST:PORT), not {url!r}",
            path="chain_config",
        )
    return url


def advertised_ws(url: str) -> str:
    """``url`` (an ``advertised_url``) as a WebSocket base URL: ``ws[s]://HOST[:PORT][/PATH]``
    without a trailing slash; ``ConfigError`` when it is not one."""
    split = urlsplit(url)
    schemes = {"ws": "ws", "http": "ws", "wss": "wss", "https": "wss"}
    try:
        port = split.port
    except ValueError:
        port = -1
    if (
        split.scheme not in schemes
        or not split.hostname
        or split.query
        or split.fragment
        or split.username is not None
        or port == -1
    ):
        raise ConfigError(
            f"advertised_url is ws[s]:// or http[s]:// HOST[:PORT][/PATH], not {url!r}",
            path="server.advertised_url",
        )
    return f"{schemes[split.scheme]}://{split.netloc}{split.path.rstrip('/')}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Range:
    """The numbers a key takes: ``low`` (exclusive when ``above``) up to ``high``."""

    low: float
    high: float
    above: bool = False

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int | float) or value != value:  # NaN is in no range
            return False
        return (value > self.low if self.above else value >= self.low) and value <= self.high

    def __str__(self) -> str:
        low = f"> {_num(self.low)}" if self.above else f">= {_num(self.low)}"
        return f"{low} and <= {_num(self.high)}"


def _num(x: float) -> str:
    return f"{int(x):,}".replace(",", "_") if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class Key:
    """One TOML key: the types it takes, its range, what it means (``doc``, which the
    generated ``docs/config.md`` shows) and how it changes the config (``apply``)."""

    types: tuple[type, ...]
    apply: Callable[[ServerConfig, Any, Path], ServerConfig]
    choices: tuple[object, ...] = ()
    """The only values allowed, when the key takes one of a few."""
    range: Range | None = None
    doc: str = ""
    field: str | None = None
    """The ``ServerConfig`` field it sets (dotted for a nested one: ``auth.NAME``), for the
    default the reference shows."""


def _set(
    name: str,
    *types: type,
    choices: tuple[object, ...] = (),
    range: Range | None = None,
    doc: str = "",
) -> Key:
    """A key that sets the ``ServerConfig`` field ``name`` as it is."""
    return Key(types, lambda cfg, v, _p: replace(cfg, **{name: v}), choices, range, doc, name)


def _auth(name: str, doc: str) -> Key:
    return Key(
        (str,), lambda cfg, v, _p: replace(cfg, auth=replace(cfg.auth, **{name: v})), doc=doc
    )


def _relative_to(config_path: Path, value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else config_path.parent / path


def _key_file(cfg: ServerConfig, value: str, config_path: Path) -> ServerConfig:
    key_path = _relative_to(config_path, value)
    try:
        key = key_path.read_text()
    except OSError as exc:
        raise ConfigError(
            f"cannot read the public key file {str(key_path)!r}: {exc.strerror or exc}",
            path="auth.rs256_public_key_file",
        ) from None
    return replace(cfg, auth=replace(cfg.auth, rs256_public_key=key))


def _retain(cfg: ServerConfig, value: float, _p: Path) -> ServerConfig:
    return replace(cfg, retain_after_producer_leaves=None if value < 0 else float(value))


def _signaling_allow(cfg: ServerConfig, value: dict[str, Any], _p: Path) -> ServerConfig:
    try:
        grants = {int(k): frozenset(int(p) for p in v) for k, v in value.items()}
    except (TypeError, ValueError):
        raise ConfigError(
            "must map peer ids to lists of peer ids, as in allow = { 1 = [2, 3] }",
            path="signaling.allow",
        ) from None
    return replace(cfg, signaling=replace(cfg.signaling, grants=grants))


def _signaling_mode(cfg: ServerConfig, value: str, _p: Path) -> ServerConfig:
    return replace(cfg, signaling=replace(cfg.signaling, mode=value))  # type: ignore[arg-type]


def _roles(value: dict[str, Any]) -> dict[str, Any]:
    try:
        return {
            str(role): role_tables(tables, f"auth.roles.{role}") for role, tables in value.items()
        }
    except Unauthorized as err:
        raise ConfigError(err.message, path=err.path) from None


_PROVIDER_KEYS = ("hs256_secret", "rs256_public_key", "rs256_public_key_file", "issuer", "audience")


def _providers(cfg: ServerConfig, value: dict[str, Any], config_path: Path) -> ServerConfig:
    """``[auth.providers.NAME]`` tables: how each external provider's tokens are verified."""
    providers: dict[str, ExchangeProvider] = {}
    for name, table in value.items():
        where = f"auth.providers.{name}"
        if not isinstance(table, dict):
            raise ConfigError("must be a table of the provider's settings", path=where)
        for key, setting in table.items():
            if key not in _PROVIDER_KEYS:
                raise ConfigError(
                    f"unknown key {key!r}{_suggest(key, list(_PROVIDER_KEYS))}", path=where
                )
            if not isinstance(setting, str) or not setting:
                raise ConfigError(
                    f"must be a non-empty string, not {setting!r}", path=f"{where}.{key}"
                )
        public_key = table.get("rs256_public_key")
        if "rs256_public_key_file" in table:
            key_path = _relative_to(config_path, table["rs256_public_key_file"])
            try:
                public_key = key_path.read_text()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read the public key file {str(key_path)!r}: {exc.strerror or exc}",
                    path=f"{where}.rs256_public_key_file",
                ) from None
        secret = table.get("hs256_secret")
        if (secret is None) == (public_key is None):
            raise ConfigError(
                "needs exactly one of hs256_secret and rs256_public_key(_file): how the "
                "provider's tokens are verified",
                path=where,
            )
        providers[name] = ExchangeProvider(
            name, secret, public_key, table.get("issuer"), table.get("audience")
        )
    return replace(cfg, auth=replace(cfg.auth, providers=providers))


def _auth_seconds(name: str, range: Range, doc: str) -> Key:
    return Key(
        (int,),
        lambda cfg, v, _p: replace(cfg, auth=replace(cfg.auth, **{name: v})),
        range=range,
        doc=doc,
        field=f"auth.{name}",
    )


def _gc_age(cfg: ServerConfig, value: float, _p: Path) -> ServerConfig:
    return replace(cfg, topgun_gc_age=None if value < 0 else float(value))


def _map_names(setting: str) -> Callable[[ServerConfig, list[Any], Path], ServerConfig]:
    """A key that lists TopGun map names (``*``: every map)."""

    def apply(cfg: ServerConfig, value: list[Any], _p: Path) -> ServerConfig:
        if not all(isinstance(name, str) and name for name in value):
            raise ConfigError(f"{setting} lists map names", path=f"server.{setting}")
        names: tuple[str, ...] = tuple(value)
        return replace(cfg, **{setting: names})  # type: ignore[arg-type]

    return apply


_NUMBER = (int, float)
_PORT = Range(0, 65535)
_SECONDS = Range(0, 86_400, above=True)
_DAY = 86_400.0
_MANY = Range(1, 1 << 31)
SECTIONS: dict[str, dict[str, Key]] = {
    "server": {
        "host": _set("host", str, doc="Address to listen on."),
        "advertised_url": Key(
            (str,),
            lambda cfg, v, _p: replace(cfg, advertised_url=advertised_ws(v)),
            doc="Where clients reach this server (ws[s]:// or http[s]:// HOST[:PORT][/PATH]): "
            "the URL TopGun's cluster clients get in the partition map (default: the bound "
            "host and port).",
            field="advertised_url",
        ),
        "port": _set("port", int, range=_PORT, doc="HTTP/WebSocket port (0: any free port)."),
        "tcp_port": _set("tcp_port", int, range=_PORT, doc="Lazily over plain TCP; unset: off."),
        "dataspace_port": _set(
            "dataspace_port", int, range=_PORT, doc="Syndicate protocol over TCP; unset: off."
        ),
        "wvp_socket": _set(
            "wvp_socket",
            str,
            doc="Unix socket path serving WVP as bare JS-ABI packets; unset: off.",
        ),
        "lazily_socket": _set(
            "lazily_socket",
            str,
            doc="Unix socket path (mode 0600) serving lazily as `tcp_port` does: u32-framed, "
            "streams and shared documents; unset: off.",
        ),
        "shm_capacity": _set(
            "shm_capacity",
            int,
            range=Range(4096, 1 << 40),
            doc="Bytes of the shared-memory region for subscribers that negotiated shared-blob.",
        ),
        "shm_threshold": _set(
            "shm_threshold",
            int,
            range=Range(1, 1 << 40),
            doc="Payloads of at least this many bytes reach such subscribers by shared memory.",
        ),
        "chain_config": Key(
            (str,),
            lambda cfg, v, _p: replace(cfg, chain_config=chain_url(v)),
            doc="NATS URL of the chain configurations; set: `/chain/NAME` relays devices.",
            field="chain_config",
        ),
        "data": Key(
            (str,),
            lambda cfg, v, _p: replace(cfg, data_dir=Path(v)),
            doc="Data folder: journal, checkpoints, exports (one server per folder).",
            field="data_dir",
        ),
        "max_frame_size": _set(
            "max_frame_size", int, range=Range(1024, 1 << 30), doc="Largest frame, in bytes."
        ),
        "shutdown_deadline": _set(
            "shutdown_deadline",
            *_NUMBER,
            range=Range(0, 3600),
            doc="Seconds to keep flushing after SIGTERM before connections are closed.",
        ),
        "journal": _set("journal", bool, doc="Journal every accepted write (`serve` sets it)."),
        "journal_durability": _set(
            "journal_durability",
            str,
            choices=("full", "normal"),
            doc="`full`: fsync at every commit; `normal`: a process crash loses nothing, a "
            "power loss may lose the last commits.",
        ),
        "close_timeout": _set(
            "close_timeout",
            *_NUMBER,
            range=_SECONDS,
            doc="Seconds a closing connection gets before its transport is aborted.",
        ),
        "handshake_timeout": _set(
            "handshake_timeout",
            *_NUMBER,
            range=_SECONDS,
            doc="Seconds a connection has for its face's handshake.",
        ),
        "request_timeout": _set(
            "request_timeout",
            *_NUMBER,
            range=_SECONDS,
            doc="Seconds a new HTTP connection has to send its first request.",
        ),
        "heartbeat": _set(
            "heartbeat",
            *_NUMBER,
            range=_SECONDS,
            doc="Seconds between WebSocket pings; a peer silent as long again is dropped.",
        ),
        "max_connections": _set(
            "max_connections",
            int,
            range=_MANY,
            doc="Open connections in total; unset: from the descriptor limit.",
        ),
        "max_connections_per_address": _set(
            "max_connections_per_address",
            int,
            range=_MANY,
            doc="Open connections per client address.",
        ),
        "frames_per_second": _set(
            "frames_per_second",
            *_NUMBER,
            range=Range(0, 1e9, above=True),
            doc="Input budget per connection, frames (a faster peer is read more slowly).",
        ),
        "bytes_per_second": _set(
            "bytes_per_second",
            *_NUMBER,
            range=Range(0, 1 << 40, above=True),
            doc="Input budget per connection, bytes.",
        ),
        "offload_decode_bytes": _set(
            "offload_decode_bytes",
            int,
            range=Range(0, 1 << 30),
            doc="Frames at least this large are decoded on a worker thread (WVP).",
        ),
        "checkpoint_interval": _set(
            "checkpoint_interval",
            *_NUMBER,
            range=Range(0.01, _DAY),
            doc="Seconds between journal maintenance rounds (checkpoint, export, trim).",
        ),
        "journal_retention": _set(
            "journal_retention",
            bool,
            doc="Export the journal each round and trim what is exported and checkpointed.",
        ),
        "plane_compact_records": _set(
            "plane_compact_records",
            int,
            range=Range(1000, 1_000_000_000),
            doc="A shared document's journal records past which a round compacts them to "
            "the document's entries.",
        ),
        "topgun_gc_age": Key(
            _NUMBER,
            _gc_age,
            range=Range(-1, 3650 * _DAY),
            doc="Seconds after which TopGun tombstones are pruned; negative: never.",
            field="topgun_gc_age",
        ),
        "topgun_gc_interval": _set(
            "topgun_gc_interval",
            *_NUMBER,
            range=Range(1, 365 * _DAY),
            doc="Seconds between TopGun tombstone GC rounds.",
        ),
        "topgun_queries_per_connection": _set(
            "topgun_queries_per_connection",
            int,
            range=Range(1, 100_000),
            doc="Live TopGun queries one connection may hold.",
        ),
        "topgun_queries_per_map": _set(
            "topgun_queries_per_map",
            int,
            range=Range(1, 1_000_000),
            doc="Live TopGun queries on one map, all connections together.",
        ),
        "tls_cert": Key(
            (str,),
            lambda cfg, v, p: replace(cfg, tls_cert=_relative_to(p, v)),
            doc="PEM certificate (chain): every face over `wss://` and the TCP ports over TLS "
            "(with `tls_key`).",
            field="tls_cert",
        ),
        "tls_key": Key(
            (str,),
            lambda cfg, v, p: replace(cfg, tls_key=_relative_to(p, v)),
            doc="The certificate's PEM private key.",
            field="tls_key",
        ),
        "topgun_search": Key(
            (list,),
            _map_names("topgun_search"),
            doc="Maps indexed for full-text search on `/topgun` (needs the `search` extra).",
            field="topgun_search",
        ),
        "topgun_index_inline": _set(
            "topgun_index_inline",
            bool,
            doc="Index `/topgun` writes for search on the event loop, not the indexer thread "
            "(a benchmark baseline).",
        ),
        "topgun_sql": _set(
            "topgun_sql",
            bool,
            doc="Answer SQL_QUERY on `/topgun`: read-only, bounded (needs the `sql` extra).",
        ),
        "topgun_vectors": Key(
            (list,),
            _map_names("topgun_vectors"),
            doc="Maps indexed for vector search on `/topgun` (needs the `vector` extra).",
            field="topgun_vectors",
        ),
    },
    "auth": {
        "hs256_secret": _auth("hs256_secret", "Shared secret for HS256 tokens."),
        "rs256_public_key": _auth("rs256_public_key", "PEM public key for RS256 tokens."),
        "rs256_public_key_file": Key(
            (str,), _key_file, doc="File holding the RS256 public key (relative to this file)."
        ),
        "audience": _auth("audience", "Required `aud` claim."),
        "roles": Key(
            (dict,),
            lambda cfg, v, _p: replace(cfg, auth=replace(cfg.auth, roles=_roles(v))),
            doc="Role policies for tokens that name `roles`: role -> claim -> name -> actions.",
        ),
        "providers": Key(
            (dict,),
            _providers,
            doc="External identity providers whose tokens `POST /api/auth/token` exchanges: "
            "`[auth.providers.NAME]` with `hs256_secret` or `rs256_public_key(_file)`, and "
            "optional `issuer` and `audience` (needs `hs256_secret` in `[auth]`).",
        ),
        "access_token_seconds": _auth_seconds(
            "access_token_seconds",
            Range(1, 86_400),
            "Lifetime of the access tokens the token exchange and refresh issue.",
        ),
        "refresh_token_seconds": _auth_seconds(
            "refresh_token_seconds",
            Range(60, 3650 * 86_400),
            "Lifetime of each refresh token (single-use; a refresh issues the next).",
        ),
    },
    "hub": {
        "outbox_max_bytes": _set(
            "outbox_max_bytes",
            int,
            range=Range(1024, 1 << 34),
            doc="Bytes queued for one subscriber before it is reset to a snapshot.",
        ),
        "outbox_max_frames": _set(
            "outbox_max_frames",
            int,
            range=Range(1, 1 << 24),
            doc="Frames queued for one subscriber before it is reset to a snapshot.",
        ),
        "socket_high_water": _set(
            "socket_high_water",
            int,
            range=Range(1024, 1 << 30),
            doc="Bytes buffered in a socket before the server waits for it to drain.",
        ),
        "coalesce_backlog": _set(
            "coalesce_backlog",
            bool,
            doc="Replace a subscriber's backlog of deltas by one snapshot when that is smaller.",
        ),
        "max_replay_diffs": _set(
            "max_replay_diffs",
            int,
            range=Range(1, 1 << 20),
            doc="Diffs a WVP stream keeps after its snapshot for late joiners.",
        ),
        "verify_warp_hashes": _set(
            "verify_warp_hashes",
            bool,
            doc="Refuse WVP frames whose state_hash disagrees with the reference render graph.",
        ),
        "producer_lease": _set(
            "producer_lease",
            *_NUMBER,
            range=Range(0, 3650 * _DAY, above=True),
            doc="Seconds a WVP producer holds a warp without publishing; unset: until it leaves.",
        ),
        "retain_seconds": Key(
            _NUMBER,
            _retain,
            range=Range(-1, 3650 * _DAY),
            doc="Seconds a stream's state outlives its producer; negative: forever.",
            field="retain_after_producer_leaves",
        ),
    },
    "cluster": {
        "url": Key(
            (str,),
            lambda cfg, v, _p: replace(cfg, cluster_url=v),
            doc="NATS URL of the cluster to join.",
            field="cluster_url",
        ),
        "node_id": _set("node_id", str, doc="This node's id; default: host name and pid."),
        "map_replicas": _set(
            "map_replicas",
            int,
            range=Range(1, 5),
            doc="JetStream replicas of the cluster's TopGun op stream.",
        ),
        "map_sync_interval": _set(
            "map_sync_interval",
            *_NUMBER,
            range=Range(0.1, _DAY),
            doc="Seconds between anti-entropy rounds for TopGun maps.",
        ),
        "map_settle": _set(
            "map_settle",
            *_NUMBER,
            range=Range(0, 3600),
            doc="A map written within this many seconds sits out an anti-entropy round.",
        ),
        "map_acks": _set(
            "map_acks",
            str,
            choices=("requested", "replicated"),
            doc="`replicated`: every TopGun ack waits until the cluster stored the batch, so a "
            "node killed after it acked loses no write (TopGun's client asks `MEMORY`); "
            "`requested`: acks at the level each batch asks.",
        ),
        "map_replicate_timeout": _set(
            "map_replicate_timeout",
            *_NUMBER,
            range=_SECONDS,
            doc="Seconds a TopGun batch may take to be stored in JetStream.",
        ),
        "map_log_max_age": _set(
            "map_log_max_age",
            *_NUMBER,
            range=Range(1, 3650 * _DAY),
            doc="Seconds the cluster's op streams keep a message (anti-entropy covers the rest).",
        ),
        "hold": _set(
            "cluster_hold",
            str,
            choices=("interest", "all"),
            doc="`interest`: a node holds the shared documents its clients use, loaded from "
            "JetStream and let go when idle; `all`: every node holds every document.",
        ),
        "document_idle": _set(
            "document_idle",
            *_NUMBER,
            range=Range(0, _DAY),
            doc="Seconds a shared document no client uses stays held before the node lets it go.",
        ),
        "document_load_timeout": _set(
            "document_load_timeout",
            *_NUMBER,
            range=Range(0.1, 3600),
            doc="Seconds a node may take to load a shared document before its clients fail.",
        ),
        "document_snapshot_interval": _set(
            "document_snapshot_interval",
            *_NUMBER,
            range=Range(0.1, _DAY),
            doc="Seconds between two snapshots of a changed shared document by a node holding it.",
        ),
    },
    "signaling": {
        "mode": Key(
            (str,),
            _signaling_mode,
            ("open", "allowlist"),
            doc="`open`: any peer may signal any other; `allowlist`: only pairs in `allow`.",
        ),
        "allow": Key((dict,), _signaling_allow, doc="Peer id to the peer ids it may signal."),
    },
}
"""Every key a config file may hold, per section: adding a setting is one line here."""

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(sorted(choices))}"


def _check_type(where: str, value: Any, key: Key) -> None:
    ok = isinstance(value, key.types) and not (
        isinstance(value, bool) and bool not in key.types  # TOML true is not a port number
    )
    if not ok:
        wanted = " or ".join(dict.fromkeys(_TYPE_NAMES.get(t, t.__name__) for t in key.types))
        raise ConfigError(f"must be {wanted}, not {value!r}", path=where)
    if key.choices and value not in key.choices:
        allowed = " or ".join(repr(c) for c in key.choices)
        raise ConfigError(f"must be {allowed}, not {value!r}", path=where)
    if key.range is not None and value not in key.range:
        raise ConfigError(f"{value!r} is out of range: must be {key.range}", path=where)


def parse_config(doc: dict[str, Any], path: Path, base: ServerConfig) -> ServerConfig:
    """Apply a parsed TOML document; an unknown section or key is a ``ConfigError`` naming it
    and the nearest valid name (a typo must not silently leave a secret unset)."""
    cfg = base
    for section, table in doc.items():
        keys = SECTIONS.get(section)
        if keys is None:
            raise ConfigError(
                f"unknown section [{section}]{_suggest(section, list(SECTIONS))}", path=section
            )
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}] must be a table of settings", path=section)
        for name, value in table.items():
            where = f"{section}.{name}"
            key = keys.get(name)
            if key is None:
                elsewhere = [s for s, ks in SECTIONS.items() if name in ks]
                hint = (
                    f"; it belongs in [{elsewhere[0]}]" if elsewhere else _suggest(name, list(keys))
                )
                raise ConfigError(f"unknown key {name!r} in [{section}]{hint}", path=where)
            _check_type(where, value, key)
            cfg = key.apply(cfg, value, path)
    if cfg.auth.providers and cfg.auth.hs256_secret is None:
        raise ConfigError(
            "token exchange signs the tokens it issues with [auth] hs256_secret: set it",
            path="auth.providers",
        )
    return cfg


def load_config_file(path: Path, base: ServerConfig) -> ServerConfig:
    """Apply a TOML file's ``[server]``, ``[auth]``, ``[hub]`` and ``[signaling]`` tables.

    A missing, unreadable or malformed file, an unknown key or a value of the wrong type is a
    ``ConfigError`` naming the file and the key.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError("no such file", path=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a TOML file", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read it: {exc}", path=str(path)) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=str(path)) from None
    try:
        return parse_config(doc, path, base)
    except ConfigError as exc:
        raise ConfigError(exc.message, path=f"{path}: {exc.path}") from None
