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
