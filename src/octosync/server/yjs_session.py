"""The ``/yjs`` face's sessions: y-websocket on ``/yjs/NAME``, Hocuspocus on ``/yjs``.

Both carry y-protocols messages to one ``YjsFace``, so a document is the same whichever
protocol opens it. y-websocket's connection is one document, named by its path; its
credentials come with the upgrade (``?token=``), the server speaks first (its step 1, and the
awareness states there are) and its only error message is y-protocols' permission denied
(sent for a read-only document's update): a refusal closes the connection with a code
(``hub.policy``). Hocuspocus's socket carries many documents, each opened by an
auth message with a token (answered ``Authenticated`` with the scope, or
``PermissionDenied``); messages for an address that is not open are dropped unread; each
update is confirmed by ``SyncStatus`` once committed, and refused in-band
(``SyncStatus`` false, nothing changed) on a read-only document.
"""

from __future__ import annotations

from collections.abc import Callable

from octosync.errors import AuthError, OctosyncError, ReadOnlyDocument, Unauthorized
from octosync.hub.limits import MAX_STREAM_NAME
from octosync.server.auth import ClaimGrants
from octosync.server.face_names import YJS, FaceName
from octosync.server.ports import Credentials
from octosync.server.yjs_face import YjsFace
from octosync.wire.websocket import ws_frame
from octosync.yjs import messages as m
from octosync.yjs.awareness import encode_entries

MAX_DOCUMENTS = 256
"""Documents one Hocuspocus socket may have open."""


def _frame(body: bytes) -> bytes:
    return ws_frame(body, text=False)


class YWebsocketSession:
    """One y-websocket connection: one document."""

    face = FaceName.YJS
    byte_stream = False
    offload_decode = False
    ready = True

    def __init__(
        self, face: YjsFace, rt: Credentials, conn: int, identity: ClaimGrants, name: str
    ) -> None:
        self.yjs = face
        self.conn = conn
        self.identity = identity
        self.name = name
        self.max_frame = rt.max_frame
        core = face.core
        core.join(conn, name, b"", can_write=identity.may(YJS, name, "write"))
        self.outgoing: list[bytes] = [_frame(m.sync_step1(core.state_vector(name)))]
        states = core.awareness_states(name)
        if states is not None:
            self.outgoing.append(_frame(states))

    def decode(self, data: bytes) -> m.YMessage:
        return m.decode_y_websocket(data)

    def handle(self, message: m.YMessage) -> None:
        core = self.yjs.core
        if isinstance(message, m.SyncStep1):
            self.outgoing.append(_frame(core.answer_step1(self.name, message.state_vector)))
        elif isinstance(message, m.SyncStep2 | m.SyncUpdate):
            self.yjs.update(self.conn, self.name, message.update, None)
        elif isinstance(message, m.AwarenessUpdate):
            self.yjs.send(core.awareness(self.conn, self.name, message.payload))
        elif isinstance(message, m.QueryAwareness):
            states = core.awareness_states(self.name)
            self.outgoing.append(_frame(states or m.awareness(encode_entries([]))))

    def error_frame(self, err: OctosyncError) -> bytes:
        """A permission refusal is y-protocols' permission-denied message (the provider logs
        its reason); y-websocket has no other error message, so for the rest the close code
        is the refusal."""
        if isinstance(err, ReadOnlyDocument | AuthError):
            return _frame(m.y_permission_denied(str(err)))
        return b""

    def send_error(self, err: OctosyncError) -> None:
        frame = self.error_frame(err)
        if frame:
            self.outgoing.append(frame)

    def close(self) -> None:
        self.yjs.send(self.yjs.core.leave(self.conn, self.name))


class HocuspocusSession:
    """One Hocuspocus socket: documents opened by address, each with its own token."""

    face = FaceName.YJS
    byte_stream = False
    offload_decode = False

    def __init__(self, face: YjsFace, rt: Credentials, conn: int) -> None:
        self.yjs = face
        self.rt = rt
        self.conn = conn
        self.max_frame = rt.max_frame
        self.outgoing: list[bytes] = []
        self.identity: ClaimGrants | None = None
        """The identity, of those the documents were opened with, whose token expires first:
        its expiry closes the socket."""
        self.open: dict[str, str] = {}
        """Address -> document name, for the documents this socket opened."""
        self.read_only: set[str] = set()
        self._identities: dict[str, ClaimGrants] = {}

    @property
    def ready(self) -> bool:
        return bool(self.open)

    def decode(self, data: bytes) -> m.Addressed:
        return m.decode_hocuspocus(data)

    def handle(self, message: m.Addressed) -> None:
        address = message.address
        body = message.message
        if isinstance(body, m.AuthToken):
            self._open(address, message.document, body.token)
            return
        name = self.open.get(address)
        if name is None:
            return  # not opened (Hocuspocus queues these until its auth hooks answer; ours
            # answer at once, and a provider sends its token first)
        core = self.yjs.core
        prefix = core.prefix(self.conn, name)
        if isinstance(body, m.SyncStep1):
            self.outgoing.append(_frame(prefix + core.answer_step1(name, body.state_vector)))
            if body.ask_back:
                self.outgoing.append(_frame(prefix + m.sync_step1(core.state_vector(name))))
        elif isinstance(body, m.SyncStep2 | m.SyncUpdate):
            if address in self.read_only and body.update != m.EMPTY_UPDATE:
                self.outgoing.append(_frame(prefix + m.sync_status(False)))
                return
            self.yjs.update(self.conn, name, body.update, self._confirm(name))
        elif isinstance(body, m.AwarenessUpdate):
            self.yjs.send(core.awareness(self.conn, name, body.payload))
        elif isinstance(body, m.QueryAwareness):
            states = core.awareness_states(name)
            self.outgoing.append(_frame(prefix + (states or m.awareness(encode_entries([])))))
        elif isinstance(body, m.Stateless):
            self.yjs.send(core.stateless(self.conn, name, body.payload))
        elif isinstance(body, m.CloseDocument):
            del self.open[address]
            self.read_only.discard(address)
            self._identities.pop(address, None)
            self.yjs.send(core.leave(self.conn, name))

    def _confirm(self, name: str) -> Callable[[], None]:
        face, conn = self.yjs, self.conn
        return lambda: face.to(conn, name, m.sync_status(True))

    def _open(self, address: str, name: str, token: str) -> None:
        if address in self.open:
            return  # a provider recreated fast sends its token again: Hocuspocus ignores it
        prefix = m.address_prefix(address)
        reason = self._refusal(address, name, token)
        if reason is not None:
            self.outgoing.append(_frame(prefix + m.permission_denied(reason)))
            return
        identity = self._identities[address]
        can_write = identity.may(YJS, name, "write")
        core = self.yjs.core
        core.join(self.conn, name, prefix, can_write=can_write)
        self.open[address] = name
        if not can_write:
            self.read_only.add(address)
        self.outgoing.append(_frame(prefix + m.authenticated(not can_write)))
        states = core.awareness_states(name)
        if states is not None:
            self.outgoing.append(_frame(prefix + states))

    def _refusal(self, address: str, name: str, token: str) -> str | None:
        """Why ``address`` may not open (Hocuspocus's ``PermissionDenied`` reason), or None."""
        if not 1 <= len(name) <= MAX_STREAM_NAME:
            return f"a document name has 1 to {MAX_STREAM_NAME} characters"
        if name in self.open.values():
            return "this document is already open on this connection"
        if len(self.open) >= MAX_DOCUMENTS:
            return f"at most {MAX_DOCUMENTS} documents on one connection"
        try:
            identity = self.rt.authenticate(token or None)
        except Unauthorized as err:
            return err.message
        if not identity.may(YJS, name, "read"):
            return f"no read grant on document {name!r}"
        held = self.identity
        if held is None or (
            identity.expires_at is not None
            and (held.expires_at is None or identity.expires_at < held.expires_at)
        ):
            self.identity = identity  # the socket lasts as long as its shortest token
        self._identities[address] = identity
        return None

    def error_frame(self, err: OctosyncError) -> bytes:
        """Hocuspocus has no error message: the close code is the refusal."""
        return b""

    def send_error(self, err: OctosyncError) -> None:
        return None

    def close(self) -> None:
        core = self.yjs.core
        for name in self.open.values():
            self.yjs.send(core.leave(self.conn, name))
        self.open.clear()
