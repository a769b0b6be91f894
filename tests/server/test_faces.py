"""The face registry: every face declared once, and what is derived from it agrees."""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path

from octosync.server.app import RUNTIME, build_app
from octosync.server.config import ServerConfig
from octosync.server.face_names import CLAIM_TABLES, FaceName
from octosync.server.faces import BY_NAME, FACES, serving_line
from octosync.server.runtime import Counters, Runtime


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

    def make(runtime: Runtime) -> list[int]:
        made.append(runtime)
        return []

    first = rt.face_state(FaceName.CHAIN, make)
    first.append(1)
    assert rt.face_state(FaceName.CHAIN, make) == [1]
    assert made == [rt]


def test_the_runtime_runs_the_faces_declared_ticks(tmp_path: Path) -> None:
    config = ServerConfig(data_dir=tmp_path, journal=False, insecure_dev=True)
    runtime = build_app(config)[RUNTIME]
    assert [face.name for face in FACES if face.tick is not None] == [FaceName.TOPGUN]
    assert runtime.ticks == tuple(face.tick for face in FACES if face.tick is not None)
