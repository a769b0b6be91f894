// The client against real octosync servers on loopback (started here, one per test group).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { connect, errors, Store, toBase64 } from "../octosync.js";
import { mintToken, recordingWebSocket, startServer, waitFor } from "./server.mjs";

const WebSocket = recordingWebSocket();
const fast = { base: 0.02, cap: 0.2 };
const secret = "js-client-test-secret";
// Started together: each is a Python process whose start-up dominates this file's time.
const starting = { open: startServer(), auth: startServer({ secret }), phoenix: startServer() };

describe("an open server", () => {
  let server;
  const clients = [];
  const client = (options = {}) => {
    const c = connect(server.url, { WebSocket, backoff: fast, ...options });
    clients.push(c);
    return c;
  };
  before(async () => {
    server = await starting.open;
  });
  after(async () => {
    for (const c of clients) c.close();
    await server.stop();
  });

  test("a published store reaches a subscriber, decoded by type tag and keyed", async () => {
    const store = new Store();
    const home = store.cell(0, "i64", { key: "home" });
    const away = store.cell(0, "i64", { key: "away" });
    store.derived(() => home.get() + away.get(), "i64", { key: "total" });
    store.cell("kick-off", "string", { key: "note" });
    store.cell(0.5, "f64", { key: "ratio" });
    store.cell({ z: 1, a: [true, null] }, "json", { key: "doc" });
    store.cell(Uint8Array.of(1, 2, 3), "bytes", { key: "raw" });
    store.cell(false, "bool", { key: "live" });
    const pub = client().publish("board", store);
    await pub.ready;
    const sub = client().subscribe("board");
    const first = await sub.ready;
    assert.equal(first.keys.get("total"), 3);
    assert.equal(sub.get("note"), "kick-off");
    assert.equal(sub.get("ratio"), 0.5);
    assert.deepEqual(sub.get("doc"), { a: [true, null], z: 1 });
    assert.deepEqual(sub.get("raw"), Uint8Array.of(1, 2, 3));
    assert.equal(sub.get("live"), false);
    store.batch(() => {
      home.set(2);
      away.set(5);
    });
    const state = await waitFor(sub, "state", () => sub.get("total") === 7);
    assert.equal(state.values.get(1), 2);
    assert.equal(sub.get("home"), 2);
    assert.equal(pub.deltasSent >= 1, true);
  });

  test("a subscriber's write reaches the producer's cell and comes back as state", async () => {
    const store = new Store();
    const score = store.cell(1, "i32", { key: "score" });
    const double = store.derived(() => score.get() * 2, "i32", { key: "double" });
    const pub = client().publish("writable", store);
    await pub.ready;
    const sub = client().subscribe("writable");
    await sub.ready;
    const written = waitFor(pub, "write");
    assert.equal(await sub.write("score", 21), true);
    const took = await written;
    assert.deepEqual([took.id, took.value, took.writer.subject], [score.id, 21, null]);
    assert.equal(Number.isInteger(took.writer.peer), true);
    assert.equal(sub.get("double"), 42, "the delta that carries a write comes before its answer");
    assert.equal(double.get(), 42);
    assert.throws(() => sub.write("score", "21"), errors.TypeTagError);
    assert.throws(() => sub.write("missing", 1), errors.LocalProtocolError);
    // A write to a derived node is refused by the producer, reported there, never dropped silently.
    const refused = waitFor(pub, "error");
    sub.write("double", 1);
    assert.ok((await refused) instanceof errors.Forbidden);
  });

  test("a gap makes the subscriber ask the server for a resync and recover", async () => {
    const store = new Store();
    const n = store.cell(0, "i64", { key: "n" });
    const pub = client().publish("gappy", store);
    await pub.ready;
    const sub = client().subscribe("gappy");
    await sub.ready;
    const epoch = sub.state.epoch;
    const gapError = waitFor(sub, "error");
    // A delta that skips an epoch, as a lossy path would deliver it.
    sub.received(JSON.stringify({ type: "delta", base_epoch: epoch + 5, epoch: epoch + 6, ops: [{ op: "cell_set", slot_id: n.id, payload: toBase64(Uint8Array.of(0, 0, 0, 0, 0, 0, 0, 9)) }] }));
    assert.ok((await gapError) instanceof errors.EpochGap);
    assert.equal(sub.mirror.inSync, false);
    await waitFor(sub, "state", () => sub.mirror.inSync);
    assert.equal(sub.resyncs, 1);
    assert.equal(sub.get("n"), 0, "the bogus value never landed");
    n.set(3);
    await waitFor(sub, "state", () => sub.get("n") === 3);
  });

  test("a second producer is refused with a typed error and the first keeps the stream", async () => {
    const owner = new Store();
    const v = owner.cell(1, "i32");
    await client().publish("owned", owner).ready;
    const thief = new Store();
    thief.cell(666, "i32");
    const pub = client().publish("owned", thief);
    const refused = waitFor(pub, "error");
    await assert.rejects(pub.ready, errors.ForbiddenPublish); // in place of the handshake reply
    assert.ok((await refused) instanceof errors.ForbiddenPublish);
    assert.equal(pub.status, "failed", "a refused producer stops instead of publishing into the void");
    assert.ok(pub.errors[0] instanceof errors.ForbiddenPublish);
    const sub = client().subscribe("owned");
    v.set(2);
    await waitFor(sub, "state", () => sub.get(v.id) === 2);
  });

  test("a stream name of another face fails the handshake with a typed error", async () => {
    const sub = client().subscribe("warp:1");
    await assert.rejects(sub.ready, errors.HandshakeFailed);
    assert.equal(sub.status, "failed");
  });

  test("a wrong port reports a ConnectionLost error event per failed attempt, then gives up when bounded", async () => {
    const wrong = new URL(server.url);
    wrong.port = String(Number(wrong.port) === 1 ? 2 : 1); // nothing listens on port 1 or 2
    const c = connect(wrong.href, { WebSocket, backoff: { ...fast, maxAttempts: 2 } });
    clients.push(c);
    const sub = c.subscribe("anything");
    sub.on("error", () => {}); // collected in sub.errors
    const failed = waitFor(sub, "status", (s) => s === "failed");
    await failed;
    const lost = sub.errors.filter((e) => e.code === "ConnectionLost");
    assert.equal(lost.length, 3, lost.map((e) => e.message).join("\n")); // 2 retries, then giving up
    assert.match(lost[0].message, /^cannot reach ws:\/\/127\.0\.0\.1:[12]\/lazily .*attempt 1 of 2/);
    assert.match(lost.at(-1).message, /gave up after 2 reconnect attempts/);
  });

  test("a WebSocket option that is not a constructor is refused up front", () => {
    assert.throws(() => connect(server.url, { WebSocket: {} }), errors.LocalProtocolError);
  });
});

describe("a server with auth", () => {
  let server;
  const clients = [];
  const client = (token) => {
    const c = connect(server.url, { WebSocket, token, backoff: fast });
    clients.push(c);
    return c;
  };
  before(async () => {
    server = await starting.auth;
  });
  after(async () => {
    for (const c of clients) c.close();
    await server.stop();
  });

  test("no token or a bad token: Unauthorized, read from the refused upgrade", async () => {
    for (const token of [undefined, "not-a-jwt", mintToken("other-secret", { streams: { "*": ["read"] } })]) {
      const sub = client(token).subscribe("s");
      await assert.rejects(sub.ready, errors.Unauthorized);
      assert.equal(sub.status, "failed");
    }
  });

  test("?token= grants what its claims say: read without write gets Forbidden on a write", async () => {
    const producerToken = mintToken(secret, { streams: { s: ["publish"] } });
    const store = new Store();
    const x = store.cell(5, "i32", { key: "x" });
    await client(producerToken).publish("s", store).ready;
    const reader = client(mintToken(secret, { streams: { s: ["read"] } })).subscribe("s");
    await reader.ready;
    assert.equal(reader.get("x"), 5);
    const refused = waitFor(reader, "error");
    reader.write("x", 6);
    assert.ok((await refused) instanceof errors.Forbidden);
    assert.equal(reader.status, "open", "Forbidden keeps the connection (hub/policy.py)");
    x.set(7);
    await waitFor(reader, "state", () => reader.get("x") === 7);
    const other = client(mintToken(secret, { streams: { elsewhere: ["read"] } })).subscribe("s");
    await assert.rejects(other.ready, errors.Forbidden);
  });

  test("writers are answered: applied, refused by a node grant, refused by the producer who knows who asked", async () => {
    const store = new Store();
    const alice = store.cell(0, "i32", { key: "players/alice/score" });
    const bob = store.cell(0, "i32", { key: "players/bob/score" });
    const board = store.cell("open", "string", { key: "board/state" });
    const seen = [];
    const producer = client(mintToken(secret, { streams: { game: ["publish"] } }));
    await producer.publish("game", store, {
      accept: (id, value, writer) => {
        seen.push(writer.subject);
        return value >= 0; // the producer's own rule: no negative scores
      },
    }).ready;
    const token = mintToken(secret, {
      sub: "alice",
      streams: { game: ["read", "write"] },
      nodes: { game: { read: ["board/*", "players/alice/*"], write: ["players/alice/*"] } },
    });
    const sub = client(token).subscribe("game");
    await sub.ready;
    assert.deepEqual([...sub.state.keys.keys()].sort(), ["board/state", "players/alice/score"]);
    assert.equal(await sub.write("players/alice/score", 5), true);
    assert.equal(sub.get("players/alice/score"), 5, "the delta that carries a write comes before its answer");
    assert.equal(alice.get(), 5);
    assert.deepEqual(seen, ["alice"]);
    await assert.rejects(sub.write("players/alice/score", -1), (e) => e instanceof errors.Forbidden && /refused/.test(e.message));
    await assert.rejects(sub.write("board/state", "won"), (e) => e instanceof errors.Forbidden && /board\/state/.test(e.message));
    assert.equal(board.get(), "open");
    await assert.rejects(sub.trigger(99), errors.Forbidden);
    // Flushes the view hides are skipped; the next visible delta spans them, no resync.
    const before = sub.mirror.epoch;
    const closed = waitFor(sub, "state", () => sub.get("board/state") === "closed");
    for (let i = 1; i <= 3; i++) {
      bob.set(i); // bob's score, hidden from alice
      await new Promise((r) => setTimeout(r, 5)); // one flush each
    }
    board.set("closed");
    await closed;
    assert.equal(sub.resyncs, 0);
    assert.equal(sub.mirror.epoch > before + 1, true);
    assert.equal(sub.status, "open");
  });
});

describe("a server that goes away and comes back", () => {
  test("subscriber and publisher reconnect with backoff and resume from a snapshot", async () => {
    let server = await starting.phoenix;
    const port = server.port;
    const pubClient = connect(server.url, { WebSocket, backoff: fast });
    const subClient = connect(server.url, { WebSocket, backoff: fast });
    try {
      const store = new Store();
      const n = store.cell(1, "i64", { key: "n" });
      await pubClient.publish("phoenix", store).ready;
      const sub = subClient.subscribe("phoenix");
      await sub.ready;
      const reconnecting = waitFor(sub, "status", (s) => s === "reconnecting");
      await server.stop();
      await reconnecting;
      n.set(2); // made while the server is down: carried by the next snapshot
      server = await startServer({ port });
      await waitFor(sub, "state", () => sub.get("n") === 2, 15000);
      assert.ok(sub.reconnects >= 1);
      n.set(3);
      await waitFor(sub, "state", () => sub.get("n") === 3);
    } finally {
      pubClient.close();
      subClient.close();
      await server.stop();
    }
  });
});
