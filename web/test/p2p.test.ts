// Unit tests of the 1:1 direct mode (sdk/p2p.ts) on fake peer connections: who
// offers, when, and how media moves between the direct and the SFU senders.
import assert from 'node:assert/strict';
import test from 'node:test';
import { DirectMode, P2P_CONNECT_TIMEOUT_MS, P2P_RETRY_MS, P2P_SETTLE_MS, type P2PSignal } from '../sdk/p2p.js';
import { LocalTrackPublication, RemoteParticipant, type MediaPath } from '../sdk/roomtypes.js';
import type { ParticipantInfo, TrackInfo } from '../sdk/protocol.js';
import { FakePc, FakeTrack, FakeTransceiver, settle } from './fakes.js';

function participant(sid: string, tracks: TrackInfo[] = []): RemoteParticipant {
  const p = new RemoteParticipant({ sid, identity: `id-${sid}`, tracks } as ParticipantInfo);
  return p;
}

function setup(localSid: string, opts: { allowed?: boolean } = {}) {
  const participants = new Map<string, RemoteParticipant>();
  const localTracks = new Map<string, LocalTrackPublication>();
  const relayed: { to: string; data: P2PSignal }[] = [];
  const paths: [MediaPath, string][] = [];
  const pcs: FakePc[] = [];
  const mode = new DirectMode(
    {
      allowed: () => opts.allowed ?? true,
      connected: () => true,
      localSid: () => localSid,
      participants,
      localTracks,
      rtcConfig: () => ({}),
      relay: (to, data) => relayed.push({ to, data }),
      pathChanged: (path, reason) => paths.push([path, reason]),
    },
    () => {
      const pc = new FakePc();
      pc.offeredKinds = ['audio', 'video'];
      pcs.push(pc);
      return pc as unknown as RTCPeerConnection;
    },
  );
  return { mode, participants, localTracks, relayed, paths, pcs };
}

function camera(): { pub: LocalTrackPublication; track: FakeTrack; sfu: FakeTransceiver } {
  const track = new FakeTrack('video');
  const sfu = new FakeTransceiver('video', '0', track);
  const info = { sid: 'TR_cam', kind: 'video', source: 'camera', muted: false } as TrackInfo;
  const pub = new LocalTrackPublication(info, track as unknown as MediaStreamTrack, sfu as unknown as RTCRtpTransceiver);
  return { pub, track, sfu };
}

test('the lower sid offers once the 1:1 room has settled; the higher one waits', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const low = setup('PA_a');
  low.participants.set('PA_b', participant('PA_b'));
  low.mode.evaluate();
  t.mock.timers.tick(P2P_SETTLE_MS - 1);
  await settle();
  assert.equal(low.relayed.length, 0);
  t.mock.timers.tick(1);
  await settle();
  assert.equal(low.relayed.length, 1);
  assert.equal(low.relayed[0].to, 'PA_b');
  assert.equal(low.relayed[0].data.p2p, 'offer');
  assert.ok(low.relayed[0].data.sdp);
  assert.deepEqual(low.pcs[0].transceivers.map((x) => [x.receiver.track.kind, x.direction]), [['audio', 'sendrecv'], ['video', 'sendrecv']]);

  const high = setup('PA_z');
  high.participants.set('PA_b', participant('PA_b'));
  high.mode.evaluate();
  t.mock.timers.tick(P2P_SETTLE_MS * 5);
  await settle();
  assert.equal(high.relayed.length, 0);
  assert.equal(high.pcs.length, 0);
});

test('the higher sid answers an offer with both transceivers sending, and a new offer replaces the link', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const s = setup('PA_z');
  s.participants.set('PA_a', participant('PA_a'));
  const cam = camera();
  s.localTracks.set(cam.pub.sid, cam.pub);
  await s.mode.onRelay('PA_a', { p2p: 'offer', session: 'S1', sdp: 'offer' });
  const pc = s.pcs[0];
  assert.deepEqual(pc.calls, ['setRemote:offer', 'setLocal:answer']);
  assert.deepEqual(s.relayed.map((r) => [r.to, r.data.p2p, r.data.session]), [['PA_a', 'answer', 'S1']]);
  assert.deepEqual(pc.transceivers.map((x) => x.direction), ['sendrecv', 'sendrecv']);
  pc.setConnectionState('connected');
  await settle();
  assert.equal(pc.transceivers[1].sender.track, cam.track);
  // An answer or bye of another session is not ours.
  await s.mode.onRelay('PA_a', { p2p: 'bye', session: 'other' });
  assert.equal(s.mode.pc, pc as unknown as RTCPeerConnection);
  await s.mode.onRelay('PA_a', { p2p: 'offer', session: 'S2', sdp: 'offer' });
  assert.equal(pc.signalingState, 'closed', 'a new offer replaces the old link');
  assert.equal(s.pcs.length, 2);
});

test('direct media: the SFU sender goes idle and comes back when the path fails', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const s = setup('PA_a');
  s.participants.set('PA_b', participant('PA_b'));
  const cam = camera();
  s.localTracks.set(cam.pub.sid, cam.pub);
  s.mode.evaluate();
  t.mock.timers.tick(P2P_SETTLE_MS);
  await settle();
  const pc = s.pcs[0];
  await s.mode.onRelay('PA_b', { p2p: 'answer', session: s.relayed[0].data.session, sdp: 'answer' });
  assert.equal(pc.remoteDescription?.type, 'answer');

  pc.setConnectionState('connected');
  await settle();
  assert.deepEqual(s.paths, [['p2p', 'direct connection up']]);
  assert.equal(pc.transceivers[1].sender.track, cam.track, 'camera on the direct video sender');
  assert.equal(cam.sfu.sender.track, null, 'SFU sender idle');

  pc.setConnectionState('failed');
  await settle();
  assert.deepEqual(s.paths[1], ['sfu', 'direct path failed']);
  assert.equal(cam.sfu.sender.track, cam.track, 'camera back on the SFU sender');
  assert.equal(pc.signalingState, 'closed');
  assert.equal(s.relayed.at(-1)?.data.p2p, 'bye');

  // After a failure the next attempt waits for the retry delay, not just the settle time.
  t.mock.timers.tick(P2P_SETTLE_MS);
  await settle();
  assert.equal(s.pcs.length, 1);
  t.mock.timers.tick(P2P_RETRY_MS);
  await settle();
  assert.equal(s.pcs.length, 2);
});

test('a third participant ends the direct call; a refused or unconnected path is given up', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const s = setup('PA_a');
  s.participants.set('PA_b', participant('PA_b'));
  s.mode.evaluate();
  t.mock.timers.tick(P2P_SETTLE_MS);
  await settle();
  assert.ok(s.mode.pc);
  s.participants.set('PA_c', participant('PA_c'));
  s.mode.evaluate();
  assert.equal(s.mode.pc, null);
  assert.deepEqual(s.paths, [['sfu', 'room is not 1:1']]);
  assert.deepEqual(s.relayed.at(-1), { to: 'PA_b', data: { p2p: 'bye', session: s.relayed[0].data.session } });

  // Never connecting: given up after the connect timeout.
  s.participants.delete('PA_c');
  s.mode.evaluate();
  t.mock.timers.tick(P2P_SETTLE_MS);
  await settle();
  assert.ok(s.mode.pc);
  t.mock.timers.tick(P2P_CONNECT_TIMEOUT_MS);
  await settle();
  assert.equal(s.mode.pc, null);
  assert.equal(s.paths.at(-1)?.[1], 'direct path did not connect');

  // With direct mode off, an offer is declined.
  const off = setup('PA_z', { allowed: false });
  off.participants.set('PA_a', participant('PA_a'));
  await off.mode.onRelay('PA_a', { p2p: 'offer', session: 'S', sdp: 'x' });
  assert.deepEqual(off.relayed, [{ to: 'PA_a', data: { p2p: 'bye', session: 'S' } }]);
  assert.equal(off.pcs.length, 0);
});
