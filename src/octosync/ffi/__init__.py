"""The lazily C ABI (seed § FFI Boundary): statuses, message kinds, owned byte buffers, and
a channel that decodes each accepted frame and re-encodes canonical JSON. ``boundary.py`` is
the behaviour in Python; ``build.py`` makes it a shared library with cffi's embedding mode."""
