"""lib0's variable-length encoding, as y-protocols frames its messages.

An unsigned integer is little-endian groups of 7 bits, the high bit of each byte saying
another follows; a string is its UTF-8 length then its bytes; a byte array likewise. lib0
refuses integers past 53 bits (a JavaScript number), and so does the reader here. Every
failure is ``MalformedYjsMessage`` naming the byte offset, so a peer learns what was wrong.
"""

from __future__ import annotations

from octosync.errors import MalformedYjsMessage

MAX_VAR_UINT = 2**53 - 1


def write_var_uint(out: bytearray, value: int) -> None:
    if not 0 <= value <= MAX_VAR_UINT:
        raise ValueError(f"{value} is not a var uint")
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)


def write_var_bytes(out: bytearray, data: bytes) -> None:
    write_var_uint(out, len(data))
    out += data


def write_var_string(out: bytearray, text: str) -> None:
    write_var_bytes(out, text.encode())


class Reader:
    """Reads one message's fields in order; ``done`` says whether bytes are left over."""

    __slots__ = ("at", "data")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    @property
    def done(self) -> bool:
        return self.at >= len(self.data)

    def var_uint(self, what: str) -> int:
        value = 0
        shift = 0
        data = self.data
        start = self.at
        while True:
            if self.at >= len(data):
                raise MalformedYjsMessage("the message ends inside a number", path=what)
            byte = data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if value > MAX_VAR_UINT:
                raise MalformedYjsMessage(f"the number at byte {start} is past 2^53", path=what)
            if byte < 0x80:
                return value
            shift += 7

    def var_bytes(self, what: str) -> bytes:
        n = self.var_uint(what)
        end = self.at + n
        if end > len(self.data):
            raise MalformedYjsMessage(
                f"{n} bytes announced, {len(self.data) - self.at} left", path=what
            )
        chunk = self.data[self.at : end]
        self.at = end
        return chunk

    def var_string(self, what: str) -> str:
        raw = self.var_bytes(what)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise MalformedYjsMessage("not UTF-8", path=what) from None

    def end(self, what: str) -> None:
        """Nothing may follow the message's last field."""
        if not self.done:
            raise MalformedYjsMessage(
                f"{len(self.data) - self.at} bytes after the message's end", path=what
            )
