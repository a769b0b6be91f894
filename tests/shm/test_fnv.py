from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from octosync.shm.fnv import OFFSET_BASIS, fnv1a_64, fnv1a_64_python


def test_known_values() -> None:
    # FNV-1a 64 test vectors from the algorithm's authors: "" and "a"
    assert fnv1a_64(b"") == OFFSET_BASIS == 0xCBF29CE484222325
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8


@given(st.binary(max_size=2048))
def test_the_c_path_agrees_with_the_loop_on_every_buffer_kind(data: bytes) -> None:
    expected = fnv1a_64_python(data)
    assert fnv1a_64(data) == expected
    assert fnv1a_64(bytearray(data)) == expected
    assert fnv1a_64(memoryview(b"xx" + data)[2:]) == expected
