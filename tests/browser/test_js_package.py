"""``clients/js`` as an npm package: its declarations cover every export, ``npm pack`` ships the
module itself (not a dangling link) with its types, a project that depends on it imports it
by name through the package's ``exports``, and TypeScript (npm ``typescript``, installed once
into ``~/.cache/octosync/typescript``) compiles the declarations and types such a project."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from tests.browser.support import JS_CLIENT, node_command
from tests.conftest import missing

TYPESCRIPT = "typescript@5.9.3"
TS_CACHE = Path.home() / ".cache" / "octosync" / "typescript"

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


def tsc() -> Path:
    """TypeScript's compiler from the cache folder (npm install on first use), or a skip."""
    compiler = TS_CACHE / "node_modules" / "typescript" / "bin" / "tsc"
    if compiler.exists():
        return compiler
    npm = shutil.which("npm")
    if npm is None:
        missing("npm not found on PATH (apt-get install npm): TypeScript check skipped")
    TS_CACHE.mkdir(parents=True, exist_ok=True)
    (TS_CACHE / "package.json").write_text('{"name": "octosync-typescript", "private": true}\n')
    done = subprocess.run(
        [npm, "install", "--silent", "--no-audit", "--no-fund", TYPESCRIPT],
        cwd=TS_CACHE,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        missing(f"npm install {TYPESCRIPT} failed: TypeScript check skipped ({done.stderr[-200:]})")
    return compiler


TS_APP = """
import { connect, errors, ChainDevice, OctosyncError, Store } from "octosync";
import type { State, Status } from "octosync";

const client = connect("wss://example.org", { token: "jwt", backoff: { maxAttempts: 5 } });
const sub = client.subscribe("scores", { onError: (e: OctosyncError) => console.log(e.code) });
sub.on("state", (state: State) => {
  const first: number | undefined = [...state.values.keys()][0];
  console.log(first, state.keys.get("home"), state.epoch + 1);
});
const status: Status = sub.status;
const store = new Store();
const home = store.cell(0, "i64", { key: "home" });
home.set(home.get() + 1);
client.publish("scores", store).ready.then((p) => p.deltasSent);
const doc = client.openDocument("counter");
const clicks: number = doc.counter("clicks").value;
doc.synced().then((d) => d.pending);
const device = new ChainDevice("wss://example.org", "game", "ada");
device.on("state", ({ state, sequencer }) => console.log(state, sequencer));
device.start().then((d) => d.emitEvent("move", JSON.stringify({ dx: 1, dy: 0 })));
if (new Error("x") instanceof errors.Unauthorized) console.log(status, clicks);

// each line below is a mistake the declarations must catch (an unused directive fails)
// @ts-expect-error: a stream is named by a string
client.subscribe(42);
// @ts-expect-error: a counter's value is a number
const wrong: string = doc.counter("clicks").value;
// @ts-expect-error: a status is one of five words
const nope: Status = "sleeping";
// @ts-expect-error: a chain event's payload is a string
device.emitEvent("move", { dx: 1 });
console.log(wrong, nope);
"""

TS_CONFIG = {
    "compilerOptions": {
        "strict": True,
        "noEmit": True,
        "module": "nodenext",
        "moduleResolution": "nodenext",
        "target": "es2022",
        "lib": ["es2022", "dom"],
        "types": [],
        "skipLibCheck": False,
    },
    "files": ["app.ts"],
}


def test_typescript_compiles_the_declarations_and_types_a_project(tmp_path: Path) -> None:
    node = node_command()
    compiler = tsc()
    modules = tmp_path / "node_modules"
    modules.mkdir()
    (modules / "octosync").symlink_to(JS_CLIENT, target_is_directory=True)
    (tmp_path / "package.json").write_text('{"type": "module", "dependencies": {"octosync": "*"}}')
    (tmp_path / "tsconfig.json").write_text(json.dumps(TS_CONFIG))
    (tmp_path / "app.ts").write_text(TS_APP)
    ran = subprocess.run(
        [*node, str(compiler), "-p", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
