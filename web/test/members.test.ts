// Unit tests of room membership (sdk/members.ts): the events a page sees as
// people join, publish and leave, and one shown participant per person while
// a session moves to another node. No browser objects needed.
import assert from 'node:assert/strict';
import test from 'node:test';
import { Members } from '../sdk/members.js';
import type { ParticipantInfo, TrackInfo } from '../sdk/protocol.js';
import type { RemoteParticipant, RemoteTrackPublication } from '../sdk/roomtypes.js';

const track = (sid: string, kind = 'video', source = 'camera', muted = false) => ({ sid, kind, source, muted, name: '' }) as TrackInfo;
const info = (sid: string, identity: string, tracks: TrackInfo[] = [], joinedAt = 0) => ({ sid, identity, tracks, joinedAt }) as ParticipantInfo;

function setup(local = 'me') {
  const events: string[] = [];
  const attached: [string, string, string][] = [];
  const m = new Members({
    emit: (event, ...args) => {
      const a = args as unknown[];
      const who = (x: unknown) => (x as RemoteParticipant)?.sid ?? (x as RemoteTrackPublication)?.sid;
      if (event === 'participantMoved') events.push(`moved ${a[1]}->${who(a[0])}`);
      else if (event.startsWith('track')) events.push(`${event} ${(a[0] as RemoteTrackPublication).sid}`);
      else events.push(`${event} ${who(a[0])}`);
    },
    localIdentity: () => local,
    attach: (pub, p, t) => attached.push([p.sid, pub.sid, (t as unknown as { id: string }).id]),
  });
  return { m, events, attached };
}

const mediaTrack = (id: string) => ({ id }) as unknown as MediaStreamTrack;

test('joins, track list reconciliation, mutes and leaves become events', () => {
  const { m, events } = setup();
  m.upsert(info('PA_b', 'bob', [track('TR_1')]));
  m.upsert(info('PA_me2', 'me')); // our own session elsewhere: not someone else
  m.upsert(info('PA_b', 'bob', [track('TR_1', 'video', 'camera', true), track('TR_2', 'audio', 'microphone')]));
  m.upsert(info('PA_b', 'bob', [track('TR_2', 'audio', 'microphone')]));
  m.trackMuted('PA_b', 'TR_2', true);
  m.left('PA_b', 'left');
  assert.deepEqual(events, [
    'participantJoined PA_b', 'trackPublished TR_1',
    'participantUpdated PA_b', 'trackMuted TR_1', 'trackPublished TR_2',
    'participantUpdated PA_b', 'trackUnpublished TR_1',
    'trackMuted TR_2',
    'trackUnpublished TR_2', 'participantLeft PA_b',
  ]);
  assert.equal(m.participants.size, 0);
});

test('a track that arrives before its publication is attached when the publication comes', () => {
  const { m, attached } = setup();
  m.upsert(info('PA_b', 'bob'));
  m.trackArrived('PA_b', 'TR_1', mediaTrack('t1'));
  assert.equal(attached.length, 0);
  m.trackPublished('PA_b', track('TR_1'));
  assert.deepEqual(attached, [['PA_b', 'TR_1', 't1']]);
  m.trackArrived('PA_b', 'TR_1', mediaTrack('t1b'));
  assert.deepEqual(attached[1], ['PA_b', 'TR_1', 't1b']);
});

test('a participant moving nodes stays one participant: its new session takes over the tile', () => {
  const { m, events, attached } = setup();
  m.upsert(info('PA_old', 'bob', [track('TR_old')]));
  const bob = m.participants.get('PA_old');
  events.length = 0;
  // The new session appears (mirrored from the other node) and publishes.
  m.upsert(info('PA_new', 'bob'));
  m.trackPublished('PA_new', track('TR_new'));
  m.trackArrived('PA_new', 'TR_new', mediaTrack('tnew'));
  assert.deepEqual(events, [], 'no join, no new publication: the camera tile is reused');
  assert.deepEqual(attached, [['PA_old', 'TR_new', 'tnew']]);
  m.left('PA_old', 'left');
  assert.deepEqual(events, ['moved PA_old->PA_new', 'participantUpdated PA_new']);
  assert.equal(m.participants.get('PA_new'), bob);
  assert.deepEqual([...bob!.tracks.keys()], ['TR_new']);
  assert.equal(bob!.tracks.get('TR_new')!.participantSid, 'PA_new');
});

test('during our own move, those who leave the old node stay until the move ends', () => {
  const { m, events } = setup();
  m.upsert(info('PA_b', 'bob'));
  m.upsert(info('PA_c', 'carol'));
  events.length = 0;
  m.startMove();
  assert.equal(m.isMoving, true);
  m.left('PA_b', 'left');
  m.left('PA_c', 'left');
  assert.deepEqual(events, []);
  // The new node: bob is there (a new session), carol is not, dave is new.
  m.adoptNode([info('PA_d', 'dave', [], 3), info('PA_b2', 'bob', [], 1), info('PA_me', 'me', [], 2)], 'me');
  m.endMove();
  assert.deepEqual(events, ['moved PA_b->PA_b2', 'participantUpdated PA_b2', 'participantJoined PA_d', 'participantLeft PA_c']);
  assert.deepEqual([...m.participants.keys()].sort(), ['PA_b2', 'PA_d']);
});

test('a rejoin keeps who is listed, promotes moved sessions and drops the rest', () => {
  const { m, events } = setup();
  m.upsert(info('PA_b', 'bob'));
  m.upsert(info('PA_c', 'carol'));
  m.upsert(info('PA_b2', 'bob')); // bob's successor
  events.length = 0;
  m.reconcile([info('PA_b2', 'bob'), info('PA_me', 'me')], 'PA_me');
  assert.deepEqual(events, ['moved PA_b->PA_b2', 'participantUpdated PA_b2', 'participantLeft PA_c']);
});
