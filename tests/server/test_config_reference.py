"""Every numeric setting has a range, a value outside it stops the server at start in one line,
and ``docs/config.md`` is what the code generates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from octosync.errors import ConfigError
from octosync.server.config import SECTIONS, Range, ServerConfig, load_config_file
from octosync.server.config_reference import reference
from tests.e2e.helpers import refusal

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"
SERVE = [sys.executable, "-m", "octosync.cli", "serve", "--insecure-dev"]
NUMERIC = [
    (section, name, key.range)
    for section, keys in SECTIONS.items()
    for name, key in keys.items()
    if int in key.types or float in key.types
]


def test_the_reference_page_is_generated_from_the_code() -> None:
    assert DOC.read_text() == reference(), (
        "docs/config.md is stale: python -m octosync.server.config_reference > docs/config.md"
    )


@pytest.mark.parametrize(("section", "name", "allowed"), NUMERIC)
def test_every_number_has_a_range_and_values_outside_it_are_refused(
    tmp_path: Path, section: str, name: str, allowed: Range | None
) -> None:
    assert allowed is not None, f"[{section}] {name} takes any number"
    below = allowed.low if allowed.above else allowed.low - 1
    for value in (below, allowed.high + 1, 10**20):
        path = tmp_path / "octosync.toml"
        path.write_text(f"[{section}]\n{name} = {value}\n")
        with pytest.raises(ConfigError) as err:
            load_config_file(path, ServerConfig())
        line = str(err.value)
        assert str(path) in line, line
        assert f"{section}.{name}" in line, line
        assert str(value) in line, line
        assert str(allowed) in line, line
    path = tmp_path / "ok.toml"
    highest = SECTIONS[section][name].types[0](allowed.high)
    path.write_text(f"[{section}]\n{name} = {highest}\n")
    load_config_file(path, ServerConfig())


@pytest.mark.parametrize(
    ("section", "line"),
    [
        ("server", "heartbeat = -1"),
        ("hub", "socket_high_water = -1"),
        ("server", "request_timeout = 0"),
        ("server", "checkpoint_interval = 0"),
        ("server", "max_frame_size = 99999999999999999999"),
    ],
)
def test_serve_refuses_a_value_that_would_break_it_exit_2_in_one_line(
    tmp_path: Path, section: str, line: str
) -> None:
    path = tmp_path / "octosync.toml"
    path.write_text(f"[{section}]\n{line}\n")
    done = subprocess.run(
        [*SERVE, "--config", str(path), "--data", str(tmp_path / "var"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = refusal(done)
    key = line.split(" = ")[0]
    assert f"{section}.{key}" in said, said
    assert "out of range" in said, said
