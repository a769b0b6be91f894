"""Write the test vectors the suite uses from ``../shared/conformance/`` into ``tests/vectors/``.

The project keeps its own copy of the vectors it tests against, so a clone without ``shared``
beside it runs every test. Only inputs and expected outputs are kept: wire bytes, wire values,
expected results and the identifiers tests select scenarios by. Descriptions, notes and other
prose are dropped, and the schemas are not copied. ``SOURCES.json`` records, per file, the
source repository, commit and path and the SHA-256 of the source and of what was written.

    python tests/vectors/extract.py                # rewrite tests/vectors from ../shared
    python tests/vectors/extract.py --check        # exit 1 if tests/vectors is out of date
    python tests/vectors/extract.py --shared DIR   # another checkout of shared/
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_SHARED = HERE.parents[2] / "shared"

# Where each set comes from. The lazily commit is the one shared/conformance/README.md names;
# TopGun's fixtures are byte-identical to packages/core-rust/tests/fixtures at the commit the
# shared TopGun peer was bundled from (checked file by file against that repository).
SOURCES = {
    "lazily": {
        "repository": "https://github.com/lazily-hub/lazily-spec",
        "commit": "57c46c3c9459744fbf9210d24d4f18edc4d26f07",
        "path": "conformance",
    },
    "topgun": {
        "repository": "https://github.com/TopGunBuild/topgun",
        "commit": "2d5b1dd05704f81f2ce8d308d0a46531b4edb050",
        "path": "packages/core-rust/tests/fixtures",
        "license": "Apache-2.0",
    },
}

# The lazily fixtures the tests read (add a name here when a test needs another).
LAZILY_FILES = (
    "snapshot_minimal.json",
    "snapshot_multi_node.json",
    "snapshot_shared_blob.json",
    "delta_sequential.json",
    "delta_non_sequential.json",
    "delta_shared_blob.json",
    "arena_blob.json",
    "codec/capability_handshake.json",
    "codec/frame_roundtrip_json.json",
    "codec/frame_roundtrip_msgpack.json",
    "codec/nodekey_null_leniency.json",
    "collections/registers_convergence.json",
    "collections/seqcrdt_convergence.json",
    "presence/presence.json",
    "presence/awareness.json",
    "presence/ephemeral.json",
    "collections/textcrdt_convergence.json",
    "distributed/crdt_sync_frames.json",
    "reliable-sync/idempotent_redelivery.json",
    "reliable-sync/coalesce_bounds_outbox.json",
    "signaling/frames.json",
)

# Keys that hold prose about a vector rather than the vector itself.
PROSE_KEYS = frozenset(
    {
        "description",
        "name",
        "note",
        "clause",
        "anti_vacuity",
        "reencode_obligation",
        "wire_encoding",
        "generator",
        "reason",
        "required_of_binding",
        "prose",
    }
)
# Subtrees that are wire values: kept whole, whatever their keys are called.
WIRE_KEYS = frozenset({"wire", "frame", "wire_json", "wire_msgpack_hex", "local", "remote"})


def strip_prose(value: Any) -> Any:
    """``value`` without prose keys outside wire subtrees."""
    if isinstance(value, dict):
        return {
            k: (v if k in WIRE_KEYS else strip_prose(v))
            for k, v in value.items()
            if k not in PROSE_KEYS
        }
    if isinstance(value, list):
        return [strip_prose(v) for v in value]
    return value


def prose_left(value: Any, where: str = "$") -> list[str]:
    """Paths of strings with whitespace outside wire subtrees (there should be none)."""
    if isinstance(value, dict):
        found: list[str] = []
        for k, v in value.items():
            if k not in WIRE_KEYS:
                found += prose_left(v, f"{where}.{k}")
        return found
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in prose_left(v, f"{where}[{i}]")]
    if isinstance(value, str) and any(c.isspace() for c in value):
        return [where]
    return []


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def render(shared: Path) -> dict[str, bytes]:
    """Every vector file (path relative to ``tests/vectors``) and ``SOURCES.json``."""
    conformance = shared / "conformance"
    out: dict[str, bytes] = {}
    files: list[dict[str, str]] = []
    for name in LAZILY_FILES:
        raw = (conformance / "lazily" / name).read_bytes()
        doc = strip_prose(json.loads(raw))
        left = prose_left(doc)
        if left:
            raise SystemExit(f"{name}: prose left at {', '.join(left)}; extend PROSE_KEYS")
        data = (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode()
        out[f"lazily/{name}"] = data
        files.append(_entry("lazily", name, raw, data))
    for path in sorted((conformance / "topgun").iterdir()):
        if path.suffix not in (".json", ".msgpack"):
            continue
        raw = path.read_bytes()  # one wire message per file: the value and its bytes
        out[f"topgun/{path.name}"] = raw
        files.append(_entry("topgun", path.name, raw, raw))
    sources = {"sources": SOURCES, "files": files}
    out["SOURCES.json"] = (json.dumps(sources, indent=1) + "\n").encode()
    return out


def _entry(source: str, name: str, raw: bytes, data: bytes) -> dict[str, str]:
    return {
        "file": f"{source}/{name}",
        "source": source,
        "source_path": f"{SOURCES[source]['path']}/{name}",
        "source_sha256": sha256(raw),
        "sha256": sha256(data),
    }


def stale(target: Path, rendered: dict[str, bytes]) -> list[str]:
    """Files that differ from, are missing in, or are extra in ``target``."""
    have = {
        p.relative_to(target).as_posix()
        for p in target.rglob("*")
        if p.is_file() and p.suffix in (".json", ".msgpack")
    }
    differ = {
        n for n, data in rendered.items() if n not in have or (target / n).read_bytes() != data
    }
    return sorted(differ | (have - set(rendered)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help="shared/ checkout")
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    if not (args.shared / "conformance").is_dir():
        print(f"extract: no conformance/ under {args.shared} (use --shared DIR)", file=sys.stderr)
        return 2
    rendered = render(args.shared)
    if args.check:
        differ = stale(HERE, rendered)
        for name in differ:
            print(f"out of date: tests/vectors/{name}", file=sys.stderr)
        return 1 if differ else 0
    for name, data in rendered.items():
        path = HERE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    print(f"wrote {len(rendered)} files under {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
