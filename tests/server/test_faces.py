"""The face registry: every face declared once, and what is derived from it agrees."""

from __future__ import annotations

import ast
import asyncio
import importlib
import re
from dataclasses import replace
from pathlib import Path

from octosync.server.app import RUNTIME, build_app
from octosync.server.config import ServerConfig
from octosync.server.counters import Counters
from octosync.server.face_names import CLAIM_TABLES, FaceName
from octosync.server.face_state import FaceState
from octosync.server.faces import BY_NAME, FACES, serving_line
from octosync.server.lazily_state import lazily_state
from octosync.server.runtime import Runtime
from octosync.server.topgun_state import topgun_state
from octosync.server.yjs_face import yjs_face


def test_every_name_is_declared_once() -> None:
    assert [face.name for face in FACES] == list(dict.fromkeys(face.name for face in FACES))
    assert set(BY_NAME) == set(FaceName)


def test_the_token_parser_reads_exactly_the_faces_grant_tables() -> None:
    used = {table for face in FACES for table in face.grants}
    assert used == set(CLAIM_TABLES)


def test_every_codec_is_a_module() -> None:
    for face in FACES:
        importlib.import_module(f"octosync.{face.codec}")


def test_the_app_serves_every_route(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, journal=False, insecure_dev=True)
    app = build_app(config)
    paths = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    routes = {face.route for face in FACES if face.route is not None}
    assert routes == {"/lazily", "/wvp", "/signal", "/dataspace", "/topgun", "/yjs"}
    assert routes <= paths
    assert "/yjs/{name}" in paths  # y-websocket's document per path, beside Hocuspocus's /yjs


def test_every_face_is_counted() -> None:
    assert set(Counters().faces) == set(FaceName)


def test_the_banner_names_every_route_and_bound_tcp_port(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, host="127.0.0.1")
    line = serving_line(config, 8765, {FaceName.TCP: 9000})
    assert line == (
        "octosync serving /lazily /wvp /signal /dataspace /topgun /yjs /metrics /healthz, the "
        "inspector at / on http://127.0.0.1:8765, lazily over TCP on 127.0.0.1:9000 "
        f"(data in {tmp_path})"
    )
    chained = serving_line(replace(config, chain_config="nats://h:4222"), 1, {})
    assert ", /chain/NAME (chains configured at nats://h:4222) on http://127.0.0.1:1 " in chained


def test_a_faces_state_is_made_once_per_server(tmp_path: Path) -> None:
    rt = Runtime(ServerConfig(data_dir=tmp_path, journal=False, insecure_dev=True))
    made: list[Runtime] = []

    def make(runtime: Runtime) -> FaceState:
        made.append(runtime)
        return FaceState()

    first = rt.face_state(FaceName.CHAIN, make)
    assert rt.face_state(FaceName.CHAIN, make) is first
    assert made == [rt]
    assert rt.states() == (first,)


def test_the_app_makes_every_declared_state_in_the_registrys_order(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, journal=False, insecure_dev=True)
    runtime = build_app(config)[RUNTIME]
    declared = [face.state for face in FACES if face.state is not None]
    assert [
        face.name for face in FACES if face.state in (lazily_state, topgun_state, yjs_face)
    ] == [FaceName.LAZILY, FaceName.TOPGUN, FaceName.YJS]
    assert runtime.states() == tuple(state(runtime) for state in declared)
    assert len(set(map(id, runtime.states()))) == len(declared)


class Ticking(FaceState):
    def __init__(self) -> None:
        self.ticks = 0
        self.closed = False

    def tick(self) -> None:
        self.ticks += 1

    def close(self) -> None:
        self.closed = True


async def test_the_runtime_ticks_and_closes_every_faces_state(tmp_path: Path) -> None:
    rt = Runtime(ServerConfig(data_dir=tmp_path, journal=False, insecure_dev=True))
    state = rt.face_state(FaceName.CHAIN, lambda _: Ticking())
    await rt.start()
    try:
        while state.ticks == 0:  # once a second: waits for the first, asserts no duration
            await asyncio.sleep(0.05)
    finally:
        await rt.shutdown()
    assert state.closed


def test_a_map_stream_is_followed_by_the_face_that_makes_it(tmp_path: Path) -> None:
    """The lazily face asks every face's state; TopGun's answers for ``map:`` names only."""
    config = ServerConfig(data_dir=tmp_path, journal=False, insecure_dev=True)
    runtime = build_app(config)[RUNTIME]
    assert runtime.hub.epoch_of("map:users") is None
    lazily_state(runtime).follow_stream("map:users")
    assert runtime.hub.epoch_of("map:users") is not None
    lazily_state(runtime).follow_stream("scores")
    assert runtime.hub.epoch_of("scores") is None


PLUMBING = ("app.py", "run.py", "metrics.py", "runtime.py", "live_connections.py", "counters.py")
"""The server's modules that every face goes through: none may name a face."""
PYTHON_SIGNAL = {"signal", "add_signal_handler"}
"""Python's own ``signal`` module and the loop's handler for it, not the ``/signal`` face."""


def face_words(source: str) -> set[str]:
    """Every face name that ``source`` spells in an identifier, an import, an attribute or a
    string that is not documentation, split at ``_``, ``.``, ``/`` and case changes; and any
    ``FaceName.MEMBER``. ``tcp`` alone is the transport every ``Face.tcp`` listener uses, so it
    counts only as ``FaceName.TCP``."""
    names = {face.value for face in FaceName} - {FaceName.TCP.value}
    tree = ast.parse(source)
    documentation = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    spelled: list[str] = []
    found: set[str] = set()
    for node in ast.walk(tree):
        match node:
            case ast.Attribute(value=ast.Name(id="FaceName"), attr=member):
                found.add(member.lower())
            case ast.Name(id=name) | ast.arg(arg=name) | ast.Attribute(attr=name):
                spelled.append(name)
            case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name):
                spelled.append(name)
            case ast.ClassDef(name=name):
                spelled.append(name)
            case ast.ImportFrom(module=module, names=aliases):
                spelled += [module or "", *(a.name for a in aliases)]
            case ast.Import(names=aliases):
                spelled += [a.name for a in aliases]
            case ast.Constant(value=str(text)) if id(node) not in documentation:
                spelled.append(text)
    for word in spelled:
        if word in PYTHON_SIGNAL:
            continue
        tokens = re.split(r"[^0-9A-Za-z]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", word).lower())
        found |= names & set(tokens)
    return found


def test_the_servers_plumbing_names_no_face() -> None:
    """Adding a face touches its own modules, ``face_names``, ``faces`` and ``errors`` only."""
    server = Path(importlib.import_module("octosync.server").__path__[0])
    named = {module: face_words((server / module).read_text()) for module in PLUMBING}
    assert named == {module: set() for module in PLUMBING}


def test_a_face_named_in_plumbing_is_found() -> None:
    """The check above can fail: each way a face could be named is caught."""
    assert face_words("from octosync.server.topgun_state import topgun_state") == {"topgun"}
    assert face_words("x = rt.plane_of(FaceName.YJS)") == {"yjs"}
    assert face_words("app.router.add_get('/dataspace', h)") == {"dataspace"}
    assert face_words("class WvpThing: pass") == {"wvp"}
    assert face_words("def f(lazily): pass") == {"lazily"}
    assert face_words("n = ports[FaceName.TCP]") == {"tcp"}
    assert face_words('"""Docstrings may explain TopGun."""\nimport signal') == set()
    assert face_words("serve_tcp(rt)") == set()
