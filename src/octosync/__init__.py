"""octosync: live state shared between one server and many clients."""

__version__ = "0.1.0"
