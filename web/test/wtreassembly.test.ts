// Unit tests of datagram reassembly (web/sdk/wtreassembly.ts): fragments from
// the real encoder (wtdgram.ts) in, objects, NACKs and RTT samples out.
import assert from 'node:assert/strict';
import test from 'node:test';
import { type Fragment, fecDatagrams, fragmentObject, parseDatagram } from '../sdk/wtdgram.js';
import { REORDER_MS, Reassembler } from '../sdk/wtreassembly.js';
import { objectBytes } from '../sdk/wtwire.js';

function setup() {
  const got: { group: number; object: number; ts: number; len: number }[] = [];
  const rtts: number[] = [];
  const logs: string[] = [];
  const r = new Reassembler({
    object: (group, object, meta, payload) => got.push({ group, object, ts: meta.tsUs, len: payload.length }),
    rtt: (ms) => rtts.push(ms),
    log: (m) => logs.push(m),
  });
  return { r, got, rtts, logs };
}

// The FRAGMENT datagrams of one object, parsed as the session hands them over.
function frags(group: number, object: number, size: number, maxDatagram = 1200): Fragment[] {
  const obj = objectBytes({ tsUs: (group * 100 + object) * 1000, key: object === 0 }, new Uint8Array(size).fill(object));
  return fragmentObject(7, group, object, obj, maxDatagram).map((d) => parseDatagram(d) as Fragment);
}

test('reordered fragments make one object; duplicates and retransmissions of a completed one are ignored', () => {
  const { r, got } = setup();
  const f = frags(0, 0, 3000);
  assert.equal(f.length, 3);
  for (const d of [f[2], f[0], f[0], f[1]]) r.fragment(d, 100);
  assert.deepEqual(got, [{ group: 0, object: 0, ts: 0, len: 3000 }]);
  r.fragment(f[1], 150);
  assert.equal(got.length, 1, 'a late duplicate is not a second object');
  assert.equal(r.incomplete, 0);
});

test('FEC rebuilds one lost fragment of a block without a NACK', () => {
  const { r, got } = setup();
  const obj = objectBytes({ tsUs: 1000, key: true }, new Uint8Array(4000).map((_, i) => i & 0xff));
  const all = fragmentObject(7, 0, 0, obj, 1000).map((d) => parseDatagram(d) as Fragment);
  const parity = fecDatagrams(7, 0, 0, obj, all.length, all.length).map((d) => parseDatagram(d));
  for (const d of all) if (d.index !== 2) r.fragment(d, 100);
  assert.equal(got.length, 0);
  for (const p of parity) if (p.type === 0x53) r.fec(p);
  assert.equal(got.length, 1);
  assert.equal(got[0].len, 4000);
  assert.equal(r.fecRecovered, 1);
});

test('a lost fragment is NACKed on evidence of loss, once per round trip, and given up past the budget', () => {
  const { r, rtts } = setup();
  const a = frags(0, 1, 3000);
  r.fragment(a[0], 100);
  r.fragment(a[2], 101);
  // Fragments still within the reorder window: no NACK yet.
  assert.deepEqual(r.nacks(101 + REORDER_MS / 2, 50, 300), []);
  // A later object started: fragment 1 is missing, not late.
  r.fragment(frags(0, 2, 100)[0], 101 + REORDER_MS);
  assert.deepEqual(r.nacks(101 + REORDER_MS, 50, 300), [{ group: 0, object: 1, missing: [1] }]);
  assert.deepEqual(r.nacks(101 + REORDER_MS + 20, 50, 300), [], 'not again within a round trip');
  assert.equal(r.nacks(101 + REORDER_MS + 60, 50, 300).length, 1, 'again after a round trip');
  // The answer to the only NACK is an RTT sample; here a second NACK went out, so none.
  r.fragment(a[1], 200);
  assert.deepEqual(rtts, []);
  assert.equal(r.incomplete, 0);

  const b = frags(1, 0, 3000);
  r.fragment(b[0], 1000);
  assert.equal(r.nacks(1000 + 4 * REORDER_MS, 50, 300).length, 1, 'stalled: NACKed');
  r.fragment(b[1], 1000 + 4 * REORDER_MS + 30);
  r.fragment(b[2], 1000 + 4 * REORDER_MS + 31);
  assert.deepEqual(rtts, [30], 'the answer to a single NACK times the round trip');

  const c = frags(2, 0, 3000);
  r.fragment(c[0], 2000);
  assert.deepEqual(r.nacks(2000 + 301, 50, 300), [], 'too old for an answer to arrive in time');
  assert.equal(r.incomplete, 1, 'kept a little longer for fragments already on the way');
  r.nacks(2000 + 501, 50, 300);
  assert.equal(r.incomplete, 0, 'then given up');
});

test('objects skipped in a group are NACKed for their first fragment; the answer tells their size', () => {
  const { r, got } = setup();
  r.fragment(frags(3, 0, 100)[0], 100);
  r.fragment(frags(3, 3, 100)[0], 101); // objects 1 and 2 never came
  assert.deepEqual(r.newest, { group: 3, object: 3 });
  const due = r.nacks(101 + REORDER_MS, 50, 300);
  assert.deepEqual(due, [
    { group: 3, object: 1, missing: [0] },
    { group: 3, object: 2, missing: [0] },
  ]);
  const two = frags(3, 2, 2500); // three fragments, learned from the first that arrives
  for (const d of two) r.fragment(d, 150);
  assert.deepEqual(got.map((o) => o.object), [0, 3, 2]);
  assert.equal(r.incomplete, 1, 'object 1 still missing');
});

test('fragments that disagree with their object, or an object that does not parse, are dropped with a log line', () => {
  const { r, got, logs } = setup();
  const f = frags(0, 0, 3000);
  r.fragment(f[0], 100);
  r.fragment({ ...f[1], count: 4 }, 100); // a different count for the same object
  r.fragment({ ...f[2], data: f[2].data.subarray(1) }, 100);
  r.fragment(f[1], 100);
  assert.equal(got.length, 0);
  assert.match(logs[0], /object 0\/0: fragments sum to \d+, header says 3\d\d\d/);
  // An object whose bytes are not metadata + payload.
  const junk = fragmentObject(7, 1, 0, new Uint8Array([0xff, 0xff]), 1200).map((d) => parseDatagram(d) as Fragment);
  r.fragment(junk[0], 100);
  assert.equal(got.length, 0);
  assert.equal(logs.length, 2);
});
