"""Directories named on the command line, checked before any work starts."""

from __future__ import annotations

from pathlib import Path

from octosync.errors import ConfigError


def data_dir(path: Path, option: str, *, create: bool) -> Path:
    """``path`` as a directory: created when ``create`` (else it must exist); a file, a missing
    input or a directory that cannot be made is a one-line ``ConfigError`` naming ``option``."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {path} is a file; point {option} at a directory")
    if not create:
        if not path.exists():
            raise ConfigError(f"{option} {path} does not exist; point {option} at a data directory")
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create {option} {path}: {exc.strerror or exc}; choose another {option}"
        ) from None
    return path
