from __future__ import annotations

from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from octosync.errors import ConfigError, Unauthorized
from octosync.server.auth import AuthConfig, ClaimGrants, authenticate, issue_token
from octosync.server.config import ServerConfig, load_config_file

SECRET = "unit-test-secret-unit-test-secret-unit"


def test_hs256_claims_grant_per_stream_with_wildcard() -> None:
    token = issue_token(SECRET, "alice", {"board": ["read", "publish"], "*": ["read"]})
    grants = authenticate(token, AuthConfig(hs256_secret=SECRET))
    assert isinstance(grants, ClaimGrants)
    assert grants.subject == "alice"
    assert grants.allows("board", "publish")
    assert not grants.allows("board", "write")
    assert grants.allows("other", "read")
    assert not grants.allows("other", "publish")


def test_rs256_public_key(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    token = jwt.encode({"sub": "bob", "streams": {"s": ["write"]}}, key, algorithm="RS256")
    grants = authenticate(token, AuthConfig(rs256_public_key=pem.decode()))
    assert grants.allows("s", "write")
    forged = jwt.encode({"sub": "bob", "streams": {"s": ["write"]}}, "x" * 40, algorithm="HS256")
    with pytest.raises(Unauthorized):
        authenticate(forged, AuthConfig(rs256_public_key=pem.decode()))


@pytest.mark.parametrize(
    "claims",
    [
        {"streams": {"s": ["read"]}},
        {"sub": "x", "streams": {"s": ["fly"]}},
        {"sub": "x", "streams": 3},
    ],
)
def test_bad_claims_are_unauthorized(claims: dict[str, object]) -> None:
    token = jwt.encode(claims, SECRET, algorithm="HS256")
    with pytest.raises(Unauthorized):
        authenticate(token, AuthConfig(hs256_secret=SECRET))


def test_anonymous_only_with_insecure_dev() -> None:
    with pytest.raises(Unauthorized):
        authenticate(None, AuthConfig(hs256_secret=SECRET))
    anonymous = authenticate(None, AuthConfig(insecure_dev=True))
    assert anonymous.everything
    assert anonymous.allows("any", "publish")
    assert anonymous.may_join("any-room")
    with pytest.raises(Unauthorized):
        authenticate("garbage", AuthConfig(hs256_secret=SECRET, insecure_dev=True))


def test_config_file(tmp_path: Path) -> None:
    (tmp_path / "key.pem").write_text("PEM")
    cfg_path = tmp_path / "octosync.toml"
    cfg_path.write_text(
        """
[server]
port = 9000
tcp_port = 9001
[auth]
rs256_public_key_file = "key.pem"
audience = "octo"
[hub]
outbox_max_frames = 7
retain_seconds = -1
[signaling]
mode = "allowlist"
allow = { "1" = [2, 3] }
"""
    )
    cfg = load_config_file(cfg_path, ServerConfig())
    assert (cfg.port, cfg.tcp_port, cfg.outbox_max_frames) == (9000, 9001, 7)
    assert cfg.auth.rs256_public_key == "PEM"
    assert cfg.auth.audience == "octo"
    assert cfg.retain_after_producer_leaves is None
    assert cfg.signaling.mode == "allowlist"
    assert cfg.signaling.may_signal(1, 3)
    assert not cfg.signaling.may_signal(2, 1)


def test_rooms_global_scope_peer_and_expiry_claims() -> None:
    token = issue_token(
        SECRET,
        "7",
        {"*": ["read", "publish"]},
        rooms={"lobby": ["join"]},
        exp=4_000_000_000,
    )
    grants = authenticate(token, AuthConfig(hs256_secret=SECRET))
    assert grants.may_join("lobby")
    assert not grants.may_join("vip")
    assert grants.allows("anything", "publish")
    assert not grants.allows("$global", "publish")  # the wildcard never covers $ names
    assert grants.peer == 7  # bound from sub
    assert grants.expires_at == 4_000_000_000
    assert not grants.expired(3_999_999_999.0)
    assert grants.expired(4_000_000_000.0)
    explicit = authenticate(
        issue_token(SECRET, "eve", {"$global": ["publish"]}, peer=3),
        AuthConfig(hs256_secret=SECRET),
    )
    assert explicit.allows("$global", "publish")
    assert explicit.peer == 3
    with pytest.raises(Unauthorized):
        authenticate(
            issue_token(SECRET, "eve", {}, rooms={"r": ["fly"]}), AuthConfig(hs256_secret=SECRET)
        )


def test_an_expired_token_is_refused_at_once() -> None:
    token = issue_token(SECRET, "late", {"*": ["read"]}, exp=1)
    with pytest.raises(Unauthorized, match="expired"):
        authenticate(token, AuthConfig(hs256_secret=SECRET))


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("127.0.0.5", True),
        ("0.0.0.0", False),
        ("192.0.2.1", False),
        ("example.org", False),
    ],
)
def test_insecure_dev_is_loopback_only(host: str, ok: bool) -> None:
    config = ServerConfig(host=host, insecure_dev=True)
    if ok:
        config.check_exposure()
    else:
        with pytest.raises(ValueError, match="loopback"):
            config.check_exposure()
    ServerConfig(host=host, insecure_dev=False).check_exposure()


ROLES = {
    "editor": {"maps": {"*": frozenset({"read", "write"})}},
    "viewer": {
        "maps": {"notes": frozenset({"read"})},
        "topics": {"news": frozenset({"subscribe"})},
    },
}


def test_a_topgun_style_token_gets_the_tables_of_its_roles() -> None:
    config = AuthConfig(hs256_secret=SECRET, roles=ROLES)
    editor = authenticate(issue_token(SECRET, "ed", {}, roles=["editor"]), config)
    assert editor.may_map("anything", "write")
    both = authenticate(
        issue_token(SECRET, "vi", {}, roles=["viewer", "nobody"], maps={"own": ["write"]}),
        config,
    )
    assert both.may_map("notes", "read")
    assert not both.may_map("notes", "write")
    assert both.may_map("own", "write")  # the token's own tables stay
    assert both.may_topic("news", "subscribe")
    assert not both.may_map("other", "read")  # "nobody" is no role here: it adds nothing
    plain = authenticate(issue_token(SECRET, "x", {}, roles=["editor"]), AuthConfig(SECRET))
    assert not plain.may_map("anything", "read")  # a server without roles grants none
    with pytest.raises(Unauthorized) as err:
        authenticate(issue_token(SECRET, "x", {}, roles="editor"), config)
    assert err.value.path == "roles"


def test_roles_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "octosync.toml"
    path.write_text(
        '[auth]\nhs256_secret = "s"\n[auth.roles.editor]\nmaps = { "*" = ["read", "write"] }\n'
    )
    config = load_config_file(path, ServerConfig())
    assert config.auth.roles == {"editor": {"maps": {"*": frozenset({"read", "write"})}}}
    path.write_text('[auth.roles.editor]\nmaps = { "*" = ["fly"] }\n')
    with pytest.raises(ConfigError) as err:
        load_config_file(path, ServerConfig())
    assert "maps.*" in str(err.value.path)
    path.write_text('[auth.roles.editor]\nspells = { "*" = ["read"] }\n')
    with pytest.raises(ConfigError):
        load_config_file(path, ServerConfig())


def test_token_exchange_providers_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "octosync.toml"
    path.write_text(
        '[auth]\nhs256_secret = "s"\naccess_token_seconds = 60\n'
        '[auth.providers.clerk]\nhs256_secret = "p"\nissuer = "https://clerk.example"\n'
    )
    auth = load_config_file(path, ServerConfig()).auth
    assert auth.access_token_seconds == 60
    assert auth.refresh_token_seconds == 30 * 86_400
    (clerk,) = auth.providers.values()
    assert (clerk.name, clerk.hs256_secret, clerk.issuer) == ("clerk", "p", "https://clerk.example")


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("[auth]\naccess_token_seconds = 0\n", "auth.access_token_seconds", "0 is out of range"),
        (
            "[auth]\nrefresh_token_seconds = 5\n",
            "auth.refresh_token_seconds",
            "must be >= 60 and <= 315_360_000",
        ),
        ('[auth.providers.a]\nhs256_secret = "p"\n', "auth.providers", "hs256_secret: set it"),
        (
            '[auth]\nhs256_secret = "s"\n[auth.providers.a]\nissuer = "i"\n',
            "auth.providers.a",
            "exactly one of",
        ),
        (
            '[auth]\nhs256_secret = "s"\n[auth.providers.a]\nsecret = "p"\n',
            "auth.providers.a",
            "did you mean 'hs256_secret'",
        ),
        (
            '[auth]\nhs256_secret = "s"\n[auth.providers.a]\nhs256_secret = 3\n',
            "auth.providers.a.hs256_secret",
            "non-empty string",
        ),
    ],
)
def test_token_exchange_mistakes_name_file_key_and_value(
    tmp_path: Path, text: str, where: str, words: str
) -> None:
    path = tmp_path / "octosync.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config_file(path, ServerConfig())
    assert info.value.path == f"{path}: {where}"
    assert words in info.value.message
