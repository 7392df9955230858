// The byte level of the WebTransport media wire format (docs/protocol.md,
// "WebTransport media (MoQT)"): MoQ Transport draft-18 variable-length integers
// and key-value pairs. Every decode of network input throws WireError on
// malformed bytes.

export class WireError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WireError';
  }
}

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

export function writePairs(w: Writer, pairs: Pairs, params: boolean): void {
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
