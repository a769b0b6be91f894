"""One error tree for every layer.

Each concrete error has a stable ``name`` (what wire faces put in their ``code``/``name`` field)
and a stable numeric ``code`` (for faces that want a number, such as WVP's ``u32``). Faces map
errors to frames; cores only raise them. Names and codes never change once published.
"""

from __future__ import annotations

from typing import ClassVar


class OctosyncError(Exception):
    """Root of every error octosync raises on purpose."""

    name: ClassVar[str] = "OctosyncError"
    code: ClassVar[int] = 1

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.message = message
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class ProtocolError(OctosyncError):
    """A peer or this side broke a protocol rule."""

    name = "ProtocolError"
    code = 2


class LocalProtocolError(ProtocolError):
    """This side was asked to do something the protocol forbids (a bug in the caller)."""

    name = "LocalProtocolError"
    code = 3


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids."""

    name = "RemoteProtocolError"
    code = 4


class DecodeError(RemoteProtocolError):
    """Bytes that do not decode to a valid message; ``path`` names the failing field."""

    name = "DecodeError"
    code = 5


class Oversize(RemoteProtocolError):
    """A frame or payload above the negotiated or hard limit; refused before it is buffered."""

    name = "Oversize"
    code = 6


class HandshakeFailed(RemoteProtocolError):
    """Capability negotiation failed closed; ``path`` names the incompatible field."""

    name = "HandshakeFailed"
    code = 7


class EpochGap(RemoteProtocolError):
    """A delta/diff whose base epoch is not the receiver's current epoch."""

    name = "EpochGap"
    code = 8


class SnapshotRequired(RemoteProtocolError):
    """A delta/diff arrived before any snapshot for that stream."""

    name = "SnapshotRequired"
    code = 9


class ForbiddenPublish(RemoteProtocolError):
    """A publish on a stream by a connection that is not its producer."""

    name = "ForbiddenPublish"
    code = 10


class Desync(RemoteProtocolError):
    """A state hash that does not match the receiver's mirror."""

    name = "Desync"
    code = 11


class UnknownHandle(LocalProtocolError):
    """A handle (assertion, observer, lock, subscription) never issued or already freed."""

    name = "UnknownHandle"
    code = 12


class GraphError(LocalProtocolError):
    """Misuse of the reactive graph (write to a derived node, use after dispose)."""

    name = "GraphError"
    code = 13


class CycleError(GraphError):
    """A node's computation depends on itself."""

    name = "CycleError"
    code = 14


class ComputeError(GraphError):
    """A memo/signal computation raised; ``__cause__`` is the original exception."""

    name = "ComputeError"
    code = 15


class TypeTagError(LocalProtocolError):
    """A type tag that is unknown, collides with a registered one, or cannot encode a value."""

    name = "TypeTagError"
    code = 16


class ClockDrift(RemoteProtocolError):
    """A remote HLC timestamp further ahead than the allowed drift."""

    name = "ClockDrift"
    code = 17


class SyncResetRequired(RemoteProtocolError):
    """A sync requester is older than the tombstone GC horizon and must reload fully."""

    name = "SyncResetRequired"
    code = 18


class LimitExceeded(RemoteProtocolError):
    """A value beyond one of the server's limits (epoch range, name length, nesting, rate)."""

    name = "LimitExceeded"
    code = 19


class InvalidBucketPath(RemoteProtocolError):
    """A Merkle bucket path that is not a hex prefix shorter than (or equal to) the tree depth."""

    name = "InvalidBucketPath"
    code = 70


class CrdtValueError(RemoteProtocolError):
    """An op record whose value bytes do not hold what its op kind requires."""

    name = "CrdtValueError"
    code = 71


class ElementCollected(CrdtValueError):
    """An op on a list element whose tombstone was collected (every member had seen it
    removed), over a text chunk the server compacted, or naming a collected character as a
    run's origin: the writer had not seen what every member had, so it re-takes the document
    instead of bringing back what went."""

    name = "ElementCollected"
    code = 73


class FeatureDisabled(RemoteProtocolError):
    """A request for a feature this server does not serve (or serves switched off): answered
    in the request's own response type, so the caller fails at once instead of timing out."""

    name = "FeatureDisabled"
    code = 72


class BlobInvalid(RemoteProtocolError):
    """A shared-blob descriptor that does not match its arena (bounds, header, generation,
    epoch, length or checksum); ``path`` names the field. Refused before it is accepted."""

    name = "BlobInvalid"
    code = 140


class FeatureNotNegotiated(RemoteProtocolError):
    """A message that uses a feature (``shared-blob``) the session did not negotiate."""

    name = "FeatureNotNegotiated"
    code = 141


class YjsRefused(RemoteProtocolError):
    """A Yjs message the ``/yjs`` face refuses: the document is unchanged. The y-websocket
    protocol has no error message, so the connection closes with a code (``hub.policy``);
    Hocuspocus's refusals of a read-only update are answered in-band (``SyncStatus``)."""

    name = "YjsRefused"
    code = 160


class MalformedYjsMessage(YjsRefused):
    """A Yjs message that does not decode: bad framing, an unknown message type, or an
    update pycrdt cannot read."""

    name = "MalformedYjsMessage"
    code = 161


class YjsUpdateTooLarge(YjsRefused):
    """A Yjs update or awareness state past the face's size limit."""

    name = "YjsUpdateTooLarge"
    code = 162


class ReadOnlyDocument(YjsRefused):
    """An update on a Yjs document the connection may only read."""

    name = "ReadOnlyDocument"
    code = 163


class AuthError(OctosyncError):
    """Authentication or authorisation failed."""

    name = "AuthError"
    code = 20


class Unauthorized(AuthError):
    """No valid credentials were presented."""

    name = "Unauthorized"
    code = 21


class Forbidden(AuthError):
    """Valid credentials, but the operation is not granted (read, write, publish, trigger)."""

    name = "Forbidden"
    code = 22


class RefreshTokenRefused(Unauthorized):
    """A refresh token the server does not hold, or holds as expired or revoked."""

    name = "RefreshTokenRefused"
    code = 23


class RefreshTokenReused(Unauthorized):
    """A refresh token that was spent already: its whole family is revoked (someone else
    may hold a copy)."""

    name = "RefreshTokenReused"
    code = 24


class StorageError(OctosyncError):
    """The journal or a snapshot file could not be read or written."""

    name = "StorageError"
    code = 30


class JournalCorrupt(StorageError):
    """A journal row that does not decode to a known record (unknown kind, bad body)."""

    name = "JournalCorrupt"
    code = 31


class InvalidRecord(StorageError):
    """A record refused before it was appended; ``path`` names the offending field."""

    name = "InvalidRecord"
    code = 32


class TrimRefused(StorageError):
    """A journal trim that would drop records not yet exported or not covered by a checkpoint."""

    name = "TrimRefused"
    code = 33


class JournalUnavailable(StorageError):
    """The journal cannot commit now (disk full, a read-only file, an I/O error): writes that
    need it are refused, and service resumes by itself once a commit succeeds again."""

    name = "JournalUnavailable"
    code = 34


class ReplicationError(OctosyncError):
    """Chain replication broke an invariant (ordering, bootstrap, trim)."""

    name = "ReplicationError"
    code = 40


class SequenceGap(ReplicationError):
    """A chain event or state change that skips a sequencer (a link's FIFO feed broke)."""

    name = "SequenceGap"
    code = 41


class StaleEpoch(ReplicationError):
    """A chain frame stamped with an older configuration epoch (a fenced-off link)."""

    name = "StaleEpoch"
    code = 42


class NotBootstrapped(ReplicationError):
    """A device event on a connection that has not completed its bootstrap."""

    name = "NotBootstrapped"
    code = 43


class ComputeContract(ReplicationError):
    """The application's ``compute`` returned a change the chain cannot apply."""

    name = "ComputeContract"
    code = 44


class ConfigConflict(ReplicationError):
    """A chain configuration write lost its compare-and-set race (re-read and retry)."""

    name = "ConfigConflict"
    code = 45


class DocumentUnavailable(ReplicationError):
    """A shared document this node does not hold could not be loaded from the cluster in
    time (``[cluster] document_load_timeout``), or too many frames waited for its load; the
    client reconnects and sends again."""

    name = "DocumentUnavailable"
    code = 46


class ServerError(OctosyncError):
    """The server cannot serve this request now; the request itself may be fine."""

    name = "ServerError"
    code = 90


class ShuttingDown(ServerError):
    """The server is draining after SIGTERM and accepts no new work."""

    name = "ShuttingDown"
    code = 91


class Overloaded(ServerError):
    """A connection cap (per client address or in total) is reached."""

    name = "Overloaded"
    code = 92


class InternalError(ServerError):
    """Serving this connection failed unexpectedly; only this connection is affected."""

    name = "InternalError"
    code = 93


class Unavailable(ServerError):
    """This node cannot serve the request correctly now (it lost its cluster, so its copy may
    be stale); try again later or on another node."""

    name = "Unavailable"
    code = 95


class ListenError(ServerError):
    """The server could not listen where it was told to (a port in use, an address not here)."""

    name = "ListenError"
    code = 94


class EffectError(OctosyncError):
    """The single-writer effect authority refused to run an effect."""

    name = "EffectError"
    code = 150


class LeaseLost(EffectError):
    """This holder's effect lease expired or was taken over (its fencing token is stale):
    nothing more may fire under it."""

    name = "LeaseLost"
    code = 151


class EffectInDoubt(EffectError):
    """An earlier holder recorded its intent to fire this effect and never recorded the
    outcome; without a way to ask the effect's target, firing again could fire it twice."""

    name = "EffectInDoubt"
    code = 152


class ConfigError(OctosyncError):
    """A configuration file or a command-line setting is missing, malformed or unknown."""

    name = "ConfigError"
    code = 100


class DataDirInUse(ConfigError):
    """Another process holds the data folder (one server per folder: two would interleave
    their journals)."""

    name = "DataDirInUse"
    code = 101


class MissingExtra(ConfigError):
    """A command needs an optional part of the package (an extra) that is not installed."""

    name = "MissingExtra"
    code = 102


class NothingPublished(OctosyncError):
    """A subscriber got no state in the time it was given: nobody publishes the stream there."""

    name = "NothingPublished"
    code = 103


class PipelineError(OctosyncError):
    """A pipeline job failed; the message names the input and the stage."""

    name = "PipelineError"
    code = 50


class InvalidValue(RemoteProtocolError):
    """A dataspace value of an unsupported type (``path`` names where it sits in the value):
    the values come from peers (the relay decodes them), so it is the peer's error."""

    name = "InvalidValue"
    code = 80


class InvalidPattern(RemoteProtocolError):
    """A dataspace pattern with an operator where only a constant may stand (label, dict key):
    a peer's, like ``InvalidValue``."""

    name = "InvalidPattern"
    code = 81


def all_errors() -> list[type[OctosyncError]]:
    """Every class in the tree, root first; used to check names and codes stay unique."""
    seen: list[type[OctosyncError]] = []
    stack: list[type[OctosyncError]] = [OctosyncError]
    while stack:
        cls = stack.pop(0)
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen


def by_name(name: str) -> type[OctosyncError]:
    """The error class with this stable name (for clients turning a wire error back into one)."""
    for cls in all_errors():
        if cls.name == name:
            return cls
    raise KeyError(name)


class NotJoined(RemoteProtocolError):
    """A signaling frame other than ``join`` from a connection that has not joined."""

    name = "NotJoined"
    code = 60


class DuplicatePeer(RemoteProtocolError):
    """A signaling ``join`` with a peer id already registered in the session (or a rejoin)."""

    name = "DuplicatePeer"
    code = 61


class UnknownTarget(RemoteProtocolError):
    """A directed signaling frame to a peer that is not in the session."""

    name = "UnknownTarget"
    code = 62


class RelayError(RemoteProtocolError):
    """A Syndicate relay peer broke the protocol (the relay answers ``Error`` and closes)."""

    name = "RelayError"
    code = 82


class UnknownOid(RelayError):
    """A turn event or wire ref naming an OID the connection does not hold."""

    name = "UnknownOid"
    code = 83


class HandleInUse(RelayError):
    """An ``Assert`` reusing a handle that is still live on that connection."""

    name = "HandleInUse"
    code = 84
