"""Config files: unknown sections and keys, wrong types and unreadable files are errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from octosync.errors import ConfigError
from octosync.server.config import (
    SECTIONS,
    Key,
    ServerConfig,
    apply_flags,
    flags,
    load_config_file,
)


def load(tmp_path: Path, text: str) -> ServerConfig:
    path = tmp_path / "octosync.toml"
    path.write_text(text)
    return load_config_file(path, ServerConfig())


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ('[auth]\nhs256_secrett = "x"\n', "auth.hs256_secrett", "did you mean 'hs256_secret'"),
        ("[server]\nprot = 1\n", "server.prot", "did you mean 'port'"),
        ("[hubb]\nx = 1\n", "hubb", "unknown section [hubb]; did you mean 'hub'"),
        ("[server]\noutbox_max_frames = 5\n", "server.outbox_max_frames", "belongs in [hub]"),
        ("[server]\nzzz = 5\n", "server.zzz", "valid: "),
        ('[server]\nport = "80"\n', "server.port", "must be an integer"),
        ("[server]\nport = true\n", "server.port", "must be an integer"),
        ("[hub]\ncoalesce_backlog = 1\n", "hub.coalesce_backlog", "must be true or false"),
        ('[server]\njournal_durability = "fast"\n', "server.journal_durability", "'full'"),
        ('[signaling]\nmode = "closed"\n', "signaling.mode", "'allowlist'"),
        ("[signaling]\nallow = { a = [1] }\n", "signaling.allow", "peer ids"),
        ("port = 1\n", "port", "unknown section [port]"),
    ],
)
def test_mistakes_name_the_key_and_a_fix(tmp_path: Path, text: str, where: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert info.value.path == f"{tmp_path / 'octosync.toml'}: {where}"
    assert words in info.value.message


def test_every_table_key_is_accepted_with_a_value_of_its_type(tmp_path: Path) -> None:
    samples = {str: '"x"', int: "3", float: "1.5", bool: "true", dict: "{}", list: '["x"]'}
    skip = {"rs256_public_key_file"}  # reads a file: covered by test_auth_config
    shaped = {  # strings with a required shape
        "chain_config": '"nats://127.0.0.1:4222"',
        "advertised_url": '"wss://node1.example.com"',
    }
    for section, keys in SECTIONS.items():
        for name, key in keys.items():
            if name in skip:
                continue
            value = repr(key.choices[0]).replace("'", '"') if key.choices else samples[key.types[0]]
            if key.range is not None:  # the highest value its range takes, of its first type
                value = str(key.types[0](key.range.high))
            value = shaped.get(name, value)
            load(tmp_path, f"[{section}]\n{name} = {value}\n")


def test_the_advertised_url_is_a_websocket_base_and_anything_else_is_refused(
    tmp_path: Path,
) -> None:
    for given, base in (
        ("https://node1.example.com/", "wss://node1.example.com"),
        ("http://10.0.0.5:8765/octo", "ws://10.0.0.5:8765/octo"),
        ("ws://[::1]:9000", "ws://[::1]:9000"),
    ):
        cfg = load(tmp_path, f'[server]\nadvertised_url = "{given}"\n')
        assert cfg.advertised_url == base
        assert cfg.public_base(1) == base
    assert ServerConfig(host="0.0.0.0").public_base(8765) == "ws://0.0.0.0:8765"
    for bad in ("node1:8765", "ftp://node1", "ws://", "ws://n1:99999", "ws://n1/?q=1", "ws://u@n1"):
        with pytest.raises(ConfigError, match="advertised_url"):
            load(tmp_path, f'[server]\nadvertised_url = "{bad}"\n')


def test_values_land_where_they_belong(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        '[server]\nport = 9100\ndata = "elsewhere"\nheartbeat = 5\n'
        '[auth]\nhs256_secret = "s3cret-s3cret"\n[hub]\nretain_seconds = 12\n',
    )
    assert (cfg.port, cfg.data_dir, cfg.heartbeat) == (9100, Path("elsewhere"), 5)
    assert cfg.auth.hs256_secret == "s3cret-s3cret"
    assert cfg.retain_after_producer_leaves == 12.0
    assert cfg.host == ServerConfig().host  # untouched keys keep their defaults


def test_missing_malformed_and_directory_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config_file(tmp_path / "absent.toml", ServerConfig())
    with pytest.raises(ConfigError, match="is a directory"):
        load_config_file(tmp_path, ServerConfig())
    with pytest.raises(ConfigError, match=r"not valid TOML.*line 2"):
        load(tmp_path, "[server]\nport = = 1\n")
    with pytest.raises(ConfigError, match="cannot read the public key file"):
        load(tmp_path, '[auth]\nrs256_public_key_file = "nope.pem"\n')


def test_topgun_gc_settings_reach_the_core(tmp_path: Path) -> None:
    from octosync.server.runtime import Runtime
    from octosync.server.topgun_state import topgun_state

    cfg = load(tmp_path, "[server]\ntopgun_gc_age = 60\ntopgun_gc_interval = 5\n")
    core = topgun_state(Runtime(cfg)).core
    assert (core.gc_age_ms, core.gc_every_ms) == (60_000, 5_000)
    never = load(tmp_path, "[server]\ntopgun_gc_age = -1\n")
    assert never.topgun_gc_age is None
    assert topgun_state(Runtime(never)).core.gc_age_ms is None


def test_topgun_search_names_maps(tmp_path: Path) -> None:
    assert load(tmp_path, '[server]\ntopgun_search = ["users", "notes"]').topgun_search == (
        "users",
        "notes",
    )
    with pytest.raises(ConfigError) as err:
        load(tmp_path, "[server]\ntopgun_search = [1]")
    assert str(err.value.path).endswith("server.topgun_search")


FLAGGED = [(section, name, key) for section, name, key, _ in flags()]


@pytest.mark.parametrize(("section", "name", "key"), FLAGGED, ids=[f[1] for f in FLAGGED])
def test_every_flag_is_checked_as_its_toml_key_is(
    tmp_path: Path, section: str, name: str, key: Key
) -> None:
    """Out of range (or not a number) on the command line: one ``ConfigError`` naming the flag,
    its key, the value and the range, exactly what the same value in the file gets."""
    assert key.flag is not None
    where = f"{key.flag.name} ([{section}] {name})"
    if key.range is None:  # a string: it lands, or its key's own check names the flag
        refused: ConfigError | None = None
        try:
            cfg = apply_flags(ServerConfig(), {key.flag.name: "x"}, tmp_path)
        except ConfigError as err:
            refused = err
        if refused is None:
            assert cfg != ServerConfig(), name
        else:
            assert refused.path == where
        return
    outside = str(int(key.range.high) + 1)
    with pytest.raises(ConfigError) as caught:
        apply_flags(ServerConfig(), {key.flag.name: outside}, tmp_path)
    assert caught.value.path == where
    assert caught.value.message == f"{outside} is out of range: must be {key.range}"
    doc = tmp_path / "c.toml"
    doc.write_text(f"[{section}]\n{name} = {outside}\n")
    with pytest.raises(ConfigError) as in_file:
        load_config_file(doc, ServerConfig())
    assert in_file.value.message == caught.value.message
    with pytest.raises(ConfigError, match="must be an integer, not 'many'"):
        apply_flags(ServerConfig(), {key.flag.name: "many"}, tmp_path)
    inside = str(int(key.range.low))
    cfg = apply_flags(ServerConfig(), {key.flag.name: inside}, tmp_path)
    assert getattr(cfg, key.field or name) == int(inside)


def test_a_flag_wins_over_the_file_and_a_path_flag_is_relative_to_the_working_folder(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "c.toml"
    doc.write_text('[server]\nport = 1000\ntls_cert = "in-file.pem"\n')
    cfg = load_config_file(doc, ServerConfig())
    assert cfg.tls_cert == tmp_path / "in-file.pem"
    cfg = apply_flags(cfg, {"--port": "2000", "--tls-cert": "flag.pem", "--host": None}, Path("/w"))
    assert (cfg.port, cfg.tls_cert, cfg.host) == (2000, Path("/w/flag.pem"), "127.0.0.1")
