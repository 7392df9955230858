// Unit tests of the room protocol as a WebTransport session receives it
// (web/sdk/wtevents.ts): the events track's objects, their order, the roster.
import assert from 'node:assert/strict';
import test from 'node:test';
import { EventOrder, type EventMessage, WtRoster, readEventObjects } from '../sdk/wtevents.js';
import { StreamReader } from '../sdk/wtstream.js';
import { streamObject } from '../sdk/wtwire.js';

const enc = new TextEncoder();

test('events track objects are read as JSON messages; one that is not JSON is a wire error', async () => {
  const objs = [{ type: 'joined', participantSid: 'PA' }, { type: 'data', payload: '' }].map((j) => streamObject(0, { tsUs: 0, key: true }, enc.encode(JSON.stringify(j))));
  const stream = (parts: Uint8Array[]) => new StreamReader(new ReadableStream<Uint8Array>({ start(c) { for (const p of parts) c.enqueue(p); c.close(); } }));
  const got: EventMessage[] = [];
  await readEventObjects(stream(objs), true, (m) => got.push(m));
  assert.deepEqual(got.map((m) => m.type), ['joined', 'data']);
  await assert.rejects(readEventObjects(stream([streamObject(0, { tsUs: 0, key: true }, enc.encode('{nope'))]), true, () => {}), /not JSON/);
});

test('events are applied in group order; joined starts the order; a missing group is skipped after the gap time', async () => {
  const applied: unknown[] = [];
  const order = new EventOrder((m) => applied.push(m.n), 30);
  order.push(10, { type: 'joined', n: 10 });
  order.push(12, { type: 'x', n: 12 });
  order.push(11, { type: 'x', n: 11 });
  assert.deepEqual(applied, [10, 11, 12]);
  order.push(14, { type: 'x', n: 14 }); // 13 lost (its stream reset)
  assert.deepEqual(applied, [10, 11, 12], 'held while 13 may still come');
  await new Promise((r) => setTimeout(r, 80));
  assert.deepEqual(applied, [10, 11, 12, 14], 'skipped after the gap time');
  order.push(13, { type: 'x', n: 13 });
  assert.deepEqual(applied, [10, 11, 12, 14], 'a group older than the order is not applied late');
  order.push(40, { type: 'joined', n: 40 }); // a new room state restarts the order
  assert.deepEqual(applied, [10, 11, 12, 14, 40]);
  order.close();
});

test('the roster follows joins, tracks, leaves and data, and never lists ourselves', () => {
  const seen: string[] = [];
  const roster = new WtRoster({
    joined: () => seen.push('joined'),
    participantJoined: (p) => seen.push(`+${p.identity}`),
    participantLeft: (p) => seen.push(`-${p.identity}`),
    trackPublished: (t, p) => seen.push(`+${p.identity}/${t.sid}`),
    trackUnpublished: (t, p) => seen.push(`-${p.identity}/${t.sid}:${p.tracks.has(t.sid)}`),
    data: (m) => seen.push(`data ${m.from} ${m.topic} ${m.text}`),
  });
  const cam = { sid: 'TR_cam', kind: 'video', source: 'camera' };
  roster.apply({
    type: 'joined',
    participantSid: 'PA',
    participants: [
      { sid: 'PA', identity: 'me', name: '', tracks: [] },
      { sid: 'PB', identity: 'bob', name: 'Bob', tracks: [cam] },
    ],
  });
  assert.equal(roster.participantSid, 'PA');
  assert.deepEqual([...roster.participants.keys()], ['PB']);
  assert.equal(roster.participants.get('PB')!.name, 'Bob');
  roster.apply({ type: 'participantJoined', participant: { sid: 'PA', identity: 'me', tracks: [] } });
  roster.apply({ type: 'participantJoined', participant: { sid: 'PC', identity: 'carol', name: '', tracks: null } });
  assert.equal(roster.participants.get('PC')!.name, 'carol', 'the identity when there is no name');
  roster.apply({ type: 'participantUpdated', participant: { sid: 'PB', identity: 'bob', tracks: [cam, { sid: 'TR_mic', kind: 'audio', source: 'microphone' }] } });
  roster.apply({ type: 'trackPublished', participantSid: 'PC', track: { sid: 'TR_c', kind: 'video', source: 'camera' } });
  roster.apply({ type: 'trackUnpublished', participantSid: 'PB', trackSid: 'TR_mic' });
  roster.apply({ type: 'data', from: 'bob', topic: 'chat', text: true, payload: btoa('hi') });
  roster.apply({ type: 'participantLeft', participantSid: 'PC' });
  roster.apply({ type: 'participantLeft', participantSid: 'PZ' });
  assert.deepEqual(seen, [
    '+bob',
    '+bob/TR_cam',
    'joined',
    '+carol',
    '+bob/TR_mic',
    '+carol/TR_c',
    '-bob/TR_mic:false',
    'data bob chat hi',
    '-carol/TR_c:false',
    '-carol',
  ]);
  assert.deepEqual([...roster.participants.keys()], ['PB']);
});
