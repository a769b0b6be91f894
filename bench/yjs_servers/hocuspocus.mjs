// Hocuspocus's server with its SQLite extension (bench/yjs_face.py): documents persisted to
// DATABASE on its default debounce. usage: node hocuspocus.mjs PORT DATABASE
import { Server } from "@hocuspocus/server";
import { SQLite } from "@hocuspocus/extension-sqlite";

const [port, database] = process.argv.slice(2);
const server = new Server({
  port: Number(port),
  address: "127.0.0.1",
  quiet: true,
  extensions: [new SQLite({ database })],
});
await server.listen();
