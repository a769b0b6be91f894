"""Server configuration: command-line flags over an optional TOML file over defaults."""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from octosync.hub.limits import Limits
from octosync.server.auth import AuthConfig
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

    def check_exposure(self) -> None:
        """``--insecure-dev`` grants everything to anyone: refuse it on a non-loopback host."""
        if self.insecure_dev and not is_loopback(self.host):
            raise ValueError(
                f"--insecure-dev serves anonymous clients with every grant; it listens on "
                f"loopback only, not on {self.host!r} (configure [auth] to serve a network)"
            )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_config_file(path: Path, base: ServerConfig) -> ServerConfig:
    """Apply a TOML file's ``[server]``, ``[auth]``, ``[hub]`` and ``[signaling]`` tables."""
    doc: dict[str, Any] = tomllib.loads(path.read_text())
    cfg = base
    server = doc.get("server", {})
    for key in (
        "host",
        "port",
        "tcp_port",
        "dataspace_port",
        "max_frame_size",
        "shutdown_deadline",
        "journal",
        "journal_durability",
        "close_timeout",
        "handshake_timeout",
        "request_timeout",
        "heartbeat",
        "max_connections",
        "max_connections_per_address",
        "frames_per_second",
        "bytes_per_second",
        "offload_decode_bytes",
    ):
        if key in server:
            cfg = replace(cfg, **{key: server[key]})
    if "data" in server:
        cfg = replace(cfg, data_dir=Path(server["data"]))
    auth = doc.get("auth", {})
    secret = auth.get("hs256_secret")
    public_key = auth.get("rs256_public_key")
    if "rs256_public_key_file" in auth:
        key_path = Path(auth["rs256_public_key_file"])
        if not key_path.is_absolute():
            key_path = path.parent / key_path
        public_key = key_path.read_text()
    cfg = replace(
        cfg,
        auth=AuthConfig(
            hs256_secret=secret, rs256_public_key=public_key, audience=auth.get("audience")
        ),
    )
    hub = doc.get("hub", {})
    for key in (
        "outbox_max_bytes",
        "outbox_max_frames",
        "socket_high_water",
        "coalesce_backlog",
        "max_replay_diffs",
    ):
        if key in hub:
            cfg = replace(cfg, **{key: hub[key]})
    if "retain_seconds" in hub:
        retain = hub["retain_seconds"]
        cfg = replace(cfg, retain_after_producer_leaves=None if retain < 0 else float(retain))
    sig = doc.get("signaling", {})
    if sig:
        grants = {int(k): frozenset(int(p) for p in v) for k, v in sig.get("allow", {}).items()}
        cfg = replace(cfg, signaling=SignalingPolicy(sig.get("mode", "open"), grants))
    return cfg
