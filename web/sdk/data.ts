// Binary framing of room data messages (protocol.md, "Data channels"):
// version byte, big-endian uint16 header length, JSON header, payload.

export interface DataHeader {
  to?: string[];
  topic?: string;
  text: boolean;
  from?: string;
  fromSid?: string;
}

const VERSION = 1;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function encodeData(header: DataHeader, payload: Uint8Array): Uint8Array<ArrayBuffer> {
  const h = encoder.encode(JSON.stringify(header));
  if (h.length > 0xffff) throw new Error('data header too large');
  const out = new Uint8Array(3 + h.length + payload.length);
  out[0] = VERSION;
  out[1] = h.length >> 8;
  out[2] = h.length & 0xff;
  out.set(h, 3);
  out.set(payload, 3 + h.length);
  return out;
}

// Returns null for frames this version cannot read; the caller drops them.
export function decodeData(buf: Uint8Array): { header: DataHeader; payload: Uint8Array } | null {
  if (buf.length < 3 || buf[0] !== VERSION) return null;
  const hlen = (buf[1] << 8) | buf[2];
  if (3 + hlen > buf.length) return null;
  try {
    const header = JSON.parse(decoder.decode(buf.subarray(3, 3 + hlen))) as DataHeader;
    if (typeof header !== 'object' || header === null) return null;
    return { header, payload: buf.slice(3 + hlen) };
  } catch {
    return null;
  }
}
