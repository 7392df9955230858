// Unit tests of the WebTransport wire format: integers (wtbytes.ts), control
// messages and objects (wtwire.ts), datagrams (wtdgram.ts), stream reads (wtstream.ts).
import assert from 'node:assert/strict';
import test from 'node:test';
import { Reader, Writer, viLen } from '../sdk/wtbytes.js';
import { fecDatagrams, fragmentObject, fragmentSpan, parseDatagram } from '../sdk/wtdgram.js';
import { StreamReader, streamObjects } from '../sdk/wtstream.js';
import { Msg, describeReply, objectBytes, parseMessage, parseObjectBytes, streamObject, subgroupLayout, subscribeMessage } from '../sdk/wtwire.js';

test('draft-18 integers: prefix lengths and round trips at the edges', () => {
  assert.deepEqual([...new Writer().vi(0x2f00).finish()], [0xaf, 0x00], 'SETUP type is two bytes');
  assert.deepEqual([...new Writer().vi(37).finish()], [37]);
  for (const v of [0, 127, 128, 16383, 16384, 2 ** 21 - 1, 2 ** 28, 2 ** 35 + 5, 2 ** 49 + 1, 2 ** 53 - 1]) {
    const b = new Writer().vi(v).finish();
    assert.equal(b.length, viLen(v));
    assert.equal(new Reader(b).vi(), v, `value ${v}`);
  }
  assert.equal(new Writer().vi(2 ** 53 - 1).finish()[0], 0xfe, 'eight-byte form (56 value bits)');
  assert.throws(() => new Reader(new Uint8Array([0xc0, 1])).vi(), /truncated/);
});

test('an object fragments into datagrams that fit and reassembles with its metadata', () => {
  const payload = new Uint8Array(5000).map((_, i) => i & 0xff);
  const obj = objectBytes({ tsUs: 123456, key: true, codec: 'vp8', width: 640, height: 480, wallMs: 1_700_000_000_000 }, payload);
  const frags = fragmentObject(3, 7, 0, obj, 1215);
  assert.ok(frags.every((f) => f.length <= 1215));
  const parts = frags.map((f) => parseDatagram(f)).reverse(); // reordered
  const whole = new Uint8Array(obj.length);
  const per = Math.ceil(obj.length / frags.length);
  for (const p of parts) {
    assert.equal(p.type, 0x50);
    if (p.type !== 0x50) continue;
    assert.equal(p.count, frags.length);
    whole.set(p.data, p.index * per);
  }
  const back = parseObjectBytes(whole);
  assert.equal(back.meta.tsUs, 123456);
  assert.equal(back.meta.key, true);
  assert.equal(back.meta.codec, 'vp8');
  assert.equal(back.meta.width, 640);
  assert.deepEqual(back.payload, payload);
});

test('malformed datagrams and messages are errors, not crashes', () => {
  assert.throws(() => parseDatagram(new Uint8Array([0x50, 1, 1, 1, 5, 2, 10])), /fragment 5 of 2/);
  assert.throws(() => parseDatagram(new Uint8Array([0x7f])), /unknown datagram/);
  assert.throws(() => parseDatagram(new Uint8Array([0x51, 1])), /truncated/);
  const m = subscribeMessage(2, ['petrel', 'room', 'bob'], 'video', new Map([[0x2a0, 1]]));
  const r = new Reader(m);
  const type = r.vi();
  const len = r.u16();
  const parsed = parseMessage({ type, body: new Reader(r.raw(len)) });
  assert.equal(parsed.type, 0x3);
  if (parsed.type === 0x3) {
    assert.deepEqual(parsed.ns, ['petrel', 'room', 'bob']);
    assert.equal(parsed.track, 'video');
    assert.equal(parsed.params.get(0x2a0), 1);
  }
  // A namespace of zero fields is refused.
  const bad = new Writer().vi(1).vi(0).finish();
  assert.throws(() => parseMessage({ type: 0x3, body: new Reader(bad) }), /namespace of 0 fields/);
});

test('StreamReader reads messages split across chunks and reports a short stream', async () => {
  const m = subscribeMessage(0, ['petrel', 'r'], 'events');
  const chunks = [m.subarray(0, 1), m.subarray(1, 3), m.subarray(3)];
  const rs = new ReadableStream<Uint8Array>({ start(c) { for (const x of chunks) c.enqueue(x); c.close(); } });
  const sr = new StreamReader(rs);
  const got = await sr.message();
  assert.equal(got.type, 0x3);
  assert.equal(await sr.atEnd(), true);
  const short = new StreamReader(new ReadableStream<Uint8Array>({ start(c) { c.enqueue(m.subarray(0, 4)); c.close(); } }));
  await assert.rejects(short.message(), /ended/);
});

test('subgroup header types: fields per draft-18 type, others refused', () => {
  assert.deepEqual(subgroupLayout(0x15), { explicitSubgroup: true, subgroupIsFirstObject: false, priority: true, ext: true });
  assert.deepEqual(subgroupLayout(0x30), { explicitSubgroup: false, subgroupIsFirstObject: false, priority: false, ext: false });
  assert.equal(subgroupLayout(0x53)?.ext, true);
  assert.equal(subgroupLayout(0x53)?.subgroupIsFirstObject, true);
  assert.equal(subgroupLayout(0x75)?.priority, false);
  for (const bad of [0x0f, 0x16, 0x17, 0x1e, 0x2f00, 0x7e]) assert.equal(subgroupLayout(bad), undefined, `type 0x${bad.toString(16)}`);
});

test('FEC parity per block rebuilds any one lost fragment of it; blocks of one fragment get none', () => {
  const obj = new Uint8Array(4000).map((_, i) => (i * 7) & 0xff);
  const frags = fragmentObject(1, 2, 3, obj, 1000).map((f) => parseDatagram(f));
  const count = frags.length; // 5: blocks of 3 are [0,1,2] and [3,4]
  assert.equal(count, 5);
  const fec = fecDatagrams(1, 2, 3, obj, count, 3).map((d) => parseDatagram(d));
  assert.deepEqual(fec.map((f) => (f.type === 0x53 ? [f.first, f.count] : [])), [[0, 3], [3, 2]]);
  for (const f of fec) {
    if (f.type !== 0x53) continue;
    for (let lost = f.first; lost < f.first + f.count; lost++) {
      const x = f.xor.slice();
      for (let i = f.first; i < f.first + f.count; i++) {
        const d = frags[i];
        if (i === lost || d.type !== 0x50) continue;
        for (let j = 0; j < d.data.length; j++) x[j] ^= d.data[j];
      }
      const [a, b] = fragmentSpan(obj.length, count, lost);
      assert.deepEqual(x.subarray(0, b - a), obj.subarray(a, b), `fragment ${lost} rebuilt`);
    }
  }
  assert.equal(fecDatagrams(1, 2, 3, obj, count, 4).length, 1, 'a trailing block of one fragment gets no parity');
  assert.equal(fecDatagrams(1, 2, 3, obj, count, 0).length, 0, 'off');
  // Spans cover the object without overlap, the last one no longer than the others.
  let end = 0;
  for (let i = 0; i < 7; i++) {
    const [a, b] = fragmentSpan(1000, 7, i);
    assert.equal(a, end);
    end = b;
  }
  assert.equal(end, 1000);
});

test('a subgroup stream yields its objects with ids and metadata, skips status objects, refuses oversized ones', async () => {
  const meta = { tsUs: 5000, key: true, codec: 'opus' };
  const body = [
    streamObject(4, meta, new Uint8Array([1, 2, 3])), // first object: id 4
    streamObject(0, meta, new Uint8Array(0)), // id 5: a status, no payload
    streamObject(1, meta, new Uint8Array([9])), // id 7
  ];
  const all = new Uint8Array(body.reduce((n, b) => n + b.length, 0));
  let off = 0;
  for (const b of body) all.set(b, (off += b.length) - b.length);
  const chunked = () => new ReadableStream<Uint8Array>({ start(c) { for (let i = 0; i < all.length; i += 5) c.enqueue(all.subarray(i, i + 5)); c.close(); } });
  const got: { id: number; payload: number[]; codec?: string }[] = [];
  for await (const o of streamObjects(new StreamReader(chunked()), true, 1024)) {
    got.push({ id: o.id, payload: [...o.payload], codec: parseObjectBytes(new Writer().vi(o.ext!.length).raw(o.ext!).raw(o.payload).finish()).meta.codec });
  }
  assert.deepEqual(got, [
    { id: 4, payload: [1, 2, 3], codec: 'opus' },
    { id: 7, payload: [9], codec: 'opus' },
  ]);
  await assert.rejects(async () => {
    for await (const o of streamObjects(new StreamReader(chunked()), true, 2)) void o;
  }, /object of 3 bytes/);
});

test('a refused request reads as its error code and reason', () => {
  const r = new Reader(new Writer().vi(0x10).vi(0).bytes(new TextEncoder().encode('no track x')).finish());
  const m = parseMessage({ type: Msg.REQUEST_ERROR, body: r });
  assert.equal(describeReply(m), 'error 0x10 no track x');
  assert.equal(describeReply({ type: Msg.REQUEST_OK }), 'unexpected reply type 7');
});
