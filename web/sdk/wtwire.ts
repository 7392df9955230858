// The WebTransport media wire format (docs/protocol.md, "WebTransport media
// (MoQT)"): MoQ Transport draft-18 integers, key-value pairs, control messages
// and subgroup streams, LOC-style object metadata, and Petrel's datagram
// extension (FRAGMENT, NACK, KEYFRAME_REQUEST, FEC). Pure encoding; unit-tested
// in Node. Every decode of network input throws WireError on malformed bytes.

export class WireError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WireError';
  }
}

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

export const Dgram = { FRAGMENT: 0x50, NACK: 0x51, KEYFRAME_REQUEST: 0x52, FEC: 0x53 } as const;
export const SUBGROUP_HEADER = 0x15;
export const RequestErrorCode = { INTERNAL: 0x0, UNAUTHORIZED: 0x1, NOT_SUPPORTED: 0x3, DOES_NOT_EXIST: 0x10 } as const;
/** Stream reset code for a group whose frames went stale. */
export const RESET_STALE = 0x1;

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

// ---- integers -------------------------------------------------------------------

/** Bytes a draft-18 `vi` of this value takes. */
export function viLen(v: number): number {
  if (v < 0 || !Number.isInteger(v) || v > MAX_SAFE) throw new WireError(`vi out of range: ${v}`);
  for (let n = 1; n <= 8; n++) if (v < 2 ** (7 * n)) return n;
  return 9;
}

export class Writer {
  private buf: Uint8Array;
  private n = 0;
  constructor(size = 64) {
    this.buf = new Uint8Array(size);
  }
  private room(k: number): void {
    if (this.n + k <= this.buf.length) return;
    const b = new Uint8Array(Math.max(this.buf.length * 2, this.n + k));
    b.set(this.buf.subarray(0, this.n));
    this.buf = b;
  }
  get length(): number {
    return this.n;
  }
  u8(v: number): this {
    this.room(1);
    this.buf[this.n++] = v & 0xff;
    return this;
  }
  u16(v: number): this {
    this.room(2);
    this.buf[this.n++] = (v >> 8) & 0xff;
    this.buf[this.n++] = v & 0xff;
    return this;
  }
  vi(v: number): this {
    const len = viLen(v);
    this.room(len);
    if (len === 9) {
      this.buf[this.n++] = 0xff;
      this.bigEndian(v, 8);
      return this;
    }
    // The first byte holds len−1 one bits, a zero, then the top value bits.
    const valueBits = 7 * len;
    const firstBits = 8 - len; // value bits in the first byte
    const hi = Math.floor(v / 2 ** (valueBits - firstBits));
    const prefix = (0xff << (9 - len)) & 0xff;
    this.buf[this.n++] = prefix | hi;
    this.bigEndian(v % 2 ** (valueBits - firstBits), len - 1);
    return this;
  }
  private bigEndian(v: number, bytes: number): void {
    for (let i = bytes - 1; i >= 0; i--) {
      this.buf[this.n + i] = v % 256;
      v = Math.floor(v / 256);
    }
    this.n += bytes;
  }
  raw(b: Uint8Array): this {
    this.room(b.length);
    this.buf.set(b, this.n);
    this.n += b.length;
    return this;
  }
  /** `bytes`: vi length, then the bytes. */
  bytes(b: Uint8Array): this {
    return this.vi(b.length).raw(b);
  }
  finish(): Uint8Array {
    return this.buf.slice(0, this.n);
  }
}

export class Reader {
  private i = 0;
  constructor(private readonly b: Uint8Array) {}
  get remaining(): number {
    return this.b.length - this.i;
  }
  private need(k: number, what: string): void {
    if (this.i + k > this.b.length) throw new WireError(`truncated ${what}`);
  }
  u8(): number {
    this.need(1, 'u8');
    return this.b[this.i++];
  }
  u16(): number {
    this.need(2, 'u16');
    const v = (this.b[this.i] << 8) | this.b[this.i + 1];
    this.i += 2;
    return v;
  }
  vi(): number {
    this.need(1, 'vi');
    const first = this.b[this.i];
    const len = viPrefixLen(first);
    this.need(len, 'vi');
    const v = viDecode(this.b, this.i, len);
    this.i += len;
    return v;
  }
  raw(k: number): Uint8Array {
    this.need(k, 'bytes');
    const out = this.b.subarray(this.i, this.i + k);
    this.i += k;
    return out;
  }
  bytes(max = 1 << 22): Uint8Array {
    const k = this.vi();
    if (k > max) throw new WireError(`field of ${k} bytes (limit ${max})`);
    return this.raw(k);
  }
  rest(): Uint8Array {
    return this.raw(this.remaining);
  }
}

/** Total bytes of a `vi` from its first byte. */
export function viPrefixLen(first: number): number {
  let len = 1;
  for (let bit = 0x80; bit && first & bit; bit >>= 1) len++;
  return len;
}

function viDecode(b: Uint8Array, at: number, len: number): number {
  let v = len === 9 ? 0 : b[at] & (0xff >> len);
  for (let k = 1; k < len; k++) v = v * 256 + b[at + k];
  if (v > MAX_SAFE) throw new WireError('vi beyond 2^53');
  return v;
}

// ---- key-value pairs --------------------------------------------------------------

export type Pairs = Map<number, number | Uint8Array | [number, number]>;

// Message parameters whose values are a u8 or two vi instead of the even/odd rule.
const U8_PARAMS = new Set([0x10, 0x20, 0x22]);
const PAIR_PARAM = 0x09;

function writePairs(w: Writer, pairs: Pairs, params: boolean): void {
  let prev = 0;
  for (const key of [...pairs.keys()].sort((a, b) => a - b)) {
    const v = pairs.get(key)!;
    w.vi(key - prev);
    prev = key;
    if (params && U8_PARAMS.has(key)) w.u8(v as number);
    else if (params && key === PAIR_PARAM) w.vi((v as [number, number])[0]).vi((v as [number, number])[1]);
    else if (key % 2 === 0) w.vi(v as number);
    else w.bytes(v as Uint8Array);
  }
}

function readPair(r: Reader, key: number, params: boolean): number | Uint8Array | [number, number] {
  if (params && U8_PARAMS.has(key)) return r.u8();
  if (params && key === PAIR_PARAM) return [r.vi(), r.vi()];
  return key % 2 === 0 ? r.vi() : r.bytes();
}

/** Message parameters: vi count, then pairs. */
export function writeParams(w: Writer, pairs: Pairs = new Map()): void {
  w.vi(pairs.size);
  writePairs(w, pairs, true);
}

export function readParams(r: Reader): Pairs {
  const n = r.vi();
  if (n > 256) throw new WireError(`${n} parameters`);
  const out: Pairs = new Map();
  let key = 0;
  for (let i = 0; i < n; i++) {
    key += r.vi();
    out.set(key, readPair(r, key, true));
  }
  return out;
}

/** Pairs to the end of the reader (SETUP, track extensions). */
export function readPairsToEnd(r: Reader): Pairs {
  const out: Pairs = new Map();
  let key = 0;
  while (r.remaining > 0) {
    key += r.vi();
    out.set(key, readPair(r, key, false));
  }
  return out;
}

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

export interface SubgroupHeader {
  type: number;
  alias: number;
  group: number;
  subgroup: number;
  priority: number;
  /** Objects carry extension headers (odd header types). */
  hasExt: boolean;
}

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

// ---- datagrams (Petrel extension) --------------------------------------------------

export interface Fragment {
  alias: number;
  group: number;
  object: number;
  index: number;
  count: number;
  objectLength: number;
  data: Uint8Array;
}

export const MAX_FRAGMENTS = 1024;

/** Header bytes of a FRAGMENT before its data. */
export function fragmentHeaderLen(f: Omit<Fragment, 'data'>): number {
  return 1 + viLen(f.alias) + viLen(f.group) + viLen(f.object) + viLen(f.index) + viLen(f.count) + viLen(f.objectLength);
}

/**
 * Splits an object (metadata + payload bytes) into FRAGMENT datagrams no larger
 * than `maxSize`, of near-equal size so that the last is not a runt.
 */
export function fragmentObject(alias: number, group: number, object: number, obj: Uint8Array, maxSize: number): Uint8Array[] {
  const worst = fragmentHeaderLen({ alias, group, object, index: MAX_FRAGMENTS, count: MAX_FRAGMENTS, objectLength: obj.length });
  const room = maxSize - worst;
  if (room < 16) throw new WireError(`datagrams of ${maxSize} bytes are too small`);
  const count = Math.max(1, Math.ceil(obj.length / room));
  if (count > MAX_FRAGMENTS) throw new WireError(`object of ${obj.length} bytes needs ${count} fragments`);
  const per = Math.ceil(obj.length / count);
  const out: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    const part = obj.subarray(i * per, Math.min(obj.length, (i + 1) * per));
    out.push(new Writer(part.length + worst).vi(Dgram.FRAGMENT).vi(alias).vi(group).vi(object).vi(i).vi(count).vi(obj.length).raw(part).finish());
  }
  return out;
}

/** XOR of fragments' data, each zero-padded to the longest (FEC). */
export function fecDatagram(alias: number, group: number, object: number, first: number, parts: Uint8Array[]): Uint8Array {
  const len = Math.max(...parts.map((p) => p.length));
  const x = new Uint8Array(len);
  for (const p of parts) for (let i = 0; i < p.length; i++) x[i] ^= p[i];
  return new Writer(len + 24).vi(Dgram.FEC).vi(alias).vi(group).vi(object).vi(first).vi(parts.length).bytes(x).finish();
}

export function nackDatagram(alias: number, group: number, object: number, indices: number[]): Uint8Array {
  const w = new Writer(16 + indices.length * 2).vi(Dgram.NACK).vi(alias).vi(group).vi(object).vi(indices.length);
  for (const i of indices) w.vi(i);
  return w.finish();
}

export function keyframeRequestDatagram(alias: number, groupSeen: number): Uint8Array {
  return new Writer(12).vi(Dgram.KEYFRAME_REQUEST).vi(alias).vi(groupSeen).finish();
}

export type ParsedDatagram =
  | ({ type: typeof Dgram.FRAGMENT } & Fragment)
  | { type: typeof Dgram.NACK; alias: number; group: number; object: number; indices: number[] }
  | { type: typeof Dgram.KEYFRAME_REQUEST; alias: number; groupSeen: number }
  | { type: typeof Dgram.FEC; alias: number; group: number; object: number; first: number; count: number; xor: Uint8Array };

export function parseDatagram(b: Uint8Array): ParsedDatagram {
  const r = new Reader(b);
  const type = r.vi();
  switch (type) {
    case Dgram.FRAGMENT: {
      const alias = r.vi();
      const group = r.vi();
      const object = r.vi();
      const index = r.vi();
      const count = r.vi();
      const objectLength = r.vi();
      if (count < 1 || count > MAX_FRAGMENTS || index >= count) throw new WireError(`fragment ${index} of ${count}`);
      if (objectLength > 4 << 20) throw new WireError(`object of ${objectLength} bytes`);
      return { type, alias, group, object, index, count, objectLength, data: r.rest() };
    }
    case Dgram.NACK: {
      const alias = r.vi();
      const group = r.vi();
      const object = r.vi();
      const n = r.vi();
      if (n > MAX_FRAGMENTS) throw new WireError(`NACK of ${n} fragments`);
      const indices: number[] = [];
      for (let i = 0; i < n; i++) indices.push(r.vi());
      return { type, alias, group, object, indices };
    }
    case Dgram.KEYFRAME_REQUEST:
      return { type, alias: r.vi(), groupSeen: r.vi() };
    case Dgram.FEC: {
      const alias = r.vi();
      const group = r.vi();
      const object = r.vi();
      const first = r.vi();
      const count = r.vi();
      if (count < 1 || count > MAX_FRAGMENTS) throw new WireError(`FEC over ${count} fragments`);
      return { type, alias, group, object, first, count, xor: r.bytes(65536) };
    }
    default:
      throw new WireError(`unknown datagram type 0x${type.toString(16)}`);
  }
}

// ---- reading streams --------------------------------------------------------------

/** Buffered reads of exact sizes from a WebTransport receive stream. */
export class StreamReader {
  private chunks: Uint8Array[] = [];
  private have = 0;
  private done = false;
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  constructor(stream: ReadableStream<Uint8Array>) {
    this.reader = stream.getReader();
  }

  /** Waits for k bytes; false if the stream ended first. */
  private async fill(k: number): Promise<boolean> {
    while (this.have < k && !this.done) {
      const r = await this.reader.read();
      if (r.done) this.done = true;
      else if (r.value.length) {
        this.chunks.push(r.value);
        this.have += r.value.length;
      }
    }
    return this.have >= k;
  }

  private take(k: number): Uint8Array {
    const out = new Uint8Array(k);
    let off = 0;
    while (off < k) {
      const c = this.chunks[0];
      const n = Math.min(c.length, k - off);
      out.set(c.subarray(0, n), off);
      off += n;
      if (n === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(n);
    }
    this.have -= k;
    return out;
  }

  /** True when the stream ended cleanly with nothing left. */
  async atEnd(): Promise<boolean> {
    return !(await this.fill(1));
  }

  async exact(k: number): Promise<Uint8Array> {
    if (!(await this.fill(k))) throw new WireError(`stream ended ${k - this.have} bytes short`);
    return this.take(k);
  }

  async u8(): Promise<number> {
    return (await this.exact(1))[0];
  }

  async vi(): Promise<number> {
    if (!(await this.fill(1))) throw new WireError('stream ended before a vi');
    const len = viPrefixLen(this.chunks[0][0]);
    return new Reader(await this.exact(len)).vi();
  }

  /** One control message: vi type, u16 length, payload. */
  async message(): Promise<ControlMessage> {
    const type = await this.vi();
    const len = new Reader(await this.exact(2)).u16();
    return { type, body: new Reader(await this.exact(len)) };
  }

  cancel(reason?: unknown): void {
    this.reader.cancel(reason).catch(() => {});
  }
}
