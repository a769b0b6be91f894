"""Dataspace: assertions, interest patterns and a skeleton index routing +/-/! events.

Build values from atoms, :class:`Record`, lists and dicts; build patterns from the same plus
:data:`_` and :func:`capture`. :class:`Dataspace` is the indexed implementation;
:func:`match` and :class:`BruteForceDataspace` are the brute-force reference.
"""

from octosync.dataspace.dataspace import Dataspace
from octosync.dataspace.oracle import BruteForceDataspace, match
from octosync.dataspace.pattern import Skeleton, analyse
from octosync.dataspace.skeleton import Index
from octosync.dataspace.values import (
    Capture,
    Discard,
    Observe,
    Record,
    _,
    capture,
    key,
    values_equal,
)

__all__ = [
    "BruteForceDataspace",
    "Capture",
    "Dataspace",
    "Discard",
    "Index",
    "Observe",
    "Record",
    "Skeleton",
    "_",
    "analyse",
    "capture",
    "key",
    "match",
    "values_equal",
]
