"""octosync: live state shared between one server and many clients."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from octosync.graph import Context

__version__ = "0.1.0"

__all__ = ["Context", "__version__"]


def __getattr__(name: str) -> object:
    """``octosync.Context``, ``octosync.connect`` and ``octosync.open_document`` without
    importing the graph or the asyncio client on ``import octosync`` (every command line run
    imports the package; a pipeline job needs neither)."""
    if name == "Context":
        from octosync.graph import Context

        return Context
    if name == "connect":
        from octosync.client import connect

        return connect
    if name == "open_document":
        from octosync.client import open_document

        return open_document
    raise AttributeError(f"module 'octosync' has no attribute {name!r}")
