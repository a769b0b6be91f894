from __future__ import annotations

import math

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from octosync.errors import DecodeError, LimitExceeded
from octosync.wire import cbor

plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6) | st.integers(-100, 100), inner, max_size=4)
    ),
    max_leaves=12,
)


def test_reference_handshake_vector() -> None:
    # The reference implementation's canonical handshake vector (ADR-0013 appendix A).
    vector = bytes.fromhex(
        "a3 62 6f 70 69 68 61 6e 64 73 68 61 6b 65 62 74 73 00 67 70 61 79 6c 6f 61 64 a4 68 61"
        "67 65 6e 74 5f 69 64 6d 65 78 61 6d 70 6c 65 2d 61 67 65 6e 74 6c 63 61 70 61 62 69 6c"
        "69 74 69 65 73 82 70 63 6f 6d 70 72 65 73 73 69 6f 6e 3a 7a 73 74 64 6f 73 74 72 65 61"
        "6d 3a 73 75 62 67 72 61 70 68 6c 73 65 73 73 69 6f 6e 5f 6d 65 74 61 f6 6e 63 6c 69 65"
        "6e 74 5f 76 65 72 73 69 6f 6e 01"
    )
    value = {
        "op": "handshake",
        "ts": 0,
        "payload": {
            "client_version": 1,
            "capabilities": ["compression:zstd", "stream:subgraph"],
            "agent_id": "example-agent",
            "session_meta": None,
        },
    }
    assert cbor.encode(value) == vector
    assert cbor.decode(vector) == value


@given(plain)
def test_roundtrip_and_canonical_is_a_fixed_point(value: object) -> None:
    data = cbor.encode(value)
    back = cbor.decode(data)
    assert cbor.encode(back) == data
    assert cbor2.loads(data) == back


@given(st.dictionaries(st.text(max_size=6), st.integers(-1000, 1000), max_size=6))
def test_agrees_with_cbor2_canonical_on_string_maps(value: dict[str, int]) -> None:
    assert cbor.encode(value) == cbor2.dumps(value, canonical=True)


def test_keys_sort_by_encoded_bytes_across_types() -> None:
    # 1000 encodes as 19 03 e8 (3 bytes) and sorts before "a" (61 61): bytewise, not length-first.
    assert cbor.encode({"a": 1, 1000: 2}) == bytes.fromhex("a21903e802616101")


@pytest.mark.parametrize(
    ("value", "hexed"),
    [
        (1.0, "01"),
        (0.5, "f93800"),
        (math.inf, "f97c00"),
        (1.1, "fb3ff199999999999a"),
        (100000.5, "fa47c35040"),
        (23, "17"),
        (24, "1818"),
        (-1, "20"),
        (256, "190100"),
    ],
)
def test_shortest_forms(value: object, hexed: str) -> None:
    assert cbor.encode(value).hex() == hexed
    assert cbor.encode(float("nan")).hex() == "f97e00"


@pytest.mark.parametrize(
    "hexed",
    [
        "9f0102ff",  # indefinite array
        "190001",  # 1 in a 2-byte head
        "c000",  # tag
        "a2616101616102",  # duplicate key
        "a2617a01616101",  # misordered keys
        "fa3f800000",  # 1.0 as a float
        "fb3fe0000000000000",  # 0.5 in 8 bytes
        "0101",  # trailing byte
        "",  # nothing
        "f7",  # undefined
    ],
)
def test_non_canonical_input_is_a_decode_error(hexed: str) -> None:
    with pytest.raises(DecodeError):
        cbor.decode(bytes.fromhex(hexed))


def test_unencodable_types_name_the_path() -> None:
    with pytest.raises(DecodeError) as err:
        cbor.encode({"a": [1, object()]})
    assert err.value.path == "$.a[1]"
    with pytest.raises(DecodeError):
        cbor.encode(2**64)


def old_rule(data: bytes) -> bool:
    """The rule before the validator: cbor2 parses it and re-encoding gives the same bytes."""
    try:
        value = cbor2.loads(data)
        if isinstance(value, cbor2.CBORTag) or value is cbor2.undefined:
            return False
        return cbor.encode(value) == data
    except Exception:
        return False


def has_container_key(value: object) -> bool:
    if isinstance(value, dict):
        return any(
            isinstance(k, tuple | list | dict) or has_container_key(v) for k, v in value.items()
        )
    if isinstance(value, list):
        return any(has_container_key(v) for v in value)
    return False


@given(st.data())
def test_the_validator_accepts_exactly_the_canonical_encodings(data: st.DataObject) -> None:
    raw = bytearray(cbor.encode(data.draw(plain)))
    for _ in range(data.draw(st.integers(0, 3))):
        if raw:
            pos = data.draw(st.integers(0, len(raw) - 1))
            raw[pos] = data.draw(st.integers(0, 255))
    sample = bytes(raw)
    expected = old_rule(sample) and not has_container_key(cbor2.loads(sample))
    try:
        cbor.decode(sample)
        accepted = True
    except (DecodeError, LimitExceeded):
        accepted = False
    assert accepted == expected


@given(plain, plain)
def test_raw_kept_values_are_validated_and_spliced_back_verbatim(
    graph: object, meta: object
) -> None:
    data = cbor.encode({"graph": graph, "meta": meta, "n": 1})
    value = cbor.decode(data, raw_keys=frozenset({"graph"}))
    assert isinstance(value["graph"], cbor.Raw)
    assert value["graph"].value() == cbor.decode(cbor.encode(graph))
    assert value["meta"] == cbor.decode(cbor.encode(meta))
    assert cbor.encode(value) == data


def test_a_broken_raw_value_is_refused_and_the_cooked_part_is_bounded() -> None:
    good = cbor.encode({"graph": [1, 2, 3], "x": "a" * 100})
    bad = good.replace(b"\x83\x01\x02\x03", b"\x83\x01\x19\x00\x02\x03")  # long head inside
    with pytest.raises(DecodeError):
        cbor.decode(bad, raw_keys=frozenset({"graph"}))
    with pytest.raises(LimitExceeded):
        cbor.decode(good, raw_keys=frozenset({"graph"}), max_cooked=50)
    deep = b"\x81" * (cbor.MAX_DEPTH + 1) + b"\x00"
    with pytest.raises(LimitExceeded):
        cbor.decode(deep)
    cbor.decode(b"\x81" * cbor.MAX_DEPTH + b"\x00")
