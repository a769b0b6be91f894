"""The server's secret for sturdy refs: ``<data>/dataspace.key``, made on first use (0600).

``octosync serve`` and ``octosync dataspace mint`` read the same file, so a minted ref stays
valid across restarts for as long as the file is kept; deleting it revokes every ref.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

KEY_FILE = "dataspace.key"
KEY_BYTES = 32


def load_or_create_secret(data_dir: Path) -> bytes:
    path = data_dir / KEY_FILE
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        data_dir.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_bytes(KEY_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            return path.read_bytes()
        with os.fdopen(fd, "wb") as f:
            f.write(secret)
    if len(secret) < 16:
        raise ValueError(f"{path} holds {len(secret)} bytes; a sturdy-ref secret needs 16+")
    return secret
