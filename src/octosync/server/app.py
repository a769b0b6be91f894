"""aiohttp application: one port, one route per wire face."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from octosync import __version__


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    data_dir: Path = Path("./var")
    insecure_dev: bool = False


CONFIG_KEY = web.AppKey("config", ServerConfig)


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "version": __version__})


def build_app(config: ServerConfig) -> web.Application:
    app = web.Application()
    app[CONFIG_KEY] = config
    app.router.add_get("/healthz", _healthz)
    return app
