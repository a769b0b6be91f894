"""``clients/js`` as an npm package: its declarations cover every export, ``npm pack`` ships the
module itself (not a dangling link) with its types, and a project that depends on it imports it
by name through the package's ``exports``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from tests.browser.support import JS_CLIENT, node_command
from tests.conftest import missing

EXPORT = re.compile(r"^export (?:async )?(?:class|function|const) (\w+)", re.M)
DECLARED = re.compile(r"^export (?:declare )?(?:class|function|const|interface|type) (\w+)", re.M)


def test_every_export_is_declared_with_a_type() -> None:
    exported = set(EXPORT.findall((JS_CLIENT / "octosync.js").read_text("utf-8")))
    declared = set(DECLARED.findall((JS_CLIENT / "octosync.d.ts").read_text("utf-8")))
    assert {"connect", "Client", "Store", "Subscription", "Publication", "errors"} <= exported
    assert exported - declared == set()


def test_the_package_json_points_at_the_module_and_its_types() -> None:
    package = json.loads((JS_CLIENT / "package.json").read_text("utf-8"))
    assert package["type"] == "module"
    assert package["exports"]["."] == {"types": "./octosync.d.ts", "default": "./octosync.js"}
    for name in ("octosync.js", "octosync.d.ts"):
        assert name in package["files"]
        assert (JS_CLIENT / name).is_file()
    assert not (JS_CLIENT / "octosync.js").is_symlink()  # npm pack leaves links out


def test_npm_pack_ships_the_module_and_its_types() -> None:
    npm = shutil.which("npm")
    if npm is None:
        missing("npm not found on PATH (apt-get install npm): package test skipped")
    packed = subprocess.run(
        [npm, "pack", "--dry-run", "--json"],
        cwd=JS_CLIENT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    files = {f["path"]: f["size"] for f in json.loads(packed.stdout)[0]["files"]}
    assert set(files) == {"octosync.js", "octosync.d.ts", "package.json"}
    assert files["octosync.js"] == (JS_CLIENT / "octosync.js").stat().st_size


def test_a_project_imports_it_by_name(tmp_path: Path) -> None:
    node = node_command()
    modules = tmp_path / "node_modules"
    modules.mkdir()
    (modules / "octosync").symlink_to(JS_CLIENT, target_is_directory=True)
    (tmp_path / "package.json").write_text('{"type": "module", "dependencies": {"octosync": "*"}}')
    (tmp_path / "app.mjs").write_text(
        'import { connect, Store, errors } from "octosync";\n'
        "const client = connect('ws://127.0.0.1:1');\n"
        "console.log(typeof client.subscribe, typeof Store, Object.keys(errors).length > 10);\n"
    )
    ran = subprocess.run(
        [*node, "app.mjs"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "function function true"
