"""The project's copy of the conformance vectors: complete, prose-free, and current."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.conftest import SHARED, missing
from tests.vectors import extract


def test_every_listed_file_is_present_with_its_recorded_hash(vectors_dir: Path) -> None:
    sources = json.loads((vectors_dir / "SOURCES.json").read_text())
    listed = {entry["file"]: entry for entry in sources["files"]}
    assert {f"lazily/{name}" for name in extract.LAZILY_FILES} <= set(listed)
    assert sum(1 for name in listed if name.startswith("topgun/")) >= 60
    for name, entry in listed.items():
        data = (vectors_dir / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
        assert entry["source"] in sources["sources"]
    for source in sources["sources"].values():
        assert len(source["commit"]) == 40
        assert source["repository"].startswith("https://github.com/")


def _keys_outside_wire(value: object) -> set[str]:
    if isinstance(value, dict):
        keys = set(value)
        for k, v in value.items():
            if k not in extract.WIRE_KEYS:
                keys |= _keys_outside_wire(v)
        return keys
    if isinstance(value, list):
        return set().union(*(_keys_outside_wire(v) for v in value))
    return set()


def test_no_prose_is_kept(vectors_dir: Path) -> None:
    paths = sorted((vectors_dir / "lazily").rglob("*.json"))
    assert len(paths) == len(extract.LAZILY_FILES)
    for path in paths:
        doc = json.loads(path.read_text())
        assert extract.prose_left(doc) == [], path
        assert not _keys_outside_wire(doc) & extract.PROSE_KEYS, path


def test_prose_stripping_keeps_wire_values_whole() -> None:
    doc = {
        "description": "a long story",
        "wire": {"Error": {"message": "peer 9 is not allowed", "description": "kept"}},
        "scenarios": [{"id": "x", "name": "the x case", "expect": {"note": "why", "n": 1}}],
    }
    assert extract.strip_prose(doc) == {
        "wire": {"Error": {"message": "peer 9 is not allowed", "description": "kept"}},
        "scenarios": [{"id": "x", "expect": {"n": 1}}],
    }
    assert extract.prose_left({"expect": {"why": "because it is"}}) == ["$.expect.why"]


def test_vectors_match_what_extract_writes_from_shared(vectors_dir: Path) -> None:
    if not (SHARED / "conformance").is_dir():
        missing(f"no {SHARED / 'conformance'} to compare tests/vectors with")
    assert extract.stale(vectors_dir, extract.render(SHARED)) == []
