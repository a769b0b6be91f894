"""Reading frames in bulk: any split of the byte stream gives the same frames, in order."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import Oversize
from octosync.links import frames
from octosync.wire import chain_link
from octosync.wire.framing import HEADER


def stream(n: int) -> tuple[bytes, list[chain_link.AnyFrame]]:
    sent: list[chain_link.AnyFrame] = [
        chain_link.DeviceHello(i, f"device-{i}" * (i % 5 + 1)) for i in range(n)
    ]
    return b"".join(chain_link.encode(f) for f in sent), sent


async def read_until_end(chunks: list[bytes]) -> tuple[list[chain_link.AnyFrame], Exception]:
    """Every frame read, and the error that ended the stream."""
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    incoming = frames.FrameReader(reader)
    got: list[chain_link.AnyFrame] = []
    for _ in range(1000):  # bounded: a reader that never consumes would loop
        try:
            payloads = await incoming.payloads()
        except Exception as exc:
            return got, exc
        got.extend(chain_link.decode(p) for p in payloads)
    raise AssertionError(f"no end of stream after {len(got)} frames")


@given(st.integers(1, 12), st.lists(st.integers(0, 400), max_size=12))
def test_any_split_gives_the_same_frames(n: int, cuts: list[int]) -> None:
    data, sent = stream(n)
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    got, end = asyncio.run(read_until_end([c for c in chunks if c]))
    assert got == sent
    assert isinstance(end, asyncio.IncompleteReadError)
    assert end.partial == b""


def test_end_of_stream_inside_a_frame_is_an_incomplete_read() -> None:
    data, sent = stream(2)
    got, end = asyncio.run(read_until_end([data[:-3]]))
    assert got == sent[:1]
    assert isinstance(end, asyncio.IncompleteReadError)
    assert end.partial != b""


def test_an_oversized_length_is_refused_before_its_payload_arrives() -> None:
    got, end = asyncio.run(read_until_end([HEADER.pack(chain_link.MAX_FRAME + 1)]))
    assert got == []
    assert isinstance(end, Oversize)
