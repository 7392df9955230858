// Reading WebTransport receive streams: exact-size reads, control messages, and
// the objects of a subgroup stream (docs/protocol.md, "WebTransport media (MoQT)").
import { Reader, WireError, viPrefixLen } from './wtbytes.js';
import type { ControlMessage } from './wtwire.js';

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

/** One object of a subgroup stream: its id, its extension headers' pair bytes, its payload. */
export interface StreamObject {
  id: number;
  ext?: Uint8Array;
  payload: Uint8Array;
}

/**
 * The objects of a subgroup stream after its header, until the stream ends;
 * objects with a status instead of a payload are skipped. Throws WireError on
 * malformed bytes or an object over `maxPayload`.
 */
export async function* streamObjects(r: StreamReader, hasExt: boolean, maxPayload: number): AsyncGenerator<StreamObject> {
  let id = -1;
  while (!(await r.atEnd())) {
    const delta = await r.vi();
    id = id < 0 ? delta : id + delta + 1;
    let ext: Uint8Array | undefined;
    if (hasExt) {
      const len = await r.vi();
      if (len > 4096) throw new WireError(`extension headers of ${len} bytes`);
      ext = await r.exact(len);
    }
    const plen = await r.vi();
    if (plen === 0) {
      await r.vi(); // status
      continue;
    }
    if (plen > maxPayload) throw new WireError(`object of ${plen} bytes`);
    yield { id, ext, payload: await r.exact(plen) };
  }
}
