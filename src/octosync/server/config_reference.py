"""``docs/config.md``, generated from ``server.config.SECTIONS`` (a test keeps them equal):
``python -m octosync.server.config_reference > docs/config.md``."""

from __future__ import annotations

from pathlib import Path

from octosync.server.config import SECTIONS, Key, ServerConfig

_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "table"}
HEADER = """# Configuration reference

`octosync serve --config FILE` reads a TOML file; command-line flags win over it. An unknown
section or key, a value of the wrong type or out of its range stops the server at start with
one line naming the file, the key, the value and what it takes (exit status 2); a flag's value
is checked as its key's is, and the line names the flag.

Generated from the code (`octosync.server.config`); do not edit by hand.
"""


def _default(key: Key, defaults: ServerConfig) -> str:
    if key.field is None:
        return "unset"
    value: object = defaults
    for part in key.field.split("."):  # "auth.access_token_seconds": a nested setting
        if not hasattr(value, part):
            return "unset"
        value = getattr(value, part)
    if value is None:
        return "unset"
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def reference() -> str:
    defaults = ServerConfig()
    lines = [HEADER]
    for section, keys in SECTIONS.items():
        lines += [f"## [{section}]", "", "| key | type | default | allowed | flag | what it does |"]
        lines.append("| --- | --- | --- | --- | --- | --- |")
        for name, key in keys.items():
            names = [_TYPES.get(t, t.__name__) for t in key.types]
            kind = "number" if "number" in names else " or ".join(dict.fromkeys(names))
            if key.choices:
                allowed = " or ".join(f"`{c}`" for c in key.choices)
            elif key.range is not None:
                allowed = str(key.range)
            else:
                allowed = "any"
            flag = "" if key.flag is None else f"`{key.flag.name}`"
            default = _default(key, defaults)
            lines.append(f"| `{name}` | {kind} | {default} | {allowed} | {flag} | {key.doc} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference(), end="")
