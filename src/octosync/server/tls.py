"""TLS for every listener: the HTTP port (every face over ``https://`` and ``wss://``) and the
TCP ports (``--tcp-port``, ``--dataspace-port``), with one certificate.

The certificate and key are files (``--tls-cert``/``--tls-key``, ``[server] tls_cert`` and
``tls_key``); the context is built once, before any port is bound, so a missing file or a key
that does not match its certificate is one line at start-up, not a failure per connection.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from octosync.errors import ConfigError


def server_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """The server's TLS context, or None when TLS is off (neither file given)."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise ConfigError(f"{given} needs {missing} too: TLS takes a certificate and its key")
    for option, path in (("--tls-cert", cert), ("--tls-key", key)):
        if not path.is_file():
            raise ConfigError(f"{option} {path}: no such file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=cert, keyfile=key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"--tls-cert {cert} and --tls-key {key} are not a PEM certificate (chain) and its "
            f"private key: {exc.strerror or exc}"
        ) from None
    return context
