// Real octosync servers for the tests: `python -m octosync.cli serve` on loopback, one per call.
// OCTOSYNC_PYTHON names the interpreter that has octosync installed (pytest passes its own);
// without it, the repository's .venv (what `make` creates), else python3 on PATH.
import { spawn } from "node:child_process";
import { createHmac } from "node:crypto";
import { existsSync, mkdtempSync, writeFileSync, appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const VENV_PYTHON = new URL("../../../.venv/bin/python", import.meta.url).pathname;
const PYTHON = process.env.OCTOSYNC_PYTHON ?? (existsSync(VENV_PYTHON) ? VENV_PYTHON : "python3");
const START_TIMEOUT_MS = 20000;

/** Start a server; `secret` turns auth on (HS256), else --insecure-dev. Port 0 picks one;
 * `server` is more of the config file's `[server]` section (TOML lines). */
export async function startServer({ secret = null, port = 0, server = "" } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "octosync-js-"));
  const args = ["-m", "octosync.cli", "serve", "--port", String(port), "--data", join(dir, "data")];
  const config = join(dir, "octosync.toml");
  writeFileSync(config, `${secret ? `[auth]\nhs256_secret = "${secret}"\n` : ""}[server]\n${server}\n`);
  args.push("--config", config);
  if (!secret) args.push("--insecure-dev");
  const proc = spawn(PYTHON, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, PYTHONUNBUFFERED: "1" } });
  let output = "";
  const bound = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start in time:\n${output}`)), START_TIMEOUT_MS);
    const look = (chunk) => {
      output += chunk;
      const m = /serving .* on http:\/\/127\.0\.0\.1:(\d+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    proc.stdout.setEncoding("utf8").on("data", look);
    proc.stderr.setEncoding("utf8").on("data", (c) => (output += c));
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code}) before serving:\n${output}`));
    });
  });
  const exited = new Promise((resolve) => proc.on("exit", resolve));
  return {
    port: bound,
    url: `ws://127.0.0.1:${bound}`,
    http: `http://127.0.0.1:${bound}`,
    async stop() {
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

const b64url = (data) => Buffer.from(data).toString("base64url");

/** An HS256 JWT with these claims (what `octosync token` mints). */
export function mintToken(secret, claims) {
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify({ sub: "js-test", ...claims }));
  const sig = createHmac("sha256", secret).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${sig}`;
}

/**
 * A WebSocket constructor to inject that records every text frame both ways into
 * OCTOSYNC_FRAMES_OUT (JSON lines), for pytest to validate against docs/schemas.
 */
export function recordingWebSocket(Base = globalThis.WebSocket) {
  const out = process.env.OCTOSYNC_FRAMES_OUT;
  const log = (direction, data) => {
    if (out && typeof data === "string") appendFileSync(out, JSON.stringify({ direction, data }) + "\n");
  };
  return class RecordingWebSocket extends Base {
    constructor(url) {
      super(url);
      this.addEventListener("message", (e) => log("received", e.data));
    }
    send(data) {
      log("sent", data);
      super.send(data);
    }
  };
}

/** Resolve when `predicate(value)` holds for an event's value (rejects after `ms`). */
export function waitFor(emitter, event, predicate = () => true, ms = 8000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`no matching ${event} within ${ms} ms`));
    }, ms);
    const off = emitter.on(event, (value) => {
      if (predicate(value)) {
        clearTimeout(timer);
        off();
        resolve(value);
      }
    });
  });
}
