// Shared documents (multi-writer streams) against a real octosync server on loopback.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { connect, errors, nodeOf } from "../octosync.js";
import { recordingWebSocket, startServer } from "./server.mjs";

const WebSocket = recordingWebSocket();
const fast = { base: 0.02, cap: 0.2 };
let server;
const clients = [];
const open = (name, options = {}) => {
  const c = connect(server.url, { WebSocket, backoff: fast });
  clients.push(c);
  return c.openDocument(name, options);
};

before(async () => {
  server = await startServer();
});
after(async () => {
  for (const c of clients) c.close();
  await server.stop();
});

test("node ids are FNV-1a-64 of the name, as the Python replicas compute them", () => {
  // the same values octosync.crdt.shared.node_of gives (tests/crdt/test_shared.py)
  assert.equal(nodeOf("clicks"), 97025182709940);
  assert.equal(nodeOf("é"), 25321904020993);
});

test("five documents adding at once lose no click, and a late one sees them all", async () => {
  const docs = Array.from({ length: 5 }, () => open("js-board"));
  for (let round = 0; round < 30; round += 1) for (const d of docs) d.counter("clicks").add(1);
  await Promise.all(docs.map((d) => d.synced()));
  const late = open("js-board");
  await late.synced();
  assert.equal(late.counter("clicks").value, 150);
  for (const d of docs) {
    if (d.counter("clicks").value !== 150) await new Promise((r) => d.counter("clicks").on("change", (v) => v === 150 && r()));
  }
});

test("registers, maps and multi-value registers have the Python names and values", async () => {
  const a = open("js-doc");
  const b = open("js-doc");
  await Promise.all([a.synced(), b.synced()]);
  const seen = [];
  b.register("title").onChange((v) => seen.push(v));
  a.register("title").set("draft");
  a.map("todo").set("milk", false);
  a.map("todo").set("eggs", true);
  a.map("todo").delete("milk");
  a.multi("owner").set("ann");
  b.multi("owner").set("bob"); // concurrent with ann's: both kept
  await Promise.all([a.synced(), b.synced()]);
  const c = open("js-doc");
  await c.synced();
  assert.equal(c.register("title").value, "draft");
  assert.deepEqual(c.map("todo").value, { eggs: true });
  assert.deepEqual([...c.multi("owner").value].sort(), ["ann", "bob"]);
  assert.deepEqual(seen, [null, "draft"]);
  assert.throws(() => c.counter("title"), errors.CrdtValueError);
  assert.throws(() => c.register("a/b"), errors.CrdtValueError);
});

test("edits made while disconnected are sent on reconnect", async () => {
  const a = open("js-offline");
  await a.synced();
  a.ws.close(); // the connection drops; the document reconnects by itself
  a.counter("n").add(5);
  assert.equal(a.pending, 1);
  await a.synced();
  const b = open("js-offline");
  await b.synced();
  assert.equal(b.counter("n").value, 5);
});

test("lists: two tabs moving one item at once keep one copy, and a move and an edit both apply", async () => {
  const a = open("js-list");
  const b = open("js-list");
  await Promise.all([a.synced(), b.synced()]);
  for (const item of ["w", "x", "y", "z"]) a.list("todo").push(item);
  await a.synced();
  while (b.list("todo").length < 4) await new Promise((r) => b.list("todo").on("change", r));
  const edits = [];
  b.list("todo").onEdit((change) => edits.push(change));
  a.list("todo").move(0, 2);
  b.list("todo").move(0, 3);
  b.list("todo").set(3, "W"); // w, now last on b
  await Promise.all([a.synced(), b.synced()]);
  const c = open("js-list");
  await c.synced();
  const want = JSON.stringify(c.list("todo").value);
  assert.equal(c.list("todo").length, 4);
  assert.deepEqual([...c.list("todo")].sort(), ["W", "x", "y", "z"]);
  for (const d of [a, b]) while (JSON.stringify(d.list("todo").value) !== want) await new Promise((r) => d.list("todo").on("change", r));
  assert.ok(edits.some((e) => e.moved.length === 1 && e.inserted.length === 0));
  assert.throws(() => a.list("todo").move(0, 4), (err) => err.path === "to");
  assert.throws(() => a.counter("todo"), (err) => err.path === "kind");
});

test("presence: each tab sees the others, a closed tab leaves, and awareness is last writer per peer", async () => {
  const a = open("js-room", { peer: 101 });
  const b = open("js-room", { peer: 102 });
  await Promise.all([a.synced(), b.synced()]);
  const seen = [];
  b.presence.onChange((all) => seen.push(all));
  a.presence.set({ name: "ann" });
  b.presence.set({ name: "bob" });
  a.awareness("cursor").set(1);
  a.awareness("cursor").set(2);
  const until = async (doc, ok) => {
    while (!ok()) await new Promise((r) => doc.on("change", r));
  };
  await until(b, () => b.presence.others["101"]?.name === "ann" && b.awareness("cursor").others["101"] === 2);
  await until(a, () => a.presence.others["102"]?.name === "bob");
  assert.deepEqual(a.presence.all, { 101: { name: "ann" }, 102: { name: "bob" } });
  assert.deepEqual(a.presence.mine, { name: "ann" });
  a.close();
  await until(b, () => !("101" in b.presence.all));
  assert.deepEqual(b.presence.all, { 102: { name: "bob" } });
  assert.deepEqual(seen.at(-1), { 102: { name: "bob" } });
  assert.throws(() => b.awareness("a/b"), (err) => err.path === "name");
});

test("a tab back after the away bound drops its edit of a list element collected meanwhile", async () => {
  const away = await startServer({ server: "plane_member_away = 1" });
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const removals = (d) => [...d.entries.values()].filter((op) => op.key.includes("/ld/")).length;
  let offline = false;
  class Flaky extends WebSocket {
    constructor(url) {
      super(offline ? "ws://127.0.0.1:9" : url); // nothing listens there: b stays away
    }
  }
  const ca = connect(away.url, { WebSocket, backoff: fast });
  const cb = connect(away.url, { WebSocket: Flaky, backoff: fast });
  try {
    const a = ca.openDocument("away", { reportEvery: 50 });
    const b = cb.openDocument("away", { reportEvery: 50 });
    await Promise.all([a.synced(), b.synced()]);
    b.list("todo").push("milk");
    await b.synced();
    while (a.list("todo").length < 1) await new Promise((r) => a.list("todo").on("change", r));
    offline = true;
    b.ws.close();
    a.list("todo").delete(0); // b never sees milk go
    await a.synced();
    assert.equal(removals(a), 1); // b has not seen it: kept
    await sleep(1500); // b away past plane_member_away
    a.list("todo").push("eggs"); // a report after the bound: collected now
    for (let i = 0; i < 400 && removals(a) > 0; i += 1) await sleep(50);
    assert.equal(removals(a), 0);
    const seen = [];
    b.on("error", (err) => seen.push(err));
    b.list("todo").set(0, "oat milk"); // offline, on the element a removed
    assert.equal(b.pending, 1);
    offline = false;
    await b.synced(); // its edit dropped, not pending forever
    assert.deepEqual(b.list("todo").value, ["eggs"]);
    assert.deepEqual(a.list("todo").value, ["eggs"]);
    assert.ok(seen.some((err) => err instanceof errors.ElementCollected && err.path === "pending"));
    assert.equal(removals(b), 0);
  } finally {
    ca.close();
    cb.close();
    await away.stop();
  }
});

test("an edit the server refuses is dropped from pending, reported and undone; the edits around it stay", async () => {
  const a = open("js-refused", { peer: 5 });
  await a.synced();
  const told = [];
  a.on("error", (err) => told.push(err));
  const clicks = a.counter("clicks");
  clicks.add(1);
  a.writeStamped("clicks", () => [["pn/6", [7, 0]]]); // another peer's counter entry, forged
  clicks.add(1);
  assert.equal(clicks.value, 9); // applied locally at once, as every edit is
  await a.synced(); // not pending forever
  assert.deepEqual(told.map((err) => [err.name, err.path]), [["Forbidden", "ops[0].key"]]);
  assert.ok(told[0] instanceof errors.Forbidden);
  assert.equal(clicks.value, 2); // undone: the local copy is the server's
  const b = open("js-refused");
  await b.synced();
  assert.equal(b.counter("clicks").value, 2); // both real clicks kept
});
