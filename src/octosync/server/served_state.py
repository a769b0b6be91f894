"""The part of a face's state its sessions' port shares with every other face's."""

from __future__ import annotations

from octosync.server.auth import ClaimGrants
from octosync.server.face_state import FaceState
from octosync.server.runtime import Runtime


class ServedFaceState(FaceState):
    """A face's state whose sessions take the frame limit, token checks and delivery from the
    runtime they share (the parts of their port every face has alike)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    @property
    def max_frame(self) -> int:
        return self.rt.max_frame

    def authenticate(self, token: str | None) -> ClaimGrants:
        return self.rt.authenticate(token)

    def deliver(self, conn: int, *data: bytes) -> None:
        self.rt.deliver(conn, *data)
