// Datagram reassembly for a WebTransport subscription: FRAGMENT datagrams back
// into objects, a lost fragment rebuilt from FEC parity, objects skipped by a
// gap noted so they can be NACKed, and which NACKs are due. No I/O and no
// clock of its own (every call takes `now`), so it is unit-tested in Node.
import { type Fragment, fragmentSpan } from './wtdgram.js';
import { type ObjectMeta, parseObjectBytes } from './wtwire.js';

/** Where reassembled objects and observations go. */
export interface ReassemblySink {
  object(group: number, object: number, meta: ObjectMeta, payload: Uint8Array): void;
  /** A clean round-trip sample: the answer to an object's only NACK, ms. */
  rtt(ms: number): void;
  log(msg: string): void;
}

/** A NACK due now: the fragments of one object still missing. */
export interface NackDue {
  group: number;
  object: number;
  missing: number[];
}

interface Incomplete {
  group: number;
  object: number;
  count: number;
  len: number;
  parts: (Uint8Array | undefined)[];
  got: number;
  first: number; // when the first fragment came (or the gap was noticed)
  last: number; // when the latest fragment of it came
  nackAt: number;
  nacks: number;
  known: boolean; // count/len known (a fragment arrived), not only inferred from a gap
  fec: { first: number; count: number; xor: Uint8Array }[];
}

/** Fragments arriving closer together than this are still in flight, not lost. */
export const REORDER_MS = 10;

export class Reassembler {
  private readonly partial = new Map<string, Incomplete>();
  // Recently completed objects, so that a retransmitted duplicate is not a new one.
  private readonly done = new Set<string>();
  private newestSeen = { group: -1, object: -1 };
  fecRecovered = 0;

  constructor(private readonly sink: ReassemblySink) {}

  /** The newest object any fragment has been seen of. */
  get newest(): { readonly group: number; readonly object: number } {
    return this.newestSeen;
  }

  /** Objects still incomplete (a repair may still come for them). */
  get incomplete(): number {
    return this.partial.size;
  }

  fragment(d: Fragment, now: number): void {
    const k = `${d.group}/${d.object}`;
    let p = this.partial.get(k);
    if (!p) {
      if (this.done.has(k)) return; // a duplicate of a completed object
      this.noteGap(d.group, d.object, now);
      p = this.incompleteOf(d.group, d.object, d.count, d.objectLength, true, now);
      this.partial.set(k, p);
    } else if (!p.known) {
      p.count = d.count;
      p.len = d.objectLength;
      p.parts = new Array(d.count);
      p.known = true;
    }
    if (d.count !== p.count || d.objectLength !== p.len || p.parts[d.index]) return;
    p.parts[d.index] = d.data;
    p.got++;
    p.last = now;
    // The answer to our only NACK for it: a clean round-trip sample.
    if (p.nacks === 1 && now - p.nackAt < 2_000) {
      this.sink.rtt(now - p.nackAt);
      p.nacks = 2;
    }
    if (p.got === p.count) this.complete(p);
    else this.tryFec(p);
  }

  /** Parity over a block of an object's fragments; kept until it can rebuild one. */
  fec(d: { group: number; object: number; first: number; count: number; xor: Uint8Array }): void {
    const p = this.partial.get(`${d.group}/${d.object}`);
    if (!p) return;
    p.fec.push({ first: d.first, count: d.count, xor: d.xor });
    this.tryFec(p);
  }

  /**
   * The NACKs to send now, marked as sent. An object is asked for on evidence of
   * loss (a later object started, or it stalled for a few reorder windows), at
   * most once per round trip, and only while an answer can still arrive within
   * `budgetMs` of its first fragment; past that (and a margin) it is given up.
   */
  nacks(now: number, rttMs: number, budgetMs: number): NackDue[] {
    const out: NackDue[] = [];
    for (const [k, p] of this.partial) {
      const age = now - p.first;
      if (age > budgetMs + 200) {
        this.partial.delete(k);
        continue;
      }
      const n = this.newestSeen;
      const newerSeen = n.group > p.group || (n.group === p.group && n.object > p.object);
      const stalled = now - p.last > 3 * REORDER_MS;
      if (!(newerSeen || stalled) || now - p.last < REORDER_MS || now - p.nackAt < Math.max(rttMs, 20) || age > budgetMs) continue;
      const missing: number[] = [];
      for (let i = 0; i < p.count && missing.length < 256; i++) if (!p.parts[i]) missing.push(i);
      if (!missing.length) continue;
      p.nackAt = now;
      p.nacks++;
      out.push({ group: p.group, object: p.object, missing });
    }
    return out;
  }

  private incompleteOf(group: number, object: number, count: number, len: number, known: boolean, now: number): Incomplete {
    return { group, object, count, len, parts: new Array(count), got: 0, first: now, last: now, nackAt: 0, nacks: 0, known, fec: [] };
  }

  private complete(p: Incomplete): void {
    const k = `${p.group}/${p.object}`;
    this.partial.delete(k);
    this.done.add(k);
    if (this.done.size > 512) this.done.delete(this.done.values().next().value as string);
    const obj = new Uint8Array(p.len);
    let off = 0;
    for (const part of p.parts) {
      obj.set(part!, off);
      off += part!.length;
    }
    if (off !== p.len) {
      this.sink.log(`object ${k}: fragments sum to ${off}, header says ${p.len}`);
      return;
    }
    let parsed;
    try {
      parsed = parseObjectBytes(obj);
    } catch (e) {
      this.sink.log(`object ${k}: ${(e as Error).message}`);
      return;
    }
    this.sink.object(p.group, p.object, parsed.meta, parsed.payload);
  }

  private tryFec(p: Incomplete): void {
    if (!p.known) return;
    for (const f of p.fec) {
      const end = Math.min(p.count, f.first + f.count);
      const missing: number[] = [];
      for (let i = f.first; i < end; i++) if (!p.parts[i]) missing.push(i);
      if (missing.length !== 1) continue;
      const x = f.xor.slice();
      for (let i = f.first; i < end; i++) {
        const part = p.parts[i];
        if (part) for (let j = 0; j < part.length; j++) x[j] ^= part[j];
      }
      const [a, b] = fragmentSpan(p.len, p.count, missing[0]);
      if (b <= a) continue;
      p.parts[missing[0]] = x.subarray(0, b - a);
      p.got++;
      this.fecRecovered++;
      if (p.got === p.count) {
        this.complete(p);
        return;
      }
    }
  }

  // Objects skipped between the newest seen and this one get placeholders so
  // that the NACK scan asks for them (fragment 0; the answer tells their size).
  private noteGap(group: number, object: number, now: number): void {
    const n = this.newestSeen;
    if (group === n.group && object > n.object + 1) {
      for (let o = n.object + 1; o < object && o < n.object + 64; o++) {
        const k = `${group}/${o}`;
        if (!this.partial.has(k) && !this.done.has(k)) this.partial.set(k, this.incompleteOf(group, o, 1, 0, false, now));
      }
    }
    if (group > n.group || (group === n.group && object > n.object)) this.newestSeen = { group, object };
  }
}
