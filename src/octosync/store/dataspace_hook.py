"""The dataspace face's activity as journal records (``DataspaceEvent``), for the pipeline.

The relay notes what each dataspace took (``syndicate.relay.Activity``); the server turns those
notes into records here and queues them to the journal after the turn (not waited for, like
the hub's fan-out: assertions are live state, gone when their connection closes, so the
journal is their history, not their store). A value is kept as its Preserves text, entity
references as ``#:ref`` (a reference means nothing outside the connection that held it).
"""

from __future__ import annotations

from collections.abc import Iterable

import preserves

from octosync.store.records import DataspaceEvent, EncodedRecord, encode_record
from octosync.syndicate.relay import Activity
from octosync.syndicate.values import to_wire

_REF = preserves.Symbol("ref")


def value_text(value: object) -> str:
    """The Preserves text of a dataspace value; references as ``#:ref``."""
    return str(preserves.stringify(to_wire(value, lambda _ref: _REF)))


def dataspace_records(activity: Iterable[Activity], run: str) -> list[EncodedRecord]:
    """One encoded ``DataspaceEvent`` per note; ``run`` names the server run in ``peer``."""
    return [
        encode_record(
            DataspaceEvent(
                a.dataspace,
                a.action,
                a.handle,
                a.label,
                "" if a.value is None else value_text(a.value),
                None if a.conn is None else f"{run}.{a.conn}",
            )
        )
        for a in activity
    ]
