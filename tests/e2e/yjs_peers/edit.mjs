// Two real Yjs providers edit one document at once, then print what each ends with.
// usage: node edit.mjs KIND_A KIND_B WS_BASE DOCUMENT [TOKEN]
//   (BASE_B in the environment: provider b connects there instead, e.g. another cluster node)
//   KIND: "y-websocket" (WebsocketProvider on WS_BASE/yjs/DOCUMENT) or "hocuspocus"
//   (HocuspocusProvider on WS_BASE/yjs). Each writes its own lines into Y.Text "text" and
//   its own keys into Y.Map "map", interleaved with the other's; the script waits until
//   both views are equal and (Hocuspocus) every change is confirmed, and prints JSON.
import * as Y from "yjs";
import WebSocket from "ws";
import { WebsocketProvider } from "y-websocket";
import { HocuspocusProvider } from "@hocuspocus/provider";

const [kindA, kindB, baseA, name, token = ""] = process.argv.slice(2);
const baseB = process.env.BASE_B || baseA;
const EDITS = 20;

function open(kind, label, base) {
  const doc = new Y.Doc();
  let provider;
  if (kind === "y-websocket") {
    provider = new WebsocketProvider(`${base}/yjs`, name, doc, {
      WebSocketPolyfill: WebSocket,
      disableBc: true,
      params: token ? { token } : {},
    });
  } else {
    provider = new HocuspocusProvider({ url: `${base}/yjs`, name, document: doc, token, WebSocketPolyfill: WebSocket });
  }
  provider.awareness.setLocalStateField("user", { name: label });
  return { kind, label, doc, provider };
}

function synced(peer) {
  return new Promise((resolve) => {
    const check = () => (peer.provider.synced ? resolve() : setTimeout(check, 10));
    check();
  });
}

function view(peer) {
  const map = peer.doc.getMap("map").toJSON();
  const sorted = Object.fromEntries(Object.keys(map).sort().map((k) => [k, map[k]]));
  return { text: peer.doc.getText("text").toString(), map: sorted };
}

const a = open(kindA, "a", baseA);
const b = open(kindB, "b", baseB);
await Promise.all([synced(a), synced(b)]);
for (let i = 0; i < EDITS; i++) {
  for (const peer of [a, b]) {
    const text = peer.doc.getText("text");
    text.insert(i % 2 ? 0 : text.length, `${peer.label}${i};`);
    peer.doc.getMap("map").set(`${peer.label}${i}`, i);
    peer.doc.getMap("map").set("last", `${peer.label}${i}`);
  }
  await new Promise((r) => setTimeout(r, 2));
}
const settled = (peer) => peer.kind !== "hocuspocus" || !peer.provider.hasUnsyncedChanges;
for (;;) {
  const [va, vb] = [view(a), view(b)];
  const full = Object.keys(va.map).length === 2 * EDITS + 1;
  if (full && JSON.stringify(va) === JSON.stringify(vb) && settled(a) && settled(b)) break;
  await new Promise((r) => setTimeout(r, 20));
}
const seen = { a: [...a.provider.awareness.getStates().values()].map((s) => s.user?.name).sort() };
console.log(JSON.stringify({ a: view(a), b: view(b), awareness: seen }));
a.provider.destroy();
b.provider.destroy();
process.exit(0);
