// Petrel's datagram extension to MoQT (docs/protocol.md, "WebTransport media
// (MoQT)"): an object split into FRAGMENT datagrams, XOR parity (FEC), NACK and
// KEYFRAME_REQUEST. Every decode of network input throws WireError.
import { Reader, WireError, Writer, viLen } from './wtbytes.js';

export const Dgram = { FRAGMENT: 0x50, NACK: 0x51, KEYFRAME_REQUEST: 0x52, FEC: 0x53 } as const;

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

/** Bytes [start, end) of an object of `len` bytes that fragment `i` of `count` carries. */
export function fragmentSpan(len: number, count: number, i: number): [number, number] {
  // Near-equal parts, so that the last is not a runt; sender, FEC and receiver agree on them.
  const per = Math.ceil(len / count);
  return [Math.min(len, i * per), Math.min(len, (i + 1) * per)];
}

/**
 * Splits an object (metadata + payload bytes) into FRAGMENT datagrams no larger
 * than `maxSize`.
 */
export function fragmentObject(alias: number, group: number, object: number, obj: Uint8Array, maxSize: number): Uint8Array[] {
  const worst = fragmentHeaderLen({ alias, group, object, index: MAX_FRAGMENTS, count: MAX_FRAGMENTS, objectLength: obj.length });
  const room = maxSize - worst;
  if (room < 16) throw new WireError(`datagrams of ${maxSize} bytes are too small`);
  const count = Math.max(1, Math.ceil(obj.length / room));
  if (count > MAX_FRAGMENTS) throw new WireError(`object of ${obj.length} bytes needs ${count} fragments`);
  const out: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    const part = obj.subarray(...fragmentSpan(obj.length, count, i));
    out.push(new Writer(part.length + worst).vi(Dgram.FRAGMENT).vi(alias).vi(group).vi(object).vi(i).vi(count).vi(obj.length).raw(part).finish());
  }
  return out;
}

/**
 * FEC datagrams for an object sent as `count` fragments: per block of `block`
 * fragments, the XOR of their data, each zero-padded to the longest, so that
 * one lost fragment per block is rebuilt. Blocks of one fragment get none.
 */
export function fecDatagrams(alias: number, group: number, object: number, obj: Uint8Array, count: number, block: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  if (block < 2) return out;
  for (let first = 0; first < count; first += block) {
    const n = Math.min(count, first + block) - first;
    if (n < 2) continue;
    const [s0, e0] = fragmentSpan(obj.length, count, first);
    const x = new Uint8Array(e0 - s0); // the block's first fragment is its longest
    for (let i = first; i < first + n; i++) {
      const [a, b] = fragmentSpan(obj.length, count, i);
      for (let j = a; j < b; j++) x[j - a] ^= obj[j];
    }
    out.push(new Writer(x.length + 24).vi(Dgram.FEC).vi(alias).vi(group).vi(object).vi(first).vi(n).bytes(x).finish());
  }
  return out;
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
