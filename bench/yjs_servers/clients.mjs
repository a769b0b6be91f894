// The bench's clients (bench/yjs_face.py): writers and readers of one provider kind, one process.
// usage: node clients.mjs KIND URL DOCS READERS EVERY_MS SECONDS TAG
//   KIND: "y-websocket" (WebsocketProvider, URL + "/" + document) or "hocuspocus"
//   (HocuspocusProvider on URL). One writer per document appends "<seq>;" to Y.Text "t" every
//   EVERY_MS ms (every piece due by the clock, so a busy client does not offer less; 0:
//   unpaced, as fast as its pieces reach every reader, WINDOW in flight) for SECONDS; READERS readers in all, spread over the documents. For every piece: when its last
//   reader saw it. Hocuspocus writers then wait (bounded) until the server confirmed every
//   change. Prints one JSON line.
import * as Y from "yjs";
import WebSocket from "ws";
import { WebsocketProvider } from "y-websocket";
import { HocuspocusProvider } from "@hocuspocus/provider";

const [kind, url, docsArg, readersArg, everyArg, secondsArg, tag] = process.argv.slice(2);
const [docs, readers, every, seconds] = [docsArg, readersArg, everyArg, secondsArg].map(Number);
const WINDOW = 4;
const OPEN_TIMEOUT = 120_000;
const providers = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function open(name) {
  const doc = new Y.Doc();
  const provider =
    kind === "y-websocket"
      ? new WebsocketProvider(url, name, doc, { WebSocketPolyfill: WebSocket, disableBc: true })
      : new HocuspocusProvider({ url, name, document: doc, WebSocketPolyfill: WebSocket });
  providers.push(provider);
  return { doc, provider };
}

async function until(check, timeout, what) {
  const deadline = Date.now() + timeout;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await sleep(5);
  }
}

const documents = [];
for (let d = 0; d < docs; d++) {
  const name = `bench-${tag}-${d}`;
  documents.push({ name, writer: open(name), audience: 0, pieces: [], inflight: 0, sent: 0 });
}
await until(() => documents.every((x) => x.writer.provider.synced), OPEN_TIMEOUT, "writers");

let recording = false;
let delivered = 0;
let lastArrival = 0;
const lastReader = [];
function arrive(entry, seq, now) {
  const piece = entry.pieces[seq];
  if (piece === undefined) return;
  piece.seen += 1;
  delivered += 1;
  lastArrival = now;
  if (piece.seen === entry.audience) {
    lastReader.push(now - piece.sent);
    entry.inflight -= 1;
    if (every === 0 && recording) send(entry);
  }
}

const readerSockets = [];
for (let r = 0; r < readers; r += 50) {
  const batch = [];
  for (let k = r; k < Math.min(readers, r + 50); k++) {
    const entry = documents[k % docs];
    entry.audience += 1;
    const reader = open(entry.name);
    reader.doc.getText("t").observe((event) => {
      const now = Date.now();
      for (const op of event.delta) {
        if (typeof op.insert !== "string") continue;
        for (const piece of op.insert.split(";")) if (piece) arrive(entry, Number(piece), now);
      }
    });
    batch.push(reader);
    readerSockets.push(reader);
  }
  await until(() => batch.every((x) => x.provider.synced), OPEN_TIMEOUT, "readers");
}

function insert(entry) {
  const seq = entry.sent++;
  entry.pieces.push({ sent: Date.now(), seen: 0 });
  entry.inflight += 1;
  const text = entry.writer.doc.getText("t");
  text.insert(text.length, `${seq};`); // an update of its own
}

function send(entry) {
  if (every === 0) {
    while (entry.inflight < WINDOW) insert(entry);
    return;
  }
  // paced: every piece due by now, so a late timer does not lower the offered rate
  const due = Math.min(Math.floor((Date.now() - start) / every) + 1, (seconds * 1000) / every);
  while (entry.sent < due) insert(entry);
}

const cpuBefore = process.cpuUsage();
recording = true;
const start = Date.now();
let timer = null;
if (every === 0) for (const entry of documents) send(entry);
else timer = setInterval(() => documents.forEach(send), every);
await sleep(seconds * 1000);
recording = false;
if (timer) clearInterval(timer);
const sent = documents.reduce((n, x) => n + x.sent, 0);
await until(() => lastReader.length >= sent, 10_000, "last readers").catch(() => {});
const elapsed = (Math.max(lastArrival, start + 1) - start) / 1000;
const cpu = process.cpuUsage(cpuBefore);
let unconfirmed = 0;
if (kind === "hocuspocus") {
  const pending = () => documents.filter((x) => x.writer.provider.hasUnsyncedChanges).length;
  await until(() => pending() === 0, 30_000, "confirmations").catch(() => {});
  unconfirmed = pending();
}
lastReader.sort((a, b) => a - b);
const n = lastReader.length;
const at = (q) => lastReader[Math.min(n - 1, Math.floor(q * n))] ?? NaN;
const written = Object.fromEntries(documents.map((x) => [x.name, x.sent]));
console.log(
  JSON.stringify({
    delivered, elapsed, sent, complete: n, p50: at(0.5), p99: at(0.99),
    clientCpu: (cpu.user + cpu.system) / 1e6, unconfirmed, written,
  }),
);
for (const p of providers) p.destroy();
process.exit(0);
