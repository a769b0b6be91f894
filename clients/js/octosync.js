// octosync browser and Node client: one dependency-free ES module, no build step.
//
//   import { connect, Store } from "/client/octosync.js";
//   const client = connect("ws://127.0.0.1:8765", { token });
//   const sub = client.subscribe("scoreboard");
//   sub.on("state", (s) => console.log(s.epoch, s.values));   // Map: node id -> value
//   sub.on("error", (err) => console.warn(err.code, err.message));
//   sub.write(1, 42);                                         // a cell_set the producer may take
//
// It speaks the /lazily face in the seed JSON dialect (docs/PROTOCOL.md): handshake first, then
// snapshots and gapless deltas mirrored with the rules of octosync/ipc/mirror.py. A gap, a bad
// op or an undecodable frame sends a resync_request; a dropped connection reconnects with
// full-jitter exponential backoff. Every error the server sends (`{"type":"error","code",
// "message"}`) and every error found here becomes a typed `OctosyncError` delivered to "error"
// listeners (or, with none, to console.error): nothing is dropped silently.
//
// Node 22+ has a global WebSocket; on Node 18/20 pass one: connect(url, { WebSocket }) (Node 20
// also has it behind --experimental-websocket).

// --- errors ------------------------------------------------------------------------------------

/** Root of every error this client raises or receives; `code` is the server's stable name. */
export class OctosyncError extends Error {
  constructor(message, { code, path, closes } = {}) {
    super(path ? `${path}: ${message}` : message);
    this.name = new.target.errorName ?? "OctosyncError";
    this.code = code ?? this.name;
    this.path = path ?? null;
    /** True when the server closes the connection after this error (hub/policy.py). */
    this.closes = closes ?? false;
  }
}

// The server's error tree (octosync/errors.py), by stable name. A name not listed here still
// arrives as an OctosyncError carrying that code.
const TREE = {
  ProtocolError: "OctosyncError",
  LocalProtocolError: "ProtocolError",
  RemoteProtocolError: "ProtocolError",
  DecodeError: "RemoteProtocolError",
  Oversize: "RemoteProtocolError",
  HandshakeFailed: "RemoteProtocolError",
  EpochGap: "RemoteProtocolError",
  SnapshotRequired: "RemoteProtocolError",
  ForbiddenPublish: "RemoteProtocolError",
  Desync: "RemoteProtocolError",
  LimitExceeded: "RemoteProtocolError",
  CrdtValueError: "RemoteProtocolError",
  ElementCollected: "CrdtValueError",
  TypeTagError: "LocalProtocolError",
  AuthError: "OctosyncError",
  Unauthorized: "AuthError",
  Forbidden: "AuthError",
  ServerError: "OctosyncError",
  ShuttingDown: "ServerError",
  Overloaded: "ServerError",
  InternalError: "ServerError",
  ConnectionLost: "OctosyncError",
  StorageError: "OctosyncError",
};

/** Error classes by name: `errors.EpochGap`, `errors.Unauthorized`, ... (instanceof works). */
export const errors = { OctosyncError };
for (const [name, parent] of Object.entries(TREE)) {
  const base = errors[parent];
  errors[name] = { [name]: class extends base {} }[name];
  errors[name].errorName = name;
}

// Which errors close the connection (hub/policy.py, message faces: a DecodeError does not).
const CLOSING = new Set([
  "HandshakeFailed", "Unauthorized", "Oversize", "ShuttingDown", "Overloaded", "InternalError",
]);
const KEEPING = new Set([
  "RemoteProtocolError", "DecodeError", "EpochGap", "SnapshotRequired", "ForbiddenPublish",
  "Desync", "ClockDrift", "SyncResetRequired", "LimitExceeded", "Forbidden", "NotJoined",
  "DuplicatePeer", "UnknownTarget", "InvalidBucketPath", "CrdtValueError", "ElementCollected",
  "FeatureDisabled", "BlobInvalid", "FeatureNotNegotiated",
]);

/** The typed error for a server error frame `{type: "error", code, message, path?}`. */
export function errorFromFrame(frame) {
  const cls = errors[frame.code] ?? OctosyncError;
  const closes = CLOSING.has(frame.code) || !KEEPING.has(frame.code);
  const path = typeof frame.path === "string" ? frame.path : undefined;
  return new cls(String(frame.message), { code: String(frame.code), closes, path });
}

function fail(cls, message, path) {
  return new cls(message, { path });
}

// --- type tags (graph/type_tags.py) ------------------------------------------------------------

const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true });
const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

function view(bytes) {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function packed(size, write) {
  const out = new Uint8Array(size);
  write(view(out));
  return out;
}

function fixed(name, size, bytes) {
  if (bytes.length !== size) throw fail(errors.TypeTagError, `${name} needs ${size} bytes, got ${bytes.length}`);
  return view(bytes);
}

function sortedJson(value) {
  // The server encodes json values with sorted keys; writes do too, so equal values are equal bytes.
  if (Array.isArray(value)) return `[${value.map(sortedJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${sortedJson(value[k])}`).join(",")}}`;
  }
  if (typeof value === "number" && !Number.isFinite(value)) {
    throw fail(errors.TypeTagError, "json cannot carry NaN or infinity");
  }
  if (value === undefined || typeof value === "function" || typeof value === "symbol" || typeof value === "bigint") {
    throw fail(errors.TypeTagError, `json cannot encode ${typeof value}`);
  }
  return JSON.stringify(value);
}

const BUILTIN_TAGS = {
  i32: {
    encode(v) {
      if (!Number.isInteger(v) || v < -(2 ** 31) || v > 2 ** 31 - 1) throw fail(errors.TypeTagError, `i32 needs an integer in range, got ${v}`);
      return packed(4, (d) => d.setInt32(0, v));
    },
    decode: (b) => fixed("i32", 4, b).getInt32(0),
  },
  i64: {
    encode(v) {
      let big;
      if (typeof v === "bigint") big = v;
      else if (Number.isSafeInteger(v)) big = BigInt(v);
      else throw fail(errors.TypeTagError, `i64 needs a safe integer or a BigInt, got ${v}`);
      if (big < I64_MIN || big > I64_MAX) throw fail(errors.TypeTagError, `${v} does not fit i64`);
      return packed(8, (d) => d.setBigInt64(0, big));
    },
    // A Number when exact, else a BigInt: never a silently rounded integer.
    decode(b) {
      const big = fixed("i64", 8, b).getBigInt64(0);
      const n = Number(big);
      return Number.isSafeInteger(n) ? n : big;
    },
  },
  f64: {
    encode(v) {
      if (typeof v !== "number") throw fail(errors.TypeTagError, `f64 needs a number, got ${typeof v}`);
      return packed(8, (d) => d.setFloat64(0, v));
    },
    decode: (b) => fixed("f64", 8, b).getFloat64(0),
  },
  bool: {
    encode(v) {
      if (typeof v !== "boolean") throw fail(errors.TypeTagError, `bool needs a boolean, got ${typeof v}`);
      return Uint8Array.of(v ? 1 : 0);
    },
    decode(b) {
      if (b.length !== 1 || b[0] > 1) throw fail(errors.TypeTagError, "bool needs one byte 0x00 or 0x01");
      return b[0] === 1;
    },
  },
  string: {
    encode(v) {
      if (typeof v !== "string") throw fail(errors.TypeTagError, `string needs a string, got ${typeof v}`);
      return utf8.encode(v);
    },
    decode(b) {
      try {
        return utf8Strict.decode(b);
      } catch {
        throw fail(errors.TypeTagError, "string payload is not valid UTF-8");
      }
    },
  },
  bytes: {
    encode(v) {
      if (!(v instanceof Uint8Array)) throw fail(errors.TypeTagError, "bytes needs a Uint8Array");
      return new Uint8Array(v);
    },
    decode: (b) => new Uint8Array(b),
  },
  json: {
    encode: (v) => utf8.encode(sortedJson(v)),
    decode(b) {
      try {
        return JSON.parse(utf8Strict.decode(b));
      } catch (e) {
        throw fail(errors.TypeTagError, `json payload does not decode: ${e.message}`);
      }
    },
  },
};

/** A type-tag table: the built-ins plus tags you register (a producer's own value formats). */
export class TypeRegistry {
  constructor() {
    this.tags = new Map(Object.entries(BUILTIN_TAGS));
  }
  register(name, encode, decode) {
    if (!name) throw fail(errors.TypeTagError, "a type tag needs a non-empty name");
    if (this.tags.has(name)) throw fail(errors.TypeTagError, `type tag ${JSON.stringify(name)} is already registered`);
    this.tags.set(name, { encode, decode });
  }
  has(name) {
    return this.tags.has(name);
  }
  encode(name, value) {
    const tag = this.tags.get(name);
    if (!tag) throw fail(errors.TypeTagError, `unknown type tag ${JSON.stringify(name)}`);
    return tag.encode(value);
  }
  /** Decoded value; bytes of a tag this registry does not know come back as a Uint8Array. */
  decode(name, bytes) {
    const tag = this.tags.get(name);
    return tag ? tag.decode(bytes) : new Uint8Array(bytes);
  }
}

export const defaultRegistry = new TypeRegistry();

// --- base64 (the seed dialect's payloads) -----------------------------------------------------

const B64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export function fromBase64(text, path = "payload") {
  if (typeof text !== "string" || !B64.test(text)) throw fail(errors.DecodeError, "expected standard padded base64", path);
  const bin = atob(text);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function toBase64(bytes) {
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}

// --- strict decoding of the seed JSON dialect (ipc/messages.py) --------------------------------

const MAX_SAFE_ID = 2 ** 53;
const NODE_STATES = new Set(["resolved", "dirty", "unset", "opaque"]);
const KEY_RE = /^[^/]+(\/[^/]+)*$/;

function obj(v, path) {
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw fail(errors.DecodeError, "expected an object", path);
  return v;
}
function arr(v, path) {
  if (!Array.isArray(v)) throw fail(errors.DecodeError, "expected an array", path);
  return v;
}
function id(v, path) {
  if (!Number.isInteger(v) || v < 0 || v > MAX_SAFE_ID) throw fail(errors.DecodeError, `expected an integer in 0..2^53`, path);
  return v;
}
function str(v, path) {
  if (typeof v !== "string") throw fail(errors.DecodeError, "expected a string", path);
  return v;
}
function known(o, fields, path) {
  for (const k of Object.keys(o)) {
    if (!fields.includes(k)) throw fail(errors.DecodeError, `unknown field ${JSON.stringify(k)}`, path);
  }
}
function payload(v, path) {
  if (typeof v === "string") return fromBase64(v, path);
  // A blob reference (shared memory, Arrow): kept as it is, there is nothing to decode here.
  const o = obj(v, path);
  for (const f of ["offset", "len", "generation", "epoch", "checksum"]) id(o[f], `${path}.${f}`);
  return { blob: o };
}
function nodeKey(v, path) {
  if (v === undefined || v === null) return null;
  if (typeof v !== "string" || v.length < 1 || v.length > 1024 || !KEY_RE.test(v)) throw fail(errors.DecodeError, "expected a '/'-joined key", path);
  return v;
}
function state(v, path) {
  if (!NODE_STATES.has(v)) throw fail(errors.DecodeError, `expected one of ${[...NODE_STATES]}`, path);
  return v;
}

const NODE_FIELDS = ["slot_id", "type_tag", "state", "payload", "key"];
const OP_FIELDS = {
  cell_set: ["op", "slot_id", "payload"],
  slot_value: ["op", "slot_id", "payload"],
  invalidate: ["op", "slot_id"],
  node_add: ["op", "slot_id", "type_tag", "payload", "key", "state"],
  node_remove: ["op", "slot_id"],
  edge_add: ["op", "dependent", "dependency"],
  edge_remove: ["op", "dependent", "dependency"],
};

function decodeNode(n, path) {
  obj(n, path);
  known(n, NODE_FIELDS, path);
  const node = {
    id: id(n.slot_id, `${path}.slot_id`),
    tag: str(n.type_tag, `${path}.type_tag`),
    state: state(n.state, `${path}.state`),
    payload: n.payload == null ? null : payload(n.payload, `${path}.payload`),
    key: nodeKey(n.key, `${path}.key`),
  };
  if ((node.state === "resolved") !== (node.payload !== null)) {
    throw fail(errors.DecodeError, `node ${node.id}: payload must be present exactly when state is 'resolved'`, path);
  }
  return node;
}

function decodeOp(o, path) {
  obj(o, path);
  const fields = OP_FIELDS[o.op];
  if (!fields) throw fail(errors.DecodeError, `unknown op ${JSON.stringify(o.op)}`, `${path}.op`);
  known(o, fields, path);
  const op = { op: o.op };
  if (fields.includes("slot_id")) op.id = id(o.slot_id, `${path}.slot_id`);
  if (o.op === "cell_set" || o.op === "slot_value") op.payload = payload(o.payload, `${path}.payload`);
  if (o.op === "edge_add" || o.op === "edge_remove") {
    op.dependent = id(o.dependent, `${path}.dependent`);
    op.dependency = id(o.dependency, `${path}.dependency`);
  }
  if (o.op === "node_add") {
    op.tag = str(o.type_tag, `${path}.type_tag`);
    op.payload = o.payload == null ? null : payload(o.payload, `${path}.payload`);
    op.key = nodeKey(o.key, `${path}.key`);
    op.state = o.state == null ? (op.payload !== null ? "resolved" : "unset") : state(o.state, `${path}.state`);
  }
  return op;
}

/** One server frame of the seed JSON dialect, checked field by field (DecodeError names the path). */
export function decodeMessage(text) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw fail(errors.DecodeError, `not JSON: ${e.message}`, "$");
  }
  obj(doc, "$");
  switch (doc.type) {
    case "error":
      known(doc, ["type", "code", "message", "path"], "$");
      if (doc.path !== undefined) str(doc.path, "$.path");
      return { type: "error", error: errorFromFrame({ code: str(doc.code, "$.code"), message: str(doc.message, "$.message"), path: doc.path }) };
    case "snapshot":
      known(doc, ["type", "epoch", "nodes", "edges", "roots", "state_hash"], "$");
      return {
        type: "snapshot",
        epoch: id(doc.epoch, "$.epoch"),
        nodes: arr(doc.nodes ?? [], "$.nodes").map((n, i) => decodeNode(n, `$.nodes[${i}]`)),
        edges: arr(doc.edges ?? [], "$.edges").map((e, i) => {
          known(obj(e, `$.edges[${i}]`), ["dependent", "dependency"], `$.edges[${i}]`);
          return [id(e.dependent, `$.edges[${i}].dependent`), id(e.dependency, `$.edges[${i}].dependency`)];
        }),
        roots: arr(doc.roots ?? [], "$.roots").map((r, i) => id(r, `$.roots[${i}]`)),
      };
    case "delta": {
      known(doc, ["type", "base_epoch", "epoch", "ops", "state_hash"], "$");
      const base = id(doc.base_epoch, "$.base_epoch");
      const epoch = id(doc.epoch, "$.epoch");
      // A span of several epochs: a view that hides some flushes chains over them.
      if (epoch <= base) throw fail(errors.DecodeError, `epoch ${epoch} is not above base_epoch ${base}`, "$.epoch");
      return { type: "delta", base, epoch, ops: arr(doc.ops ?? [], "$.ops").map((o, i) => decodeOp(o, `$.ops[${i}]`)) };
    }
    case "resync_request":
      known(doc, ["type", "last_epoch", "reason"], "$");
      return { type: "resync_request" };
    case "remote_op": {
      known(doc, ["type", "kind", "node", "payload", "request", "peer", "subject"], "$");
      if (doc.kind !== "write" && doc.kind !== "trigger_effect") throw fail(errors.DecodeError, `unknown kind ${JSON.stringify(doc.kind)}`, "$.kind");
      if ((doc.kind === "write") !== (doc.payload !== undefined)) throw fail(errors.DecodeError, "a write carries a payload, a trigger_effect none", "$.payload");
      return {
        type: "remote_op",
        kind: doc.kind,
        node: id(doc.node, "$.node"),
        payload: doc.payload === undefined ? null : fromBase64(str(doc.payload, "$.payload"), "$.payload"),
        request: doc.request === undefined ? 0 : id(doc.request, "$.request"),
        writer: { peer: doc.peer === undefined ? null : id(doc.peer, "$.peer"), subject: doc.subject === undefined ? null : str(doc.subject, "$.subject") },
      };
    }
    case "remote_op_result":
      known(doc, ["type", "request", "peer", "error", "message", "applied"], "$");
      return {
        type: "remote_op_result",
        request: id(doc.request, "$.request"),
        error: doc.error === undefined ? null : errorFromFrame({ code: str(doc.error, "$.error"), message: doc.message === undefined ? doc.error : str(doc.message, "$.message") }),
        applied: doc.applied ?? true,
      };
    default:
      throw fail(errors.DecodeError, `unknown message type ${JSON.stringify(doc.type)}`, "$.type");
  }
}

// --- the mirror (ipc/mirror.py) -----------------------------------------------------------------

/**
 * A peer's copy of a stream: apply a snapshot, then gapless deltas. `apply` returns "applied",
 * "ignored" or a resync reason (an error name); a bad delta changes nothing (rolled back).
 */
export class Mirror {
  constructor(registry = defaultRegistry) {
    this.registry = registry;
    this.nodes = new Map(); // id -> {tag, state, payload, key}
    this.deps = new Map(); // dependent -> Set(dependency)
    this.roots = new Set();
    this.epoch = null;
    this.awaiting = false;
    this.lastError = null;
  }

  get inSync() {
    return this.epoch !== null && !this.awaiting;
  }

  apply(msg) {
    if (msg.type === "snapshot") return this.#snapshot(msg);
    if (msg.type !== "delta") return "ignored";
    if (this.epoch !== null && msg.epoch <= this.epoch) return "ignored";
    if (this.awaiting) return "ignored";
    if (this.epoch === null) return this.#lost(fail(errors.SnapshotRequired, "a delta arrived before any snapshot"));
    if (msg.base !== this.epoch) {
      return this.#lost(fail(errors.EpochGap, `delta ${msg.base}->${msg.epoch} does not follow epoch ${this.epoch}`));
    }
    const undo = [];
    try {
      msg.ops.forEach((op, i) => this.#op(op, i, undo));
    } catch (err) {
      for (let i = undo.length - 1; i >= 0; i--) undo[i]();
      return this.#lost(err);
    }
    this.epoch = msg.epoch;
    return "applied";
  }

  /** Out of sync from now on: deltas are ignored until a snapshot lands. */
  lose(error) {
    return this.#lost(error);
  }

  #lost(error) {
    this.awaiting = true;
    this.lastError = error;
    return error.code;
  }

  #snapshot(msg) {
    const nodes = new Map();
    const deps = new Map();
    try {
      msg.nodes.forEach((n, i) => {
        if (nodes.has(n.id)) throw fail(errors.RemoteProtocolError, `node ${n.id} appears twice`, `nodes[${i}]`);
        nodes.set(n.id, { tag: n.tag, state: n.state, payload: n.payload, key: n.key });
      });
      msg.edges.forEach(([a, b], i) => {
        if (!nodes.has(a) || !nodes.has(b)) throw fail(errors.RemoteProtocolError, "edge names an unknown node", `edges[${i}]`);
        if (!deps.has(a)) deps.set(a, new Set());
        deps.get(a).add(b);
      });
      msg.roots.forEach((r, i) => {
        if (!nodes.has(r)) throw fail(errors.RemoteProtocolError, `root ${r} is not a node`, `roots[${i}]`);
      });
    } catch (err) {
      return this.#lost(err);
    }
    this.nodes = nodes;
    this.deps = deps;
    this.roots = new Set(msg.roots);
    this.epoch = msg.epoch;
    this.awaiting = false;
    this.lastError = null;
    return "applied";
  }

  #op(op, i, undo) {
    const bad = (m) => fail(errors.RemoteProtocolError, m, `ops[${i}]`);
    const nodes = this.nodes;
    switch (op.op) {
      case "cell_set":
      case "slot_value":
      case "invalidate": {
        const node = nodes.get(op.id);
        if (!node) throw bad(`${op.op} on unknown node ${op.id}`);
        const before = { ...node };
        undo.push(() => nodes.set(op.id, before));
        nodes.set(op.id, op.op === "invalidate" ? { ...node, state: "dirty", payload: null } : { ...node, state: "resolved", payload: op.payload });
        return;
      }
      case "node_add": {
        if (nodes.has(op.id)) throw bad(`node_add of node ${op.id}, which exists (remove it first)`);
        if ((op.state === "resolved") !== (op.payload !== null)) throw bad(`node_add ${op.id}: payload must be present exactly when resolved`);
        nodes.set(op.id, { tag: op.tag, state: op.state, payload: op.payload, key: op.key });
        undo.push(() => nodes.delete(op.id));
        return;
      }
      case "node_remove": {
        const node = nodes.get(op.id);
        if (!node) throw bad(`node_remove of unknown node ${op.id}`);
        const removed = [];
        for (const [a, bs] of this.deps) {
          for (const b of bs) if (a === op.id || b === op.id) removed.push([a, b]);
        }
        for (const [a, b] of removed) this.#unlink(a, b);
        const wasRoot = this.roots.delete(op.id);
        nodes.delete(op.id);
        undo.push(() => {
          nodes.set(op.id, node);
          if (wasRoot) this.roots.add(op.id);
          for (const [a, b] of removed) this.#link(a, b);
        });
        return;
      }
      case "edge_add": {
        if (!nodes.has(op.dependent) || !nodes.has(op.dependency)) throw bad(`edge_add ${op.dependent}->${op.dependency} names an unknown node`);
        if (this.deps.get(op.dependent)?.has(op.dependency)) return;
        this.#link(op.dependent, op.dependency);
        undo.push(() => this.#unlink(op.dependent, op.dependency));
        return;
      }
      case "edge_remove": {
        if (!this.deps.get(op.dependent)?.has(op.dependency)) return;
        this.#unlink(op.dependent, op.dependency);
        undo.push(() => this.#link(op.dependent, op.dependency));
        return;
      }
      default:
        throw bad(`unknown op ${op.op}`);
    }
  }

  #link(a, b) {
    if (!this.deps.has(a)) this.deps.set(a, new Set());
    this.deps.get(a).add(b);
  }

  #unlink(a, b) {
    const s = this.deps.get(a);
    if (!s) return;
    s.delete(b);
    if (s.size === 0) this.deps.delete(a);
  }

  /** Map of node id -> decoded value, for resolved nodes (blob references as `{blob}`). */
  values() {
    const out = new Map();
    for (const [nid, n] of this.nodes) {
      if (n.state !== "resolved") continue;
      if (!(n.payload instanceof Uint8Array)) {
        out.set(nid, n.payload);
        continue;
      }
      try {
        out.set(nid, this.registry.decode(n.tag, n.payload));
      } catch (err) {
        throw fail(errors.TypeTagError, `node ${nid}: ${err.message}`, `nodes[${nid}]`);
      }
    }
    return out;
  }

  /** Node id for a key (or the id itself). */
  idOf(nameOrId) {
    if (typeof nameOrId === "number") return this.nodes.has(nameOrId) ? nameOrId : null;
    for (const [nid, n] of this.nodes) if (n.key === nameOrId) return nid;
    return null;
  }
}

// --- small event emitter ------------------------------------------------------------------------

class Emitter {
  #listeners = new Map();
  on(event, fn) {
    if (!this.#listeners.has(event)) this.#listeners.set(event, new Set());
    this.#listeners.get(event).add(fn);
    return () => this.#listeners.get(event)?.delete(fn);
  }
  emit(event, value) {
    const set = this.#listeners.get(event);
    if (!set || set.size === 0) {
      if (event === "error") console.error(`octosync: ${value.code}: ${value.message}`);
      return;
    }
    for (const fn of [...set]) fn(value);
  }
}

// --- connections --------------------------------------------------------------------------------

const PROTOCOL_ID = "lazily-ipc";

/** Full-jitter exponential backoff: attempt n waits uniform(0, min(cap, base * 2^n)) seconds. */
export function backoffDelay(attempt, { base = 0.1, cap = 5 } = {}, random = Math.random) {
  return random() * Math.min(cap, base * 2 ** attempt);
}

function wsUrl(base, path, token) {
  const url = new URL(base, globalThis.location?.href);
  if (url.protocol === "http:") url.protocol = "ws:";
  if (url.protocol === "https:") url.protocol = "wss:";
  url.pathname = url.pathname.replace(/\/(lazily)?$/, "") + path;
  if (token) url.searchParams.set("token", token);
  return url;
}

// Writers' requests stamped with who asked, answered by the producer (server/lazily_session.py).
const REMOTE_OPS = "remote_op";

function handshake(stream, publish, maxFrame) {
  return {
    protocol_id: PROTOCOL_ID,
    protocol_major_version: 1,
    codec: "json",
    max_frame_size: maxFrame,
    fragmentation_supported: false,
    ordered_reliable: true,
    peer_id: 0,
    session_id: stream,
    features: publish ? ["publish", REMOTE_OPS] : [],
  };
}

function checkHandshake(text, stream) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch {
    throw fail(errors.HandshakeFailed, "the server's first frame is not JSON", "$");
  }
  if (doc?.type === "error") return errorFromFrame(doc);
  for (const [field, want] of [["protocol_id", PROTOCOL_ID], ["protocol_major_version", 1], ["codec", "json"], ["session_id", stream]]) {
    if (doc?.[field] !== want) throw fail(errors.HandshakeFailed, `server ${field} ${JSON.stringify(doc?.[field])} is not ${JSON.stringify(want)}`, field);
  }
  return doc;
}

// Close codes after which reconnecting cannot help (hub/policy.py): policy (auth, handshake)
// and message too big.
const FATAL_CLOSES = new Set([1008, 1009]);
// Errors that end a subscription or publication for good: retrying gets the same answer.
const FATAL_CODES = new Set(["Unauthorized", "Forbidden", "ForbiddenPublish", "HandshakeFailed", "Oversize"]);

/**
 * One stream over one WebSocket, reconnecting; `Subscription` and `Publication` build on it.
 * Status: "connecting" -> "open" -> ("reconnecting" -> "open")* -> "closed" | "failed".
 */
class Channel extends Emitter {
  constructor(client, stream, publish) {
    super();
    this.client = client;
    this.stream = stream;
    this.publish = publish;
    this.status = "connecting";
    this.errors = [];
    this.reconnects = 0;
    this.maxFrame = client.maxFrameSize;
    this.ws = null;
    this.closed = false;
    this.attempt = 0;
    this.timer = null;
    this.openedOnce = false;
    this.node = 0; // which of the client's URLs this channel uses
  }

  /** The base URL this channel connects to now (a cluster client moves on when one fails). */
  get url() {
    return this.client.urls[this.node % this.client.urls.length];
  }

  start() {
    this.#open();
  }

  #setStatus(status) {
    if (this.status === status) return;
    this.status = status;
    this.emit("status", status);
  }

  /** The handshake this channel opens with. */
  hello() {
    return handshake(this.stream, this.publish, this.client.maxFrameSize);
  }

  report(err) {
    this.errors.push(err);
    if (this.errors.length > 100) this.errors.shift();
    this.emit("error", err);
  }

  #open() {
    if (this.closed) return;
    const Ctor = this.client.WebSocket;
    const url = wsUrl(this.url, "/lazily", this.client.token);
    let ws;
    try {
      ws = new Ctor(url.href);
    } catch (e) {
      this.#fatal(fail(errors.ConnectionLost, `cannot open ${url.origin}: ${e.message}`));
      return;
    }
    this.ws = ws;
    let handshaken = false;
    ws.onopen = () => ws.send(JSON.stringify(this.hello()));
    ws.onmessage = (event) => {
      if (typeof event.data !== "string") {
        this.report(fail(errors.DecodeError, "binary frame on a JSON connection", "$"));
        return;
      }
      if (!handshaken) {
        let reply;
        try {
          reply = checkHandshake(event.data, this.stream);
        } catch (err) {
          this.#fatal(err);
          return;
        }
        if (reply instanceof OctosyncError) {
          this.report(reply);
          if (FATAL_CODES.has(reply.code)) this.#fatal(null);
          return;
        }
        handshaken = true;
        this.serverFeatures = Array.isArray(reply.features) ? reply.features : [];
        this.maxFrame = Math.min(this.client.maxFrameSize, reply.max_frame_size);
        this.attempt = 0;
        if (this.openedOnce) this.reconnects += 1;
        this.openedOnce = true;
        this.#setStatus("open");
        this.opened();
        return;
      }
      this.received(event.data);
    };
    const onClose = (event) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.closedConnection();
      if (this.closed) return;
      if (FATAL_CLOSES.has(event.code)) {
        this.#fatal(fail(errors.ConnectionLost, `the server closed the connection (${event.code})`));
        return;
      }
      if (!handshaken && !this.openedOnce) {
        // The upgrade itself failed: a browser cannot read the HTTP status, so ask the same
        // URL over plain HTTP, which answers 401 with the typed error when credentials are wrong.
        this.#diagnose(url).then((err) => (err ? this.#fatal(err) : this.#retry(event.code, url)));
        return;
      }
      this.#retry(event.code, handshaken ? null : url);
    };
    ws.onclose = onClose;
    // The close event follows an error and says what happens next; Node 20's WebSocket sends
    // none after a refused upgrade, so one is assumed (1006, abnormal) if it does not come.
    ws.onerror = () => setTimeout(() => onClose({ code: 1006 }), 100);
  }

  async #diagnose(url) {
    const http = new URL(url.href);
    http.protocol = http.protocol === "wss:" ? "https:" : "http:";
    try {
      const res = await (this.client.fetch ?? globalThis.fetch)(http.href);
      if (res.status === 401 || res.status === 403) {
        const body = await res.json();
        return errorFromFrame(body);
      }
    } catch {
      // unreachable: retry with backoff like any dropped connection
    }
    return null;
  }

  // `failed`: the URL of an attempt that never opened (a wrong host or port, a server that is
  // down): each such attempt is reported as a ConnectionLost "error" event, so a page shows why
  // it keeps reconnecting instead of only a status.
  #retry(code, failed = null) {
    const limit = this.client.backoff.maxAttempts;
    if (limit !== undefined && this.attempt >= limit) {
      this.#fatal(fail(errors.ConnectionLost, `gave up after ${this.attempt} reconnect attempts (last close ${code})`));
      return;
    }
    this.#setStatus("reconnecting");
    const delay = backoffDelay(this.attempt, this.client.backoff, this.client.random);
    this.attempt += 1;
    this.node += 1; // the next node, when the client was given several
    if (failed) {
      const of = limit === undefined ? "" : ` of ${limit}`;
      const where = `${failed.origin}${failed.pathname}`;
      this.report(fail(errors.ConnectionLost, `cannot reach ${where} (close ${code}); retrying in ${delay.toFixed(1)}s (attempt ${this.attempt}${of})`));
    }
    this.timer = setTimeout(() => {
      this.timer = null;
      this.#open();
    }, delay * 1000);
  }

  #fatal(err) {
    if (err) this.report(err);
    this.closed = true;
    this.#setStatus("failed");
    this.ws?.close(1000);
    this.ws = null;
    this.ended(err ?? this.errors.at(-1));
  }

  /** Send one message (an object, encoded as JSON); a closed connection raises ConnectionLost. */
  send(message) {
    const ws = this.ws;
    if (!ws || this.status !== "open" || ws.readyState !== 1) {
      throw fail(errors.ConnectionLost, `stream ${JSON.stringify(this.stream)} is not connected (${this.status})`);
    }
    const text = JSON.stringify(message);
    const size = utf8.encode(text).length;
    if (size > this.maxFrame) throw fail(errors.Oversize, `frame of ${size} bytes exceeds the limit of ${this.maxFrame}`, "$");
    ws.send(text);
  }

  close() {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.ws?.close(1000);
    this.ws = null;
    this.#setStatus("closed");
    this.ended(null);
  }

  failWith(err) {
    this.#fatal(err);
  }

  /** The decoded message, or null once a DecodeError has been reported. */
  decoded(text) {
    try {
      return decodeMessage(text);
    } catch (err) {
      this.report(err);
      return null;
    }
  }

  // hooks
  opened() {}
  received() {}
  closedConnection() {}
  ended() {}
}

/** A live copy of one stream. Events: "state" ({epoch, values, keys}), "error", "status". */
export class Subscription extends Channel {
  constructor(client, stream) {
    super(client, stream, false);
    this.mirror = new Mirror(client.registry);
    this.resyncs = 0;
    this.state = null;
    this.requests = new Map(); // request id -> {resolve, reject}
    this.nextRequest = 0;
    let resolve, reject;
    this.ready = new Promise((res, rej) => ((resolve = res), (reject = rej)));
    this.ready.catch(() => {}); // the error is also reported; awaiting it still rejects
    this.resolveReady = resolve;
    this.rejectReady = reject;
  }

  opened() {
    this.mirror = new Mirror(this.client.registry); // the hub starts every connection with a snapshot
  }

  received(text) {
    const msg = this.decoded(text);
    if (msg === null) {
      this.#resync(this.mirror.lose(this.errors.at(-1)));
      return;
    }
    if (msg.type === "remote_op_result") {
      const waiting = this.requests.get(msg.request);
      this.requests.delete(msg.request);
      if (msg.error) this.report(msg.error);
      if (waiting) (msg.error ? waiting.reject(msg.error) : waiting.resolve(msg.applied));
      return;
    }
    if (msg.type === "error") {
      this.report(msg.error);
      // Forbidden before any snapshot is the subscription refused (no read grant): final.
      // Forbidden later answers one write; the subscription goes on.
      const refused = msg.error.code !== "Forbidden" || this.mirror.epoch === null;
      if (FATAL_CODES.has(msg.error.code) && refused) this.failWith(null);
      return;
    }
    const result = this.mirror.apply(msg);
    if (result === "ignored") return;
    if (result !== "applied") {
      this.report(this.mirror.lastError);
      this.#resync(result);
      return;
    }
    let values;
    try {
      values = this.mirror.values();
    } catch (err) {
      this.report(err);
      return;
    }
    const keys = new Map();
    for (const [nid, n] of this.mirror.nodes) if (n.key !== null) keys.set(n.key, nid);
    this.state = { epoch: this.mirror.epoch, values, keys };
    this.resolveReady(this.state);
    this.emit("state", this.state);
  }

  #resync(reason) {
    this.resyncs += 1;
    try {
      this.send({ type: "resync_request", ...(this.mirror.epoch !== null ? { last_epoch: this.mirror.epoch } : {}), reason });
    } catch (err) {
      this.report(err);
    }
  }

  closedConnection() {
    const lost = fail(errors.ConnectionLost, "the connection was lost before the producer answered");
    for (const waiting of this.requests.values()) waiting.reject(lost);
    this.requests.clear();
  }

  ended(err) {
    this.closedConnection();
    this.rejectReady(err ?? fail(errors.ConnectionLost, "the subscription was closed"));
  }

  /** The current value of a node, by id or key (undefined when unknown or not resolved). */
  get(nameOrId) {
    const nid = this.mirror.idOf(nameOrId);
    return nid === null ? undefined : this.state?.values.get(nid);
  }

  /**
   * Ask the producer to set a cell. Resolves to true once the producer applied it (the value
   * also comes back as state), false when the producer only takes the older `cell_set` form
   * (delivery alone is known); rejects with the typed refusal (Forbidden: no write grant on
   * the stream or the node, or the producer's own rule), also an "error" event. Throws
   * (typed) at once when the node is unknown, the value does not fit its type tag, or the
   * connection is down.
   */
  write(nameOrId, value) {
    const nid = this.mirror.idOf(nameOrId);
    if (nid === null) throw fail(errors.LocalProtocolError, `no node ${JSON.stringify(nameOrId)} in stream ${JSON.stringify(this.stream)}`);
    const node = this.mirror.nodes.get(nid);
    const payload = toBase64(this.client.registry.encode(node.tag, value));
    if (!(this.serverFeatures ?? []).includes(REMOTE_OPS)) {
      const base = this.mirror.epoch ?? 0;
      this.send({ type: "delta", base_epoch: base, epoch: base + 1, ops: [{ op: "cell_set", slot_id: nid, payload }] });
      return Promise.resolve(false);
    }
    return this.#ask({ type: "remote_op", kind: "write", node: nid, payload });
  }

  /** Ask the producer to run an effect, by its node id (the producer shares it); as `write`. */
  trigger(effectId) {
    if (!(this.serverFeatures ?? []).includes(REMOTE_OPS)) throw fail(errors.ProtocolError, "this server does not relay effect requests", "kind");
    return this.#ask({ type: "remote_op", kind: "trigger_effect", node: effectId });
  }

  #ask(message) {
    this.nextRequest += 1;
    const request = this.nextRequest;
    this.send({ ...message, request });
    const answer = new Promise((resolve, reject) => this.requests.set(request, { resolve, reject }));
    answer.catch(() => {}); // reported as an "error" event too: a caller may ignore the promise
    return answer;
  }
}

// --- publishing: a small reactive store ---------------------------------------------------------

/**
 * Cells and derived values; changes made in one synchronous run (or one `batch`) become one
 * change set, delivered to subscribers of the store (a Publication turns it into one delta).
 */
export class Store {
  constructor(registry = defaultRegistry) {
    this.registry = registry;
    this.nodes = new Map(); // id -> node
    this.nextId = 1;
    this.epoch = 0;
    this.pending = new Map(); // id -> op kind ("set" | "add")
    this.listeners = new Set();
    this.depth = 0;
    this.scheduled = false;
    this.tracking = null;
  }

  cell(initial, typeTag, { key } = {}) {
    return this.#add({ derived: false, tag: typeTag, key: key ?? null, fn: null }, initial);
  }

  derived(fn, typeTag, { key } = {}) {
    return this.#add({ derived: true, tag: typeTag, key: key ?? null, fn }, undefined);
  }

  #add(spec, initial) {
    const node = { id: this.nextId++, ...spec, value: undefined, payload: null, sources: new Set() };
    const store = this;
    const handle = {
      id: node.id,
      get() {
        store.tracking?.add(node.id);
        return node.value;
      },
      set(value) {
        if (node.derived) throw fail(errors.LocalProtocolError, `node ${node.id} is derived, not a cell`);
        store.assign(node, value);
      },
    };
    node.handle = handle;
    this.nodes.set(node.id, node);
    if (node.derived) this.#compute(node);
    else this.#encodeInto(node, initial);
    node.edgesBefore = undefined; // a new node's edges go out with its node_add
    this.#mark(node.id, "add");
    return handle;
  }

  #encodeInto(node, value) {
    const payload = this.registry.encode(node.tag, value);
    const same = node.payload !== null && payload.length === node.payload.length && payload.every((b, i) => b === node.payload[i]);
    node.value = value;
    node.payload = payload;
    return !same;
  }

  #compute(node) {
    const seen = new Set();
    const outer = this.tracking;
    this.tracking = seen;
    let value;
    try {
      value = node.fn();
    } finally {
      this.tracking = outer;
    }
    const before = node.sources;
    node.sources = seen;
    const edgesChanged = before.size !== seen.size || [...seen].some((s) => !before.has(s));
    if (edgesChanged && this.pending.get(node.id) !== "add") {
      this.pending.set(node.id, this.pending.get(node.id) ?? "set");
      node.edgesBefore = node.edgesBefore ?? before;
    }
    return this.#encodeInto(node, value);
  }

  assign(node, value) {
    if (this.#encodeInto(node, value)) this.#mark(node.id, "set");
  }

  #mark(nid, kind) {
    if (this.pending.get(nid) !== "add") this.pending.set(nid, kind);
    if (this.depth > 0 || this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => this.flush());
  }

  /** Run `fn` with every change inside it flushed as one change set. */
  batch(fn) {
    this.depth += 1;
    try {
      return fn();
    } finally {
      this.depth -= 1;
      if (this.depth === 0) this.flush();
    }
  }

  /** Recompute derived values (creation order is dependency order) and emit one change set. */
  flush() {
    this.scheduled = false;
    if (this.pending.size === 0) return;
    const changed = new Set(this.pending.keys());
    for (const node of this.nodes.values()) {
      if (!node.derived) continue;
      if ([...node.sources].some((s) => changed.has(s))) {
        if (this.#compute(node)) {
          this.pending.set(node.id, this.pending.get(node.id) ?? "set");
          changed.add(node.id);
        }
      }
    }
    const ops = [];
    for (const [nid, kind] of this.pending) {
      const node = this.nodes.get(nid);
      if (kind === "add") {
        node.edgesBefore = undefined;
        ops.push({ op: "node_add", slot_id: nid, type_tag: node.tag, payload: toBase64(node.payload), ...(node.key ? { key: node.key } : {}) });
        for (const s of node.sources) ops.push({ op: "edge_add", dependent: nid, dependency: s });
        continue;
      }
      const before = node.edgesBefore;
      node.edgesBefore = undefined;
      if (before) {
        for (const s of before) if (!node.sources.has(s)) ops.push({ op: "edge_remove", dependent: nid, dependency: s });
        for (const s of node.sources) if (!before.has(s)) ops.push({ op: "edge_add", dependent: nid, dependency: s });
      }
      ops.push({ op: node.derived ? "slot_value" : "cell_set", slot_id: nid, payload: toBase64(node.payload) });
    }
    this.pending.clear();
    this.epoch += 1;
    for (const fn of [...this.listeners]) fn(this.epoch - 1, this.epoch, ops);
  }

  subscribe(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  snapshot() {
    if (this.pending.size > 0) this.flush();
    const nodes = [];
    const edges = [];
    const roots = [];
    for (const node of this.nodes.values()) {
      nodes.push({ slot_id: node.id, type_tag: node.tag, state: "resolved", payload: toBase64(node.payload), ...(node.key ? { key: node.key } : {}) });
      for (const s of node.sources) edges.push({ dependent: node.id, dependency: s });
      if (!node.derived) roots.push(node.id);
    }
    return { type: "snapshot", epoch: this.epoch, nodes, edges, roots };
  }

  /** A subscriber's `cell_set`: decoded with the cell's tag and set; throws if it is not a cell. */
  applyWrite(nid, bytes) {
    const node = this.nodes.get(nid);
    if (!node || node.derived) throw fail(errors.Forbidden, `node ${nid} is not a writable cell`, "slot_id");
    const value = this.registry.decode(node.tag, bytes);
    this.assign(node, value);
    return value;
  }
}

/**
 * Serves a Store as a stream: a snapshot on every (re)connect, one delta per flush. Writes from
 * subscribers are applied to cells unless `accept(id, value)` returns false. Events: "error",
 * "status", "write" ({id, value}). `ready` resolves once the first snapshot is sent (the hub
 * does not acknowledge frames, it refuses them: an "error" event) and rejects when the
 * handshake is refused (a second producer on a stream: ForbiddenPublish); a refused producer
 * stops with status "failed".
 */
export class Publication extends Channel {
  constructor(client, stream, store, { accept } = {}) {
    super(client, stream, true);
    this.store = store;
    this.accept = accept ?? (() => true);
    this.deltasSent = 0;
    this.unsubscribe = store.subscribe((base, epoch, ops) => this.#delta(base, epoch, ops));
    let resolve, reject;
    this.ready = new Promise((res, rej) => ((resolve = res), (reject = rej)));
    this.ready.catch(() => {});
    this.resolveReady = resolve;
    this.rejectReady = reject;
  }

  opened() {
    try {
      this.snapshotting = true; // changes flushed into this snapshot are not sent as a delta
      this.send(this.store.snapshot());
    } catch (err) {
      this.report(err);
      return;
    } finally {
      this.snapshotting = false;
    }
    this.resolveReady(this);
  }

  #delta(base, epoch, ops) {
    if (this.status !== "open" || this.snapshotting) return; // a snapshot carries it
    try {
      this.send({ type: "delta", base_epoch: base, epoch, ops });
      this.deltasSent += 1;
    } catch (err) {
      this.report(err);
    }
  }

  received(text) {
    const msg = this.decoded(text);
    if (msg === null) return;
    if (msg.type === "error") {
      this.report(msg.error);
      if (FATAL_CODES.has(msg.error.code)) this.failWith(null);
      else if (["EpochGap", "SnapshotRequired", "Desync", "RemoteProtocolError"].includes(msg.error.code)) this.opened();
      return;
    }
    if (msg.type === "remote_op") {
      this.#take(msg);
      return;
    }
    if (msg.type !== "delta") {
      this.report(fail(errors.RemoteProtocolError, `a producer does not expect ${msg.type}`, "$.type"));
      return;
    }
    for (const op of msg.ops) {
      if (op.op !== "cell_set") continue;
      try {
        const node = this.store.nodes.get(op.id);
        const value = node ? this.store.registry.decode(node.tag, op.payload) : undefined;
        if (!node || node.derived) throw fail(errors.Forbidden, `node ${op.id} is not a writable cell`, "slot_id");
        if (!this.accept(op.id, value)) continue;
        this.store.applyWrite(op.id, op.payload);
        this.emit("write", { id: op.id, value });
      } catch (err) {
        this.report(err);
      }
    }
  }

  // A writer's request, stamped by the server with who asked (`writer`: {peer, subject});
  // answered to that writer alone: applied, or the typed refusal.
  #take(msg) {
    let error = null;
    try {
      if (msg.kind !== "write") throw fail(errors.Forbidden, `node ${msg.node} is not an effect this producer runs`, "node");
      const node = this.store.nodes.get(msg.node);
      if (!node || node.derived) throw fail(errors.Forbidden, `node ${msg.node} is not a writable cell`, "node");
      const value = this.store.registry.decode(node.tag, msg.payload);
      if (!this.accept(msg.node, value, msg.writer)) throw fail(errors.Forbidden, `the producer refused the write to node ${msg.node}`, "node");
      this.store.applyWrite(msg.node, msg.payload);
      this.emit("write", { id: msg.node, value, writer: msg.writer });
    } catch (err) {
      error = err instanceof OctosyncError ? err : fail(errors.Forbidden, String(err?.message ?? err), "node");
      this.report(error);
    }
    if (!msg.request && !error) return;
    const answer = { type: "remote_op_result", request: msg.request, peer: msg.writer.peer };
    if (error) Object.assign(answer, { error: error.code, message: error.message.slice(0, 1024) });
    // After the store's flush (a microtask queued before this one): the delta that carries
    // the write goes out first, so the writer's state has it when its write resolves.
    queueMicrotask(() => {
      try {
        this.send(answer);
      } catch (err) {
        this.report(err);
      }
    });
  }

  ended(err) {
    this.unsubscribe();
    this.rejectReady(err ?? fail(errors.ConnectionLost, "the publication was closed"));
  }
}

// --- shared documents (multi-writer streams) --------------------------------------------------------

// A shared document is a multi-writer stream (the CRDT cell plane, feature "distributed_crdt").
// Every value is a set of last-writer-wins entries stamped (wall_time, logical, peer), the same
// layout as octosync/crdt/shared.py, so Python, JS and lazily-spec replicas converge alike:
//   NAME/lww (register), NAME/pn/PEER ([p, n] tallies of one peer: a counter), NAME/mv/PEER
//   ([value, version vector]: a multi-value register), NAME/map/FIELD ([value] or [] deleted).
// Edits apply at once and stay pending until the server echoes them, which it does only once
// its journal committed them; pending edits are sent again on every reconnect.

const PLANE_FEATURE = "distributed_crdt";
const FNV64_OFFSET = 0xcbf29ce484222325n;
const FNV64_PRIME = 0x100000001b3n;
const MASK64 = (1n << 64n) - 1n;
const DOC_KINDS = new Set(["lww", "pn", "mv", "map", "lp", "lv", "ld"]);
const FRAME_OPS = 500; // ops per crdt_sync frame this client sends, at most

/** The node id every replica gives to a value's entries (low 48 bits of FNV-1a-64, UTF-8). */
export function nodeOf(name) {
  let h = FNV64_OFFSET;
  for (const byte of utf8.encode(name)) h = ((h ^ BigInt(byte)) * FNV64_PRIME) & MASK64;
  return Number(h & ((1n << 48n) - 1n));
}

function stampAbove(a, b) {
  if (a.wall_time !== b.wall_time) return a.wall_time > b.wall_time;
  if (a.logical !== b.logical) return a.logical > b.logical;
  return a.peer > b.peer;
}

function bytesAbove(a, b) {
  for (let i = 0; i < Math.min(a.length, b.length); i += 1) if (a[i] !== b[i]) return a[i] > b[i];
  return a.length > b.length;
}

function sameStamp(a, b) {
  return a.wall_time === b.wall_time && a.logical === b.logical && a.peer === b.peer;
}

function newPeerId() {
  const words = new Uint32Array(2);
  globalThis.crypto.getRandomValues(words);
  return (words[0] % 2 ** 21) * 2 ** 32 + words[1] + 1; // 1 .. 2^53 - 1
}

function checkName(name, what = "name") {
  if (typeof name !== "string" || name.length < 1 || name.length > 256 || name.includes("/")) {
    throw fail(errors.CrdtValueError, `${what} ${JSON.stringify(name)} must be 1 to 256 characters without '/'`, what);
  }
}

function parseState(op) {
  try {
    return { ok: true, value: JSON.parse(utf8Strict.decode(op.bytes)) };
  } catch {
    return { ok: false };
  }
}

/** One value of a shared document: `value`, its writes (`add`, `set`, `delete`), "change" events. */
export class SharedValue extends Emitter {
  constructor(doc, name, kind) {
    super();
    this.doc = doc;
    this.name = name;
    this.kind = kind;
    this.value = doc.read(name, kind);
    this.seen = sortedJson(this.value);
  }

  #need(kind, method) {
    if (this.kind !== kind) throw fail(errors.CrdtValueError, `${method} is not an operation of ${JSON.stringify(this.name)}, a ${this.kind} value`, "kind");
  }

  /** Counter: add `amount` (negative subtracts). */
  add(amount = 1) {
    this.#need("pn", "add");
    if (!Number.isSafeInteger(amount)) throw fail(errors.CrdtValueError, `a counter adds integers, not ${amount}`, "amount");
    const [p, n] = this.doc.tally(this.name);
    this.doc.write(this.name, `pn/${this.doc.peer}`, amount >= 0 ? [p + amount, n] : [p, n - amount]);
  }

  /** Register: `set(value)`; map: `set(field, value)`. */
  set(...args) {
    if (this.kind === "map" && args.length === 2) {
      checkName(args[0], "field");
      this.doc.write(this.name, `map/${args[0]}`, [args[1]]);
    } else if (this.kind === "lww" && args.length === 1) {
      this.doc.write(this.name, "lww", args[0]);
    } else if (this.kind === "mv" && args.length === 1) {
      this.doc.write(this.name, `mv/${this.doc.peer}`, [args[0], this.doc.versionAfter(this.name)]);
    } else {
      throw fail(errors.CrdtValueError, `set(${args.length} arguments) does not fit a ${this.kind} value`, "set");
    }
  }

  /** Map: delete `field`. */
  delete(field) {
    this.#need("map", "delete");
    checkName(field, "field");
    this.doc.write(this.name, `map/${field}`, []);
  }

  /** Call `fn(value)` now and after every change (Python: `on_change`). */
  onChange(fn) {
    fn(this.value);
    return this.on("change", fn);
  }

  refresh() {
    const value = this.doc.read(this.name, this.kind);
    const text = sortedJson(value);
    if (text === this.seen) return; // the equality guard: an equal value notifies nobody
    this.value = value;
    this.seen = text;
    this.emit("change", value);
  }
}

// --- lists: the move-aware sequence (octosync.crdt.seq; the same positions, ids and entries) ----

const POS_BASE = 2 ** 32;
const POS_STEP = 2 ** 16;
const POS_MAX_DIGITS = 32;

function comparePositions(a, b) {
  for (let i = 0; i < Math.min(a.length, b.length); i += 1) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return a.length - b.length;
}

/** A position after `lo` and before `hi` (null: the start or end), as octosync.crdt.seq.between. */
export function positionBetween(lo, hi) {
  lo = lo ?? [];
  if (hi !== null && comparePositions(lo, hi) >= 0) throw fail(errors.CrdtValueError, `no position between ${JSON.stringify(lo)} and ${JSON.stringify(hi)}`, "position");
  const out = [];
  for (let i = 0; out.length < POS_MAX_DIGITS; i += 1) {
    const loOpen = i >= lo.length;
    const low = loOpen ? 0 : lo[i];
    const high = hi === null ? POS_BASE : i < hi.length ? hi[i] : 0;
    const gap = high - low;
    if (gap >= 2) {
      const step = Math.min(Math.floor(gap / 2), POS_STEP);
      if (loOpen && hi === null) out.push(low + Math.floor(gap / 2));
      else if (loOpen) out.push(high - step);
      else out.push(low + step);
      return out;
    }
    out.push(low);
    if (gap === 1) hi = null; // anything that starts with `out` is below `hi` now
  }
  throw fail(errors.LimitExceeded, `no room for a position of at most ${POS_MAX_DIGITS} digits`, "position");
}

/** The position `peer` gives an element between `lo` and `hi`: `positionBetween`, then the peer's two digits. */
export function placePosition(lo, hi, peer) {
  const out = [...positionBetween(lo, hi), Math.floor(peer / 2 ** 31), (peer % 2 ** 31) * 2 + 1];
  if (out.length > POS_MAX_DIGITS) throw fail(errors.LimitExceeded, `no room for a position of at most ${POS_MAX_DIGITS} digits`, "position");
  return out;
}

function isPosition(value) {
  return Array.isArray(value) && value.length > 0 && value.length <= POS_MAX_DIGITS && value.every((d) => Number.isInteger(d) && d >= 0 && d < POS_BASE) && value[value.length - 1] > 0;
}

function compareElements(a, b) {
  return comparePositions(a.position, b.position) || a.peer - b.peer || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** keptInOrder, with one moved element found as octosync.crdt.seq._stayed finds it: none, the first, or the last. */
function stayed(seq) {
  const ascending = (from, to) => {
    for (let i = from + 1; i < to; i += 1) if (seq[i - 1] > seq[i]) return false;
    return true;
  };
  const all = (from, to) => new Set(Array.from({ length: to - from }, (_, i) => from + i));
  if (ascending(0, seq.length)) return all(0, seq.length);
  if (ascending(1, seq.length)) return all(1, seq.length);
  if (ascending(0, seq.length - 1)) return all(0, seq.length - 1);
  return keptInOrder(seq);
}

/** Indexes into `seq` of one longest increasing run: the elements that stayed while others moved. */
function keptInOrder(seq) {
  const tails = [];
  const prev = new Array(seq.length).fill(-1);
  seq.forEach((x, i) => {
    let lo = 0;
    let hi = tails.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (seq[tails[mid]] < x) lo = mid + 1;
      else hi = mid;
    }
    prev[i] = lo ? tails[lo - 1] : -1;
    tails[lo] = i;
  });
  const kept = new Set();
  for (let k = tails.length ? tails[tails.length - 1] : -1; k >= 0; k = prev[k]) kept.add(k);
  return kept;
}

/** What moved between two orders of [id, value]: as octosync.crdt.seq.diff (the same trimming and run). */
export function listChange(before, after) {
  const same = (a, b) => a === b || sortedJson(a) === sortedJson(b);
  const equal = (x, y) => x[0] === y[0] && same(x[1], y[1]);
  const n = Math.min(before.length, after.length);
  let head = 0; // the pairs both start with, unchanged
  while (head < n && equal(before[head], after[head])) head += 1;
  let tail = 0;
  while (tail < n - head && equal(before[before.length - 1 - tail], after[after.length - 1 - tail])) tail += 1;
  const oldAt = new Map();
  for (let i = head; i < before.length - tail; i += 1) oldAt.set(before[i][0], i);
  const newAt = new Map();
  for (let i = head; i < after.length - tail; i += 1) newAt.set(after[i][0], i);
  const common = [...oldAt.keys()].filter((id) => newAt.has(id));
  const kept = new Set([...stayed(common.map((id) => newAt.get(id)))].map((i) => common[i]));
  const pairs = common.map((id) => [oldAt.get(id), newAt.get(id)]).sort((a, b) => a[1] - b[1]);
  return {
    inserted: [...newAt].filter(([id]) => !oldAt.has(id)).map(([, index]) => ({ index, value: after[index][1] })),
    deleted: [...oldAt].filter(([id]) => !newAt.has(id)).map(([, index]) => ({ index, value: before[index][1] })),
    moved: common.filter((id) => !kept.has(id)).map((id) => ({ from: oldAt.get(id), to: newAt.get(id), value: after[newAt.get(id)][1] })),
    set: pairs.filter(([i, j]) => !same(before[i][1], after[j][1])).map(([, j]) => ({ index: j, value: after[j][1] })),
  };
}

/** What listChange reports when one element changed: it was at `oldAt` of `before` (or absent,
 * null) and is at `newAt` with `value` (or gone), every other element unmoved. Found from the
 * change alone (as octosync.crdt.seq.one_change). */
export function oneChange(before, oldAt, newAt, value) {
  const none = { inserted: [], deleted: [], moved: [], set: [] };
  if (oldAt === null) return newAt === null ? none : { ...none, inserted: [{ index: newAt, value }] };
  const oldValue = before[oldAt][1];
  if (newAt === null) return { ...none, deleted: [{ index: oldAt, value: oldValue }] };
  const same = oldValue === value || sortedJson(oldValue) === sortedJson(value);
  const set = same ? [] : [{ index: newAt, value }];
  if (oldAt === newAt) return { ...none, set };
  if (newAt === oldAt - 1) {
    // two neighbours swapped: listChange reports the one the element passed as moved
    return { ...none, moved: [{ from: newAt, to: oldAt, value: before[newAt][1] }], set };
  }
  return { ...none, moved: [{ from: oldAt, to: newAt, value }], set };
}

function checkIndex(index, size, what = "index") {
  if (!Number.isInteger(index) || index < 0 || index >= size) throw fail(errors.CrdtValueError, `${what} ${index} is outside the list (0 to ${size - 1})`, what);
}

/** One list's registers, decoded as their entries change, its live elements kept in order (as octosync.crdt.shared). */
/** A `NAME/gc` entry's watermark: Map(peer -> {wall_time, logical}), or null if unreadable. */
function watermarkOf(op) {
  const parsed = parseState(op);
  if (!parsed.ok || !Array.isArray(parsed.value)) return null;
  const mark = new Map();
  for (const item of parsed.value) {
    if (!Array.isArray(item) || item.length !== 3 || !item.every(Number.isSafeInteger)) return null;
    mark.set(item[0], { wall_time: item[1], logical: item[2] });
  }
  return mark;
}

/** The stamp a list element id (`PEER.WALL.LOGICAL`) was minted with, or null. */
function mintStamp(element) {
  const parts = element.split(".");
  if (parts.length !== 3 || !parts.every((p) => /^[0-9]+$/.test(p))) return null;
  return { peer: Number(parts[0]), wall_time: Number(parts[1]), logical: Number(parts[2]) };
}

/** Every member had seen `stamp`: the watermark for its peer is at or past it. */
function covers(mark, stamp) {
  const seen = mark.get(stamp.peer);
  if (!seen) return false;
  return stamp.wall_time < seen.wall_time || (stamp.wall_time === seen.wall_time && stamp.logical <= seen.logical);
}

class ListRegisters {
  constructor() {
    this.positions = new Map(); // id -> {position, peer}
    this.values = new Map(); // id -> value
    this.removed = new Set();
    this.ordered = []; // {id, position, peer, value}
    this.live = new Map(); // id -> its element in ordered
    this.changed = 0; // elements placed, removed or given a value since the last takeChange
    this.last = null; // the latest of those: [id, old index, old value, new index, new value]
  }

  /** One register back to absent (a refused local write undone). */
  dropRegister(tag, id) {
    if (tag === "lp") this.positions.delete(id);
    else if (tag === "lv") this.values.delete(id);
    else this.removed.delete(id);
    this.#place(id);
  }

  /** A collected element: out of every register (out of the order, if it was in). */
  forget(id) {
    this.positions.delete(id);
    this.values.delete(id);
    this.removed.delete(id);
    this.#place(id);
  }

  takeChange() {
    const out = [this.changed, this.last];
    this.changed = 0;
    this.last = null;
    return out;
  }

  take(tag, id, op) {
    const parsed = parseState(op);
    if (tag === "ld") {
      if (parsed.ok && parsed.value === true) this.removed.add(id);
      else this.removed.delete(id);
    } else if (tag === "lp") {
      if (parsed.ok && isPosition(parsed.value)) this.positions.set(id, { position: parsed.value, peer: op.stamp.peer });
      else this.positions.delete(id);
    } else if (parsed.ok) this.values.set(id, parsed.value);
    else this.values.delete(id);
    this.#place(id);
  }

  #find(key) {
    let lo = 0;
    let hi = this.ordered.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (compareElements(this.ordered[mid], key) < 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  #place(id) {
    const was = this.live.get(id);
    let oldAt = null;
    if (was) {
      oldAt = this.#find(was);
      this.ordered.splice(oldAt, 1); // keys are unique: it is the one found
      this.live.delete(id);
    }
    const placed = this.positions.get(id);
    if (!placed || !this.values.has(id) || this.removed.has(id)) {
      if (was) {
        this.changed += 1;
        this.last = [id, oldAt, was.value, null, null];
      }
      return;
    }
    const element = { id, position: placed.position, peer: placed.peer, value: this.values.get(id) };
    const at = this.#find(element);
    this.ordered.splice(at, 0, element);
    this.live.set(id, element);
    this.changed += 1;
    this.last = [id, oldAt, was ? was.value : null, at, element.value];
  }
}

/**
 * A list of a shared document: `insert(index, value)`, `push`, `move(from, to)`, `delete(index)`,
 * `set(index, value)`, `length`, `at(index)`, iteration; `onChange(fn(values))`, and "edit" events
 * saying what was inserted, deleted, moved and set (`onEdit`). Same entries as the Python client.
 */
export class SharedList extends Emitter {
  constructor(doc, name) {
    super();
    this.doc = doc;
    this.name = name;
    this.kind = "list";
    doc.takeListChange(name);
    this.items = doc.listElements(name).map((e) => [e.id, e.value]); // as last reported
    this.value = this.items.map(([, v]) => v);
  }

  get length() {
    return this.value.length;
  }

  at(index) {
    return this.value.at(index);
  }

  [Symbol.iterator]() {
    return this.value[Symbol.iterator]();
  }

  #neighbours(live, index) {
    return this.#between(index > 0 ? live[index - 1] : null, index < live.length ? live[index] : null);
  }

  #between(lo, hi) {
    const low = lo ? lo.position : null;
    let high = hi ? hi.position : null;
    if (low && high && comparePositions(low, high) >= 0) high = null; // no room between equal positions
    return placePosition(low, high, this.doc.peer);
  }

  /** Insert `value` so that it is at `index` (0 to length). */
  insert(index, value) {
    const live = this.doc.listOrdered(this.name);
    checkIndex(index, live.length + 1);
    const position = this.#neighbours(live, index);
    this.doc.writeStamped(this.name, (stamp) => {
      const id = `${stamp.peer}.${stamp.wall_time}.${stamp.logical}`;
      return [[`lv/${id}`, value], [`lp/${id}`, position]];
    });
  }

  /** Append `value`. */
  push(value) {
    this.insert(this.length, value);
  }

  /** Move the element at `from` so that it is at `to`. */
  move(from, to) {
    const live = this.doc.listOrdered(this.name);
    checkIndex(from, live.length, "from");
    checkIndex(to, live.length, "to");
    if (from === to) return;
    const moving = live[from];
    // its neighbours once it is out of the list, no copy made
    const lo = to > from ? live[to] : to > 0 ? live[to - 1] : null;
    const hi = to > from ? (to + 1 < live.length ? live[to + 1] : null) : live[to];
    this.doc.write(this.name, `lp/${moving.id}`, this.#between(lo, hi));
  }

  /** Remove the element at `index`. */
  delete(index) {
    const live = this.doc.listOrdered(this.name);
    checkIndex(index, live.length);
    this.doc.write(this.name, `ld/${live[index].id}`, true);
  }

  /** Replace the value at `index`. */
  set(index, value) {
    const live = this.doc.listOrdered(this.name);
    checkIndex(index, live.length);
    this.doc.write(this.name, `lv/${live[index].id}`, value);
  }

  /** Call `fn(values)` now and after every change. */
  onChange(fn) {
    fn(this.value);
    return this.on("change", fn);
  }

  /** Call `fn({inserted, deleted, moved, set})` after every change. */
  onEdit(fn) {
    return this.on("edit", fn);
  }

  refresh() {
    const [count, last] = this.doc.takeListChange(this.name);
    if (count === 0) return;
    let change;
    if (count === 1 && last) {
      // one element changed: the change says what, and the reported pairs follow it in place
      const [id, oldAt, , newAt, value] = last;
      change = oneChange(this.items, oldAt, newAt, value);
      if (oldAt !== null) this.items.splice(oldAt, 1);
      if (newAt !== null) this.items.splice(newAt, 0, [id, value]);
    } else {
      const items = this.doc.listElements(this.name).map((e) => [e.id, e.value]);
      change = listChange(this.items, items);
      this.items = items;
    }
    if (!change.inserted.length && !change.deleted.length && !change.moved.length && !change.set.length) return;
    this.value = this.items.map(([, v]) => v);
    this.emit("change", this.value);
    this.emit("edit", change);
  }
}

// --- presence and awareness (octosync.hub.presence: kept by the server, never journaled) -----------

const EPHEMERAL_KINDS = new Set(["pr", "aw"]);

/**
 * Every peer's presence (`doc.presence`: alive while its connection is) or awareness value
 * (`doc.awareness(name)`: each peer's latest, until the server's TTL): `set(value)`, `clear()`,
 * `all`, `others` and `mine` (objects by peer id), `onChange(fn(all))`. Same entries as Python.
 */
export class SharedPresence extends Emitter {
  constructor(doc, name, kind) {
    super();
    this.doc = doc;
    this.name = name;
    this.kind = kind;
    this.wanted = null; // what this replica last set: sent again on reconnect and heartbeat
    this.all = doc.peers(name, kind);
    this.seen = sortedJson(this.all);
  }

  /** Set this replica's value (`null` clears it). */
  set(value) {
    this.wanted = value ?? null;
    this.doc.writeEphemeral(this.name, this.kind, this.wanted);
  }

  clear() {
    this.set(null);
  }

  get others() {
    const me = String(this.doc.peer);
    return Object.fromEntries(Object.entries(this.all).filter(([peer]) => peer !== me));
  }

  get mine() {
    return this.all[String(this.doc.peer)] ?? null;
  }

  /** Call `fn(all)` now and after every change. */
  onChange(fn) {
    fn(this.all);
    return this.on("change", fn);
  }

  refresh() {
    const all = this.doc.peers(this.name, this.kind);
    const text = sortedJson(all);
    if (text === this.seen) return;
    this.all = all;
    this.seen = text;
    this.emit("change", all);
  }
}

/**
 * One replica of a multi-writer stream, over a reconnecting WebSocket. `counter`, `register`,
 * `multi` and `map` give its values; `pending` counts unacknowledged edits; `synced()` waits for
 * none. Events: "change" (names changed), "error", "status".
 */
const PENDING_DB = "octosync-pending";

export class SharedDocument extends Channel {
  constructor(client, name, options = {}) {
    super(client, name, false);
    this.peer = options.peer ?? newPeerId();
    this.clock = options.clock ?? (() => Date.now());
    this.entries = new Map(); // "node key" -> op {slot_id, key, stamp, bytes}
    this.byName = new Map(); // name -> Map(rest -> op)
    this.values = new Map(); // name -> SharedValue (or SharedText, SharedList)
    this.texts = new Map(); // name -> TextEntries: each text's replica, fed as its entries arrive
    this.ephemeral = new Map(); // name -> Map("pr/PEER" | "aw/PEER" -> op): presence and awareness
    this.presences = new Map(); // "kind name" -> SharedPresence
    this.lists = new Map(); // name -> ListRegisters
    this.heartbeat = (options.heartbeat ?? 10) * 1000; // ms between resends of presence and awareness
    this.beating = null;
    this.pendingOps = new Map(); // "node key" -> op
    this.outbox = [];
    this.flushDue = false;
    this.joined = false;
    this.wall = 0;
    this.logical = 0;
    this.waiters = [];
    // what this replica has seen, reported to the server so it can collect list tombstones once
    // every writer has seen them (docs/crdt.md, "Tombstones")
    this.seen = new Map(); // peer -> the highest stamp held from it
    this.reportEvery = options.reportEvery ?? 1000; // ms between two reports at most
    this.reportTimer = null;
    this.reported = 0;
    this.snapshot = null; // entry ids of the whole document while it arrives after joining
    // after a refused frame: pending edits go one at a time, each acknowledged or refused
    // before the next, so a refusal names its edit; `held` is the server's entries meanwhile
    this.careful = false;
    this.probe = null;
    this.held = new Map();
    // persist: pending edits kept in IndexedDB, taken up again by the next page that opens this
    // document (its peer id with them: the server takes a peer's ops from that peer only).
    this.persist = options.persist === true && typeof indexedDB !== "undefined" && Boolean(globalThis.navigator?.locks);
    this.restoring = this.persist;
    this.ready = this.persist ? new Promise((resolve) => (this.restored = resolve)) : Promise.resolve(this);
    this.saveDue = false;
    this.releaseLock = null;
    this.db = null;
  }

  start() {
    if (!this.persist) return super.start();
    this.#restore()
      .catch((err) => this.report(fail(errors.StorageError, `pending edits could not be restored: ${err?.message ?? err}`)))
      .finally(() => {
        this.restoring = false;
        this.restored(this);
        if (!this.closed) super.start();
      });
  }

  hello() {
    return { ...handshake(this.stream, false, this.client.maxFrameSize), peer_id: this.peer, features: [PLANE_FEATURE] };
  }

  // A page's own peer id, held by a Web Lock while it is open: another tab of the same document
  // takes over a saved peer only once nobody holds it, and otherwise draws its own.
  async #restore() {
    const open = indexedDB.open(PENDING_DB, 1);
    open.onupgradeneeded = () => open.result.createObjectStore("pending", { keyPath: "id" });
    this.db = await idbRequest(open);
    const saved = await idbRequest(this.db.transaction("pending").objectStore("pending").getAll());
    for (const record of saved.filter((r) => r.doc === this.stream)) {
      if (await this.#lock(record.peer)) {
        this.peer = record.peer;
        const names = new Set();
        for (const raw of record.ops) {
          const op = { slot_id: raw.slot_id, key: raw.key, stamp: raw.stamp, bytes: Uint8Array.from(raw.bytes) };
          const name = this.#apply(op);
          if (name !== null) names.add(name);
          this.pendingOps.set(`${op.slot_id} ${op.key ?? ""}`, op);
        }
        for (const name of names) this.values.get(name)?.refresh();
        if (names.size) this.emit("change", [...names]);
        return;
      }
    }
    await this.#lock(this.peer);
  }

  #lock(peer) {
    return new Promise((acquired) => {
      navigator.locks
        .request(`octosync-doc:${this.stream}:${peer}`, { ifAvailable: true }, (lock) => {
          acquired(lock !== null);
          return lock === null ? null : new Promise((release) => (this.releaseLock = release));
        })
        .catch(() => acquired(false));
    });
  }

  #saveSoon() {
    if (!this.db || this.saveDue) return;
    this.saveDue = true;
    queueMicrotask(() => {
      this.saveDue = false;
      const store = this.db.transaction("pending", "readwrite").objectStore("pending");
      const id = `${this.stream}|${this.peer}`;
      if (this.pendingOps.size === 0) {
        store.delete(id);
        return;
      }
      const ops = [...this.pendingOps.values()].map((op) => ({ slot_id: op.slot_id, key: op.key, stamp: op.stamp, bytes: Array.from(op.bytes) }));
      store.put({ id, doc: this.stream, peer: this.peer, ops });
    });
  }

  ended() {
    this.releaseLock?.();
    this.releaseLock = null;
    if (this.beating !== null) clearInterval(this.beating);
    this.beating = null;
  }

  get pending() {
    return this.pendingOps.size;
  }

  counter(name) {
    return this.#value(name, "pn");
  }

  register(name) {
    return this.#value(name, "lww");
  }

  multi(name) {
    return this.#value(name, "mv");
  }

  map(name) {
    return this.#value(name, "map");
  }

  /** Each connection's presence: see SharedPresence. */
  get presence() {
    return this.#presence("presence", "pr");
  }

  /** An awareness value such as a cursor: see SharedPresence. */
  awareness(name) {
    return this.#presence(name, "aw");
  }

  #presence(name, kind) {
    checkName(name);
    const id = `${kind} ${name}`;
    if (!this.presences.has(id)) this.presences.set(id, new SharedPresence(this, name, kind));
    return this.presences.get(id);
  }

  /** Each peer's live presence or awareness value `name` (by peer id, as the server last said). */
  peers(name, kind) {
    const out = {};
    const held = [...(this.ephemeral.get(name) ?? new Map()).entries()].filter(([rest]) => rest.startsWith(`${kind}/`));
    held.sort(([a], [b]) => Number(a.slice(3)) - Number(b.slice(3)));
    for (const [rest, op] of held) {
      const parsed = parseState(op);
      if (parsed.ok && parsed.value !== null) out[rest.slice(3)] = parsed.value;
    }
    return out;
  }

  /** Set this replica's presence or awareness value: sent when connected, never pending. */
  writeEphemeral(name, kind, value) {
    const op = { slot_id: nodeOf(name), key: `${name}/${kind}/${this.peer}`, stamp: this.#stamp(), bytes: utf8.encode(sortedJson(value)) };
    if (this.#apply(op) !== null) this.#refreshNames([name]);
    this.outbox.push(op);
    this.#flushSoon();
  }

  #resendEphemeral() {
    for (const p of this.presences.values()) if (p.wanted !== null) this.writeEphemeral(p.name, p.kind, p.wanted);
  }

  #refreshNames(names) {
    for (const name of names) {
      this.values.get(name)?.refresh();
      this.presences.get(`pr ${name}`)?.refresh();
      this.presences.get(`aw ${name}`)?.refresh();
    }
  }

  /** A list (the move-aware sequence): see SharedList. */
  list(name) {
    checkName(name);
    const known = this.values.get(name);
    if (known) {
      if (known.kind !== "list") throw fail(errors.CrdtValueError, `${JSON.stringify(name)} is a ${known.kind} value, not list`, "kind");
      return known;
    }
    const made = new SharedList(this, name);
    this.values.set(name, made);
    return made;
  }

  /** A shared text (a character CRDT): `insert`, `delete`, `toString`, `onChange(edits)`. */
  text(name) {
    checkName(name);
    const known = this.values.get(name);
    if (known) {
      if (known.kind !== "text") throw fail(errors.CrdtValueError, `${JSON.stringify(name)} is a ${known.kind} value, not text`, "kind");
      return known;
    }
    const made = new SharedText(this, name);
    this.values.set(name, made);
    return made;
  }

  textEntries(name) {
    if (!this.texts.has(name)) this.texts.set(name, new TextEntries(this.peer));
    return this.texts.get(name);
  }

  writeText(name, writes) {
    if (this.restoring) throw fail(errors.LocalProtocolError, "the document is taking up its saved edits: await doc.ready first", "ready");
    if (!writes.length) return;
    for (const [rest, json] of writes) {
      const op = { slot_id: nodeOf(name), key: `${name}/${rest}`, stamp: this.#stamp(), bytes: utf8.encode(json) };
      this.#apply(op, false); // the text already holds what it wrote
      this.pendingOps.set(`${op.slot_id} ${op.key}`, op);
      this.outbox.push(op);
    }
    this.#saveSoon();
    this.values.get(name)?.refresh();
    this.emit("change", [name]);
    this.#flushSoon();
  }

  /** Resolves once the server's state arrived and every local edit is acknowledged. */
  synced() {
    if (this.#isSynced()) return Promise.resolve(this);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  #isSynced() {
    return this.joined && this.status === "open" && this.pendingOps.size === 0;
  }

  #settle() {
    if (!this.#isSynced()) return;
    for (const resolve of this.waiters.splice(0)) resolve(this);
  }

  #value(name, kind) {
    checkName(name);
    const known = this.values.get(name);
    if (known) {
      if (known.kind !== kind) throw fail(errors.CrdtValueError, `${JSON.stringify(name)} is a ${known.kind} value, not ${kind}`, "kind");
      return known;
    }
    if (kind === "list") return this.list(name);
    const made = new SharedValue(this, name, kind);
    this.values.set(name, made);
    return made;
  }

  // --- the plane -------------------------------------------------------------------------------

  #stamp() {
    const wall = this.clock();
    if (wall > this.wall) {
      this.wall = wall;
      this.logical = 0;
    } else {
      this.logical += 1;
    }
    return { wall_time: this.wall, logical: this.logical, peer: this.peer };
  }

  #apply(op, feed = true) {
    const s = op.stamp;
    if (s.wall_time > this.wall || (s.wall_time === this.wall && s.logical > this.logical)) {
      this.wall = s.wall_time;
      this.logical = s.logical;
    }
    const parts = (op.key ?? "").split("/");
    if (parts.length === 3 && EPHEMERAL_KINDS.has(parts[1]) && op.slot_id === nodeOf(parts[0])) {
      // presence and awareness: the latest per peer, kept apart from the document's entries
      if (!this.ephemeral.has(parts[0])) this.ephemeral.set(parts[0], new Map());
      const held = this.ephemeral.get(parts[0]);
      const was = held.get(`${parts[1]}/${parts[2]}`);
      if (was && !stampAbove(op.stamp, was.stamp)) return null;
      held.set(`${parts[1]}/${parts[2]}`, op);
      return parts[0];
    }
    const seen = this.seen.get(s.peer);
    if (!seen || stampAbove(s, seen)) this.seen.set(s.peer, s);
    const id = `${op.slot_id} ${op.key ?? ""}`;
    const old = this.entries.get(id);
    if (old && !(stampAbove(op.stamp, old.stamp) || (sameStamp(op.stamp, old.stamp) && bytesAbove(op.bytes, old.bytes)))) return null;
    this.entries.set(id, op);
    const key = op.key ?? "";
    const slash = key.indexOf("/");
    if (slash < 0) return null;
    const name = key.slice(0, slash);
    const rest = key.slice(slash + 1);
    if (TEXT_TAGS.has(rest.split("/")[0]) && op.slot_id === nodeOf(name)) {
      const parsed = feed ? parseState(op) : { ok: false };
      // stamped by peer 0: the server's rewrite of a closed chunk (its tombstones collected)
      if (parsed.ok) this.textEntries(name).receive(rest, parsed.value, op.stamp.peer === 0);
      return name;
    }
    if (rest === "gc" && op.slot_id === nodeOf(name)) return this.#collect(name, op) ? name : null;
    if (!DOC_KINDS.has(rest.split("/")[0]) || op.slot_id !== nodeOf(name)) return null;
    if (!this.byName.has(name)) this.byName.set(name, new Map());
    this.byName.get(name).set(rest, op);
    const tag = rest.slice(0, 3);
    if (tag === "lp/" || tag === "lv/" || tag === "ld/") {
      if (!this.lists.has(name)) this.lists.set(name, new ListRegisters());
      this.lists.get(name).take(tag.slice(0, 2), rest.slice(3), op);
    }
    return name;
  }

  // --- collected list tombstones (crdt/collect.py) ------------------------------------------------

  /** Drop list `name`'s elements the server's watermark `gc` makes collectable; true if any went. */
  #collect(name, gc) {
    const mark = watermarkOf(gc);
    if (!mark) return false;
    const gone = [];
    for (const [rest, op] of this.byName.get(name) ?? []) {
      if (!rest.startsWith("ld/")) continue;
      const element = rest.slice(3);
      const minted = mintStamp(element);
      if (minted && covers(mark, minted) && covers(mark, op.stamp) && new TextDecoder().decode(op.bytes) === "true") gone.push(element);
    }
    for (const element of gone) this.#forget(name, element);
    return gone.length > 0;
  }

  #forget(name, element) {
    for (const tag of ["lp", "lv", "ld"]) {
      this.entries.delete(`${nodeOf(name)} ${name}/${tag}/${element}`);
      this.byName.get(name)?.delete(`${tag}/${element}`);
    }
    this.lists.get(name)?.forget(element);
  }

  /** After joining: elements held here, absent from the whole document, that a watermark covers were collected while away. */
  #retake(snapshot) {
    const changed = new Set();
    for (const [name, registers] of this.lists) {
      const gc = this.entries.get(`${nodeOf(name)} ${name}/gc`);
      const mark = gc ? watermarkOf(gc) : null;
      if (!mark) continue;
      const ids = new Set([...registers.positions.keys(), ...registers.values.keys(), ...registers.removed]);
      for (const element of ids) {
        const minted = mintStamp(element);
        if (!minted || !covers(mark, minted)) continue;
        if (["lp", "lv", "ld"].some((tag) => snapshot.has(`${nodeOf(name)} ${name}/${tag}/${element}`))) continue;
        this.#forget(name, element);
        changed.add(name);
        for (const tag of ["lp", "lv", "ld"]) {
          // an edit made while away of an element collected meanwhile: the server refuses it, so drop it
          const key = `${nodeOf(name)} ${name}/${tag}/${element}`;
          if (!this.pendingOps.delete(key)) continue;
          this.outbox = this.outbox.filter((op) => `${op.slot_id} ${op.key ?? ""}` !== key);
          this.#saveSoon();
          this.report(fail(errors.ElementCollected, `this edit of ${JSON.stringify(`${name}/${tag}/${element}`)} was dropped: the element was removed and collected while this replica was away`, "pending"));
        }
      }
    }
    return changed;
  }

  /** Report what this replica has seen, at most every `reportEvery` ms, after the ops it sent. */
  #reportSoon() {
    if (this.reportTimer !== null || !this.joined) return;
    const wait = Math.max(0, this.reported + this.reportEvery - Date.now());
    this.reportTimer = setTimeout(() => {
      this.reportTimer = null;
      if (this.closed || this.status !== "open" || this.ws?.readyState !== 1 || !this.joined) return;
      if (this.outbox.length) return this.#reportSoon(); // the ops go first
      this.reported = Date.now();
      const frontier = [...this.seen.entries()].sort(([a], [b]) => a - b);
      try {
        this.send({ type: "crdt_sync", frontier, ops: [] });
      } catch (err) {
        this.report(err);
      }
    }, wait);
  }

  write(name, rest, value) {
    this.writeStamped(name, () => [[rest, value]]);
  }

  /** Write entries of `name`, each with a fresh stamp (`entries(first)` gives [rest, value] pairs; `first` is the first's). */
  writeStamped(name, entries) {
    if (this.restoring) throw fail(errors.LocalProtocolError, "the document is taking up its saved edits: await doc.ready first", "ready");
    const first = this.#stamp();
    for (const [i, [rest, value]] of entries(first).entries()) {
      // each op its own stamp: a lazily plane replica takes one op per (node, stamp)
      const stamp = i === 0 ? first : this.#stamp();
      const op = { slot_id: nodeOf(name), key: `${name}/${rest}`, stamp, bytes: utf8.encode(sortedJson(value)) };
      this.#apply(op);
      this.pendingOps.set(`${op.slot_id} ${op.key}`, op);
      this.outbox.push(op);
    }
    this.#saveSoon();
    this.values.get(name)?.refresh();
    this.emit("change", [name]);
    this.#flushSoon();
  }

  /** A list's live elements in order: {id, position, peer, value} (see SharedList; a copy). */
  listElements(name) {
    return [...this.listOrdered(name)];
  }

  /** The list's live elements in order, not copied (read them, never change them). */
  listOrdered(name) {
    return this.lists.get(name)?.ordered ?? [];
  }

  /** [how many of list `name`'s elements changed since the last call, the latest change]. */
  takeListChange(name) {
    return this.lists.get(name)?.takeChange() ?? [0, null];
  }

  #flushSoon() {
    if (this.flushDue) return;
    this.flushDue = true;
    queueMicrotask(() => {
      this.flushDue = false;
      if (this.careful) {
        this.outbox.length = 0; // pending edits go singly (#probeNext); presence at the next heartbeat
        this.#probeNext();
        return;
      }
      if (this.status !== "open" || this.ws?.readyState !== 1 || this.outbox.length === 0) return; // sent on reconnect
      while (this.outbox.length) {
        // at most FRAME_OPS a frame (a long paste is many text chunks)
        const ops = this.outbox.splice(0, FRAME_OPS).map((op) => ({ slot_id: op.slot_id, stamp: op.stamp, state: toBase64(op.bytes), key: op.key }));
        try {
          this.send({ type: "crdt_sync", ops });
        } catch (err) {
          this.outbox.length = 0;
          this.report(err); // still pending: sent again on reconnect
        }
      }
    });
  }

  #entries(name, prefix) {
    const held = this.byName.get(name);
    if (!held) return [];
    return [...held.entries()].filter(([rest]) => rest.startsWith(prefix)).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  }

  tally(name) {
    const op = this.byName.get(name)?.get(`pn/${this.peer}`);
    const parsed = op ? parseState(op) : { ok: false };
    const [p, n] = parsed.ok && Array.isArray(parsed.value) ? parsed.value : [0, 0];
    return [Number.isSafeInteger(p) ? p : 0, Number.isSafeInteger(n) ? n : 0];
  }

  versionAfter(name) {
    const seen = {};
    for (const [, op] of this.#entries(name, "mv/")) {
      const parsed = parseState(op);
      if (!parsed.ok || !Array.isArray(parsed.value) || typeof parsed.value[1] !== "object") continue;
      for (const [peer, count] of Object.entries(parsed.value[1])) seen[peer] = Math.max(seen[peer] ?? 0, count);
    }
    const me = String(this.peer);
    seen[me] = (seen[me] ?? 0) + 1;
    return seen;
  }

  /** The value of `name` read as `kind` ("pn", "lww", "mv", "map" or "list"). */
  read(name, kind) {
    if (kind === "list") return this.listElements(name).map((e) => e.value);
    if (kind === "pn") {
      let total = 0;
      for (const [, op] of this.#entries(name, "pn/")) {
        const parsed = parseState(op);
        if (parsed.ok && Array.isArray(parsed.value) && parsed.value.length === 2) total += parsed.value[0] - parsed.value[1];
      }
      return total;
    }
    if (kind === "map") {
      const out = {};
      for (const [rest, op] of this.#entries(name, "map/")) {
        const parsed = parseState(op);
        if (parsed.ok && Array.isArray(parsed.value) && parsed.value.length === 1) out[rest.slice(4)] = parsed.value[0];
      }
      return out;
    }
    if (kind === "mv") {
      const held = [];
      for (const [, op] of this.#entries(name, "mv/")) {
        const parsed = parseState(op);
        if (parsed.ok && Array.isArray(parsed.value) && parsed.value[1] && typeof parsed.value[1] === "object") held.push({ op, value: parsed.value[0], vv: parsed.value[1] });
      }
      const dominated = (vv) => held.some((o) => sortedJson(o.vv) !== sortedJson(vv) && Object.entries(vv).every(([p, c]) => (o.vv[p] ?? 0) >= c));
      return held.filter((e) => !dominated(e.vv)).sort((a, b) => (stampAbove(a.op.stamp, b.op.stamp) ? 1 : -1)).map((e) => e.value);
    }
    const op = this.byName.get(name)?.get("lww");
    if (!op) return null;
    const parsed = parseState(op);
    return parsed.ok ? parsed.value : null;
  }

  // --- the channel's hooks ----------------------------------------------------------------------

  opened() {
    this.joined = false;
    this.snapshot = new Set();
    this.probe = null;
    this.held = new Map();
    this.outbox = [...this.pendingOps.values()].sort((a, b) => (stampAbove(a.stamp, b.stamp) ? 1 : -1));
    this.#resendEphemeral(); // the server dropped them when the last connection closed
    this.#flushSoon();
    if (this.beating === null) this.beating = setInterval(() => this.status === "open" && this.#resendEphemeral(), this.heartbeat);
  }

  received(text) {
    let doc;
    try {
      doc = JSON.parse(text);
    } catch {
      this.report(fail(errors.DecodeError, "a frame that is not JSON", "$"));
      return;
    }
    if (doc?.type === "error") {
      const err = errorFromFrame(doc);
      if ((err.path ?? "").startsWith("ops[")) {
        // one frame of this replica's edits refused: the probe's, or (several in flight) find
        // it by reconnecting and sending them one at a time
        if (this.probe) this.#drop(this.probe, err);
        else {
          this.careful = true;
          this.ws?.close();
        }
        return;
      }
      this.report(err);
      if (FATAL_CODES.has(err.code)) this.failWith(null);
      return;
    }
    if (doc?.type !== "crdt_sync") {
      this.report(fail(errors.RemoteProtocolError, `a shared document does not expect ${doc?.type}`, "$.type"));
      return;
    }
    const changed = new Set();
    for (const [i, raw] of (doc.ops ?? []).entries()) {
      let op;
      try {
        op = { slot_id: id(raw.slot_id, `ops[${i}].slot_id`), key: raw.key ?? null, stamp: raw.stamp, bytes: fromBase64(raw.state, `ops[${i}].state`) };
      } catch (err) {
        this.report(err);
        continue;
      }
      const name = this.#apply(op);
      if (name !== null) changed.add(name);
      this.snapshot?.add(`${op.slot_id} ${op.key ?? ""}`);
      if (this.careful) this.held.set(`${op.slot_id} ${op.key ?? ""}`, op);
      if (op.stamp.peer === this.peer) {
        const mine = this.pendingOps.get(`${op.slot_id} ${op.key ?? ""}`);
        if (mine && !stampAbove(mine.stamp, op.stamp)) {
          this.pendingOps.delete(`${op.slot_id} ${op.key ?? ""}`);
          this.#saveSoon();
        }
      }
    }
    if (doc.frontier !== undefined) {
      this.joined = true; // the last frame of the document sent at joining
      if (this.snapshot) for (const name of this.#retake(this.snapshot)) changed.add(name);
      this.snapshot = null;
    }
    this.#reportSoon();
    this.#refreshNames(changed);
    if (changed.size) this.emit("change", [...changed]);
    const probe = this.probe;
    if (probe && this.pendingOps.get(`${probe.slot_id} ${probe.key ?? ""}`) !== probe) this.probe = null; // acknowledged
    this.#settle();
    this.#probeNext();
  }

  /** While careful: send the oldest pending edit alone, once the one before it settled. */
  #probeNext() {
    if (!this.careful || !this.joined || this.probe || this.status !== "open" || this.ws?.readyState !== 1) return;
    if (this.pendingOps.size === 0) {
      this.careful = false; // every pending edit settled: pipelined again
      this.held = new Map();
      return;
    }
    this.probe = [...this.pendingOps.values()].reduce((a, b) => (stampAbove(a.stamp, b.stamp) ? b : a));
    const op = this.probe;
    try {
      this.send({ type: "crdt_sync", ops: [{ slot_id: op.slot_id, stamp: op.stamp, state: toBase64(op.bytes), key: op.key }] });
    } catch (err) {
      this.probe = null;
      this.report(err);
    }
  }

  /** The server refused `op`: out of pending, told ("error"), and set back to the server's entry. */
  #drop(op, err) {
    this.probe = null;
    const id = `${op.slot_id} ${op.key ?? ""}`;
    if (this.pendingOps.get(id) === op) {
      this.pendingOps.delete(id);
      this.#saveSoon();
    }
    this.report(err);
    const key = op.key ?? "";
    const slash = key.indexOf("/");
    const name = slash < 0 ? null : key.slice(0, slash);
    const rest = key.slice(slash + 1);
    if (name !== null && !TEXT_TAGS.has(rest.split("/")[0])) {
      // a text cannot take back a placed run: its refused chunk stays until a reload
      this.entries.delete(id);
      this.byName.get(name)?.delete(rest);
      const server = this.held.get(id);
      if (server) this.#apply(server);
      else if (["lp/", "lv/", "ld/"].includes(rest.slice(0, 3))) this.lists.get(name)?.dropRegister(rest.slice(0, 2), rest.slice(3));
      this.#refreshNames([name]);
      this.emit("change", [name]);
    }
    this.#settle();
    this.#probeNext();
  }
}

// --- shared text ---------------------------------------------------------------------------------
// The text CRDT of crdt/text.py and the chunk entries of crdt/text_entries.py, written so that
// a JavaScript and a Python replica make the same entries, byte for byte, from the same edits.
// Indexes and lengths count Unicode code points, as Python's str does.

const TEXT_TAGS = new Set(["tx", "td"]);
const TEXT_CHUNK = 64; // clocks per tx chunk: no run crosses a multiple of this
const TEXT_RANGES = 64; // deleted id ranges per td chunk
const TEXT_MAX_CLOCK = 4_000_000; // the most character clocks a text may reach
const SURROGATE = /[\uD800-\uDFFF]/;

function cpLength(s) {
  if (!SURROGATE.test(s)) return s.length;
  let n = 0;
  for (const _ of s) n += 1;
  return n;
}

function cpSlice(s, from, to) {
  if (!SURROGATE.test(s)) return s.slice(from, to);
  return Array.from(s).slice(from, to).join("");
}

/** Code points in the first `units` UTF-16 units of `s` (a textarea's offsets to text indexes). */
export function codePointIndex(s, units) {
  return cpLength(s.slice(0, units));
}

/** UTF-16 units of the first `points` code points of `s`. */
export function unitIndex(s, points) {
  if (!SURROGATE.test(s)) return points;
  let units = 0;
  let n = 0;
  for (const ch of s) {
    if (n === points) break;
    units += ch.length;
    n += 1;
  }
  return units;
}

/**
 * One replica of a shared text: characters with ids (peer, clock), each placed after its origin
 * and before every following character with a smaller (clock, peer) (RGA); deletions leave
 * tombstones. Kept as runs of one peer's consecutive clocks. Runs whose origin has not arrived
 * are held until it does; deletions of characters not seen yet wait for them.
 */
export class TextCrdt {
  constructor(peer) {
    this.peer = peer;
    this.clock = 0;
    this.spans = []; // {peer, clock, text, len, dead}, in text order
    this.where = new Map(); // "peer:chunk" -> spans with clocks in that chunk
    this.held = new Map(); // origin peer -> (origin clock -> runs waiting for it)
    this.heldChars = 0;
    this.heldOf = new Map(); // "peer:chunk" -> how many runs of that chunk wait
    this.tombs = new Map(); // "peer:chunk" -> [clock, length] deletions of unseen characters
    // "peer:chunk" the server compacted (crdt/text_collect.py) -> the [clock, length] runs it
    // kept: a deletion of any other character of it is of a collected one, never to come again
    this.closed = new Map();
    this.length = 0;
    this.cache = "";
    this.cursor = { i: 0, start: 0 };
    this.hint = 0; // where the last received span went: the next one's origin is usually near
  }

  // The index of `span`, looked for first around the last received span's place (a late
  // joiner takes each writer's runs in clock order, each placed right after the one before).
  #indexNear(span) {
    const spans = this.spans;
    const from = Math.max(0, this.hint - 4);
    const to = Math.min(spans.length, this.hint + 5);
    for (let i = from; i < to; i += 1) if (spans[i] === span) return i;
    return spans.indexOf(span);
  }

  toString() {
    if (this.cache === null) this.cache = this.spans.filter((s) => !s.dead).map((s) => s.text).join("");
    return this.cache;
  }

  /** Deleted characters still held (what collecting tombstones takes away). */
  tombstones() {
    let n = 0;
    for (const s of this.spans) if (s.dead) n += s.len;
    return n;
  }

  #find(peer, clock) {
    for (const s of this.where.get(`${peer}:${Math.floor(clock / TEXT_CHUNK)}`) ?? []) {
      if (s.clock <= clock && clock < s.clock + s.len) return s;
    }
    return null;
  }

  #register(span) {
    const key = `${span.peer}:${Math.floor(span.clock / TEXT_CHUNK)}`;
    if (!this.where.has(key)) this.where.set(key, []);
    this.where.get(key).push(span);
  }

  #split(i, at) {
    const s = this.spans[i];
    const tail = { peer: s.peer, clock: s.clock + at, text: cpSlice(s.text, at), len: s.len - at, dead: s.dead };
    s.text = cpSlice(s.text, 0, at);
    s.len = at;
    this.spans.splice(i + 1, 0, tail);
    this.#register(tail);
  }

  // The span an index lookup last ended in and its first visible index: local edits happen
  // at or after it, so it stays right, and the next lookup near it walks a few spans.
  #locate(index) {
    const spans = this.spans;
    let { i, start } = this.cursor;
    if (i >= spans.length) [i, start] = [0, 0];
    while (i > 0 && index < start) {
      i -= 1;
      if (!spans[i].dead) start -= spans[i].len;
    }
    for (; i < spans.length; i += 1) {
      const s = spans[i];
      if (s.dead) continue;
      if (index < start + s.len) {
        this.cursor = { i, start };
        return [i, index - start];
      }
      start += s.len;
    }
    throw new Error("index past the text");
  }

  #indexOf(i) {
    let index = 0;
    for (let j = 0; j < i; j += 1) if (!this.spans[j].dead) index += this.spans[j].len;
    return index;
  }

  /** Insert `text` at `index`; returns the runs to send: [peer, clock, text, [originPeer, originClock]]. */
  insert(index, text) {
    if (!Number.isInteger(index) || index < 0 || index > this.length) throw fail(errors.CrdtValueError, `insert index ${index} is outside 0..${this.length}`, "index");
    if (typeof text !== "string") throw fail(errors.CrdtValueError, "a text insert takes a string", "text");
    const n = cpLength(text);
    if (n === 0) return [];
    if (this.clock + n > TEXT_MAX_CLOCK) throw fail(errors.LimitExceeded, `the text would pass ${TEXT_MAX_CLOCK} characters written (deleted ones count)`, "text");
    this.cache = null;
    let origin = [0, 0];
    let i = 0;
    if (index === 0) this.cursor = { i: 0, start: 0 };
    else {
      const [si, off] = this.#locate(index - 1);
      const s = this.spans[si];
      origin = [s.peer, s.clock + off];
      if (off < s.len - 1) this.#split(si, off + 1);
      i = si + 1;
    }
    const runs = [];
    let clock = this.clock + 1;
    this.clock += n;
    let done = 0;
    const chars = SURROGATE.test(text) ? Array.from(text) : null;
    while (done < n) {
      const room = TEXT_CHUNK - (clock % TEXT_CHUNK);
      const len = Math.min(room, n - done);
      const piece = chars ? chars.slice(done, done + len).join("") : text.slice(done, done + len);
      runs.push({ peer: this.peer, clock, text: piece, origin });
      const prev = this.spans[i - 1];
      if (prev && prev.peer === this.peer && !prev.dead && prev.clock + prev.len === clock && origin[0] === this.peer && origin[1] === clock - 1 && clock % TEXT_CHUNK !== 0) {
        prev.text += piece;
        prev.len += len;
      } else {
        const span = { peer: this.peer, clock, text: piece, len, dead: false };
        this.spans.splice(i, 0, span);
        this.#register(span);
        i += 1;
      }
      origin = [this.peer, clock + len - 1];
      clock += len;
      done += len;
    }
    this.length += n;
    return runs;
  }

  /** Delete `count` characters at `index`; returns the [peer, clock, length] id ranges to send. */
  delete(index, count = 1) {
    if (!Number.isInteger(index) || !Number.isInteger(count) || count < 0) throw fail(errors.CrdtValueError, "a text delete takes an index and a count >= 0", "count");
    if (index < 0 || index + count > this.length) throw fail(errors.CrdtValueError, `delete of ${count} at ${index} is outside the text's ${this.length} characters`, "index");
    if (count === 0) return [];
    this.cache = null;
    const out = [];
    let [i, off] = this.#locate(index);
    if (off) {
      this.#split(i, off);
      i += 1;
    }
    let left = count;
    while (left && i < this.spans.length) {
      const s = this.spans[i];
      if (s.dead) {
        i += 1;
        continue;
      }
      if (s.len > left) this.#split(i, left);
      s.dead = true;
      this.length -= s.len;
      left -= s.len;
      const last = out[out.length - 1];
      if (last && last[0] === s.peer && last[1] === s.clock + s.len) out[out.length - 1] = [s.peer, s.clock, last[2] + s.len];
      else if (last && last[0] === s.peer && last[1] + last[2] === s.clock) out[out.length - 1] = [s.peer, last[1], last[2] + s.len];
      else out.push([s.peer, s.clock, s.len]);
      i += 1;
    }
    return out;
  }

  /** Apply a received run (the part not yet known); returns index-based edits (none with
   * `quiet`: a caller that reports a batch's change as a whole skips finding each index). */
  integrate(run, quiet = false) {
    const edits = quiet ? null : [];
    const todo = [run];
    while (todo.length) {
      const placed = this.#integrateOne(todo.pop(), edits);
      if (!placed) continue;
      const [peer, first, last] = placed;
      const byClock = this.held.get(peer);
      if (!byClock) continue;
      // the runs waiting on a placed character: walk the fewer of the run's clocks and the held
      const clocks = byClock.size <= last - first ? [...byClock.keys()].filter((c) => first <= c && c <= last) : null;
      for (let c = first, k = 0; clocks ? k < clocks.length : c <= last; c += 1, k += 1) {
        const at = clocks ? clocks[k] : c;
        const waiting = byClock.get(at);
        if (!waiting) continue;
        byClock.delete(at);
        for (const w of waiting) this.#unhold(w);
        todo.push(...waiting);
      }
      if (!byClock.size) this.held.delete(peer);
    }
    return edits;
  }

  #integrateOne(run, edits) {
    let { peer, clock, text, origin } = run;
    const end = clock + cpLength(text);
    while (clock < end) {
      const s = this.#find(peer, clock);
      if (!s) break;
      const knownTo = Math.min(end, s.clock + s.len);
      text = cpSlice(text, knownTo - clock);
      origin = [peer, knownTo - 1];
      clock = knownTo;
    }
    if (clock >= end) return null;
    const n = end - clock;
    const start = origin[0] === 0 && origin[1] === 0;
    if (!start && !this.#find(origin[0], origin[1])) {
      if (this.heldChars + n > TEXT_MAX_CLOCK) throw fail(errors.LimitExceeded, `over ${TEXT_MAX_CLOCK} characters wait for origins that never came`, "held");
      if (!this.held.has(origin[0])) this.held.set(origin[0], new Map());
      const byClock = this.held.get(origin[0]);
      if (!byClock.has(origin[1])) byClock.set(origin[1], []);
      byClock.get(origin[1]).push({ peer, clock, text, origin });
      this.heldChars += n;
      const chunkKey = `${peer}:${Math.floor(clock / TEXT_CHUNK)}`;
      this.heldOf.set(chunkKey, (this.heldOf.get(chunkKey) ?? 0) + 1);
      return null;
    }
    this.cache = null;
    if (end - 1 > this.clock) this.clock = end - 1;
    let i = 0;
    if (!start) {
      const o = this.#find(origin[0], origin[1]);
      const oi = this.#indexNear(o);
      const off = origin[1] - o.clock;
      if (off < o.len - 1) this.#split(oi, off + 1);
      i = oi + 1;
    }
    while (i < this.spans.length) {
      const s = this.spans[i];
      if (s.clock > clock || (s.clock === clock && s.peer > peer)) i += 1;
      else break;
    }
    const span = { peer, clock, text, len: n, dead: false };
    this.spans.splice(i, 0, span);
    this.#register(span);
    this.hint = i;
    this.length += n;
    this.cursor = { i: 0, start: 0 };
    edits?.push({ index: this.#indexOf(i), delete: 0, insert: text });
    for (const [c, len] of [...(this.tombs.get(`${peer}:${Math.floor(clock / TEXT_CHUNK)}`) ?? [])]) {
      const lo = Math.max(c, clock);
      const hi = Math.min(c + len, end);
      if (lo < hi) this.#kill(peer, lo, hi - lo, edits);
    }
    return [peer, clock, end - 1];
  }

  /** Apply received deletions of [peer, clock, length] id ranges (edits as `integrate`). */
  remove(ranges, quiet = false) {
    const edits = quiet ? null : [];
    for (const [peer, first, length] of ranges) {
      let clock = first;
      const end = first + length;
      while (clock < end) {
        const upto = Math.min(end, (Math.floor(clock / TEXT_CHUNK) + 1) * TEXT_CHUNK);
        const key = `${peer}:${Math.floor(clock / TEXT_CHUNK)}`;
        if (this.#kill(peer, clock, upto - clock, edits) < upto - clock) {
          for (const [c, n] of this.#mayCome(key, clock, upto - clock)) {
            if (!this.tombs.has(key)) this.tombs.set(key, []);
            const held = this.tombs.get(key);
            if (!held.some(([c2, n2]) => c2 === c && n2 === n)) held.push([c, n]);
          }
        }
        clock = upto;
      }
    }
    return edits;
  }

  /** The server collected chunk `chunk` of `peer`'s stable tombstones: drop every character of
   * it held here outside `kept` ([clock, length] runs). What goes is deleted and no kept
   * character names it as its origin, so the rest keeps its order; a visible one (this replica
   * had not seen its deletion) is reported deleted (edits as `integrate`). The chunk is closed:
   * its writer never writes it again, so a deletion of a character of it not held here is of a
   * collected one and is not remembered. */
  compact(peer, chunk, kept, quiet = false) {
    const edits = quiet ? null : [];
    const key = `${peer}:${chunk}`;
    const keep = [...kept].sort((a, b) => a[0] - b[0]);
    this.closed.set(key, keep);
    // remembered deletions of kept characters stay: those may still be on their way
    const tombs = (this.tombs.get(key) ?? []).flatMap(([c, n]) => this.#mayCome(key, c, n));
    if (tombs.length) this.tombs.set(key, tombs);
    else this.tombs.delete(key);
    let cut = chunk * TEXT_CHUNK;
    for (const [clock, n] of [...keep, [(chunk + 1) * TEXT_CHUNK, 0]]) {
      if (clock > cut) this.#drop(key, cut, Math.min(clock, (chunk + 1) * TEXT_CHUNK), edits);
      cut = Math.max(cut, clock + n);
    }
    return edits;
  }

  // The parts of clocks clock..clock+length-1 of `key` that may still arrive: all of them,
  // unless the server compacted the chunk (then only what it kept).
  #mayCome(key, clock, length) {
    const keep = this.closed.get(key);
    if (!keep) return [[clock, length]];
    const out = [];
    for (const [c, n] of keep) {
      const lo = Math.max(c, clock);
      const hi = Math.min(c + n, clock + length);
      if (lo < hi) out.push([lo, hi - lo]);
    }
    return out;
  }

  /** Drop the runs of chunk `chunk` of `peer` still waiting for their origin: the server's
   * rewrite of the chunk is integrated instead (its runs are what stays, and a run whose origin
   * was collected names the origin it has now). */
  forgetHeld(peer, chunk) {
    if (!this.heldOf.get(`${peer}:${chunk}`)) return; // a joiner's usual case: nothing of it waits
    for (const [originPeer, byClock] of this.held) {
      for (const [at, waiting] of byClock) {
        const left = waiting.filter((w) => w.peer !== peer || Math.floor(w.clock / TEXT_CHUNK) !== chunk);
        for (const w of waiting) if (!left.includes(w)) this.#unhold(w);
        if (left.length) byClock.set(at, left);
        else byClock.delete(at);
      }
      if (!byClock.size) this.held.delete(originPeer);
    }
  }

  // A held run no longer waits (placed, or replaced by its chunk's rewrite).
  #unhold(w) {
    this.heldChars -= cpLength(w.text);
    const key = `${w.peer}:${Math.floor(w.clock / TEXT_CHUNK)}`;
    const n = (this.heldOf.get(key) ?? 1) - 1;
    if (n) this.heldOf.set(key, n);
    else this.heldOf.delete(key);
  }

  // Take the characters of `key` ("peer:chunk") with clocks lo..hi-1 out of the text.
  #drop(key, lo, hi, edits) {
    for (let s of [...(this.where.get(key) ?? [])]) {
      const a = Math.max(lo, s.clock);
      const b = Math.min(hi, s.clock + s.len);
      if (a >= b) continue;
      let i = this.#indexNear(s);
      if (a > s.clock) {
        this.#split(i, a - s.clock);
        s = this.spans[(i += 1)];
      }
      if (s.clock + s.len > b) this.#split(i, b - s.clock);
      if (!s.dead) {
        this.length -= s.len;
        edits?.push({ index: this.#indexOf(i), delete: s.len, insert: "" });
      }
      this.spans.splice(i, 1);
      const where = this.where.get(key);
      where.splice(where.indexOf(s), 1);
      if (!where.length) this.where.delete(key);
      this.cache = null;
      this.cursor = { i: 0, start: 0 };
    }
  }

  #kill(peer, clock, length, edits) {
    let known = 0;
    for (let s of [...(this.where.get(`${peer}:${Math.floor(clock / TEXT_CHUNK)}`) ?? [])]) {
      const lo = Math.max(clock, s.clock);
      const hi = Math.min(clock + length, s.clock + s.len);
      if (lo >= hi) continue;
      known += hi - lo;
      if (s.dead) continue;
      let i = this.#indexNear(s);
      if (lo > s.clock) {
        this.#split(i, lo - s.clock);
        s = this.spans[(i += 1)];
      }
      if (s.clock + s.len > hi) this.#split(i, hi - s.clock);
      s.dead = true;
      this.length -= s.len;
      this.cache = null;
      this.cursor = { i: 0, start: 0 };
      edits?.push({ index: this.#indexOf(i), delete: s.len, insert: "" });
    }
    return known;
  }
}

function runsGrow(old, now) {
  const got = new Map(now.map((r) => [r[0], r]));
  return old.every(([clock, text, op, oc]) => {
    const r = got.get(clock);
    return r && r[2] === op && r[3] === oc && r[1].startsWith(text);
  });
}

function rangesGrow(old, now) {
  const merged = new Map();
  for (const [peer, clock, n] of [...now].sort((a, b) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2])) {
    if (!merged.has(peer)) merged.set(peer, []);
    const spans = merged.get(peer);
    const last = spans[spans.length - 1];
    if (last && clock <= last[1]) last[1] = Math.max(last[1], clock + n);
    else spans.push([clock, clock + n]);
  }
  return old.every(([peer, clock, n]) => (merged.get(peer) ?? []).some(([a, b]) => a <= clock && clock + n <= b));
}

/** The change from `before` to `now` as one index-based edit (null: none), its ends kept off
 * the middle of a surrogate pair. */
function wholeEdit(before, now) {
  if (before === now) return null;
  const n = Math.min(before.length, now.length);
  let a = 0;
  while (a < n && before.charCodeAt(a) === now.charCodeAt(a)) a += 1;
  if (a > 0 && a < before.length && /[\uDC00-\uDFFF]/.test(before[a])) a -= 1;
  let b = 0;
  while (b < n - a && before.charCodeAt(before.length - 1 - b) === now.charCodeAt(now.length - 1 - b)) b += 1;
  if (b > 0 && /[\uDC00-\uDFFF]/.test(before[before.length - b])) b -= 1;
  return { index: codePointIndex(before, a), delete: cpLength(before.slice(a, before.length - b)), insert: now.slice(a, now.length - b) };
}

const TEXT_BATCH_ROWS = 32;
/** Received runs between two reports past which their change is reported as one edit. */

/** A text's replica and the chunk entries its edits write (`tx/PEER/CHUNK`, `td/PEER/N`). */
export class TextEntries {
  constructor(peer) {
    this.peer = peer;
    this.crdt = new TextCrdt(peer);
    this.mine = new Map(); // chunk -> rows [clock, text, originPeer, originClock]
    this.td = new Map(); // chunk -> rows [peer, clock, length]
    this.tdChunk = 0;
    this.edits = [];
    this.listening = false; // edits are kept only for a text someone opened
    this.rows = 0; // received runs and ranges since the last report
    this.before = null; // the text when a large batch began: its change is reported as one edit
    this.batchRows = TEXT_BATCH_ROWS;
  }

  #changed(edits) {
    if (this.listening && this.before === null && edits) this.edits.push(...edits);
  }

  // Whether received rows need no edit of their own: nobody listens, or a large batch (a late
  // joiner's thousands of runs) is reported as one edit from the text before it.
  #quiet(rows) {
    if (!this.listening || this.before !== null) return true;
    this.rows += rows;
    if (this.rows <= this.batchRows) return false;
    this.before = this.crdt.toString();
    return true;
  }

  insert(index, text) {
    const runs = this.crdt.insert(index, text);
    if (runs.length) this.#changed([{ index, delete: 0, insert: text }]);
    const touched = new Set();
    for (const run of runs) {
      const chunk = Math.floor(run.clock / TEXT_CHUNK);
      if (!this.mine.has(chunk)) this.mine.set(chunk, []);
      const rows = this.mine.get(chunk);
      const last = rows[rows.length - 1];
      if (last && last[0] + cpLength(last[1]) === run.clock && run.origin[0] === this.peer && run.origin[1] === run.clock - 1) last[1] += run.text;
      else rows.push([run.clock, run.text, run.origin[0], run.origin[1]]);
      touched.add(chunk);
    }
    return [...touched].map((c) => [`tx/${this.peer}/${c}`, JSON.stringify(this.mine.get(c))]);
  }

  delete(index, count = 1) {
    const ranges = this.crdt.delete(index, count);
    if (ranges.length) this.#changed([{ index, delete: count, insert: "" }]);
    const touched = new Set();
    for (const [peer, clock, n] of ranges) {
      if (!this.td.has(this.tdChunk)) this.td.set(this.tdChunk, []);
      let rows = this.td.get(this.tdChunk);
      const last = rows[rows.length - 1];
      if (last && last[0] === peer && last[1] === clock + n) rows[rows.length - 1] = [peer, clock, last[2] + n];
      else if (last && last[0] === peer && last[1] + last[2] === clock) rows[rows.length - 1] = [peer, last[1], last[2] + n];
      else {
        if (rows.length >= TEXT_RANGES) {
          this.tdChunk += 1;
          rows = [];
          this.td.set(this.tdChunk, rows);
        }
        rows.push([peer, clock, n]);
      }
      touched.add(this.tdChunk);
    }
    return [...touched].map((c) => [`td/${this.peer}/${c}`, JSON.stringify(this.td.get(c))]);
  }

  /** Apply one entry's winning state (the server checked its shape; a malformed one is skipped).
   * `rewrite`: the winning write is stamped by peer 0, the server's compaction of a closed chunk
   * (crdt/text_collect.py); what such a `tx` chunk lacks was collected, and its writer drops its
   * own record of the chunk (it never writes it again). */
  receive(rest, value, rewrite = false) {
    const [tag, peerText, chunkText] = rest.split("/");
    const peer = Number(peerText);
    const chunk = Number(chunkText);
    if (!Array.isArray(value) || !Number.isSafeInteger(peer) || !Number.isSafeInteger(chunk)) return;
    if (tag === "tx") {
      if (!value.every((r) => Array.isArray(r) && r.length === 4 && typeof r[1] === "string")) return;
      if (rewrite) {
        if (peer === this.peer) this.mine.delete(chunk);
        this.crdt.forgetHeld(peer, chunk);
      } else if (peer === this.peer && runsGrow(this.mine.get(chunk) ?? [], value)) this.mine.set(chunk, value.map((r) => [...r]));
      const quiet = this.#quiet(value.length);
      for (const [clock, text, op, oc] of value) this.#changed(this.crdt.integrate({ peer, clock, text, origin: [op, oc] }, quiet));
      if (rewrite) this.#changed(this.crdt.compact(peer, chunk, value.map(([clock, text]) => [clock, cpLength(text)]), quiet));
    } else {
      if (!value.every((r) => Array.isArray(r) && r.length === 3)) return;
      if (rewrite) {
        if (peer === this.peer) this.td.delete(chunk);
      } else if (peer === this.peer && rangesGrow(this.td.get(chunk) ?? [], value)) {
        this.td.set(chunk, value.map((r) => [...r]));
        this.tdChunk = Math.max(this.tdChunk, chunk);
      }
      this.#changed(this.crdt.remove(value, this.#quiet(value.length)));
    }
  }

  takeEdits() {
    const out = this.edits.splice(0);
    this.rows = 0;
    if (this.before !== null) {
      const edit = wholeEdit(this.before, this.crdt.toString());
      this.before = null;
      if (edit) out.push(edit);
    }
    return out;
  }
}

/**
 * A shared text of a document: `insert(index, str)`, `delete(index, count)`, `toString()` /
 * `value`, and `onChange(fn)` with index-based edits `{index, delete, insert}` (now the whole
 * text as one insert, then every change, local and received, in order). Python: `doc.text`.
 */
export class SharedText extends Emitter {
  constructor(doc, name) {
    super();
    this.doc = doc;
    this.name = name;
    this.kind = "text";
    this.entries = doc.textEntries(name);
    this.entries.listening = true;
    this.entries.takeEdits();
  }

  get value() {
    return this.entries.crdt.toString();
  }

  get length() {
    return this.entries.crdt.length;
  }

  toString() {
    return this.value;
  }

  insert(index, text) {
    this.doc.writeText(this.name, this.entries.insert(index, text));
  }

  delete(index, count = 1) {
    this.doc.writeText(this.name, this.entries.delete(index, count));
  }

  onChange(fn) {
    const now = this.value;
    fn(now ? [{ index: 0, delete: 0, insert: now }] : []);
    return this.on("change", fn);
  }

  refresh() {
    const edits = this.entries.takeEdits();
    if (edits.length) this.emit("change", edits);
  }
}

function shiftIndex(pos, edit) {
  const n = cpLength(edit.insert);
  if (pos <= edit.index) return pos;
  if (pos >= edit.index + edit.delete) return pos - edit.delete + n;
  return edit.index;
}

/**
 * Keep an element showing plain text and a shared text in step. `io` says how to read the
 * element's text, write it, read its selection (code-point offsets, or null when the selection
 * is elsewhere) and put a selection back (UTF-16 offsets). What the user types becomes one
 * delete and one insert where the text differs; others' edits land with the selection moved
 * along the characters it was on.
 */
function bindPlainText(text, io) {
  let shown = text.value;
  io.write(shown);
  const onInput = () => {
    const now = io.read();
    if (now === shown) return;
    let a = 0;
    while (a < now.length && a < shown.length && now[a] === shown[a]) a += 1;
    let b = 0;
    while (b < now.length - a && b < shown.length - a && now[now.length - 1 - b] === shown[shown.length - 1 - b]) b += 1;
    const at = codePointIndex(shown, a);
    const gone = cpLength(shown.slice(a, shown.length - b));
    const typed = now.slice(a, now.length - b);
    shown = now;
    if (gone) text.delete(at, gone);
    if (typed) text.insert(at, typed);
  };
  const off = text.on("change", (edits) => {
    const target = text.value;
    if (target === io.read()) {
      shown = target;
      return;
    }
    const sel = io.selection();
    let [start, end] = sel ?? [0, 0];
    for (const e of edits) {
      start = shiftIndex(start, e);
      end = shiftIndex(end, e);
    }
    io.write(target);
    shown = target;
    if (sel) io.select(unitIndex(target, start), unitIndex(target, end));
  });
  io.el.addEventListener("input", onInput);
  return () => {
    off?.();
    io.el.removeEventListener("input", onInput);
  };
}

/**
 * Keep a `<textarea>` (or `<input>`) and a shared text in step: what the user types becomes
 * inserts and deletes, and others' edits land in the element with the caret and selection
 * kept on the characters they were on. Returns a function that unbinds it.
 */
export function bindTextarea(text, el) {
  return bindPlainText(text, {
    el,
    read: () => el.value,
    write: (value) => {
      el.value = value;
    },
    selection: () => {
      const now = el.value;
      return [codePointIndex(now, el.selectionStart ?? 0), codePointIndex(now, el.selectionEnd ?? 0)];
    },
    select: (start, end) => el.setSelectionRange?.(start, end),
  });
}

/**
 * Keep a plain-text contenteditable element (`contenteditable="plaintext-only"`, or `true`
 * holding only text) and a shared text in step, as `bindTextarea` does for a textarea: the
 * element holds one text node (style it `white-space: pre-wrap`), what the user types becomes
 * inserts and deletes, and others' edits keep the caret and selection on their characters.
 */
export function bindContentEditable(text, el) {
  const node = () => {
    if (el.childNodes.length !== 1 || el.firstChild.nodeType !== 3) el.replaceChildren(document.createTextNode(el.textContent));
    return el.firstChild;
  };
  return bindPlainText(text, {
    el,
    read: () => el.textContent,
    write: (value) => {
      node().data = value;
    },
    selection: () => {
      const sel = globalThis.getSelection?.();
      if (!sel || sel.rangeCount === 0 || !el.contains(sel.anchorNode)) return null;
      const now = el.textContent;
      return [codePointIndex(now, Math.min(sel.anchorOffset, sel.focusOffset)), codePointIndex(now, Math.max(sel.anchorOffset, sel.focusOffset))];
    },
    select: (start, end) => {
      const t = node();
      globalThis.getSelection().setBaseAndExtent(t, start, t, end);
    },
  });
}

// --- the client ---------------------------------------------------------------------------------

/**
 * A connection factory for one server: `url` is its base (`ws://host:port`, `http://...`, or
 * relative in a browser page). Options: token, WebSocket (constructor), backoff {base, cap,
 * maxAttempts} in seconds, random (for tests), maxFrameSize, registry, fetch, fallbacks (other
 * nodes of a cluster, tried in turn when a channel's node fails).
 */
export class Client {
  constructor(url, options = {}) {
    this.url = url;
    // Other nodes of a cluster: a channel that loses its node goes on with the next.
    this.urls = [url, ...(options.fallbacks ?? [])];
    this.token = options.token ?? null;
    this.WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (typeof this.WebSocket !== "function") {
      throw fail(errors.LocalProtocolError, "no WebSocket here: pass connect(url, { WebSocket }) (Node < 22)");
    }
    this.backoff = { base: 0.1, cap: 5, ...options.backoff };
    this.random = options.random ?? Math.random;
    this.maxFrameSize = options.maxFrameSize ?? 1 << 20;
    this.registry = options.registry ?? defaultRegistry;
    this.fetch = options.fetch;
    this.channels = new Set();
  }

  subscribe(stream, { onState, onError } = {}) {
    const sub = new Subscription(this, stream);
    if (onState) sub.on("state", onState);
    if (onError) sub.on("error", onError);
    return this.#track(sub);
  }

  /** A shared document: the multi-writer stream `name` (options: peer, clock, onError). */
  openDocument(name, options = {}) {
    const doc = new SharedDocument(this, name, options);
    if (options.onError) doc.on("error", options.onError);
    return this.#track(doc);
  }

  publish(stream, store, options = {}) {
    const pub = new Publication(this, stream, store, options);
    if (options.onError) pub.on("error", options.onError);
    return this.#track(pub);
  }

  #track(channel) {
    this.channels.add(channel);
    channel.on("status", (s) => (s === "closed" || s === "failed") && this.channels.delete(channel));
    channel.start();
    return channel;
  }

  close() {
    for (const c of [...this.channels]) c.close();
  }
}

/**
 * Follow a peer's state over a WebRTC data channel (browsers): join `session` of the server's
 * `/signal` relay as `peer`, answer the first offer (a Python peer's
 * `octosync.client.webrtc.offer`), and mirror what arrives on its ordered, reliable `lazily`
 * channel: both sides' handshakes, then snapshots and deltas; a gap is answered with a
 * `resync_request`. Resolves once the handshakes crossed to `{peer, close(), mirror, resyncs}`;
 * `onState({epoch, values})` runs after each applied frame.
 */
export async function followPeer(url, { session = "default", peer, token, onState = () => {}, rtcConfig = {} } = {}) {
  const signal = openSignal(url, session, token);
  const mirror = new Mirror();
  const link = { peer: null, mirror, resyncs: 0, close: () => { pc?.close(); signal.close(); } };
  let pc = null;
  let opened;
  const open = new Promise((resolve, reject) => { opened = { resolve, reject }; });
  const send = (msg) => signal.send(JSON.stringify(msg));
  signal.onopen = () => send({ type: "join", peer });
  signal.onerror = () => opened.reject(new errors.ConnectionLost("the signaling connection failed"));
  signal.onmessage = async (event) => {
    const msg = JSON.parse(event.data);
    if (msg.type === "error") opened.reject(fail(errors.OctosyncError, `${msg.code}: ${msg.message}`));
    if (msg.type === "ice" && pc) pc.addIceCandidate({ candidate: msg.candidate, sdpMLineIndex: 0 }).catch(() => {});
    if (msg.type !== "offer" || pc) return;
    link.peer = msg.from;
    pc = new RTCPeerConnection(rtcConfig);
    pc.ondatachannel = ({ channel }) => serve(channel);
    await pc.setRemoteDescription({ type: "offer", sdp: msg.sdp });
    await pc.setLocalDescription(await pc.createAnswer());
    await gathered(pc);
    send({ type: "answer", to: msg.from, sdp: pc.localDescription.sdp });
  };
  // Our handshake answers theirs rather than going out on "open": Chromium can drop a message
  // sent from the open handler of a channel the remote side opened (it leaves bufferedAmount
  // and is never counted in messagesSent), and the offerer would wait for it forever.
  function serve(channel) {
    let shaken = false;
    const reply = (m) => channel.send(JSON.stringify(m));
    channel.onmessage = ({ data }) => {
      const text = typeof data === "string" ? data : new TextDecoder().decode(data);
      if (!shaken) {
        const theirs = JSON.parse(text);
        if (theirs.protocol_id !== PROTOCOL_ID || !(theirs.features ?? []).includes("publish")) {
          opened.reject(fail(errors.HandshakeFailed, "the peer's handshake is not a lazily publisher's", "$"));
          link.close();
          return;
        }
        reply({ ...handshake(session, false, 256 * 1024), peer_id: peer });
        shaken = true;
        opened.resolve(link);
        return;
      }
      const result = mirror.apply(decodeMessage(text));
      if (result === "ignored") return;
      if (result !== "applied") {
        link.resyncs += 1;
        reply({ type: "resync_request", ...(mirror.epoch !== null ? { last_epoch: mirror.epoch } : {}), reason: result });
        return;
      }
      onState({ epoch: mirror.epoch, values: mirror.values() });
    };
  }
  return open;
}

function openSignal(url, session, token) {
  const where = wsUrl(url, "/signal", token);
  where.searchParams.set("session", session);
  return new WebSocket(where);
}

/** Resolves once `pc` gathered its candidates (they are then in its local description). */
function gathered(pc) {
  return new Promise((done) => {
    if (pc.iceGatheringState === "complete") return done();
    pc.onicegatheringstatechange = () => pc.iceGatheringState === "complete" && done();
  });
}

/**
 * Publish `store` to a peer over a WebRTC data channel (browsers), this side making the offer:
 * join `session` of the server's `/signal` relay as `peer`, offer to peer `to` (a Python peer's
 * `octosync.client.webrtc.answer`) an ordered, reliable `lazily` channel, and once both
 * handshakes crossed send a snapshot, then a delta per flush; a `resync_request` gets a fresh
 * snapshot. Resolves to `{peer, deltasSent, resyncs, close()}` once the follower's handshake
 * arrived.
 */
export async function publishToPeer(url, store, { session = "default", peer, to, token, rtcConfig = {} } = {}) {
  const signal = openSignal(url, session, token);
  const pc = new RTCPeerConnection(rtcConfig);
  const channel = pc.createDataChannel("lazily", { ordered: true });
  let unsubscribe = () => {};
  const link = { peer: to, deltasSent: 0, resyncs: 0, close: () => { unsubscribe(); pc.close(); signal.close(); } };
  let opened;
  const open = new Promise((resolve, reject) => { opened = { resolve, reject }; });
  const send = (msg) => signal.send(JSON.stringify(msg));
  const reply = (m) => channel.send(JSON.stringify(m));
  signal.onerror = () => opened.reject(new errors.ConnectionLost("the signaling connection failed"));
  signal.onopen = async () => {
    send({ type: "join", peer });
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc);
    send({ type: "offer", to, sdp: pc.localDescription.sdp });
  };
  signal.onmessage = async (event) => {
    const msg = JSON.parse(event.data);
    if (msg.type === "error") opened.reject(fail(errors.OctosyncError, `${msg.code}: ${msg.message}`));
    if (msg.type === "answer" && msg.from === to && !pc.remoteDescription) await pc.setRemoteDescription({ type: "answer", sdp: msg.sdp });
    if (msg.type === "ice" && msg.from === to && pc.remoteDescription) pc.addIceCandidate({ candidate: msg.candidate, sdpMLineIndex: 0 }).catch(() => {});
  };
  // This side opened the channel, so its handshake goes out as the channel opens.
  channel.onopen = () => reply({ ...handshake(session, true, 256 * 1024), peer_id: peer });
  let shaken = false;
  channel.onmessage = ({ data }) => {
    const text = typeof data === "string" ? data : new TextDecoder().decode(data);
    const msg = JSON.parse(text);
    if (!shaken) {
      if (msg.protocol_id !== PROTOCOL_ID || (msg.features ?? []).includes("publish")) {
        opened.reject(fail(errors.HandshakeFailed, "the peer's handshake is not a lazily follower's", "$"));
        link.close();
        return;
      }
      shaken = true;
      reply(store.snapshot());
      unsubscribe = store.subscribe((base, epoch, ops) => {
        reply({ type: "delta", base_epoch: base, epoch, ops });
        link.deltasSent += 1;
      });
      opened.resolve(link);
      return;
    }
    if (msg.type === "resync_request") {
      link.resyncs += 1;
      reply(store.snapshot());
    }
  };
  return open;
}

// --- chain devices (Octoprotocol) ----------------------------------------------------------------

/** RFC 7386 JSON merge patch: `patch` applied to `target` (neither is changed). */
export function mergePatch(target, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const out = target !== null && typeof target === "object" && !Array.isArray(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = mergePatch(out[key], value);
  }
  return out;
}

function idbRequest(request) {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

/**
 * A player's device on an Octoprotocol chain, in a browser: the seed's device state machine,
 * kept in IndexedDB. Every change (an event numbered, a bootstrap, a state update, consumed
 * events dropped) is written in one IndexedDB transaction before anything it produced is sent,
 * so a reloaded tab resumes where the chain may have seen it, never behind. Reaches the chain's
 * head through the server's `/chain/NAME` relay; while bootstrapping (after every connect),
 * emitted events queue unnumbered; `BootstrapComplete` merges the chain's copies of our events,
 * drops the killed ones and numbers from the larger next sequencer. Events stay until the
 * chain consumes them, so a head that failed gets them again from the next bootstrap.
 * Events: "state" ({state, sequencer}), "status" ("connecting" | "live"), "error".
 */
export class ChainDevice extends Emitter {
  constructor(url, chain, name, { token, database = "octosync-chain", backoff = {} } = {}) {
    super();
    this.url = url;
    this.chain = chain;
    this.name = name;
    this.token = token;
    this.database = database;
    this.backoff = backoff;
    this.events = new Map(); // device sequencer -> {DeviceSequencer, Name, Payload}
    this.nextSequencer = 1;
    this.state = null;
    this.stateSequencer = 0;
    this.live = false;
    this.queued = [];
    this.closed = false;
    this.ws = null;
    this.db = null;
    this.turns = Promise.resolve(); // emits and received records, one at a time, in order
  }

  #serially(work) {
    const next = this.turns.then(work);
    this.turns = next.catch((err) => this.emit("error", err));
    return next;
  }

  get key() {
    return `${this.chain}/${this.name}`;
  }

  /** Open the store, load what a previous page left, connect. */
  async start() {
    const open = indexedDB.open(this.database, 1);
    open.onupgradeneeded = () => open.result.createObjectStore("devices");
    this.db = await idbRequest(open);
    const saved = await idbRequest(this.db.transaction("devices").objectStore("devices").get(this.key));
    if (saved) {
      this.events = new Map(saved.events.map((e) => [e.DeviceSequencer, e]));
      this.nextSequencer = saved.nextSequencer;
      this.state = saved.state;
      this.stateSequencer = saved.stateSequencer;
    }
    this.#connect(0);
    return this;
  }

  #persist() {
    const tx = this.db.transaction("devices", "readwrite");
    tx.objectStore("devices").put(
      {
        events: [...this.events.values()],
        nextSequencer: this.nextSequencer,
        state: this.state,
        stateSequencer: this.stateSequencer,
      },
      this.key,
    );
    return new Promise((resolve, reject) => {
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  }

  /** The game produced (name, payload): numbered and sent once live, queued until then. */
  emitEvent(name, payload) {
    return this.#serially(async () => {
      if (!this.live) {
        this.queued.push([name, payload]);
        return;
      }
      const event = this.#number(name, payload);
      await this.#persist();
      this.#send(event);
    });
  }

  #number(name, payload) {
    const event = { Type: "DeviceEvent", DeviceSequencer: this.nextSequencer, Name: name, Payload: payload };
    this.events.set(event.DeviceSequencer, event);
    this.nextSequencer += 1;
    return event;
  }

  #send(record) {
    if (this.ws?.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(record));
  }

  #connect(attempt) {
    if (this.closed) return;
    const where = wsUrl(this.url, `/chain/${encodeURIComponent(this.chain)}`, this.token);
    if (!this.token) where.searchParams.set("device", this.name);
    this.live = false;
    this.emit("status", "connecting");
    const ws = (this.ws = new WebSocket(where));
    ws.onopen = () => {
      const events = Object.fromEntries([...this.events].map(([k, e]) => [String(k), e]));
      ws.send(JSON.stringify({ Type: "BootstrapChainRequest", NextDeviceSequencer: this.nextSequencer, Events: events }));
    };
    ws.onmessage = (message) => {
      const record = JSON.parse(message.data);
      this.#serially(() => this.#receive(record));
      attempt = 0;
    };
    ws.onclose = () => {
      if (this.ws !== ws || this.closed) return;
      this.live = false;
      setTimeout(() => this.#connect(attempt + 1), 1000 * backoffDelay(attempt, this.backoff));
    };
  }

  async #receive(record) {
    if (record.Type === "BootstrapComplete") {
      for (const [k, e] of Object.entries(record.NewEvents ?? {})) this.events.set(Number(k), e);
      for (const d of record.Kill ?? []) this.events.delete(d);
      this.events = new Map([...this.events].sort((a, b) => a[0] - b[0]));
      this.nextSequencer = Math.max(this.nextSequencer, record.NextDeviceSequencer);
      this.state = record.Change ?? null;
      this.stateSequencer = record.StateSequencer ?? 0;
      const queued = this.queued;
      this.queued = [];
      const fresh = queued.map(([name, payload]) => this.#number(name, payload));
      await this.#persist();
      this.live = true;
      this.emit("status", "live");
      this.emit("state", { state: this.state, sequencer: this.stateSequencer });
      for (const event of fresh) this.#send(event);
      return;
    }
    if (record.Type === "StateUpdate") {
      if (record.Sequencer <= this.stateSequencer) return;
      if (record.Replace) this.state = record.Change;
      else if (record.Sequencer === this.stateSequencer + 1) this.state = mergePatch(this.state, record.Change);
      else {
        this.ws?.close(); // the head lost track of us: bootstrap again
        return;
      }
      this.stateSequencer = record.Sequencer;
      for (const d of record.Consumed?.[this.name] ?? []) this.events.delete(d);
      await this.#persist();
      this.emit("state", { state: this.state, sequencer: this.stateSequencer });
      return;
    }
    if (record.Type === "DeviceNotice") {
      let dropped = false;
      for (const d of record.Consumed ?? []) dropped = this.events.delete(d) || dropped;
      if (dropped) await this.#persist();
    }
  }

  close() {
    this.closed = true;
    this.ws?.close();
  }
}

export function connect(url, options) {
  return new Client(url, options);
}
