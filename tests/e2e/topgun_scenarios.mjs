// octosync's own scenarios for TopGun's real client (the bundles in ../shared/peers/topgun,
// imported from there, never copied). One JSON object per line on stdout.
//
//   node topgun_scenarios.mjs PEER_DIR --url ws://127.0.0.1:PORT/topgun [--token JWT]
//        [--seconds N] [--node ID] [--frames] SCENARIO [ARGS...]
//
//   watch                  open "users" (LWW) and "tags" (OR); print both on every change:
//                          {"event":"maps","users":{...},"tags":{...}}; {"event":"ready"} once
//                          connected
//   ops OP...              apply OPs, print {"event":"synced"} once the server acked them all;
//                          OP: put=KEY=JSON | remove=KEY | oradd=KEY=JSON | orremove=KEY=JSON
//                          (maps "users" and "tags")
//   lockhold NAME MS       take lock NAME, print {"event":"lock",ok,token,at}, hold MS, print
//                          {"event":"unlock",at}, release and end
//   topic NAME             subscribe NAME, print {"event":"ready"}; publish {"text":"hello from
//                          <node>"} for every line on stdin; print {"event":"topic",data}
//                          for every message received
//   query                  live query on "users": age >= 18, by age desc, limit 10; prints
//                          {"event":"rows","rows":[...]} on every result change
//   paged LIMIT            queryOncePaged on "users" by age asc, LIMIT a page: prints
//                          {"event":"page",keys,hasMore,cursor}; then a live query whose
//                          loadMore runs until hasMore is false: {"event":"all",keys}
//   once JSON              queryOnce on "users" with the filter JSON: {"event":"once",rows}
//   search TEXT            search "users" for TEXT (limit 5): {"event":"search",hits:[{key,
//                          score,matchedTerms}]}; then a live search printing
//                          {"event":"live",keys} on every change
//   vector JSON TEXT       vectorSearch "users" for the vector JSON (k 2): {"event":"vector",
//                          hits:[{key,score}]}; hybridSearch for TEXT over fullText, semantic
//                          and exact (k 3): {"event":"hybrid",hits:[{key,score,methodScores}]};
//                          then a live hybrid search (fullText, k 3): {"event":"live",keys}
//   hybridquery TEXT YEAR  client.hybridQuery on "users" with Predicates.and(Predicates.match(
//                          'title', TEXT), Predicates.greaterThanOrEqual('year', YEAR)): {"event":"hybridrows",
//                          keys} on every result the handle gives; {"event":"ready"} once sent
//   http OP...             TopGun's HttpSyncProvider (POST <url>/sync, the ws URL as http),
//                          following "users", polling every 200 ms: sends OP (put=KEY=JSON) as
//                          one OP_BATCH, prints {"event":"http",type,payload} for every message
//                          it turns the responses into, {"event":"ready"} once connected
//   journal-watch          getEventJournal().subscribe on "users": {"event":"journal",
//                          sequence,type,key,value,previousValue} per event; {"event":"ready"} once sent
//   cluster OP...          (with --seeds URL,URL...: TopGun's cluster client) wait for the
//                          partition map, print {"event":"cluster",version,routing,nodes,
//                          owners,connected}, put OPs (put=KEY=JSON) and print the same as
//                          {"event":"synced"} once acked
//   writes PREFIX N MS     put PREFIX-i every MS ms, N times; {"event":"synced",refreshToken}
//                          once acked. With --exchange PROVIDER --external TOKEN|- [--refresh
//                          TOKEN]: the client's auth is TopGun's token exchange (see below)
//   failover PREFIX MS     (with --seeds) put PREFIX-i every MS ms, {"event":"progress",
//                          written,pending,connected} every 10, until a line on stdin; then
//                          {"event":"synced",written,connected} once every op is acked
//   device                 print {"event":"device",deviceId,deviceToken} once connected with the
//                          device identity the server bound (with --meta FILE the storage
//                          adapter's meta store is read from FILE at start and written to it
//                          on every change, so a second process is the same client restarted)
//   calls NAME...          make each client call NAME in turn (sql, search, vector, hybrid,
//                          journal, processor, resolvers, apply-ack), printing {"event":"call",
//                          name, ok, value | error, code} as each settles, then end
process.env.NODE_ENV = process.env.NODE_ENV || 'production';
process.env.LOG_LEVEL = process.env.LOG_LEVEL || 'silent';

import { pathToFileURL } from 'node:url';
import path from 'node:path';

const args = process.argv.slice(2);
const peerDir = args.shift();
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  if (i === -1) return dflt;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const flag = (name) => {
  const i = args.indexOf(name);
  if (i === -1) return false;
  args.splice(i, 1);
  return true;
};
const url = opt('--url', 'ws://127.0.0.1:8765/topgun');
const token = opt('--token', null);
const seconds = Number(opt('--seconds', '6'));
const nodeId = opt('--node', 'scenario-' + process.pid);
const frames = flag('--frames');
const seeds = opt('--seeds', null);
const exchange = opt('--exchange', null);
const external = opt('--external', null);
const refreshToken = opt('--refresh', null);
const metaFile = opt('--meta', null);
const [scenario, ...rest] = args;

const load = (file) => import(pathToFileURL(path.join(peerDir, file)).href);
const WS = (await load('ws.mjs')).default;
const { unpack } = await load('msgpackr.mjs');
const { MemoryStorageAdapter } = await load('memory-storage.mjs');

const out = (obj) => process.stdout.write(JSON.stringify(obj, (_k, v) =>
  typeof v === 'bigint' ? Number(v) : v) + '\n');

class TracingWebSocket extends WS {
  constructor(u, protocols) {
    super(u, protocols);
    if (frames) this.on('message', (data) => trace('in', data, this.url));
  }
  send(data, ...more) {
    if (frames) trace('out', data, this.url);
    return super.send(data, ...more);
  }
}
function trace(dir, raw, socketUrl) {
  let msg;
  try { msg = unpack(Buffer.from(raw)); } catch { msg = { undecodable: true }; }
  out({ event: 'frame', dir, type: msg && msg.type, msg, url: socketUrl });
}
globalThis.WebSocket = TracingWebSocket;

const { TopGunClient, CustomAuthProvider } = await load('topgun-client.mjs');
const storage = new MemoryStorageAdapter();
if (metaFile) {
  const { existsSync, readFileSync, writeFileSync } = await import('node:fs');
  if (existsSync(metaFile)) {
    for (const [k, v] of Object.entries(JSON.parse(readFileSync(metaFile, 'utf8')))) storage.meta.set(k, v);
  }
  const setMeta = storage.setMeta.bind(storage);
  storage.setMeta = async (key, value) => {
    await setMeta(key, value);
    writeFileSync(metaFile, JSON.stringify(Object.fromEntries(storage.meta)));
  };
}
let auth;
let inflight = 0; // token exchange and refresh calls not yet answered
if (exchange) {
  // TopGun's token exchange: the external token (none with "-") is exchanged at
  // POST /api/auth/token, renewed at /api/auth/refresh; each call is printed as
  // {"event":"fetch",path,status}, each renewal as {"event":"auth",type}.
  const realFetch = globalThis.fetch;
  globalThis.fetch = async (u, init) => {
    inflight += 1;
    try {
      const response = await realFetch(u, init);
      out({ event: 'fetch', path: new URL(u).pathname, status: response.status });
      return response;
    } finally {
      inflight -= 1;
    }
  };
  await storage.initialize('topgun_offline_db');
  if (refreshToken) await storage.setMeta('topgun:refreshToken', refreshToken);
  auth = new CustomAuthProvider(async () => (external === '-' ? null : external), {
    tokenExchangeConfig: { serverUrl: url.replace(/^ws/, 'http').replace(/\/topgun$/, ''),
                           providerName: exchange, enableRefresh: true },
    refreshMarginMs: 500, storageAdapter: storage,
  });
  auth.onAuthEvent((e) => out({ event: 'auth', type: e.type, error: e.error ? String(e.error.message) : null }));
}
const client = new TopGunClient({
  ...(seeds ? { cluster: { seeds: seeds.split(','), partitionMapRefreshMs: 1000 } } : { serverUrl: url }),
  storage,
  nodeId,
  backoff: { initialDelayMs: 300, maxDelayMs: 600, maxRetries: 2 },
  ...(auth ? { auth } : {}),
});
await client.start();
if (token) client.setAuthToken(token);
// TopGunClient.setAuthToken reaches only its SyncEngine, which sends AUTH on one pooled
// connection; the cluster client's pool authenticates every node's connection itself (on
// open and on AUTH_REQUIRED) once it holds the token.
if (token && seeds) client.clusterClient.setAuthToken(token);
const finish = async () => {
  out({ event: 'end', state: client.getConnectionState(), pendingOps: client.getPendingOpsCount() });
  await client.close().catch(() => {});
  process.exit(0);
};
setTimeout(finish, seconds * 1000);
const connected = new Promise((resolve) => client.onConnectionStateChange((e) => {
  if (e.to === 'CONNECTED') resolve();
}));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

if (scenario === 'watch') {
  const users = client.getMap('users');
  const tags = client.getORMap('tags');
  const show = () => {
    const u = {};
    for (const [k, v] of users.entries()) u[k] = v;
    const t = {};
    for (const k of tags.allKeys()) { const vs = tags.get(k); if (vs.length) t[k] = [...vs].sort(); }
    out({ event: 'maps', users: u, tags: t });
  };
  users.subscribe(show);
  tags.subscribe(show);
  await connected;
  out({ event: 'ready' });
} else if (scenario === 'ops') {
  const users = client.getMap('users');
  const tags = client.getORMap('tags');
  for (const op of rest) {
    const [kind, key, json] = op.split('=');
    const value = json === undefined ? undefined : JSON.parse(json);
    if (kind === 'put') users.set(key, value);
    else if (kind === 'remove') users.remove(key);
    else if (kind === 'oradd') tags.add(key, value);
    else if (kind === 'orremove') tags.remove(key, value);
    else { out({ event: 'error', message: 'unknown op ' + op }); await finish(); }
  }
  await connected;
  const poll = setInterval(() => {
    if (client.getPendingOpsCount() === 0) { clearInterval(poll); out({ event: 'synced' }); finish(); }
  }, 25);
} else if (scenario === 'cluster') {
  await client.clusterClient.waitForPartitionMap(5000);
  const users = client.getMap('users');
  const report = (event) => {
    const map = client.clusterClient.partitionRouter.getMap();
    const owners = {};
    for (const p of map ? map.partitions : []) owners[p.ownerNodeId] = (owners[p.ownerNodeId] || 0) + 1;
    out({
      event, version: client.getPartitionMapVersion(), routing: client.isRoutingActive(),
      nodes: map ? map.nodes.map((n) => [n.nodeId, n.endpoints.websocket, n.status]) : [],
      owners, connected: client.getConnectedNodes(),
    });
  };
  const settle = () => {
    const poll = setInterval(() => {
      if (client.getPendingOpsCount() === 0) { clearInterval(poll); report('synced'); }
    }, 25);
  };
  report('cluster');
  for (const op of rest) {
    const [kind, key, json] = op.split('=');
    if (kind === 'put') users.set(key, JSON.parse(json));
  }
  settle();
} else if (scenario === 'writes') {
  // writes PREFIX COUNT GAP_MS: put PREFIX-i = {"i": i} every GAP_MS; once all are acked
  // print {"event":"synced",refreshToken} (the refresh token the client holds then) and end
  const [prefix, count, gap] = rest;
  const users = client.getMap('users');
  await connected;
  for (let i = 0; i < Number(count); i++) {
    users.set(`${prefix}-${i}`, { i });
    await sleep(Number(gap));
  }
  const poll = setInterval(() => {
    // the token printed must stay unspent: no renewal in flight, and none after it
    if (client.getPendingOpsCount() === 0 && inflight === 0) {
      clearInterval(poll);
      auth?.clearRefreshTimer();
      out({ event: 'synced', refreshToken: auth ? auth.refreshTokenValue : null });
      finish();
    }
  }, 25);
} else if (scenario === 'failover') {
  // failover PREFIX GAP_MS (with --seeds): put PREFIX-i every GAP_MS, printing
  // {"event":"progress",written,pending,connected} every 10 writes, until a line on stdin;
  // then stop, wait until every op is acked: {"event":"synced",written,connected}
  const [prefix, gap] = rest;
  await client.clusterClient.waitForPartitionMap(5000);
  const users = client.getMap('users');
  let stop = false;
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', () => { stop = true; });
  let written = 0;
  while (!stop) {
    users.set(`${prefix}-${written}`, { i: written });
    written++;
    if (written % 10 === 0) {
      out({ event: 'progress', written, pending: client.getPendingOpsCount(),
            connected: client.getConnectedNodes() });
    }
    await sleep(Number(gap));
  }
  const poll = setInterval(() => {
    if (client.getPendingOpsCount() === 0) {
      clearInterval(poll);
      out({ event: 'synced', written, connected: client.getConnectedNodes() });
      finish();
    }
  }, 25);
} else if (scenario === 'lockhold') {
  const [name, ms] = rest;
  await connected;
  const lock = client.getLock(name);
  const ok = await lock.lock(Number(ms) * 4);
  out({ event: 'lock', ok, token: lock.fencingToken ?? null, at: Date.now() });
  await sleep(Number(ms));
  out({ event: 'unlock', at: Date.now() });
  if (ok) await lock.unlock().catch(() => {});
  await finish();
} else if (scenario === 'topic') {
  const [name] = rest;
  await connected;
  const topic = client.topic(name);
  topic.subscribe((data) => out({ event: 'topic', data }));
  out({ event: 'ready' });
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', () => topic.publish({ text: 'hello from ' + nodeId }));
} else if (scenario === 'query') {
  await connected;
  const q = client.query('users', {
    predicate: { op: 'gte', attribute: 'age', value: 18 },
    sort: { age: 'desc' },
    limit: 10,
  });
  q.subscribe((rows) => out({ event: 'rows', rows }));
} else if (scenario === 'paged') {
  const limit = Number(rest[0]);
  await connected;
  const filter = { sort: { age: 'asc' }, limit };
  const first = await client.queryOncePaged('users', filter);
  out({ event: 'page', keys: first.items.map((r) => r._key), hasMore: first.hasMore,
        cursor: first.cursor ?? null });
  const handle = client.query('users', filter);
  let rows = [];
  handle.subscribe((r) => { rows = r; });
  await handle.whenSettled();
  for (let round = 0; handle.getPaginationInfo().hasMore && round < 50; round++) {
    await handle.loadMore();
  }
  out({ event: 'all', keys: rows.map((r) => r._key) });
  await finish();
} else if (scenario === 'once') {
  await connected;
  const rows = await client.queryOnce('users', JSON.parse(rest[0]));
  out({ event: 'once', rows });
  await finish();
} else if (scenario === 'search') {
  const [text] = rest;
  await connected;
  const hits = await client.search('users', text, { limit: 5 });
  out({ event: 'search',
        hits: hits.map((h) => ({ key: h.key, score: h.score, matchedTerms: h.matchedTerms })) });
  const handle = client.searchSubscribe('users', text, { limit: 5 });
  handle.subscribe((rows) => out({ event: 'live', keys: rows.map((r) => r.key) }));
  out({ event: 'ready' });
} else if (scenario === 'vector') {
  const [vector, text] = rest;
  await connected;
  const near = await client.vectorSearch('users', new Float32Array(JSON.parse(vector)), { k: 2 });
  out({ event: 'vector', hits: near.map((h) => ({ key: h.key, score: h.score })) });
  const fused = await client.hybridSearch('users', text,
    { methods: ['fullText', 'semantic', 'exact'], k: 3 });
  out({ event: 'hybrid',
        hits: fused.map((h) => ({ key: h.key, score: h.score, methodScores: h.methodScores })) });
  const handle = client.hybridSearchSubscribe('users', text, { methods: ['fullText'], k: 3 });
  handle.subscribe((rows) => out({ event: 'live', keys: rows.map((r) => r.key) }));
  out({ event: 'ready' });
} else if (scenario === 'hybridquery') {
  const [text, year] = rest;
  const { Predicates } = await load('topgun-client.mjs');
  await connected;
  const handle = client.hybridQuery('users', {
    predicate: Predicates.and(Predicates.match('title', text), Predicates.greaterThanOrEqual('year', Number(year))),
  });
  handle.subscribe((rows) => out({ event: 'hybridrows', keys: rows.map((r) => r._key ?? r.key) }));
  out({ event: 'ready' });
} else if (scenario === 'http') {
  // TopGunClient takes no provider of ours, so the provider is driven as the client would.
  const { HttpSyncProvider } = await load('topgun-client.mjs');
  const { pack } = await load('msgpackr.mjs');
  let tick = 0;
  const hlc = { now: () => ({ millis: Date.now(), counter: tick++, nodeId }), update: () => {} };
  const provider = new HttpSyncProvider({
    url: url.replace(/^ws/, 'http'), clientId: nodeId, hlc, authToken: token || '',
    syncMaps: ['users'], pollIntervalMs: 200,
  });
  provider.on('message', (_node, data) => {
    const m = unpack(Buffer.from(data));
    out({ event: 'http', type: m.type, payload: m.payload });
  });
  provider.on('error', (err) => out({ event: 'error', message: String(err && err.message) }));
  const ops = rest.map((op, i) => {
    const [, key, json] = op.split('=');
    const timestamp = hlc.now();
    return { id: String(i + 1), mapName: 'users', opType: 'PUT', key,
             record: { value: JSON.parse(json), timestamp }, timestamp };
  });
  if (ops.length) provider.send(pack({ type: 'OP_BATCH', payload: { ops } }));
  await provider.connect();
  out({ event: 'ready' });
} else if (scenario === 'journal-watch') {
  await connected;
  client.getEventJournal().subscribe((e) => out({
    event: 'journal', sequence: String(e.sequence), type: e.type, key: e.key, value: e.value ?? null,
    previousValue: e.previousValue ?? null,
  }), { mapName: 'users' });
  out({ event: 'ready' });
} else if (scenario === 'device') {
  await connected;
  const poll = setInterval(() => {
    const deviceId = storage.meta.get('deviceId');
    if (deviceId) {
      clearInterval(poll);
      out({ event: 'device', deviceId, deviceToken: storage.meta.get('deviceToken') ?? null });
      finish();
    }
  }, 25);
} else if (scenario === 'calls') {
  await connected;
  const calls = {
    sql: () => client.sql('SELECT name FROM users'),
    search: () => client.search('users', 'alice', { limit: 5 }),
    vector: () => client.vectorSearch('users', new Float32Array([0.1, 0.2, 0.3]), { k: 3 }),
    hybrid: () => client.hybridSearch('users', 'alice', { k: 3 }),
    journal: () => client.getEventJournal().readFrom(0n, 10),
    processor: () => client.executeOnKey('users', 'u1', { name: 'inc', code: 'x' }),
    resolvers: () => client.getConflictResolvers().list('users'),
    'apply-ack': async () => client.syncEngine.emitConfirmedApply(1),
  };
  for (const name of rest) {
    try {
      const value = await calls[name]();
      out({ event: 'call', name, ok: true, value: value ?? null });
    } catch (err) {
      out({ event: 'call', name, ok: false, error: String(err && err.message), code: err && err.code });
    }
  }
  await sleep(200);  // let any answer to the last call arrive before the trace ends
  await finish();
} else {
  out({ event: 'error', message: 'unknown scenario ' + scenario });
  await finish();
}
