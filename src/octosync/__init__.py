"""octosync: live state shared between one server and many clients."""

from octosync.graph import Context

__version__ = "0.1.0"

__all__ = ["Context", "__version__"]
