"""What the inspector lists of each face's state, as JSON rows, for one identity.

Pure functions of a core's state and the identity's grants; the face registry
(``server.faces``) names which listing each face contributes to ``/api/streams``.
"""

from __future__ import annotations

from octosync.crdt.fold import MapStore
from octosync.crdt.shared import document_values
from octosync.hub import Hub
from octosync.hub.crdt_streams import CrdtStreams
from octosync.hub.streams import stream_face
from octosync.server.auth import ClaimGrants
from octosync.server.dataspace_session import DATASPACE_GRANT_PREFIX
from octosync.server.face_names import YJS
from octosync.syndicate import Relay
from octosync.yjs.documents import YjsDocuments


def stream_rows(hub: Hub, identity: ClaimGrants) -> list[dict[str, object]]:
    """One row per stream ``identity`` may read: what the inspector shows, sorted by name."""
    rows: list[dict[str, object]] = []
    for stream in hub.stream_ids():
        if not identity.allows(stream, "read"):
            continue
        rows.append(
            {
                "stream": str(stream),
                "face": stream_face(stream),
                "producer": hub.producer_of(stream),
                "epoch": hub.epoch_of(stream),
                "subscribers": len(hub.subscribers_of(stream)),
                "backlog": hub.backlog_of(stream),
                "frames": hub.frames_accepted_of(stream),
            }
        )
    rows.sort(key=lambda row: str(row["stream"]))
    return rows


MAX_SHOWN_ENTRIES = 2_000
"""A document's values are folded for the listing only up to this many entries (the listing is
polled every two seconds; a bigger document says how big it is instead)."""
MAX_SHOWN_VALUES = 100
"""Values listed per document at most (``more`` counts the rest)."""


def document_rows(plane: CrdtStreams, identity: ClaimGrants) -> list[dict[str, object]]:
    """One row per shared document ``identity`` may read: members, entries, ops taken, and
    its values read by kind (a counter's sum, a register's value, a map's fields), only those
    ``identity``'s node grants let it read."""
    rows: list[dict[str, object]] = []
    for name, doc in sorted(plane.streams.items()):
        if not identity.allows(name, "read"):
            continue
        row: dict[str, object] = {
            "document": name,
            "members": len(doc.members),
            "entries": len(doc.replica),
            "ops": doc.ops_accepted,
            "values": None,
            "more": 0,
        }
        if len(doc.replica) <= MAX_SHOWN_ENTRIES:
            rules = identity.node_rules(name)
            ops = [
                op
                for op in doc.replica.ops()
                if rules is None or rules.allows("read", op.slot_id, op.key)
            ]
            values = document_values(ops)
            row["values"] = [
                {"name": n, "kind": k, "value": v} for n, k, v in values[:MAX_SHOWN_VALUES]
            ]
            row["more"] = max(0, len(values) - MAX_SHOWN_VALUES)
        rows.append(row)
    return rows


def map_rows(store: MapStore, identity: ClaimGrants) -> list[dict[str, object]]:
    """One row per TopGun map ``identity`` may read: live keys and tombstones, by name."""
    rows: list[dict[str, object]] = []
    for name in store.maps():
        if not identity.may_map(name, "read"):
            continue
        live = dead = 0
        for row in store.rows(name):
            dead += row.tombstone
            live += not row.tombstone
        rows.append({"map": name, "keys": live, "tombstones": dead})
    return rows


def dataspace_rows(relay: Relay | None, identity: ClaimGrants) -> list[dict[str, object]]:
    """One row per dataspace ``identity`` may use (assertions and observers), by name; none
    before the dataspace face's first use."""
    if relay is None:
        return []
    return [
        {"dataspace": name, "assertions": len(ds.handles), "observers": len(ds.observers)}
        for name, ds in sorted(relay.dataspaces.items())
        if identity.allows(f"{DATASPACE_GRANT_PREFIX}{name}", "publish")
    ]


def yjs_rows(core: YjsDocuments, identity: ClaimGrants) -> list[dict[str, object]]:
    """One row per Yjs document ``identity`` may read: connections, awareness clients, and
    updates committed since the server started."""
    return [
        {
            "document": name,
            "connections": len(doc.members),
            "awareness": len(doc.awareness.known),
            "updates": doc.updates,
        }
        for name, doc in sorted(core.documents.items())
        if identity.may(YJS, name, "read")
    ]
