// The client's pure parts: type tags, strict decoding, the mirror's rules, the store, backoff.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Mirror, Store, TypeRegistry, backoffDelay, decodeMessage, defaultRegistry, errorFromFrame,
  errors, fromBase64, toBase64, OctosyncError,
} from "../octosync.js";

const hex = (bytes) => Buffer.from(bytes).toString("hex");
const b64 = (h) => Buffer.from(h, "hex").toString("base64");

test("built-in type tags encode to the bytes graph/type_tags.py defines", () => {
  const r = defaultRegistry;
  assert.equal(hex(r.encode("i32", -2)), "fffffffe");
  assert.equal(hex(r.encode("i64", 1)), "0000000000000001");
  assert.equal(hex(r.encode("i64", -(2n ** 63n))), "8000000000000000");
  assert.equal(hex(r.encode("f64", 1.5)), "3ff8000000000000");
  assert.equal(hex(r.encode("bool", true)), "01");
  assert.equal(hex(r.encode("string", "é")), "c3a9");
  assert.equal(hex(r.encode("bytes", Uint8Array.of(0, 255))), "00ff");
  assert.equal(Buffer.from(r.encode("json", { b: [1, 2], a: "x" })).toString(), '{"a":"x","b":[1,2]}');
});

test("type tags decode what they encode; i64 beyond 2^53 stays exact as a BigInt", () => {
  const r = defaultRegistry;
  for (const [tag, value] of [["i32", -7], ["i64", 2 ** 53 - 1], ["f64", -0.25], ["bool", false], ["string", "ok ✓"], ["json", { a: [null, true] }]]) {
    assert.deepEqual(r.decode(tag, r.encode(tag, value)), value);
  }
  assert.equal(r.decode("i64", Buffer.from("7fffffffffffffff", "hex")), 2n ** 63n - 1n);
  assert.deepEqual(r.decode("bytes", Uint8Array.of(1, 2)), Uint8Array.of(1, 2));
  assert.deepEqual(r.decode("no-such-tag", Uint8Array.of(9)), Uint8Array.of(9), "unknown tags come back as bytes");
});

test("bad values and bad bytes are TypeTagErrors naming what is wrong", () => {
  const r = defaultRegistry;
  const cases = [
    () => r.encode("i32", 2 ** 31),
    () => r.encode("i64", 2 ** 60),
    () => r.encode("i64", 1.5),
    () => r.encode("bool", 1),
    () => r.encode("string", 3),
    () => r.encode("json", { x: NaN }),
    () => r.encode("nope", 1),
    () => r.decode("i64", Uint8Array.of(1)),
    () => r.decode("bool", Uint8Array.of(2)),
    () => r.decode("string", Uint8Array.of(0xff)),
    () => r.decode("json", Buffer.from("{")),
  ];
  for (const f of cases) assert.throws(f, (e) => e instanceof errors.TypeTagError && e.code === "TypeTagError" && e.message.length > 0);
  const own = new TypeRegistry();
  own.register("point", (p) => Uint8Array.of(p.x, p.y), (b) => ({ x: b[0], y: b[1] }));
  assert.deepEqual(own.decode("point", own.encode("point", { x: 3, y: 4 })), { x: 3, y: 4 });
  assert.throws(() => own.register("i32", () => {}, () => {}), errors.TypeTagError);
});

test("base64 is the standard padded alphabet, strictly", () => {
  assert.equal(toBase64(Uint8Array.of(0xfb, 0xff)), "+/8=");
  assert.deepEqual(fromBase64("+/8="), Uint8Array.of(0xfb, 0xff));
  for (const bad of ["-_8=", "+/8", "a", 7]) assert.throws(() => fromBase64(bad), errors.DecodeError);
});

test("decodeMessage is strict and names the failing field", () => {
  const bad = [
    ['{"type":"snapshot","epoch":1,"extra":1}', "$"],
    ['{"type":"snapshot","epoch":-1}', "$.epoch"],
    ['{"type":"snapshot","epoch":9007199254740994}', "$.epoch"],
    ['{"type":"delta","base_epoch":3,"epoch":3,"ops":[]}', "$.epoch"],
    ['{"type":"remote_op","kind":"trigger_effect","node":3,"payload":"AA=="}', "$.payload"],
    ['{"type":"remote_op","kind":"read","node":3}', "$.kind"],
    ['{"type":"delta","base_epoch":1,"epoch":2,"ops":[{"op":"teleport","slot_id":1}]}', "$.ops[0].op"],
    ['{"type":"delta","base_epoch":1,"epoch":2,"ops":[{"op":"cell_set","slot_id":1,"payload":"%%"}]}', "$.ops[0].payload"],
    ['{"type":"snapshot","epoch":1,"nodes":[{"slot_id":1,"type_tag":"i64","state":"resolved"}]}', "$.nodes[0]"],
    ['{"type":"snapshot","epoch":1,"nodes":[{"slot_id":1,"type_tag":"i64","state":"gone"}]}', "$.nodes[0].state"],
    ['{"type":"hello"}', "$.type"],
    ["[1]", "$"],
    ["{", "$"],
  ];
  for (const [text, path] of bad) {
    assert.throws(() => decodeMessage(text), (e) => e instanceof errors.DecodeError && e.path === path, text);
  }
  const delta = decodeMessage('{"type":"delta","base_epoch":4,"epoch":5,"ops":[{"op":"node_add","slot_id":3,"type_tag":"bool","payload":"AQ==","key":"a/b"}]}');
  assert.deepEqual(delta.ops[0], { op: "node_add", id: 3, tag: "bool", payload: Uint8Array.of(1), key: "a/b", state: "resolved" });
});

test("server error frames become typed errors with the policy's close flag", () => {
  const gap = errorFromFrame({ code: "EpochGap", message: "base_epoch: delta 3->4 does not follow epoch 1" });
  assert.ok(gap instanceof errors.EpochGap && gap instanceof errors.RemoteProtocolError && gap instanceof OctosyncError);
  assert.equal(gap.closes, false);
  assert.equal(errorFromFrame({ code: "Unauthorized", message: "m" }).closes, true);
  assert.ok(errorFromFrame({ code: "Forbidden", message: "m" }) instanceof errors.AuthError);
  const unknown = errorFromFrame({ code: "SomethingNew", message: "m" });
  assert.equal(unknown.code, "SomethingNew");
  assert.equal(unknown.closes, true, "an error the policy table does not know closes");
  const decoded = decodeMessage('{"type":"error","code":"ForbiddenPublish","message":"no"}');
  assert.ok(decoded.error instanceof errors.ForbiddenPublish);
});

const snap = (epoch, values) => decodeMessage(JSON.stringify({
  type: "snapshot", epoch,
  nodes: Object.entries(values).map(([id, v]) => ({ slot_id: Number(id), type_tag: "i32", state: "resolved", payload: toBase64(defaultRegistry.encode("i32", v)) })),
  roots: Object.keys(values).map(Number),
}));
const set = (base, id, v) => decodeMessage(JSON.stringify({
  type: "delta", base_epoch: base, epoch: base + 1,
  ops: [{ op: "cell_set", slot_id: id, payload: toBase64(defaultRegistry.encode("i32", v)) }],
}));
const values = (m) => Object.fromEntries(m.values());

test("the mirror applies a snapshot then gapless deltas, and ignores re-deliveries", () => {
  const m = new Mirror();
  assert.equal(m.apply(snap(3, { 1: 10, 2: 20 })), "applied");
  assert.equal(m.apply(set(3, 1, 11)), "applied");
  assert.equal(m.apply(set(3, 1, 99)), "ignored", "epoch 4 again");
  assert.deepEqual(values(m), { 1: 11, 2: 20 });
  assert.equal(m.epoch, 4);
});

test("a gap, a delta before any snapshot, and a bad op each ask for a resync and change nothing", () => {
  const early = new Mirror();
  assert.equal(early.apply(set(0, 1, 1)), "SnapshotRequired");
  const m = new Mirror();
  m.apply(snap(1, { 1: 10 }));
  const bad = decodeMessage(JSON.stringify({ type: "delta", base_epoch: 1, epoch: 2, ops: [
    { op: "cell_set", slot_id: 1, payload: toBase64(defaultRegistry.encode("i32", 5)) },
    { op: "node_remove", slot_id: 42 },
  ] }));
  assert.equal(m.apply(bad), "RemoteProtocolError");
  assert.equal(m.lastError.path, "ops[1]");
  assert.deepEqual(values(m), { 1: 10 }, "the first op was rolled back");
  assert.equal(m.inSync, false);
  assert.equal(m.apply(set(1, 1, 7)), "ignored", "out of sync: deltas wait for a snapshot");
  m.apply(snap(5, { 1: 50 }));
  assert.equal(m.apply(set(7, 1, 1)), "EpochGap");
  assert.ok(m.lastError instanceof errors.EpochGap);
  assert.equal(m.apply(snap(8, { 1: 80 })), "applied");
  assert.equal(m.inSync, true);
});

test("node_remove drops the node's edges and root entry; a rolled back one restores them", () => {
  const m = new Mirror();
  m.apply(decodeMessage(JSON.stringify({
    type: "snapshot", epoch: 0,
    nodes: [1, 2].map((id) => ({ slot_id: id, type_tag: "i32", state: "unset" })),
    edges: [{ dependent: 2, dependency: 1 }], roots: [1],
  })));
  const removeThenFail = decodeMessage('{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"node_remove","slot_id":1},{"op":"invalidate","slot_id":1}]}');
  assert.equal(m.apply(removeThenFail), "RemoteProtocolError");
  assert.deepEqual([...m.deps.get(2)], [1]);
  assert.ok(m.roots.has(1));
  m.apply(decodeMessage('{"type":"snapshot","epoch":0,"nodes":[{"slot_id":1,"type_tag":"i32","state":"unset"},{"slot_id":2,"type_tag":"i32","state":"unset"}],"edges":[{"dependent":2,"dependency":1}],"roots":[1]}'));
  assert.equal(m.apply(decodeMessage('{"type":"delta","base_epoch":0,"epoch":1,"ops":[{"op":"node_remove","slot_id":1}]}')), "applied");
  assert.equal(m.deps.size, 0);
  assert.equal(m.roots.size, 0);
});

test("the store turns one synchronous run of changes into one delta a mirror can apply", async () => {
  const store = new Store();
  const a = store.cell(1, "i64", { key: "a" });
  const b = store.cell(2, "i64");
  const sum = store.derived(() => a.get() + b.get(), "i64", { key: "sum" });
  const mirror = new Mirror();
  assert.equal(mirror.apply(decodeMessage(JSON.stringify(store.snapshot()))), "applied");
  assert.deepEqual(values(mirror), { 1: 1, 2: 2, 3: 3 });
  assert.deepEqual([...mirror.deps.get(3)].sort(), [1, 2]);
  const deltas = [];
  store.subscribe((base, epoch, ops) => deltas.push({ type: "delta", base_epoch: base, epoch, ops }));
  a.set(10);
  b.set(20);
  a.set(10); // same bytes: no change of its own
  await Promise.resolve();
  assert.equal(deltas.length, 1);
  const flag = store.batch(() => store.cell(true, "bool"));
  b.set(5);
  await Promise.resolve();
  assert.equal(deltas.length, 3);
  for (const d of deltas) assert.equal(mirror.apply(decodeMessage(JSON.stringify(d))), "applied");
  assert.deepEqual(values(mirror), { 1: 10, 2: 5, 3: 15, [flag.id]: true });
  assert.equal(sum.get(), 15);
  assert.throws(() => sum.set(1), errors.LocalProtocolError);
  assert.throws(() => store.applyWrite(sum.id, defaultRegistry.encode("i64", 1)), errors.Forbidden);
});

test("backoff is full jitter under an exponential cap", () => {
  const opts = { base: 0.1, cap: 1 };
  assert.equal(backoffDelay(0, opts, () => 1), 0.1);
  assert.equal(backoffDelay(3, opts, () => 1), 0.8);
  assert.equal(backoffDelay(10, opts, () => 1), 1);
  assert.equal(backoffDelay(10, opts, () => 0), 0);
  assert.equal(backoffDelay(2, opts, () => 0.5), 0.2);
});
