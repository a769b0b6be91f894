// The inspector at GET /: streams from /api/streams, one stream watched live with the client,
// and charts of a few /metrics series. Nothing here but the served client and the DOM.
import { connect, errorFromFrame } from "/client/octosync.js";

const POLL_MS = 1000;
const METRICS_MS = 2000;
const HISTORY_S = 300;
const STALL_POLLS = 3; // a backlog that has not shrunk for this many polls is flagged

const $ = (sel) => document.querySelector(sel);
let token = new URLSearchParams(location.search).get("token") ?? sessionStorage.getItem("octosync-token");
let client = null;
let watched = null; // {name, sub}
const previous = new Map(); // stream -> {frames, at, backlog, grew}

function authQuery() {
  return token ? `?token=${encodeURIComponent(token)}` : "";
}

function askForToken(message) {
  $("#token-form").hidden = false;
  $("#token-error").textContent = message;
  $("#summary").textContent = "waiting for a token";
}

$("#token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  token = $("#token-input").value.trim() || null;
  if (token) sessionStorage.setItem("octosync-token", token);
  client?.close();
  client = null;
  watched = null;
  $("#watch").hidden = true;
  poll();
});

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

async function poll() {
  let res;
  try {
    res = await fetch(`/api/streams${authQuery()}`, { cache: "no-store" });
  } catch (err) {
    $("#summary").textContent = `server unreachable: ${err.message}`;
    return;
  }
  if (res.status === 401) {
    const err = errorFromFrame(await res.json());
    askForToken(`${err.code}: ${err.message}`);
    return;
  }
  $("#token-form").hidden = true;
  const body = await res.json();
  client ??= connect(location.origin, { token });
  render(body);
}

function render(body) {
  const now = performance.now();
  const tbody = $("#streams tbody");
  tbody.replaceChildren();
  for (const row of body.streams) {
    const prev = previous.get(row.stream);
    const rate = prev ? ((row.frames - prev.frames) * 1000) / (now - prev.at) : 0;
    const grew = row.backlog > 0 && prev && row.backlog >= prev.backlog ? prev.grew + 1 : 0;
    previous.set(row.stream, { frames: row.frames, at: now, backlog: row.backlog, grew });
    const stalled = grew >= STALL_POLLS;
    const tr = document.createElement("tr");
    tr.dataset.stream = row.stream;
    if (stalled) tr.classList.add("stalled");
    if (watched?.name === row.stream) tr.classList.add("selected");
    tr.append(
      cell(row.stream, "name"),
      cell(row.face, "face"),
      cell(row.producer === null ? "none" : `#${row.producer}`, "producer"),
      cell(row.epoch === null ? "–" : String(row.epoch), "epoch"),
      cell(String(row.subscribers), "subscribers"),
      cell(String(row.backlog), "backlog"),
      cell(rate.toFixed(1), "rate"),
      cell(stalled ? "stalled subscriber" : row.producer === null ? "no producer" : "", "flag"),
    );
    tr.addEventListener("click", () => watch(row.stream, row.face));
    tbody.append(tr);
  }
  $("#no-streams").hidden = body.streams.length > 0;
  renderList("documents", body.documents ?? [], (r) => [r.document, r.members, r.entries, r.ops, documentValues(r)]);
  renderList("maps", body.maps ?? [], (r) => [r.map, r.keys, r.tombstones]);
  renderList("dataspaces", body.dataspaces ?? [], (r) => [r.dataspace, r.assertions, r.observers]);
  renderList("yjs", body.yjs ?? [], (r) => [r.document, r.connections, r.awareness, r.updates]);
  $("#summary").textContent = `${body.streams.length} streams, ${body.connections} connections · ${new Date().toLocaleTimeString()}`;
}

const KIND_NAMES = { pn: "counter", lww: "register", mv: "multi-value register", map: "map" };

// A shared document's values as the server folds them: one line per value, "name (kind): value".
function documentValues(row) {
  if (row.values === null) return `(${row.entries} entries: too many to show here)`;
  const lines = row.values.map((v) => `${v.name} (${KIND_NAMES[v.kind] ?? v.kind}): ${JSON.stringify(v.value)}`);
  if (row.more > 0) lines.push(`… and ${row.more} more`);
  return lines.join("\n");
}

// Shared documents, TopGun maps, dataspaces and Yjs documents: a plain table each, hidden (with a hint shown) while empty.
function renderList(id, rows, columns) {
  $(`#${id} tbody`).replaceChildren(
    ...rows.map((row) => {
      const tr = document.createElement("tr");
      const values = columns(row);
      tr.append(...values.map((v, i) => cell(String(v), id === "documents" && i === 4 ? "doc-values" : undefined)));
      return tr;
    }),
  );
  $(`#${id}`).hidden = rows.length === 0;
  $(`#no-${id}`).hidden = rows.length > 0;
}

function show(value) {
  if (value instanceof Uint8Array) return `bytes[${value.length}]`;
  if (typeof value === "bigint") return value.toString();
  if (value && typeof value === "object" && "blob" in value) return "blob reference";
  return typeof value === "string" ? value : JSON.stringify(value);
}

function watch(name, face) {
  watched?.sub?.close();
  $("#watch").hidden = false;
  $("#watch-name").textContent = name;
  $("#watch-errors").replaceChildren();
  $("#values tbody").replaceChildren();
  $("#watch-epoch").textContent = "–";
  if (face !== "lazily") {
    watched = { name, sub: null };
    $("#watch-status").textContent = "(a WVP stream: watch it with a WVP client)";
    return;
  }
  const sub = client.subscribe(name);
  watched = { name, sub };
  $("#watch-status").textContent = sub.status;
  sub.on("status", (s) => ($("#watch-status").textContent = s));
  sub.on("error", (err) => {
    const li = document.createElement("li");
    li.textContent = `${err.code}: ${err.message}`;
    $("#watch-errors").append(li);
  });
  sub.on("state", (state) => {
    $("#watch-epoch").textContent = String(state.epoch);
    const rows = [];
    for (const [id, node] of [...sub.mirror.nodes].sort((a, b) => a[0] - b[0])) {
      const tr = document.createElement("tr");
      tr.dataset.node = String(id);
      const value = state.values.has(id) ? show(state.values.get(id)) : node.state;
      tr.append(cell(String(id)), cell(node.key ?? ""), cell(node.tag), cell(value, "value"));
      rows.push(tr);
    }
    $("#values tbody").replaceChildren(...rows);
  });
}

// --- /metrics charts ---------------------------------------------------------------------------

const SERIES = [
  { title: "frames in /s", metric: "octosync_frames_in_total", rate: true },
  { title: "frames out /s", metric: "octosync_frames_out_total", rate: true },
  { title: "open connections", metric: "octosync_connections", rate: false },
  { title: "outbox depth (frames)", metric: "octosync_outbox_depth", rate: false },
  { title: "errors sent /s", metric: "octosync_errors_total", rate: true },
];
const history = SERIES.map(() => []);
let lastSample = null;

function parseMetrics(text) {
  const sums = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (m) sums.set(m[1], (sums.get(m[1]) ?? 0) + Number(m[3]));
  }
  return sums;
}

async function pollMetrics() {
  let text;
  try {
    text = await (await fetch("/metrics", { cache: "no-store" })).text();
  } catch {
    return;
  }
  const at = Date.now();
  const sums = parseMetrics(text);
  SERIES.forEach((s, i) => {
    const value = sums.get(s.metric) ?? 0;
    let y = value;
    if (s.rate) {
      if (!lastSample) return;
      y = Math.max(0, (value - (lastSample.sums.get(s.metric) ?? 0)) / ((at - lastSample.at) / 1000));
    }
    history[i].push([at, y]);
    while (history[i].length && history[i][0][0] < at - HISTORY_S * 1000) history[i].shift();
  });
  lastSample = { at, sums };
  drawCharts(at);
}

const NS = "http://www.w3.org/2000/svg";
function svgEl(name, attrs, text) {
  const el = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function drawCharts(now) {
  const W = 320, H = 120, L = 40, B = 18;
  const figs = SERIES.map((s, i) => {
    const points = history[i];
    const max = Math.max(1, ...points.map((p) => p[1]));
    const x = (t) => L + ((t - (now - HISTORY_S * 1000)) / (HISTORY_S * 1000)) * (W - L - 4);
    const y = (v) => H - B - (v / max) * (H - B - 6);
    const svg = svgEl("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-metric": s.metric });
    svg.append(
      svgEl("line", { x1: L, y1: H - B, x2: W - 4, y2: H - B, stroke: "#c5cbd3" }),
      svgEl("line", { x1: L, y1: 6, x2: L, y2: H - B, stroke: "#c5cbd3" }),
      svgEl("text", { x: L - 4, y: 12, "text-anchor": "end" }, max.toPrecision(3)),
      svgEl("text", { x: L - 4, y: H - B, "text-anchor": "end" }, "0"),
      svgEl("text", { x: L, y: H - 4 }, new Date(now - HISTORY_S * 1000).toLocaleTimeString()),
      svgEl("text", { x: W - 4, y: H - 4, "text-anchor": "end" }, new Date(now).toLocaleTimeString()),
    );
    if (points.length > 0) {
      const d = points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
      svg.append(svgEl("polyline", { points: d, fill: "none", stroke: "#2563eb", "stroke-width": 1.5 }));
    }
    const fig = document.createElement("figure");
    const cap = document.createElement("figcaption");
    cap.textContent = `${s.title}: ${points.length ? points.at(-1)[1].toFixed(s.rate ? 1 : 0) : "–"}`;
    fig.append(cap, svg);
    return fig;
  });
  $("#charts").replaceChildren(...figs);
}

poll();
pollMetrics();
setInterval(poll, POLL_MS);
setInterval(pollMetrics, METRICS_MS);
