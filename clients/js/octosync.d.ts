// Types for octosync.js, the dependency-free client of octosync's /lazily face.

/** Root of every error the client raises or receives; `code` is the server's stable name. */
export class OctosyncError extends Error {
  constructor(message: string, options?: { code?: string; path?: string | null; closes?: boolean });
  /** The server's error name (`Unauthorized`, `Forbidden`, `EpochGap`, `ConnectionLost`, ...). */
  readonly code: string;
  /** The field the error is about (`stream`, `$.ops[0].slot_id`), if any. */
  readonly path: string | null;
  /** True when the server closes the connection after this error. */
  readonly closes: boolean;
}

/** Error classes by name (`errors.Unauthorized`, `errors.EpochGap`, ...): `instanceof` works. */
export const errors: { OctosyncError: typeof OctosyncError } & Record<string, typeof OctosyncError>;

/** The typed error for a server error frame `{type: "error", code, message, path?}`. */
export function errorFromFrame(frame: { code: string; message: string; path?: string | null }): OctosyncError;

/** A value's wire type: a built-in tag or one registered on a `TypeRegistry`. */
export type TypeTag = "i64" | "f64" | "bool" | "string" | "bytes" | "json" | (string & {});

/** A type-tag table: the built-ins plus tags you register. */
export class TypeRegistry {
  constructor();
  register(name: string, encode: (value: unknown) => Uint8Array, decode: (bytes: Uint8Array) => unknown): void;
  has(name: string): boolean;
  encode(name: string, value: unknown): Uint8Array;
  decode(name: string, bytes: Uint8Array): unknown;
}

export const defaultRegistry: TypeRegistry;

export function fromBase64(text: string, path?: string): Uint8Array;
export function toBase64(bytes: Uint8Array): string;

/** One decoded server frame of the seed JSON dialect. */
export type Message =
  | { type: "snapshot"; epoch: number; [field: string]: unknown }
  | { type: "delta"; base: number; epoch: number; ops: unknown[]; [field: string]: unknown }
  | { type: "error"; error: OctosyncError }
  | { type: string; [field: string]: unknown };

/** Decode one frame strictly (a `DecodeError` names the failing field). */
export function decodeMessage(text: string): Message;

/** What `Mirror.apply` did with a frame. */
export type ApplyResult = "applied" | "ignored" | string;

/** The receiving side of a stream: a snapshot, then gapless deltas. */
export class Mirror {
  constructor(registry?: TypeRegistry);
  readonly epoch: number | null;
  readonly inSync: boolean;
  readonly lastError: OctosyncError | null;
  apply(msg: Message): ApplyResult;
  /** Node id -> decoded value, for resolved nodes. */
  values(): Map<number, unknown>;
  /** The node id for a key (or the id itself), null when unknown. */
  idOf(nameOrId: string | number): number | null;
}

/** Full-jitter exponential backoff: attempt n waits uniform(0, min(cap, base * 2^n)) seconds. */
export function backoffDelay(attempt: number, options?: { base?: number; cap?: number }, random?: () => number): number;

export type Status = "connecting" | "open" | "reconnecting" | "closed" | "failed";

/** A stream's mirrored state. */
export interface State {
  epoch: number;
  /** Node id -> decoded value. */
  values: Map<number, unknown>;
  /** Node key (name) -> node id. */
  keys: Map<string, number>;
}

interface Channel<Events> {
  readonly stream: string;
  readonly status: Status;
  readonly errors: OctosyncError[];
  readonly reconnects: number;
  /** Listen; returns the function that stops listening. */
  on<E extends keyof Events>(event: E, listener: (value: Events[E]) => void): () => void;
  close(): void;
}

/** A live copy of one stream. */
export interface Subscription extends Channel<{ state: State; error: OctosyncError; status: Status }> {
  readonly state: State | null;
  readonly resyncs: number;
  /** Resolves with the first state; rejects if the subscription ends first. */
  readonly ready: Promise<State>;
  /** The current value of a node, by key or id. */
  get(nameOrId: string | number): unknown;
  /**
   * Ask the producer to set a cell. Resolves true once applied, false when the producer only
   * confirms delivery; rejects with the typed refusal (Forbidden: no grant on the stream or
   * the node, or the producer's own rule).
   */
  write(nameOrId: string | number, value: unknown): Promise<boolean>;
  /** Ask the producer to run an effect, by its node id; as `write`. */
  trigger(effectId: number): Promise<boolean>;
}

/** Who asked a producer for a write, as the server vouches. */
export interface Writer {
  /** The writer's connection on the server. */
  peer: number | null;
  /** The writer's token subject (null with --insecure-dev). */
  subject: string | null;
}

/** A node of a `Store`. */
export interface Node<T = unknown> {
  readonly id: number;
  get(): T;
  /** Cells only: a derived node throws. */
  set(value: T): void;
}

/** Cells and derived values; one synchronous run of changes (or one `batch`) is one delta. */
export class Store {
  constructor(registry?: TypeRegistry);
  cell<T>(initial: T, typeTag: TypeTag, options?: { key?: string }): Node<T>;
  derived<T>(fn: () => T, typeTag: TypeTag, options?: { key?: string }): Node<T>;
  batch(fn: () => void): void;
  flush(): void;
}

/** A store served as a stream. */
export interface Publication
  extends Channel<{ write: { id: number; value: unknown }; error: OctosyncError; status: Status }> {
  readonly deltasSent: number;
  /** Resolves once the snapshot is sent; rejects if the publication ends first. */
  readonly ready: Promise<Publication>;
}

export interface ClientOptions {
  /** A JWT, sent as `?token=` (omit with `--insecure-dev`). */
  token?: string | null;
  /** A WebSocket constructor (Node before 22). */
  WebSocket?: unknown;
  /** Seconds; `maxAttempts` failed attempts in a row end a channel as "failed". */
  backoff?: { base?: number; cap?: number; maxAttempts?: number };
  random?: () => number;
  maxFrameSize?: number;
  registry?: TypeRegistry;
  fetch?: typeof fetch;
  /** Other nodes of a cluster: a channel that loses its node goes on with the next. */
  fallbacks?: string[];
}

/** A connection factory for one server (`ws://host:port`, `wss://...`, `http://...`). */
export class Client {
  constructor(url: string, options?: ClientOptions);
  subscribe(
    stream: string,
    handlers?: { onState?: (state: State) => void; onError?: (error: OctosyncError) => void },
  ): Subscription;
  publish(
    stream: string,
    store: Store,
    options?: {
      accept?: (id: number, value: unknown, writer?: Writer) => boolean;
      onError?: (error: OctosyncError) => void;
    },
  ): Publication;
  /** A shared document: the multi-writer stream `name` (docs/crdt.md). */
  openDocument(
    name: string,
    options?: {
      peer?: number;
      clock?: () => number;
      onError?: (error: OctosyncError) => void;
      /** Keep pending edits in IndexedDB for the next page of this document (browsers). */
      persist?: boolean;
      /** Seconds between resends of this replica's presence and awareness values (10). */
      heartbeat?: number;
      /** Milliseconds between two reports of what this replica has seen, at most (1000): the
       * server collects a list's tombstones once every writer has seen them. */
      reportEvery?: number;
    },
  ): SharedDocument;
  close(): void;
}

export function connect(url: string, options?: ClientOptions): Client;

/** The node id every replica gives to a shared value's entries (low 48 bits of FNV-1a-64). */
export function nodeOf(name: string): number;

// --- shared text -------------------------------------------------------------------------------

/** One change of a text: at `index`, `delete` characters went and `insert` came (code points). */
export interface TextEdit {
  index: number;
  delete: number;
  insert: string;
}

/** A shared text of a document (Python: `doc.text(name)`); indexes count Unicode code points. */
export class SharedText {
  readonly name: string;
  readonly kind: "text";
  readonly value: string;
  readonly length: number;
  toString(): string;
  insert(index: number, text: string): void;
  delete(index: number, count?: number): void;
  /** `fn(edits)` now (the whole text as one insert), then with every change, local and received. */
  onChange(fn: (edits: TextEdit[]) => void): () => void;
  on(event: "change", fn: (edits: TextEdit[]) => void): () => void;
}

/** Keep a `<textarea>` or `<input>` and a text in step, caret and selection kept; returns an unbind. */
export function bindTextarea(text: SharedText, el: HTMLTextAreaElement | HTMLInputElement): () => void;
/** Keep a plain-text contenteditable element and a text in step, caret and selection kept; returns an unbind. */
export function bindContentEditable(text: SharedText, el: HTMLElement): () => void;
/** Code points in the first `units` UTF-16 units of `s`. */
export function codePointIndex(s: string, units: number): number;
/** UTF-16 units of the first `points` code points of `s`. */
export function unitIndex(s: string, points: number): number;

/** The text CRDT alone (sans-I/O): runs to send out, received runs and deletions in. */
export class TextCrdt {
  constructor(peer: number);
  readonly length: number;
  toString(): string;
  insert(index: number, text: string): { peer: number; clock: number; text: string; origin: [number, number] }[];
  delete(index: number, count?: number): [number, number, number][];
  integrate(run: { peer: number; clock: number; text: string; origin: [number, number] }): TextEdit[];
  remove(ranges: [number, number, number][]): TextEdit[];
  /** The server collected `peer`'s chunk `chunk`: drop what of it is outside the `kept` [clock, length] runs. */
  compact(peer: number, chunk: number, kept: [number, number][]): TextEdit[];
  /** Deleted characters still held. */
  tombstones(): number;
}

/** A text's replica and the chunk entries (`tx/PEER/CHUNK`, `td/PEER/N`: key rest, JSON) its edits write. */
export class TextEntries {
  constructor(peer: number);
  readonly crdt: TextCrdt;
  insert(index: number, text: string): [string, string][];
  delete(index: number, count?: number): [string, string][];
  /** `rewrite`: the entry's winning write is the server's (stamped by peer 0) compaction of a closed chunk. */
  receive(rest: string, value: unknown, rewrite?: boolean): void;
}

/** One value of a shared document. */
export class SharedValue<T = unknown> {
  readonly name: string;
  readonly kind: "pn" | "lww" | "mv" | "map";
  readonly value: T;
  /** Counter: add `amount` (negative subtracts). */
  add(amount?: number): void;
  /** Register: `set(value)`; map: `set(field, value)`. */
  set(...args: unknown[]): void;
  /** Map: delete `field`. */
  delete(field: string): void;
  /** Call `fn(value)` now and after every change; returns the function that stops it. */
  onChange(fn: (value: T) => void): () => void;
  /** "change" events only (not the current value). */
  on(event: "change", fn: (value: T) => void): () => void;
}

/** What one change of a list did: indexes of `deleted` and moves' `from` are in the old list. */
export interface ListChange<T = unknown> {
  inserted: { index: number; value: T }[];
  deleted: { index: number; value: T }[];
  moved: { from: number; to: number; value: T }[];
  set: { index: number; value: T }[];
}

/** A position between two list positions (null: the start or the end), as octosync.crdt.seq.between. */
export function positionBetween(lo: number[] | null, hi: number[] | null): number[];
/** The position a peer gives a list element between two others: positionBetween, then the peer's two digits. */
export function placePosition(lo: number[] | null, hi: number[] | null, peer: number): number[];
/** What changed between two orders of [id, value] pairs (what SharedList's "edit" events carry). */
export function listChange<T = unknown>(before: [string, T][], after: [string, T][]): ListChange<T>;
export function oneChange<T = unknown>(before: [string, T][], oldAt: number | null, newAt: number | null, value: T): ListChange<T>;

/** A list of a shared document (the move-aware sequence): the Python client's names. */
export class SharedList<T = unknown> implements Iterable<T> {
  readonly name: string;
  readonly kind: "list";
  readonly value: T[];
  readonly length: number;
  at(index: number): T | undefined;
  [Symbol.iterator](): Iterator<T>;
  /** Insert `value` so that it is at `index` (0 to length). */
  insert(index: number, value: T): void;
  push(value: T): void;
  /** Move the element at `from` so that it is at `to` (one position write: never a copy). */
  move(from: number, to: number): void;
  delete(index: number): void;
  set(index: number, value: T): void;
  /** Call `fn(values)` now and after every change; returns the function that stops it. */
  onChange(fn: (value: T[]) => void): () => void;
  /** Call `fn(change)` after every change, saying what was inserted, deleted, moved and set. */
  onEdit(fn: (change: ListChange<T>) => void): () => void;
  on(event: "change", fn: (value: T[]) => void): () => void;
  on(event: "edit", fn: (change: ListChange<T>) => void): () => void;
}

/** Every peer's presence or awareness value, by peer id (kept by the server, never journaled). */
export class SharedPresence<T = unknown> {
  readonly name: string;
  readonly kind: "pr" | "aw";
  readonly all: Record<string, T>;
  readonly others: Record<string, T>;
  readonly mine: T | null;
  /** Set this replica's value (`null` clears it); sent again on reconnect and every heartbeat. */
  set(value: T | null): void;
  clear(): void;
  onChange(fn: (all: Record<string, T>) => void): () => void;
  on(event: "change", fn: (all: Record<string, T>) => void): () => void;
}

/** One replica of a multi-writer stream: counters, registers, multi-value registers, maps, lists. */
export class SharedDocument implements Channel<{ change: string[]; error: OctosyncError; status: Status }> {
  readonly stream: string;
  readonly status: Status;
  readonly errors: OctosyncError[];
  readonly reconnects: number;
  readonly peer: number;
  /** Local edits the server has not acknowledged yet. */
  readonly pending: number;
  /** True once the server's whole document arrived on the current connection. */
  readonly joined: boolean;
  on<E extends "change" | "error" | "status">(
    event: E,
    listener: (value: { change: string[]; error: OctosyncError; status: Status }[E]) => void,
  ): () => void;
  close(): void;
  counter(name: string): SharedValue<number>;
  register(name: string): SharedValue<unknown>;
  multi(name: string): SharedValue<unknown[]>;
  map(name: string): SharedValue<Record<string, unknown>>;
  list<T = unknown>(name: string): SharedList<T>;
  /** Each connection's presence: alive while it is connected. */
  readonly presence: SharedPresence;
  /** An awareness value (a cursor, a selection): each peer's latest, until the server's TTL. */
  awareness<T = unknown>(name: string): SharedPresence<T>;
  /** A shared text, merged character by character. */
  text(name: string): SharedText;
  /** Resolves once the document arrived and every local edit is acknowledged. */
  synced(): Promise<SharedDocument>;
  /** With `persist`: resolves once saved edits are taken up (edit after it); else at once. */
  readonly ready: Promise<SharedDocument>;
}

/** A WebRTC data channel from a peer, mirrored (`followPeer`). */
export interface PeerLink {
  /** The peer id of the side that made the offer. */
  peer: number | null;
  mirror: Mirror;
  /** Resync requests sent after a gap or a bad frame. */
  resyncs: number;
  close(): void;
}

/** Join `session` of the server's `/signal` relay as `peer`, answer the first offer and mirror
 * the offerer's state plane over its `lazily` data channel. */
export function followPeer(
  url: string,
  options: {
    session?: string;
    peer: number;
    token?: string;
    onState?: (state: { epoch: number | null; values: Map<number, unknown> }) => void;
    rtcConfig?: RTCConfiguration;
  },
): Promise<PeerLink>;

/** A WebRTC data channel to a peer that follows this side's store (`publishToPeer`). */
export interface PublishedLink {
  /** The peer id the offer went to. */
  peer: number;
  deltasSent: number;
  /** Resync requests answered with a snapshot. */
  resyncs: number;
  close(): void;
}

/** Join `session` of the server's `/signal` relay as `peer`, offer peer `to` a `lazily` data
 * channel and publish `store` over it: a snapshot, then a delta per flush. */
export function publishToPeer(
  url: string,
  store: Store,
  options: {
    session?: string;
    peer: number;
    to: number;
    token?: string;
    rtcConfig?: RTCConfiguration;
  },
): Promise<PublishedLink>;

/** RFC 7386 JSON merge patch. */
export function mergePatch(target: unknown, patch: unknown): unknown;

/** A device of an Octoprotocol chain in a browser, persisted in IndexedDB. */
export class ChainDevice {
  constructor(
    url: string,
    chain: string,
    name: string,
    options?: { token?: string; database?: string; backoff?: { base?: number; cap?: number } },
  );
  readonly name: string;
  readonly chain: string;
  events: Map<number, { Type: "DeviceEvent"; DeviceSequencer: number; Name: string; Payload: string }>;
  nextSequencer: number;
  state: unknown;
  stateSequencer: number;
  live: boolean;
  start(): Promise<ChainDevice>;
  emitEvent(name: string, payload: string): Promise<void>;
  on(event: "state", fn: (s: { state: unknown; sequencer: number }) => void): () => void;
  on(event: "status", fn: (status: "connecting" | "live") => void): () => void;
  on(event: "error", fn: (error: Error) => void): () => void;
  close(): void;
}
