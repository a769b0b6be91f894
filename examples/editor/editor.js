// Tiptap, collaborative: the document is a Yjs document that octosync's /yjs face journals.
// ?server=ws://HOST:PORT (default 127.0.0.1:8765)  ?doc=NAME (default "editor")  ?token=JWT
import { Editor } from "@tiptap/core";
import StarterKit from "@tiptap/starter-kit";
import Collaboration from "@tiptap/extension-collaboration";
import CollaborationCaret from "@tiptap/extension-collaboration-caret";
import { HocuspocusProvider } from "@hocuspocus/provider";
import * as Y from "yjs";

const params = new URLSearchParams(location.search);
const server = params.get("server") ?? "ws://127.0.0.1:8765";
const name = params.get("doc") ?? "editor";
const user = params.get("user") ?? `guest ${Math.floor(Math.random() * 1000)}`;
const status = document.getElementById("status");

const ydoc = new Y.Doc();
const provider = new HocuspocusProvider({
  url: `${server}/yjs`,
  name,
  document: ydoc,
  token: params.get("token") ?? "",
});
const editor = new Editor({
  element: document.getElementById("editor"),
  extensions: [
    StarterKit.configure({ undoRedo: false }), // Yjs keeps the history
    Collaboration.configure({ document: ydoc }),
    CollaborationCaret.configure({
      provider,
      user: { name: user, color: `hsl(${Math.floor(Math.random() * 360)} 70% 45%)` },
    }),
  ],
});

// "saved" only once the server said every change is journaled (Hocuspocus's SyncStatus)
const show = () =>
  (status.textContent = provider.hasUnsyncedChanges ? "saving…" : provider.synced ? "saved" : "connecting…");
provider.on("synced", show);
provider.on("unsyncedChanges", show);
window.example = { editor, provider, ydoc };
