// The WebTransport media wire format (docs/protocol.md, "WebTransport media
// (MoQT)"): MoQ Transport draft-18 control messages and subgroup streams, and
// LOC-style object metadata. Integers and pairs are in wtbytes.ts, Petrel's
// datagram extension in wtdgram.ts. Pure encoding; unit-tested in Node.
import { type Pairs, Reader, WireError, Writer, readPairsToEnd, readParams, writePairs, writeParams } from './wtbytes.js';

export const MOQT_VERSION = 'moqt-18';

export const Msg = {
  SETUP: 0x2f00,
  PUBLISH_NAMESPACE: 0x6,
  REQUEST_OK: 0x7,
  REQUEST_ERROR: 0x5,
  SUBSCRIBE: 0x3,
  SUBSCRIBE_OK: 0x4,
  UNSUBSCRIBE: 0xa,
  PUBLISH_DONE: 0xb,
  GOAWAY: 0x10,
} as const;

export const Setup = { PATH: 0x1, AUTH: 0x3, IMPLEMENTATION: 0x7, PETREL: 0x2a1 } as const;
/** SUBSCRIBE parameter: 1 asks for datagram delivery (Petrel extension). */
export const PARAM_DATAGRAM = 0x2a0;

export const Loc = {
  TIMESTAMP_US: 0x2a0,
  FLAGS: 0x2a2,
  CODEC: 0x2a3,
  WALLCLOCK_MS: 0x2a4,
  DESCRIPTION: 0x2a5,
  WIDTH: 0x2a6,
  HEIGHT: 0x2a8,
  AUDIO_LEVEL: 0x2aa,
} as const;

export const SUBGROUP_HEADER = 0x15;
export const RequestErrorCode = { INTERNAL: 0x0, UNAUTHORIZED: 0x1, NOT_SUPPORTED: 0x3, DOES_NOT_EXIST: 0x10 } as const;
/** Stream reset code for a group whose frames went stale. */
export const RESET_STALE = 0x1;

// ---- control messages -------------------------------------------------------------

/** Frames a control message: vi type, u16 length, payload. */
export function message(type: number, body: (w: Writer) => void): Uint8Array {
  const p = new Writer();
  body(p);
  if (p.length > 0xffff) throw new WireError('control message over 64 KiB');
  return new Writer(p.length + 8).vi(type).u16(p.length).raw(p.finish()).finish();
}

export function writeNamespace(w: Writer, ns: string[]): void {
  w.vi(ns.length);
  for (const f of ns) w.bytes(enc.encode(f));
}

export function readNamespace(r: Reader): string[] {
  const n = r.vi();
  if (n < 1 || n > 32) throw new WireError(`namespace of ${n} fields`);
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(dec.decode(r.bytes(4096)));
  return out;
}

const enc = new TextEncoder();
const dec = new TextDecoder();

export function setupMessage(pairs: Pairs): Uint8Array {
  return message(Msg.SETUP, (w) => writePairs(w, pairs, false));
}

export function subscribeMessage(requestId: number, ns: string[], track: string, params: Pairs = new Map()): Uint8Array {
  return message(Msg.SUBSCRIBE, (w) => {
    w.vi(requestId);
    writeNamespace(w, ns);
    w.bytes(enc.encode(track));
    writeParams(w, params);
  });
}

// Draft-18 responses (SUBSCRIBE_OK, REQUEST_OK, REQUEST_ERROR, PUBLISH_DONE) and
// UNSUBSCRIBE travel on the request's own stream and carry no request id.
export function subscribeOkMessage(alias: number): Uint8Array {
  return message(Msg.SUBSCRIBE_OK, (w) => {
    w.vi(alias);
    writeParams(w);
  });
}

export function publishNamespaceMessage(requestId: number, ns: string[]): Uint8Array {
  return message(Msg.PUBLISH_NAMESPACE, (w) => {
    w.vi(requestId);
    writeNamespace(w, ns);
    writeParams(w);
  });
}

export function requestErrorMessage(code: number, reason: string): Uint8Array {
  return message(Msg.REQUEST_ERROR, (w) => w.vi(code).vi(0).bytes(enc.encode(reason)));
}

export function unsubscribeMessage(): Uint8Array {
  return message(Msg.UNSUBSCRIBE, () => {});
}

/** A parsed control message: its type and a reader over exactly its payload. */
export interface ControlMessage {
  type: number;
  body: Reader;
}

export type ParsedRequest =
  | { type: typeof Msg.SUBSCRIBE; requestId: number; ns: string[]; track: string; params: Pairs }
  | { type: typeof Msg.SUBSCRIBE_OK; alias: number; params: Pairs }
  | { type: typeof Msg.REQUEST_OK }
  | { type: typeof Msg.REQUEST_ERROR; code: number; reason: string }
  | { type: typeof Msg.PUBLISH_NAMESPACE; requestId: number; ns: string[] }
  | { type: typeof Msg.UNSUBSCRIBE }
  | { type: typeof Msg.PUBLISH_DONE; status: number; reason: string }
  | { type: typeof Msg.GOAWAY; uri: string }
  | { type: typeof Msg.SETUP; pairs: Pairs }
  | { type: -1; raw: number };

/** Decodes a request-stream or control-stream message. Unknown types are returned as type -1. */
export function parseMessage(m: ControlMessage): ParsedRequest {
  const r = m.body;
  switch (m.type) {
    case Msg.SETUP:
      return { type: Msg.SETUP, pairs: readPairsToEnd(r) };
    case Msg.SUBSCRIBE: {
      const requestId = r.vi();
      const ns = readNamespace(r);
      const track = dec.decode(r.bytes(4096));
      return { type: Msg.SUBSCRIBE, requestId, ns, track, params: readParams(r) };
    }
    case Msg.SUBSCRIBE_OK: {
      const alias = r.vi();
      const params = readParams(r);
      readPairsToEnd(r); // track extensions: none used by the SDK yet
      return { type: Msg.SUBSCRIBE_OK, alias, params };
    }
    case Msg.REQUEST_OK:
      readParams(r);
      return { type: Msg.REQUEST_OK };
    case Msg.REQUEST_ERROR: {
      const code = r.vi();
      r.vi(); // retry interval
      return { type: Msg.REQUEST_ERROR, code, reason: dec.decode(r.bytes(4096)) };
    }
    case Msg.PUBLISH_NAMESPACE: {
      const requestId = r.vi();
      const ns = readNamespace(r);
      readParams(r);
      return { type: Msg.PUBLISH_NAMESPACE, requestId, ns };
    }
    case Msg.UNSUBSCRIBE:
      return { type: Msg.UNSUBSCRIBE };
    case Msg.PUBLISH_DONE: {
      const status = r.vi();
      r.vi(); // stream count
      return { type: Msg.PUBLISH_DONE, status, reason: dec.decode(r.bytes(4096)) };
    }
    case Msg.GOAWAY:
      return { type: Msg.GOAWAY, uri: dec.decode(r.bytes(8192)) };
    default:
      return { type: -1, raw: m.type };
  }
}

/** A reply that is not the one hoped for, for an error message. */
export function describeReply(m: ParsedRequest): string {
  if (m.type === Msg.REQUEST_ERROR) return `error 0x${m.code.toString(16)} ${m.reason}`;
  return `unexpected reply type ${m.type}`;
}

// ---- object metadata (LOC) -----------------------------------------------------

export interface ObjectMeta {
  tsUs: number;
  key: boolean;
  discardable?: boolean;
  codec?: string;
  wallMs?: number;
  width?: number;
  height?: number;
  level?: number;
}

/** Extension headers of an object: vi byte-length, then pairs. */
export function writeMeta(w: Writer, m: ObjectMeta): void {
  const p: Pairs = new Map();
  p.set(Loc.TIMESTAMP_US, m.tsUs);
  p.set(Loc.FLAGS, (m.key ? 1 : 0) | (m.discardable ? 2 : 0));
  if (m.codec) p.set(Loc.CODEC, enc.encode(m.codec));
  if (m.wallMs !== undefined) p.set(Loc.WALLCLOCK_MS, m.wallMs);
  if (m.width) p.set(Loc.WIDTH, m.width);
  if (m.height) p.set(Loc.HEIGHT, m.height);
  if (m.level !== undefined) p.set(Loc.AUDIO_LEVEL, m.level);
  const inner = new Writer();
  writePairs(inner, p, false);
  w.vi(inner.length).raw(inner.finish());
}

export function readMeta(r: Reader): ObjectMeta {
  return metaFromPairs(r.raw(r.vi()));
}

/** Object metadata from the extension headers' pair bytes (without their length). */
export function metaFromPairs(b: Uint8Array): ObjectMeta {
  const p = readPairsToEnd(new Reader(b));
  const ts = p.get(Loc.TIMESTAMP_US);
  if (typeof ts !== 'number') throw new WireError('object without a media timestamp');
  const flags = (p.get(Loc.FLAGS) as number | undefined) ?? 0;
  const codec = p.get(Loc.CODEC);
  const num = (k: number) => {
    const v = p.get(k);
    return typeof v === 'number' ? v : undefined;
  };
  return {
    tsUs: ts,
    key: (flags & 1) !== 0,
    discardable: (flags & 2) !== 0,
    codec: codec instanceof Uint8Array ? dec.decode(codec) : undefined,
    wallMs: num(Loc.WALLCLOCK_MS),
    width: num(Loc.WIDTH),
    height: num(Loc.HEIGHT),
    level: num(Loc.AUDIO_LEVEL),
  };
}

/** The object as datagram mode fragments it: metadata then payload. */
export function objectBytes(m: ObjectMeta, payload: Uint8Array): Uint8Array {
  const w = new Writer(payload.length + 48);
  writeMeta(w, m);
  w.raw(payload);
  return w.finish();
}

export function parseObjectBytes(b: Uint8Array): { meta: ObjectMeta; payload: Uint8Array } {
  const r = new Reader(b);
  const meta = readMeta(r);
  return { meta, payload: r.rest() };
}

// ---- subgroup streams -----------------------------------------------------------


export function subgroupHeader(alias: number, group: number, subgroup: number, priority: number): Uint8Array {
  return new Writer(24).vi(SUBGROUP_HEADER).vi(alias).vi(group).vi(subgroup).u8(priority).finish();
}

/** One object on a subgroup stream: id delta, metadata, payload length, payload. */
export function streamObject(idDelta: number, m: ObjectMeta, payload: Uint8Array): Uint8Array {
  const w = new Writer(payload.length + 48);
  w.vi(idDelta);
  writeMeta(w, m);
  w.vi(payload.length);
  if (payload.length === 0) w.vi(0); // status: normal
  w.raw(payload);
  return w.finish();
}

/** Which fields a draft-18 subgroup header type carries, or undefined for a non-subgroup type. */
export function subgroupLayout(type: number): { explicitSubgroup: boolean; subgroupIsFirstObject: boolean; priority: boolean; ext: boolean } | undefined {
  // 0x30–0x3D: as 0x10–0x1D without the priority byte; +0x40: the stream starts
  // at the subgroup's first object (same fields).
  const base = type & ~0x60;
  if (base < 0x10 || base > 0x1d || (base & 0x6) === 0x6) return undefined;
  const sid = (base >> 1) & 0x3; // 0: subgroup 0, 1: first object id, 2: explicit
  return { explicitSubgroup: sid === 2, subgroupIsFirstObject: sid === 1, priority: (type & 0x20) === 0, ext: (base & 1) === 1 };
}
