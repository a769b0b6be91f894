"""The protocol's JSON Schemas (``docs/schemas``), loaded once, and what the tests ask of them."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schemas"


@cache
def validator(name: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def check(name: str, doc: Any) -> None:
    """Raise ``AssertionError`` listing every way ``doc`` breaks schema ``name``."""
    problems = [
        f"{'/'.join(map(str, e.absolute_path)) or '$'}: {e.message}"
        for e in validator(name).iter_errors(doc)
    ]
    assert not problems, f"{name}: {problems} in {json.dumps(doc)[:400]}"


def validate_lazily(direction: str, text: str) -> str:
    """Check one text frame of the lazily face (either way); returns its kind."""
    doc = json.loads(text)
    if isinstance(doc, dict) and "protocol_id" in doc:
        check("lazily-handshake", doc)
        return "handshake"
    check("lazily-json", doc)
    kind: str = doc["type"]
    assert not (direction == "sent" and kind == "error"), "clients do not send error frames"
    return kind
