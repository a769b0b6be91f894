"""Shared-memory blobs: the arena (sans-I/O, ``arena.py``), its POSIX region (``region.py``)
and the message rewrites that inline or spill payloads (``messages.py``)."""
