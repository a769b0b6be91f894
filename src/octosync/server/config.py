"""Server configuration: command-line flags over an optional TOML file over defaults."""

from __future__ import annotations

import difflib
import ipaddress
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from octosync.errors import ConfigError, Unauthorized
from octosync.hub.limits import Limits
from octosync.hub.outbox import OutboxLimits
from octosync.hub.types import HubConfig
from octosync.pipeline.layout import SERVER_COMPACTION_SUBDIR
from octosync.server.auth import AuthConfig, ExchangeProvider, role_tables
from octosync.signaling import SignalingPolicy
from octosync.signaling.rooms import Mode
from octosync.store.storage_rules import Setting as StorageSetting
from octosync.store.storage_rules import StorageSettings


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
class Flag:
    """How a key is also an ``octosync serve`` flag: its name (``--tcp-port``), its help when
    it says more than the key's doc, its metavar. A flag's value is checked as the key's is."""

    name: str
    help: str = ""
    metavar: str | None = None


Apply = Callable[["ServerConfig", Any, Path], "ServerConfig"]


@dataclass(frozen=True)
class Key:
    """One TOML key: the types it takes, its range, what it means (``doc``, which the
    generated ``docs/config.md`` shows), how it changes the config (``apply``) and the
    ``octosync serve`` flag that sets it too (``flag``)."""

    types: tuple[type, ...]
    apply: Apply
    choices: tuple[object, ...] = ()
    """The only values allowed, when the key takes one of a few."""
    range: Range | None = None
    doc: str = ""
    field: str | None = None
    """The ``ServerConfig`` field it sets (dotted for a nested one: ``auth.NAME``), for the
    default the reference shows."""
    flag: Flag | None = None


@dataclass(frozen=True)
class Declared:
    """A ``ServerConfig`` field's declaration (``setting(...)``): its TOML section and key
    (default: the field's name), the types it takes (default: from the field's type), range,
    choices, doc, how it applies (default: the value as it is) and its flag."""

    section: str
    doc: str
    key: str | None = None
    types: tuple[type, ...] | None = None
    range: Range | None = None
    choices: tuple[object, ...] = ()
    apply: Apply | None = None
    flag: Flag | None = None


def setting(
    default: Any,
    section: str,
    doc: str,
    *,
    key: str | None = None,
    types: tuple[type, ...] | None = None,
    range: Range | None = None,
    choices: tuple[object, ...] = (),
    apply: Apply | None = None,
    flag: Flag | None = None,
) -> Any:
    """A ``ServerConfig`` field declared once: its default and, as metadata, everything the
    config file, the command line and ``docs/config.md`` need (``SECTIONS`` is derived)."""
    declared = Declared(section, doc, key, types, range, choices, apply, flag)
    return field(default=default, metadata={"setting": declared})


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
    mode: Mode = "open" if value == "open" else "allowlist"  # the key's choices: one of two
    return replace(cfg, signaling=replace(cfg.signaling, mode=mode))


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


def _map_names(setting: str, value: list[Any]) -> tuple[str, ...]:
    """A key that lists TopGun map names (``*``: every map)."""
    if not all(isinstance(name, str) and name for name in value):
        raise ConfigError(f"{setting} lists map names", path=f"server.{setting}")
    return tuple(value)


_NUMBER = (int, float)
_PORT = Range(0, 65535)
_SECONDS = Range(0, 86_400, above=True)
_DAY = 86_400.0
_MANY = Range(1, 1 << 31)


@dataclass(frozen=True)
class ServerConfig:
    """The server's settings. Each field with a ``setting(...)`` is declared there once: its
    default, its TOML key and section, type, range, doc and flag (``SECTIONS``, the argparse
    flags of ``octosync serve`` and ``docs/config.md`` are derived from them)."""

    host: str = setting(
        "127.0.0.1", "server", "Address to listen on.", flag=Flag("--host", "listen address")
    )
    advertised_url: str | None = setting(
        None,
        "server",
        "Where clients reach this server (ws[s]:// or http[s]:// HOST[:PORT][/PATH]): the URL "
        "TopGun's cluster clients get in the partition map (default: the bound host and port).",
        apply=lambda cfg, v, _p: replace(cfg, advertised_url=advertised_ws(v)),
    )
    port: int = setting(
        8765,
        "server",
        "HTTP/WebSocket port (0: any free port).",
        range=_PORT,
        flag=Flag("--port", "HTTP/WebSocket port"),
    )
    tcp_port: int | None = setting(
        None,
        "server",
        "Lazily over plain TCP; unset: off.",
        range=_PORT,
        flag=Flag("--tcp-port", "also serve lazily over plain TCP on this port"),
    )
    dataspace_port: int | None = setting(
        None,
        "server",
        "Syndicate protocol over TCP; unset: off.",
        range=_PORT,
        flag=Flag("--dataspace-port", "also serve the Syndicate protocol over TCP"),
    )
    wvp_socket: str | None = setting(
        None,
        "server",
        "Unix socket path serving WVP as bare JS-ABI packets; unset: off.",
        flag=Flag(
            "--wvp-socket",
            "also serve WVP (JS-ABI packets) on a Unix socket at PATH, mode 0600",
            "PATH",
        ),
    )
    lazily_socket: str | None = setting(
        None,
        "server",
        "Unix socket path (mode 0600) serving lazily as `tcp_port` does: u32-framed, streams "
        "and shared documents; unset: off.",
        flag=Flag(
            "--lazily-socket",
            "also serve lazily (u32-framed, as --tcp-port) on a Unix socket at PATH, mode 0600",
            "PATH",
        ),
    )
    shm_capacity: int = setting(
        256 * 1024 * 1024,
        "server",
        "Bytes of the shared-memory region for subscribers that negotiated shared-blob "
        "(made on first use; tmpfs pages are taken as written).",
        range=Range(4096, 1 << 40),
    )
    shm_threshold: int = setting(
        64 * 1024,
        "server",
        "Payloads of at least this many bytes reach such subscribers by shared memory.",
        range=Range(1, 1 << 40),
    )
    chain_config: str | None = setting(
        None,
        "server",
        "NATS URL of the chain configurations; set: `/chain/NAME` relays devices.",
        apply=lambda cfg, v, _p: replace(cfg, chain_config=chain_url(v)),
        flag=Flag(
            "--chain-config",
            "serve /chain/NAME: relay WebSocket devices to the head of the chains configured "
            "at this NATS URL (nats://HOST:PORT)",
            "NATS_URL",
        ),
    )
    data_dir: Path = setting(
        Path("./var"),
        "server",
        "Data folder: journal, checkpoints, exports (one server per folder).",
        key="data",
        types=(str,),
        apply=lambda cfg, v, _p: replace(cfg, data_dir=Path(v)),
        flag=Flag("--data", "data directory"),
    )
    max_frame_size: int = setting(
        1024 * 1024, "server", "Largest frame, in bytes.", range=Range(1024, 1 << 30)
    )
    shutdown_deadline: float = setting(
        5.0,
        "server",
        "Seconds to keep flushing after SIGTERM before connections are closed.",
        range=Range(0, 3600),
    )
    journal: bool = setting(False, "server", "Journal every accepted write (`serve` sets it).")
    journal_durability: Literal["full", "normal"] = setting(
        "full",
        "server",
        "`full`: fsync at every commit; `normal`: a process crash loses nothing, a power loss "
        "may lose the last commits.",
        types=(str,),
        choices=("full", "normal"),
    )
    close_timeout: float = setting(
        2.0,
        "server",
        "Seconds a closing connection gets before its transport is aborted.",
        range=_SECONDS,
    )
    handshake_timeout: float = setting(
        5.0, "server", "Seconds a connection has for its face's handshake.", range=_SECONDS
    )
    request_timeout: float = setting(
        10.0,
        "server",
        "Seconds a new HTTP connection has to send its first request.",
        range=_SECONDS,
    )
    heartbeat: float | None = setting(
        30.0,
        "server",
        "Seconds between WebSocket pings; a peer silent as long again is dropped.",
        range=_SECONDS,
    )
    max_connections: int | None = setting(
        None,
        "server",
        "Open connections in total; unset: from the descriptor limit.",
        range=_MANY,
    )
    max_connections_per_address: int = setting(
        1024, "server", "Open connections per client address.", range=_MANY
    )
    frames_per_second: float = setting(
        200_000.0,
        "server",
        "Input budget per connection, frames (a faster peer is read more slowly).",
        range=Range(0, 1e9, above=True),
    )
    bytes_per_second: float = setting(
        64 * 1024 * 1024,
        "server",
        "Input budget per connection, bytes.",
        range=Range(0, 1 << 40, above=True),
    )
    offload_decode_bytes: int = setting(
        64 * 1024,
        "server",
        "Frames at least this large are decoded on a worker thread (WVP).",
        range=Range(0, 1 << 30),
    )
    checkpoint_interval: float = setting(
        30.0,
        "server",
        "Seconds between journal maintenance rounds (checkpoint, export, trim).",
        range=Range(0.01, _DAY),
    )
    journal_retention: bool = setting(
        True,
        "server",
        "Export the journal each round and trim what is exported and checkpointed "
        "(without the pipeline extra: no export; trim what is checkpointed).",
    )
    plane_compact_records: int = setting(
        10_000,
        "server",
        "A shared document's (or Yjs document's) journal records past which a round "
        "compacts them to the document's entries (one merged update).",
        range=Range(1000, 1_000_000_000),
    )
    plane_member_away: float = setting(
        24 * 3600.0,
        "server",
        "Seconds a writer of a shared document may be away and still hold back the collection "
        "of list tombstones it has not seen (past it, its late edits of them are refused).",
        range=Range(1, 365 * _DAY),
    )
    presence_ttl: float = setting(
        30.0,
        "server",
        "Seconds a shared document's presence or awareness value lives after it was last set.",
        range=Range(1, 3600),
    )
    topgun_gc_age: float | None = setting(
        30 * 24 * 3600.0,
        "server",
        "Seconds after which TopGun tombstones are pruned; negative: never.",
        range=Range(-1, 3650 * _DAY),
        apply=lambda cfg, v, _p: replace(cfg, topgun_gc_age=None if v < 0 else float(v)),
    )
    topgun_gc_interval: float = setting(
        3600.0,
        "server",
        "Seconds between TopGun tombstone GC rounds.",
        range=Range(1, 365 * _DAY),
    )
    topgun_queries_per_connection: int = setting(
        64, "server", "Live TopGun queries one connection may hold.", range=Range(1, 100_000)
    )
    topgun_queries_per_map: int = setting(
        1024,
        "server",
        "Live TopGun queries on one map, all connections together.",
        range=Range(1, 1_000_000),
    )
    tls_cert: Path | None = setting(
        None,
        "server",
        "PEM certificate (chain): every face over `wss://` and the TCP ports over TLS "
        "(with `tls_key`).",
        types=(str,),
        apply=lambda cfg, v, p: replace(cfg, tls_cert=_relative_to(p, v)),
        flag=Flag(
            "--tls-cert",
            "serve every face over TLS (https://, wss://, the TCP ports) with this "
            "certificate (chain)",
            "PEM",
        ),
    )
    tls_key: Path | None = setting(
        None,
        "server",
        "The certificate's PEM private key.",
        types=(str,),
        apply=lambda cfg, v, p: replace(cfg, tls_key=_relative_to(p, v)),
        flag=Flag("--tls-key", "the certificate's key", "PEM"),
    )
    topgun_search: tuple[str, ...] = setting(
        (),
        "server",
        "Maps indexed for full-text search on `/topgun` (needs the `search` extra).",
        types=(list,),
        apply=lambda cfg, v, _p: replace(cfg, topgun_search=_map_names("topgun_search", v)),
    )
    topgun_index_inline: bool = setting(
        False,
        "server",
        "Index `/topgun` writes for search on the event loop, not the indexer thread "
        "(a benchmark baseline).",
    )
    topgun_sql: bool = setting(
        False,
        "server",
        "Answer SQL_QUERY on `/topgun`: read-only, bounded (needs the `sql` extra).",
    )
    topgun_vectors: tuple[str, ...] = setting(
        (),
        "server",
        "Maps indexed for vector search on `/topgun` (needs the `vector` extra).",
        types=(list,),
        apply=lambda cfg, v, _p: replace(cfg, topgun_vectors=_map_names("topgun_vectors", v)),
    )
    outbox_max_bytes: int = setting(
        4 * 1024 * 1024,
        "hub",
        "Bytes queued for one subscriber before it is reset to a snapshot.",
        range=Range(1024, 1 << 34),
    )
    outbox_max_frames: int = setting(
        1024,
        "hub",
        "Frames queued for one subscriber before it is reset to a snapshot.",
        range=Range(1, 1 << 24),
    )
    socket_high_water: int = setting(
        64 * 1024,
        "hub",
        "Bytes buffered in a socket before the server waits for it to drain.",
        range=Range(1024, 1 << 30),
    )
    coalesce_backlog: bool = setting(
        False,
        "hub",
        "Replace a subscriber's backlog of deltas by one snapshot when that is smaller.",
    )
    max_replay_diffs: int = setting(
        1024,
        "hub",
        "Diffs a WVP stream keeps after its snapshot for late joiners.",
        range=Range(1, 1 << 20),
    )
    verify_warp_hashes: bool = setting(
        False,
        "hub",
        "Refuse WVP frames whose state_hash disagrees with the reference render graph.",
    )
    producer_lease: float | None = setting(
        None,
        "hub",
        "Seconds a WVP producer holds a warp without publishing; unset: until it leaves.",
        range=Range(0, 3650 * _DAY, above=True),
    )
    retain_after_producer_leaves: float | None = setting(
        300.0,
        "hub",
        "Seconds a stream's state outlives its producer; negative: forever.",
        key="retain_seconds",
        range=Range(-1, 3650 * _DAY),
        apply=lambda cfg, v, _p: replace(
            cfg, retain_after_producer_leaves=None if v < 0 else float(v)
        ),
    )
    cluster_url: str | None = setting(
        None,
        "cluster",
        "NATS URL of the cluster to join.",
        key="url",
        flag=Flag(
            "--cluster",
            "join the cluster whose NATS server (with JetStream) is at this URL",
            "nats://HOST:PORT",
        ),
    )
    node_id: str | None = setting(
        None,
        "cluster",
        "This node's id; default: host name and pid.",
        flag=Flag(
            "--node-id",
            "this server's id in the cluster (letters, digits, - or _; default: host-pid)",
        ),
    )
    map_replicas: int = setting(
        1,
        "cluster",
        "JetStream replicas of the cluster's op streams (TopGun maps, shared documents, Yjs "
        "documents) and of its document snapshots.",
        range=Range(1, 5),
    )
    map_sync_interval: float = setting(
        30.0,
        "cluster",
        "Seconds between anti-entropy rounds (TopGun maps, shared documents, Yjs documents).",
        range=Range(0.1, _DAY),
    )
    map_settle: float = setting(
        2.0,
        "cluster",
        "A map or document written within this many seconds sits out an anti-entropy round.",
        range=Range(0, 3600),
    )
    map_acks: Literal["requested", "replicated"] = setting(
        "requested",
        "cluster",
        "`replicated`: every TopGun ack waits until the cluster stored the batch, so a node "
        "killed after it acked loses no write (TopGun's client asks `MEMORY`); `requested`: "
        "acks at the level each batch asks.",
        types=(str,),
        choices=("requested", "replicated"),
    )
    map_replicate_timeout: float = setting(
        30.0,
        "cluster",
        "Seconds a write (a TopGun batch, a shared document's frame, a Yjs update) may take "
        "to be stored in JetStream.",
        range=_SECONDS,
    )
    map_log_max_age: float = setting(
        7 * 86400.0,
        "cluster",
        "Seconds the cluster's op streams keep a message (anti-entropy covers the rest).",
        range=Range(1, 3650 * _DAY),
    )
    cluster_hold: Literal["interest", "all"] = setting(
        "interest",
        "cluster",
        "`interest`: a node holds the shared documents its clients use, loaded from JetStream "
        "and let go when idle; `all`: every node holds every document.",
        key="hold",
        types=(str,),
        choices=("interest", "all"),
    )
    document_idle: float = setting(
        30.0,
        "cluster",
        "Seconds a shared document no client uses stays held before the node lets it go.",
        range=Range(0, _DAY),
    )
    document_load_timeout: float = setting(
        10.0,
        "cluster",
        "Seconds a node may take to load a shared document before its clients fail.",
        range=Range(0.1, 3600),
    )
    document_snapshot_interval: float = setting(
        10.0,
        "cluster",
        "Seconds at least between two snapshots of a shared document by a node holding it.",
        range=Range(0.1, _DAY),
    )
    insecure_dev: bool = False
    """``--insecure-dev``: anonymous connections get every grant (loopback only)."""
    dataspace_secret: bytes | None = None
    """The sturdy-ref secret; None: ``<data_dir>/dataspace.key`` (made on first use)."""
    auth: AuthConfig = field(default_factory=AuthConfig)
    """``[auth]`` (its keys: ``SECTIONS["auth"]``)."""
    signaling: SignalingPolicy = field(default_factory=SignalingPolicy)
    """``[signaling]``."""
    storage: StorageSettings = field(default_factory=StorageSettings)
    """``[storage]``: the storage rules' settings (declared in ``store.storage_rules``)."""

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

    def hub_config(self) -> HubConfig:
        """The hub's limits, outboxes, retention and producer lease."""
        return HubConfig(
            outbox=OutboxLimits(self.outbox_max_bytes, self.outbox_max_frames),
            limits=self.limits(),
            retain_after_producer_leaves=self.retain_after_producer_leaves,
            coalesce_backlog=self.coalesce_backlog,
            max_replay_diffs=self.max_replay_diffs,
            producer_lease=self.producer_lease,
            verify_warp_hashes=self.verify_warp_hashes,
        )

    def check_exposure(self) -> None:
        """``--insecure-dev`` grants everything to anyone: refuse it on a non-loopback host."""
        if self.insecure_dev and not is_loopback(self.host):
            raise ValueError(
                f"--insecure-dev serves anonymous clients with every grant; it listens on "
                f"loopback only, not on {self.host!r} (configure [auth] to serve a network)"
            )


def _auth(name: str, doc: str) -> Key:
    return Key(
        (str,), lambda cfg, v, _p: replace(cfg, auth=replace(cfg.auth, **{name: v})), doc=doc
    )


def _auth_seconds(name: str, range: Range, doc: str) -> Key:
    return Key(
        (int,),
        lambda cfg, v, _p: replace(cfg, auth=replace(cfg.auth, **{name: v})),
        range=range,
        doc=doc,
        field=f"auth.{name}",
    )


def _storage_keys() -> dict[str, Key]:
    """``[storage]``: one key per ``StorageSettings`` field, from its ``setting(...)``."""
    keys: dict[str, Key] = {}
    for f in fields(StorageSettings):
        declared: StorageSetting = f.metadata["setting"]
        types: tuple[type, ...] = _NUMBER if f.type in ("float", float) else (int,)
        bounds = None
        if declared.low is not None and declared.high is not None:
            bounds = Range(declared.low, declared.high)

        def apply(cfg: ServerConfig, value: Any, _p: Path, name: str = f.name) -> ServerConfig:
            return replace(cfg, storage=replace(cfg.storage, **{name: value}))

        keys[f.name] = Key(types, apply, range=bounds, doc=declared.doc, field=f"storage.{f.name}")
    return keys


_SIMPLE: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": _NUMBER,
    "str": (str,),
    "bool": (bool,),
}


def _declared(section: str) -> dict[str, Key]:
    """The keys of ``section`` that ``ServerConfig``'s fields declare, in field order."""
    keys: dict[str, Key] = {}
    for f in fields(ServerConfig):
        declared: Declared | None = f.metadata.get("setting")
        if declared is None or declared.section != section:
            continue
        types = declared.types or _SIMPLE[str(f.type).removesuffix(" | None")]
        apply = declared.apply or _setter(f.name)
        keys[declared.key or f.name] = Key(
            types,
            apply,
            declared.choices,
            declared.range,
            declared.doc,
            f.name,
            declared.flag,
        )
    return keys


def _setter(name: str) -> Apply:
    """Sets the ``ServerConfig`` field ``name`` to the value as it is."""
    return lambda cfg, value, _p: replace(cfg, **{name: value})


SECTIONS: dict[str, dict[str, Key]] = {
    "server": _declared("server"),
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
    "hub": _declared("hub"),
    "cluster": _declared("cluster"),
    "signaling": {
        "mode": Key(
            (str,),
            _signaling_mode,
            ("open", "allowlist"),
            doc="`open`: any peer may signal any other; `allowlist`: only pairs in `allow`.",
        ),
        "allow": Key((dict,), _signaling_allow, doc="Peer id to the peer ids it may signal."),
    },
    "storage": _storage_keys(),
}
"""Every key a config file may hold, per section: derived from ``ServerConfig``'s fields
(and, for the nested ``[auth]`` and ``[signaling]`` tables, the entries above)."""


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


def flags() -> list[tuple[str, str, Key, Flag]]:
    """Every key that is also an ``octosync serve`` flag: ``(section, key, Key, Flag)``."""
    return [
        (section, name, key, key.flag)
        for section, keys in SECTIONS.items()
        for name, key in keys.items()
        if key.flag is not None
    ]


def _from_text(text: str, key: Key, where: str) -> Any:
    """A flag's text as the value its key takes; ``ConfigError`` naming the flag if it is not."""
    try:
        if key.types == (int,):
            return int(text)
        if float in key.types:
            number = float(text)
            return int(number) if int in key.types and number.is_integer() else number
    except ValueError:
        wanted = "an integer" if key.types == (int,) else "a number"
        raise ConfigError(f"must be {wanted}, not {text!r}", path=where) from None
    return text


def apply_flags(base: ServerConfig, given: dict[str, str | None], cwd: Path) -> ServerConfig:
    """Apply the flags given (flag name -> its text; None: not given) through the same checks
    as their TOML keys: a value out of range is a ``ConfigError`` naming the flag, the key,
    the value and the range. Paths are relative to ``cwd``."""
    cfg = base
    for section, name, key, flag in flags():
        text = given.get(flag.name)
        if text is None:
            continue
        where = f"{flag.name} ([{section}] {name})"
        value = _from_text(text, key, where)
        _check_type(where, value, key)
        try:
            cfg = key.apply(cfg, value, cwd / "command line")
        except ConfigError as exc:
            raise ConfigError(exc.message, path=where) from None
    return cfg
