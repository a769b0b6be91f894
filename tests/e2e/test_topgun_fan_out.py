"""How /topgun fans events out, over real sockets read byte by byte with a raw WebSocket
client: permessage-deflate (the server's answer, frames compressed once that inflate on
their own, plain frames for a client that did not offer, compressed client frames accepted),
large frames written in parts, and fan-outs coalesced under load but not when idle."""

from __future__ import annotations

import asyncio
import time
import zlib
from pathlib import Path

import aiohttp
import pytest

from octosync.crdt.sync_messages import SyncInit
from octosync.server import topgun_face
from octosync.server.topgun_state import topgun_state
from octosync.wire import topgun as tg
from tests.e2e.helpers import TIMEOUT, serve
from tests.topgun.helpers import batch, put

TAIL = b"\x00\x00\xff\xff"


class RawWs:
    """A minimal client: the upgrade by hand, masked frames out, frames in as (first byte,
    payload) exactly as they crossed the socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.headers: dict[str, str] = {}
        self._inflate = zlib.decompressobj(-15)

    @classmethod
    async def open(cls, port: int, offer: str | None) -> RawWs:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        ws = cls(reader, writer)
        extra = f"Sec-WebSocket-Extensions: {offer}\r\n" if offer else ""
        writer.write(
            (
                "GET /topgun HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                f"{extra}\r\n"
            ).encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        status, *lines = head.decode().split("\r\n")
        assert " 101 " in status, status
        for line in lines:
            if ":" in line:
                name, _, value = line.partition(":")
                ws.headers[name.strip().lower()] = value.strip()
        return ws

    def send(self, payload: bytes, *, compress: bool = False) -> None:
        first = 0x82
        if compress:  # the client keeps its context, as RFC 7692 allows by default
            body = self._client_z.compress(payload) + self._client_z.flush(zlib.Z_SYNC_FLUSH)
            payload, first = body[: -len(TAIL)], 0xC2
        n = len(payload)
        if n < 126:
            size = bytes([0x80 | n])
        elif n < 1 << 16:
            size = bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            size = bytes([0x80 | 127]) + n.to_bytes(8, "big")
        mask = b"\x01\x02\x03\x04"
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(bytes([first]) + size + mask + masked)

    @property
    def _client_z(self) -> zlib._Compress:
        if not hasattr(self, "_z"):
            self._z = zlib.compressobj(6, zlib.DEFLATED, -15)
        return self._z

    async def frame(self) -> tuple[int, bytes]:
        first, second = await asyncio.wait_for(self.reader.readexactly(2), TIMEOUT)
        assert not second & 0x80, "a server frame is never masked"
        n = second & 0x7F
        if n == 126:
            n = int.from_bytes(await self.reader.readexactly(2), "big")
        elif n == 127:
            n = int.from_bytes(await self.reader.readexactly(8), "big")
        return first, await asyncio.wait_for(self.reader.readexactly(n), TIMEOUT)

    async def message(self) -> tuple[bool, tg.Message, bytes]:
        """(compressed?, decoded message, payload as sent on the wire) of the next frame."""
        first, payload = await self.frame()
        assert first & 0x80, hex(first)  # one final frame per message
        assert first & 0x0F == 0x2, hex(first)  # binary
        compressed = bool(first & 0x40)
        plain = self._inflate.decompress(payload + TAIL) if compressed else payload
        return compressed, tg.decode(plain), payload

    async def hello(self, map_name: str) -> None:
        self.send(tg.encode(tg.DeviceHello()))
        _, ack, _ = await self.message()
        assert isinstance(ack, tg.DeviceAck), ack
        self.send(tg.encode(SyncInit(map_name, 0)))
        await self.message()  # SYNC_RESP_ROOT

    def close(self) -> None:
        self.writer.close()


def big_batch(first: int, n: int) -> tg.OpBatch:
    return batch(
        *(put(str(first + i), f"k{i}", {"v": "x" * 40, "i": i}, 1_000 + first) for i in range(n))
    )


async def test_a_large_fan_out_is_compressed_once_for_every_client_that_offered_deflate(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as srv, aiohttp.ClientSession() as http:
        port = int(srv.ws_url.rsplit(":", 1)[1])
        offered = await RawWs.open(port, "permessage-deflate; client_max_window_bits")
        also = await RawWs.open(port, "x-unknown, permessage-deflate")
        plain = await RawWs.open(port, None)
        narrow = await RawWs.open(port, "permessage-deflate; server_max_window_bits=10")
        # Whatever the offer, the answer makes each server message stand alone.
        assert offered.headers["sec-websocket-extensions"] == (
            "permessage-deflate; server_no_context_takeover"
        )
        assert (
            also.headers["sec-websocket-extensions"] == offered.headers["sec-websocket-extensions"]
        )
        assert "sec-websocket-extensions" not in plain.headers
        assert "sec-websocket-extensions" not in narrow.headers  # needs a window below 15
        for ws in (offered, also, plain, narrow):
            await ws.hello("users")
        writer = await http.ws_connect(f"{srv.ws_url}/topgun")
        await writer.send_bytes(tg.encode(tg.DeviceHello()))
        await writer.receive_bytes()
        for round_ in range(2):
            await writer.send_bytes(tg.encode(big_batch(100 * round_, 30)))
            got = {
                name: await ws.message()
                for name, ws in (
                    ("offered", offered),
                    ("also", also),
                    ("plain", plain),
                    ("narrow", narrow),
                )
            }
            assert [got[n][0] for n in ("offered", "also", "plain", "narrow")] == [
                True,
                True,
                False,
                False,
            ]
            # One compression for both: the same bytes on both sockets, and each message
            # inflates with a fresh inflater (no history from the message before).
            assert got["offered"][2] == got["also"][2]
            alone = zlib.decompressobj(-15).decompress(got["offered"][2] + TAIL)
            assert alone == got["plain"][2] == got["narrow"][2]
            assert len(got["offered"][2]) < len(got["plain"][2]) // 3
            message = got["offered"][1]
            assert isinstance(message, tg.ServerBatchEvent), message
            assert [e.key for e in message.payload.events] == [f"k{i}" for i in range(30)]
        # With one connection left that takes deflate, nothing is shared: it gets plain frames.
        also.close()
        narrow.close()
        async with asyncio.timeout(TIMEOUT):
            while len(srv.runtime.links) > 3:  # offered, plain and the writer
                await asyncio.sleep(0.02)
        await writer.send_bytes(tg.encode(big_batch(300, 30)))
        (compressed, message, _), (_, same, _) = await offered.message(), await plain.message()
        assert not compressed
        assert message == same
        offered.close()
        plain.close()


async def test_a_client_may_compress_its_own_frames_and_small_replies_stay_plain(
    tmp_path: Path,
) -> None:
    async with serve(tmp_path) as srv:
        port = int(srv.ws_url.rsplit(":", 1)[1])
        client = await RawWs.open(port, "permessage-deflate")
        reader = await RawWs.open(port, None)
        await client.hello("users")
        await reader.hello("users")
        for round_ in range(2):  # the second frame uses the first one's history
            ops = big_batch(100 * round_, 20)
            wanted = tg.OpBatch(tg.OpBatchPayload(ops.payload.ops, write_concern="APPLIED"))
            client.send(tg.encode(wanted), compress=True)
            compressed, ack, _ = await client.message()
            assert isinstance(ack, tg.OpAck), ack
            assert not compressed  # a short reply is not worth a zlib call
            _, events, _ = await reader.message()
            assert isinstance(events, tg.ServerBatchEvent)
            assert len(events.payload.events) == 20
        assert topgun_state(srv.runtime).core.maps.live_items("users").keys() == {
            f"k{i}" for i in range(20)
        }
        client.close()
        reader.close()


async def test_a_large_message_for_one_connection_arrives_whole(tmp_path: Path) -> None:
    """Written as header then payload (``SPLIT_WRITE_BYTES``): one frame, nothing between."""
    async with serve(tmp_path) as srv:
        port = int(srv.ws_url.rsplit(":", 1)[1])
        writer, reader = await RawWs.open(port, None), await RawWs.open(port, "permessage-deflate")
        for ws in (writer, reader):
            await ws.hello("users")
        ops = [put(str(i), f"k{i}", {"blob": "y" * 2_000, "i": i}, 5_000) for i in range(60)]
        writer.send(tg.encode(batch(*ops)))
        writer.send(tg.encode(tg.Ping(timestamp=9)))
        compressed, message, payload = await reader.message()
        assert not compressed  # one target: nothing to share
        assert len(payload) > 64 * 1024
        assert isinstance(message, tg.ServerBatchEvent)
        assert [e.key for e in message.payload.events] == [f"k{i}" for i in range(60)]
        writer.send(tg.encode(batch(put("99", "after", 1, 6_000))))
        _, after, _ = await reader.message()  # the next frame starts where that one ended
        assert isinstance(after, tg.ServerEvent)
        assert after.payload.key == "after"
        writer.close()
        reader.close()


async def test_an_idle_server_fans_out_at_once_and_a_busy_one_coalesces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gap = 0.6  # long enough that the timing below holds on a loaded machine
    monkeypatch.setattr(topgun_face, "FLUSH_GAP", gap)
    async with serve(tmp_path) as srv:
        port = int(srv.ws_url.rsplit(":", 1)[1])
        writer, reader = await RawWs.open(port, None), await RawWs.open(port, None)
        for ws in (writer, reader):
            await ws.hello("users")
        started = time.monotonic()
        writer.send(tg.encode(batch(put("1", "a", 1, 10))))
        _, first, _ = await reader.message()  # idle: out at once, not after the gap
        assert time.monotonic() - started < gap / 2
        assert isinstance(first, tg.ServerEvent)
        # Busy: the next two batches, sent apart within the gap, reach the reader as one.
        writer.send(tg.encode(batch(put("2", "b", 2, 11))))
        await asyncio.sleep(gap / 6)
        writer.send(tg.encode(batch(put("3", "c", 3, 12))))
        _, both, _ = await reader.message()
        assert time.monotonic() - started >= gap
        assert isinstance(both, tg.ServerBatchEvent)
        assert [e.key for e in both.payload.events] == ["b", "c"]
        writer.close()
        reader.close()
