"""``serve --tls-cert/--tls-key``: a real server process with a certificate from a test CA
(``trustme``); every face answers over ``wss://``, the command-line tools connect with
``wss://`` trusting the CA through ``SSL_CERT_FILE``, the TCP ports (``--tcp-port``,
``--dataspace-port``) speak TLS to a lazily client and to syndicate-py, and plain HTTP or TCP
on those ports gets no answer. Each TLS mistake is one line and exit 2."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from octosync.errors import ConfigError
from octosync.server.tls import server_context
from octosync.wire import topgun, wvp
from tests.conftest import require_module
from tests.e2e.helpers import Follower, TcpLazily, delta, free_port, handshake, running, snap

trustme = require_module("trustme", "certificates for the TLS tests")

CLI = [sys.executable, "-m", "octosync.cli"]
SYNDICATE_PEER = Path(__file__).resolve().parents[1] / "e2e" / "syndicate_peer.py"
TIMEOUT = 60


@dataclass
class Pems:
    ca: Path
    cert: Path
    key: Path


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> Pems:
    root = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    pems = Pems(root / "ca.pem", root / "cert.pem", root / "key.pem")
    ca.cert_pem.write_to_path(str(pems.ca))
    issued.private_key_pem.write_to_path(str(pems.key))
    for n, blob in enumerate(issued.cert_chain_pems):
        blob.write_to_path(str(pems.cert), append=n > 0)
    return pems


@dataclass
class Ports:
    http: int
    tcp: int
    dataspace: int
    data: Path


@pytest.fixture(scope="module")
def ports(pems: Pems, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ports]:
    found = Ports(free_port(), free_port(), free_port(), tmp_path_factory.mktemp("tls-data"))
    tls = ("--tls-cert", str(pems.cert), "--tls-key", str(pems.key))
    tcp = ("--tcp-port", str(found.tcp), "--dataspace-port", str(found.dataspace))
    serve = ("serve", "--insecure-dev", "--port", str(found.http), "--data", str(found.data))
    with running(*serve, *tls, *tcp) as (_, line):
        assert f"on https://127.0.0.1:{found.http}, " in line, line
        assert f"lazily over TCP with TLS on 127.0.0.1:{found.tcp}" in line
        assert f"dataspace over TCP with TLS on 127.0.0.1:{found.dataspace}" in line
        yield found


@pytest.fixture(scope="module")
def port(ports: Ports) -> int:
    return ports.http


def trusting(pems: Pems) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pems.ca))


async def test_every_face_answers_over_wss(pems: Pems, port: int) -> None:
    base = f"wss://127.0.0.1:{port}"
    context = trusting(pems)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"https://127.0.0.1:{port}/healthz", ssl=context) as reply:
            assert reply.status == 200
        async with http.get(f"https://127.0.0.1:{port}/client/octosync.js", ssl=context) as js:
            assert "export function connect" in await js.text()

        lazily = await http.ws_connect(f"{base}/lazily", ssl=context)
        await lazily.send_str('{"protocol_id": "nonsense"}')
        assert '"type":"error"' in (await lazily.receive(TIMEOUT)).data.replace(" ", "")
        await lazily.close()

        face = await http.ws_connect(f"{base}/wvp", ssl=context)
        hello = wvp.Handshake(capabilities=(), client_version=1, agent_id=None)
        await face.send_bytes(wvp.encode(hello, 1))
        ack, _ = wvp.decode((await face.receive(TIMEOUT)).data)
        assert isinstance(ack, wvp.HandshakeAck)
        await face.close()

        signal = await http.ws_connect(f"{base}/signal?session=r", ssl=context)
        await signal.send_json({"type": "join", "peer": 1})
        assert (await signal.receive_json(timeout=TIMEOUT))["type"] == "welcome"
        await signal.close()

        tg = await http.ws_connect(f"{base}/topgun", ssl=context)
        await tg.send_bytes(topgun.encode(topgun.Ping(timestamp=5)))
        reply = topgun.decode((await tg.receive(TIMEOUT)).data)
        if isinstance(reply, topgun.AuthRequired):  # sent first when the server wants a JWT
            reply = topgun.decode((await tg.receive(TIMEOUT)).data)
        assert isinstance(reply, topgun.Pong)
        assert reply.timestamp == 5
        await tg.close()

        dataspace = await http.ws_connect(f"{base}/dataspace", ssl=context)
        await dataspace.send_bytes(b"\xff")  # not Preserves: the face's own error, over TLS
        assert (await dataspace.receive(TIMEOUT)).type in (
            aiohttp.WSMsgType.BINARY,
            aiohttp.WSMsgType.CLOSE,
        )
        await dataspace.close()


def test_the_tools_speak_wss_trusting_the_ca_from_ssl_cert_file(pems: Pems, port: int) -> None:
    url = f"wss://127.0.0.1:{port}/lazily"
    env = {**os.environ, "SSL_CERT_FILE": str(pems.ca)}
    demo = ("publish-demo", "secure", "--url", url, "--interval", "0.05")
    with running(*demo, env=env) as (_, line):
        assert line.startswith("publishing 'secure'")
        watched = subprocess.run(
            [*CLI, "watch", "secure", "--url", url, "--limit", "2"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
            check=False,
        )
        assert watched.returncode == 0, watched.stderr
        assert '"by_name": {"home": ' in watched.stdout


async def test_plain_http_on_the_tls_port_is_not_served(port: int) -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises((aiohttp.ClientError, asyncio.TimeoutError)):
            async with http.get(
                f"http://127.0.0.1:{port}/healthz", timeout=aiohttp.ClientTimeout(total=10)
            ) as reply:
                await reply.read()


def test_an_untrusted_client_is_refused_by_its_own_check(pems: Pems, port: int) -> None:
    ran = subprocess.run(
        [*CLI, "watch", "x", "--url", f"wss://127.0.0.1:{port}/lazily", "--wait", "1"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"},
        check=False,
    )
    assert ran.returncode == 1
    (line,) = ran.stderr.strip().splitlines()
    assert "certificate verify failed" in line


@pytest.mark.parametrize(
    ("which", "said"),
    [
        ("cert-only", "--tls-cert needs --tls-key too"),
        ("key-only", "--tls-key needs --tls-cert too"),
        ("missing", "no such file"),
        ("swapped", "are not a PEM certificate (chain) and its private key"),
    ],
)
def test_tls_mistakes_are_one_line(pems: Pems, tmp_path: Path, which: str, said: str) -> None:
    args = {
        "cert-only": ["--tls-cert", str(pems.cert)],
        "key-only": ["--tls-key", str(pems.key)],
        "missing": ["--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(pems.key)],
        "swapped": ["--tls-cert", str(pems.key), "--tls-key", str(pems.cert)],
    }[which]
    ran = subprocess.run(
        [*CLI, "serve", "--insecure-dev", "--port", "0", "--data", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert ran.returncode == 2
    (line,) = ran.stderr.strip().splitlines()
    assert said in line


def test_no_files_no_tls() -> None:
    assert server_context(None, None) is None
    with pytest.raises(ConfigError):
        server_context(Path("cert.pem"), None)


def test_the_config_file_names_the_pems_relative_to_itself(pems: Pems, tmp_path: Path) -> None:
    config = pems.cert.parent / "octosync.toml"
    config.write_text('[server]\ntls_cert = "cert.pem"\ntls_key = "key.pem"\nport = 0\n')
    serve = ("serve", "--insecure-dev", "--config", str(config), "--data", str(tmp_path))
    with running(*serve, cwd=tmp_path) as (_, line):  # cwd: not where the files are
        assert " on https://127.0.0.1:" in line


async def test_lazily_over_tcp_with_tls_publishes_and_subscribes(pems: Pems, ports: Ports) -> None:
    context = trusting(pems)
    sub = await TcpLazily.open(ports.tcp, ssl=context)
    sub.send(handshake("tls-tcp"))
    assert json.loads(await sub.recv())["session_id"] == "tls-tcp"
    prod = await TcpLazily.open(ports.tcp, ssl=context)
    prod.send(handshake("tls-tcp", publish=True))
    await prod.recv()
    prod.send(snap(0, {1: b"a"}))
    for e in range(3):
        prod.send(delta(e, 1, f"v{e}".encode()))
    seen = Follower()
    while seen.epoch != 3:
        seen.feed(await sub.recv())
    assert seen.values == {1: b"v2"}
    assert seen.gaps == 0
    for c in (sub, prod):
        c.close()


async def test_tcp_clients_without_tls_or_trust_get_nothing(pems: Pems, ports: Ports) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):  # the client's own check refuses
        await TcpLazily.open(ports.tcp, ssl=ssl.create_default_context())
    for port in (ports.tcp, ports.dataspace):  # plain bytes on a TLS port: no frame back
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">I", len(hello := handshake("plain"))) + hello)
        answer = await asyncio.wait_for(reader.read(), TIMEOUT)  # until the server closes
        assert answer[:1] in (b"", b"\x15")  # nothing, or a TLS alert record
        writer.close()


@pytest.mark.peer
def test_syndicate_py_over_tcp_with_tls_sees_a_peer_over_wss(pems: Pems, ports: Ports) -> None:
    """Two syndicate-py processes on one dataspace, one on the TLS TCP port, one over
    ``wss://``: each sees the other's presence."""
    require_module("syndicate", "syndicate-py, the real dataspace peer")
    minted = subprocess.run(
        [*CLI, "dataspace", "mint", "demo", "--data", str(ports.data)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    ref = minted.stdout.strip()
    env = {**os.environ, "SSL_CERT_FILE": str(pems.ca)}
    addresses = {
        "ada": f'tls:<tcp "127.0.0.1" {ports.dataspace}>',
        "bob": f'<ws "wss://127.0.0.1:{ports.http}/dataspace">',
    }
    peers = {
        name: subprocess.Popen(
            [sys.executable, str(SYNDICATE_PEER), "presence", address, ref, name],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        for name, address in addresses.items()
    }
    try:
        for peer in peers.values():
            assert peer.stdout is not None
            seen = sorted(json.loads(peer.stdout.readline()) for _ in range(2))
            assert seen == [["+", "ada"], ["+", "bob"]]
    finally:
        for peer in peers.values():
            peer.kill()
            peer.wait(timeout=TIMEOUT)
