"""The command line as a user meets it: real ``octosync`` processes, a real server on loopback.

Every mistake ends in exactly one line on stderr (what is wrong and what to do), a non-zero
exit and no traceback; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from octosync import __version__
from octosync.cli import build_parser
from octosync.store.journal import Journal
from tests.e2e.helpers import free_port, running

SECRET = "cli-test-secret-cli-test-secret-cli-test"
TIMEOUT = 60
CLI = [sys.executable, "-m", "octosync.cli"]


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def one_line(self) -> str:
        """The single stderr line of a refused command (asserting there is exactly one)."""
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        assert "Traceback" not in self.err
        return lines[0]


def octosync(*args: str, cwd: Path | None = None) -> Ran:
    proc = subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr)


def token(*grants: str, ttl: int | None = None) -> str:
    extra = [] if ttl is None else ["--ttl", str(ttl)]
    args = [a for g in grants for a in ("--grant", g)]
    ran = octosync("token", "--secret", SECRET, "--sub", "t", *args, *extra)
    assert ran.code == 0, ran.err
    return ran.out.strip()


@dataclass
class Server:
    url: str
    port: int


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``octosync serve`` with an HS256 key, in its own process."""
    root = tmp_path_factory.mktemp("cli-server")
    config = root / "octosync.toml"
    config.write_text(f'[auth]\nhs256_secret = "{SECRET}"\n')
    port = free_port()
    data = ("--data", str(root / "data"), "--no-journal")
    proc = subprocess.Popen(
        [*CLI, "serve", "--config", str(config), "--port", str(port), *data],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "octosync serving" in line, (line, proc.stderr and proc.stderr.read())
        yield Server(f"ws://127.0.0.1:{port}/lazily", port)
    finally:
        proc.terminate()
        proc.wait(timeout=TIMEOUT)


def test_version() -> None:
    ran = octosync("--version")
    assert (ran.code, ran.out.strip()) == (0, f"octosync {__version__}")


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_option_of_every_command_has_help() -> None:
    seen = 0
    for parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help, f"{parser.prog}: {action.option_strings or action.dest}"
            seen += 1
    assert seen > 30


def test_missing_and_malformed_config(tmp_path: Path) -> None:
    ran = octosync("serve", "--config", str(tmp_path / "absent.toml"))
    assert ran.code == 2
    assert "absent.toml: no such file" in ran.one_line
    (tmp_path / "bad.toml").write_text("[server]\nport = = 1\n")
    ran = octosync("serve", "--config", str(tmp_path / "bad.toml"))
    assert ran.code == 2
    assert "not valid TOML" in ran.one_line
    assert "line 2" in ran.one_line
    (tmp_path / "typo.toml").write_text('[auth]\nhs256_secrett = "x"\n')
    ran = octosync("serve", "--config", str(tmp_path / "typo.toml"))
    assert ran.code == 2
    assert "unknown key 'hs256_secrett' in [auth]; did you mean 'hs256_secret'?" in ran.one_line


def test_data_pointing_at_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    ran = octosync("serve", "--insecure-dev", "--data", str(tmp_path / "afile"))
    assert ran.code == 2
    assert "is a file; point --data at a directory" in ran.one_line
    ran = octosync("journal", "export", "--data", str(tmp_path / "afile"), "--to", str(tmp_path))
    assert ran.code != 0
    assert "afile" in ran.one_line


def test_port_in_use_prints_nothing_as_serving(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        ran = octosync("serve", "--insecure-dev", "--port", port, "--data", str(tmp_path))
        assert ran.code == 2
        assert ran.out == ""
        assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in ran.one_line
        assert "choose another --port" in ran.one_line
        other = str(free_port())
        ran = octosync(
            "serve", "--insecure-dev", "--port", other, "--tcp-port", port, "--data", str(tmp_path)
        )
        assert ran.out == ""
        assert f"127.0.0.1:{port}" in ran.one_line
        assert "choose another --tcp-port" in ran.one_line


def test_a_port_out_of_range_is_refused_before_any_bind(tmp_path: Path) -> None:
    ran = octosync("serve", "--insecure-dev", "--port", "99999", "--data", str(tmp_path))
    assert ran.code == 2
    assert ran.out == ""
    assert "--port ([server] port): 99999 is out of range: must be >= 0 and <= 65_535" in (
        ran.one_line
    )
    (tmp_path / "p.toml").write_text("[server]\ndataspace_port = -1\n")
    ran = octosync("serve", "--insecure-dev", "--config", str(tmp_path / "p.toml"), "--port", "0")
    assert ran.code == 2
    assert "p.toml: server.dataspace_port: -1 is out of range: must be >= 0" in ran.one_line


def test_server_unreachable() -> None:
    url = f"ws://127.0.0.1:{free_port()}/lazily"
    for command in ("watch", "publish-demo"):
        ran = octosync(command, "s", "--url", url)
        assert ran.code == 1
        assert f"cannot reach {url}: Connection refused" in ran.one_line
        assert "is octosync serve running there?" in ran.one_line


def test_missing_bad_and_expired_tokens(server: Server) -> None:
    ran = octosync("watch", "s", "--url", server.url)
    assert ran.code == 1
    assert ran.one_line.startswith("octosync watch: Unauthorized: no token was given")
    ran = octosync("watch", "s", "--url", server.url, "--token", "not-a-jwt")
    assert ran.code == 1
    assert "Unauthorized: the token was refused: invalid token" in ran.one_line
    expired = token("s=read", ttl=-60)
    ran = octosync("publish-demo", "s", "--url", server.url, "--token", expired)
    assert ran.code == 1
    assert "Signature has expired" in ran.one_line
    assert "--token" in ran.one_line


def test_refused_publish_and_subscribe_show_the_servers_code(server: Server) -> None:
    reader = token("s=read")
    ran = octosync("publish-demo", "s", "--url", server.url, "--token", reader, "--ticks", "1")
    assert ran.code == 1
    assert "publishing" not in ran.out
    assert "Forbidden: not granted publish on stream 's'" in ran.one_line
    ran = octosync("watch", "s", "--url", server.url, "--token", token("other=read"))
    assert ran.code == 1
    assert "Forbidden: not granted read on stream 's'" in ran.one_line


def test_second_producer_is_refused_and_the_first_keeps_publishing(server: Server) -> None:
    owner = token("board=read,publish")
    fast = ("--interval", "0.05")
    first = subprocess.Popen(
        [*CLI, "publish-demo", "board", "--url", server.url, "--token", owner, *fast],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline().startswith("publishing 'board'")
        ran = octosync("publish-demo", "board", "--url", server.url, "--token", owner)
        assert ran.code == 1
        assert ran.out == ""
        assert "ForbiddenPublish: " in ran.one_line
        assert "stream 'board' is produced by another connection" in ran.one_line
        watched = octosync("watch", "board", "--url", server.url, "--token", owner, "--limit", "2")
        assert watched.code == 0, watched.err
        assert '"by_name": {"home": ' in watched.out
    finally:
        first.terminate()
        first.wait(timeout=TIMEOUT)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    ran = octosync("serve", "--config", str(tmp_path / "absent.toml"), "--debug")
    assert ran.code != 0
    assert "Traceback" in ran.err
    assert "ConfigError" in ran.err


def test_a_short_secret_gets_one_warning_line_and_still_a_token() -> None:
    ran = octosync("token", "--secret", "short", "--grant", "s=read")
    assert ran.code == 0
    assert ran.out.count(".") == 2  # header.claims.signature
    line = ran.one_line
    assert line.startswith("octosync token: warning: --secret is 5 bytes; HS256 wants at least 32")
    ran = octosync("token", "--secret", SECRET, "--grant", "s=read")
    assert ran.err == ""


def test_bad_grant_syntax() -> None:
    ran = octosync("token", "--secret", SECRET, "--grant", "scoreboard")
    assert ran.code == 2
    assert "expected STREAM=ACTIONS" in ran.one_line


def test_pipeline_refuses_a_missing_input_before_spark_starts(tmp_path: Path) -> None:
    for job in ("verify", "compact", "report"):
        extra = [] if job == "verify" else ["--out", str(tmp_path / "out")]
        ran = octosync("pipeline", job, "--journal", str(tmp_path / "nowhere"), *extra)
        assert ran.code == 2
        assert f"--journal {tmp_path / 'nowhere'} does not exist" in ran.one_line  # no JVM lines
    (tmp_path / "file").write_text("")
    ran = octosync(
        "pipeline", "compact", "--journal", str(tmp_path), "--out", str(tmp_path / "file")
    )
    assert ran.code == 2
    assert "--out" in ran.one_line


@pytest.mark.spark
def test_pipeline_gives_up_on_an_unanswering_master_in_one_line(tmp_path: Path) -> None:
    master = f"spark://127.0.0.1:{free_port()}"
    Journal(tmp_path).close()  # an empty journal: the input is good, the master is not
    ran = octosync(
        "pipeline", "verify", "--journal", str(tmp_path), "--master", master,
        "--master-timeout", "1",
    )  # fmt: skip
    assert ran.code == 2
    (ours,) = [line for line in ran.err.splitlines() if line.startswith("octosync ")]
    assert f"no Spark session from {master} within 1s" in ours  # (the JVM may still print)
    assert "Traceback" not in ran.err


@pytest.mark.parametrize("command", ["watch", "publish-demo"])
def test_a_server_address_given_as_the_stream_is_refused(command: str) -> None:
    ran = octosync(command, "ws://127.0.0.1:8765")
    assert ran.code == 2
    assert "is an address, not a stream name" in ran.one_line
    assert "--url" in ran.one_line


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("127.0.0.1:8765", "has no scheme: use ws://127.0.0.1:8765/lazily"),
        ("ws://127.0.0.1:8765/wvp", "is the /wvp face; watch and publish-demo speak /lazily"),
        ("ws://127.0.0.1:8765/chain/demo", "is the /chain face"),
        ("ws://127.0.0.1:8765", "does not end in /lazily: use ws://127.0.0.1:8765/lazily"),
        ("ftp://127.0.0.1:8765/lazily", "ftp:// is not a WebSocket scheme"),
    ],
)
@pytest.mark.parametrize("command", ["watch", "publish-demo"])
def test_a_url_that_cannot_be_a_lazily_endpoint_is_refused(
    command: str, url: str, said: str
) -> None:
    ran = octosync(command, "scoreboard", "--url", url)
    assert ran.code == 2
    assert said in ran.one_line


def test_watching_a_stream_nobody_publishes_ends_with_a_hint(server: Server) -> None:
    reader = token("no-such-stream=read")
    ran = octosync(
        "watch", "no-such-stream", "--url", server.url, "--token", reader, "--wait", "0.5"
    )
    assert ran.code == 1
    (line,) = [ln for ln in ran.err.splitlines() if not ln.startswith("watching ")]
    assert "NothingPublished: no state of 'no-such-stream'" in line
    assert "octosync publish-demo no-such-stream starts a producer" in line


def test_a_token_without_grants_is_refused_unless_asked_for() -> None:
    ran = octosync("token", "--secret", SECRET)
    assert ran.code == 2
    assert ran.out == ""
    assert "a token without --grant grants nothing" in ran.one_line
    ran = octosync("token", "--secret", SECRET, "--no-grants")
    assert ran.code == 0
    assert ran.out.count(".") == 2


def test_publish_demo_names_all_three_nodes(server: Server) -> None:
    owner = token("trio=read,publish")
    ran = octosync(
        "publish-demo", "trio", "--url", server.url, "--token", owner, "--ticks", "1",
        "--interval", "0.05",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    assert ran.out.splitlines()[0] == "publishing 'trio': node 0=home 1=away 2=total"


def test_pipeline_on_a_folder_that_is_not_a_journal(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a journal")
    for job in ("report", "verify"):
        extra = ["--out", str(tmp_path / "out")] if job == "report" else []
        ran = octosync("pipeline", job, "--journal", str(tmp_path), *extra)
        assert ran.code == 2
        assert f"{tmp_path} holds no journal (journal.sqlite3)" in ran.one_line
    assert not (tmp_path / "out").exists()


def test_pipeline_without_java_says_so_in_one_line(tmp_path: Path) -> None:
    Journal(tmp_path).close()
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"} | {"PATH": str(empty)}
    proc = subprocess.run(
        [*CLI, "pipeline", "verify", "--journal", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        check=False,
    )
    ran = Ran(proc.returncode, proc.stdout, proc.stderr)
    assert ran.code == 2
    assert "Java 17 or newer is needed" in ran.one_line
    assert "JAVA_GATEWAY" not in ran.err


def _follower(command: str, url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, command, "lost", "--url", url, "--retries", "2", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_watch_and_publish_demo_say_they_lost_the_server_and_give_up(tmp_path: Path) -> None:
    port = free_port()
    url = f"ws://127.0.0.1:{port}/lazily"
    followers: list[subprocess.Popen[str]] = []
    with running("serve", "--insecure-dev", "--port", str(port), "--data", str(tmp_path)) as (
        _,
        line,
    ):
        assert "octosync serving" in line
        followers.append(_follower("publish-demo", url, "--interval", "0.05"))
        assert followers[0].stdout is not None
        assert followers[0].stdout.readline().startswith("publishing 'lost'")
        followers.append(_follower("watch", url))
        assert followers[1].stdout is not None
        assert followers[1].stdout.readline().startswith('{"epoch"')
    for proc, command in zip(followers, ("publish-demo", "watch"), strict=True):
        _, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 1, err
        lines = [ln for ln in err.splitlines() if ln.startswith(f"octosync {command}: ")]
        assert len(lines) == 3, err
        for n, line in enumerate(lines[:2], 1):
            assert f"lost the server at {url} (Connection refused)" in line
            assert f"reconnecting (attempt {n} of 2)" in line
        assert f"lost the connection to {url}: gave up after 2 reconnect attempts" in lines[2]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("serve", "--prot", "8766"),
            "octosync serve: unknown option --prot: did you mean --port? "
            "(octosync serve --help lists them)",
        ),
        (
            ("token", "--secrt", "s", "--sub", "t"),
            "octosync token: unknown option --secrt: did you mean --secret? "
            "(octosync token --help lists them)",
        ),
        (
            ("pipeline", "report", "--journal", "var"),
            "octosync pipeline report: --out is required: add --out OUT",
        ),
        (("serv",), "octosync: unknown command 'serv': did you mean serve?"),
        (("journal", "exprt"), "octosync journal: unknown command 'exprt': did you mean export?"),
    ],
)
def test_a_usage_mistake_is_one_line_naming_the_fix(args: tuple[str, ...], line: str) -> None:
    ran = octosync(*args)
    assert ran.code == 2
    assert ran.one_line.startswith(line), ran.one_line
    assert "usage:" not in ran.err


def test_help_still_prints_the_usage() -> None:
    ran = octosync("serve", "--help")
    assert ran.code == 0
    assert "--port" in ran.out


def test_every_parser_answers_a_usage_mistake_in_one_line() -> None:
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > 20
    plain = [p.prog for p in parsers if "error" not in vars(p)]
    assert plain == []  # every parser's error is cli_mistakes' one line, not argparse's usage
