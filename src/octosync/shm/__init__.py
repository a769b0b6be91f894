"""Shared-memory blobs: the arena (sans-I/O, ``arena.py``) and its POSIX region
(``region.py``); ``ipc/blobs.py`` inlines or spills a message's payloads through them."""
