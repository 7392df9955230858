// Unit tests of moves to another node (sdk/move.ts): the view of the new node
// kept until the switch, how a track is republished there, and a whole move on a
// real Session over a fake socket and fake peer connections (the same transport
// code a room uses; test/browser/tests/move.test.mjs moves real browsers).
import assert from 'node:assert/strict';
import test from 'node:test';
import { NodeView, moveBeforeBreak, moveSpec, type Adoption, type MoveHost } from '../sdk/move.js';
import { Session, type SessionHandlers } from '../sdk/session.js';
import type { ClientMessage, JoinedMessage, ParticipantInfo, ServerMessage, TrackInfo } from '../sdk/protocol.js';
import type { SignalHandlers } from '../sdk/signal.js';
import { LocalTrackPublication } from '../sdk/roomtypes.js';
import { FakePc, FakeSender, FakeTrack, FakeTransceiver } from './fakes.js';

const track = (sid: string) => ({ sid, kind: 'video', source: 'camera', muted: false, name: 'cam' }) as TrackInfo;

test('the new node is followed from its messages until the switch', () => {
  const v = new NodeView();
  v.init({ participant: { sid: 'PA_me' }, participants: [{ sid: 'PA_me' }, { sid: 'PA_b', identity: 'bob', tracks: [] }] } as unknown as JoinedMessage);
  v.apply({ type: 'participantJoined', participant: { sid: 'PA_c', identity: 'carol', tracks: [] } } as unknown as ServerMessage);
  v.apply({ type: 'trackPublished', participantSid: 'PA_b', track: track('TR_b') } as ServerMessage);
  v.apply({ type: 'participantLeft', participantSid: 'PA_c', identity: 'carol', reason: 'left' } as ServerMessage);
  v.apply({ type: 'trackDemand', trackSid: 'TR_me', active: true, layers: [true, false, false] } as ServerMessage);
  assert.deepEqual([...v.parts.keys()], ['PA_b']);
  assert.deepEqual(v.parts.get('PA_b')?.tracks?.map((t) => t.sid), ['TR_b']);
  assert.deepEqual(v.demands.get('TR_me'), { active: true, layers: [true, false, false] });
  assert.equal(v.failed, '');
  v.apply({ type: 'trackUnpublished', participantSid: 'PA_b', trackSid: 'TR_b' } as ServerMessage);
  assert.deepEqual(v.parts.get('PA_b')?.tracks, []);

  const mids = new Map([['1', { streamId: 'PA_b', trackId: 'TR_b' }], ['2', { streamId: 'PA_x', trackId: 'TR_x' }]]);
  const stats = [
    { type: 'inbound-rtp', kind: 'video', framesDecoded: 3, mid: '1' },
    { type: 'inbound-rtp', kind: 'video', framesDecoded: 0, mid: '2' },
    { type: 'inbound-rtp', kind: 'audio', framesDecoded: 9, mid: '2' },
  ];
  assert.deepEqual([...v.decoded(stats, mids)], ['bob']);

  v.apply({ type: 'error', code: 'unauthorized', message: 'no' } as ServerMessage);
  assert.match(v.failed, /refused: unauthorized/);
});

test('a track moves with its layers, encodings and codec', () => {
  const t = new FakeTrack('video');
  const tr = new FakeTransceiver('video', '0', t);
  tr.sender.params = {
    encodings: [{ rid: 'q', maxBitrate: 150_000, scaleResolutionDownBy: 4, active: false }, { rid: 'f', maxBitrate: 1_500_000, scaleResolutionDownBy: 1 }],
    codecs: [{ mimeType: 'video/VP8' }],
  };
  const pub = new LocalTrackPublication(track('TR_1'), t as unknown as MediaStreamTrack, tr as unknown as RTCRtpTransceiver, true);
  const spec = moveSpec(pub);
  assert.equal(spec.codec, 'video/VP8');
  assert.equal(spec.layers?.length, 3);
  assert.deepEqual(spec.sendEncodings, [
    { rid: 'q', maxBitrate: 150_000, scaleResolutionDownBy: 4 },
    { rid: 'f', maxBitrate: 1_500_000, scaleResolutionDownBy: 1 },
  ]);
  tr.sender.params = { encodings: [{ scalabilityMode: 'L3T3_KEY', maxBitrate: 2e6 }], codecs: [{ mimeType: 'video/AV1' }] };
  const svc = moveSpec(pub);
  assert.equal(svc.dependencyDescriptor, true);
  assert.equal((svc.sendEncodings?.[0] as { scalabilityMode?: string }).scalabilityMode, 'L3T3_KEY');
  tr.sender.params = { encodings: [{}], codecs: [] };
  assert.equal(moveSpec(pub).sendEncodings, undefined, 'one plain encoding: the browser default');
});

const SUB_OFFER = ['v=0', 'o=- 1 2 IN IP4 0.0.0.0', 's=-', 't=0 0', 'm=video 9 UDP/TLS/RTP/SAVPF 96', 'a=mid:0', 'a=sendonly', 'a=rtpmap:96 VP8/90000', 'a=msid:PA_b2 TR_b', ''].join('\r\n');

// A node that admits us, answers offers, and (optionally) tells us to leave.
function node(opts: { leave?: boolean } = {}) {
  const requests: ClientMessage[] = [];
  let closed = false;
  const pcs: FakePc[] = [];
  const newSession = (h: SessionHandlers) =>
    new Session(h, () => false, {
      newSignal: (sh: SignalHandlers) => ({
        open: true,
        async join() {
          if (opts.leave) setTimeout(() => sh.message({ type: 'leave', reason: 'full' } as ServerMessage), 0);
          // The server offers bob's video (mid 0) on the new subscriber connection.
          else setTimeout(() => sh.message({ type: 'offer', sdp: SUB_OFFER } as ServerMessage), 0);
          return { type: 'joined', room: { name: 'r' }, participant: { sid: 'PA_me2', identity: 'me' }, resumeToken: 'rt2',
            participants: [{ sid: 'PA_me2', identity: 'me' }, { sid: 'PA_b2', identity: 'bob', tracks: [] }] as ParticipantInfo[] } as unknown as JoinedMessage;
        },
        send() {},
        async request(m: ClientMessage) {
          requests.push(m);
          if (m.type === 'publishTrack') return { type: 'response', track: { ...track('TR_new'), cid: m.cid } } as unknown as ServerMessage;
          if (m.type === 'offer') {
            setTimeout(() => (pcs[0].connectionState = 'connected'), 0);
            return { type: 'response', sdp: 'answer' } as unknown as ServerMessage;
          }
          return { type: 'response' } as ServerMessage;
        },
        drop() {},
        close() {
          closed = true;
        },
      }),
      newPc: () => {
        const pc = new FakePc();
        pcs.push(pc);
        return pc as unknown as RTCPeerConnection;
      },
      newStream: () => ({ addTrack() {}, removeTrack() {} }) as unknown as MediaStream,
    });
  return { newSession, requests, pcs, closed: () => closed };
}

function host(n: ReturnType<typeof node>, want: string[]) {
  const t = new FakeTrack('video');
  const sender = new FakeSender(t);
  sender.params = { encodings: [{}], codecs: [{ mimeType: 'video/VP8' }] };
  const tr = { sender, mid: '0' } as unknown as RTCRtpTransceiver;
  const local = new LocalTrackPublication(track('TR_old'), t as unknown as MediaStreamTrack, tr);
  const adopted: Adoption[] = [];
  const h: MoveHost = {
    connected: () => true,
    state: () => 'connected',
    joinMessage: () => ({ type: 'join', token: 't', protocol: 1 }),
    rtcConfig: (ice) => ({ iceServers: ice }),
    newSession: n.newSession,
    localTracks: new Map([[local.sid, local]]),
    shownVideo: () => new Set(want),
    adopt: (a) => void adopted.push(a),
  };
  return { h, adopted, t };
}

test('a move publishes the same tracks on a second session and hands it over once it decodes', async () => {
  const n = node();
  const { h, adopted, t } = host(n, ['bob']);
  const moving = moveBeforeBreak(h, 'ws://127.0.0.1:2/v1/rtc', 'node-b', 'drain', 2_000);
  // The new node's video of bob decodes a little later.
  const sub = await waitFor(() => n.pcs[1]);
  let decodedAt = 0;
  setTimeout(() => {
    decodedAt = Date.now();
    sub.getStats = async () => new Map([['x', { type: 'inbound-rtp', kind: 'video', framesDecoded: 1, mid: '0' }]]);
  }, 300);
  await moving.catch((err) => assert.fail(err));
  assert.equal(adopted.length, 1);
  const a = adopted[0];
  assert.equal(a.url, 'ws://127.0.0.1:2/v1/rtc');
  assert.equal(a.node, 'node-b');
  assert.equal(a.published[0].sid, 'TR_new');
  assert.equal(a.published[0].track, t as unknown as MediaStreamTrack, 'the same track, not a copy');
  assert.deepEqual(n.requests.map((m) => m.type), ['publishTrack', 'offer']);
  assert.equal(n.closed(), false);
  assert.ok(decodedAt > 0 && Date.now() - decodedAt >= 400, 'switched only after the video decoded (and the overlap)');
  assert.equal(sub.remoteDescription?.type, 'offer');
  assert.deepEqual(a.view.parts.get('PA_b2')?.identity, 'bob');
});

test('a node that says leave ends the move, and what it made is closed', async () => {
  const n = node({ leave: true });
  const { h, adopted } = host(n, []);
  await assert.rejects(moveBeforeBreak(h, 'ws://127.0.0.1:2/v1/rtc', undefined, 'drain', 2_000), /said leave \(full\)/);
  assert.equal(adopted.length, 0);
  assert.equal(n.closed(), true);
  assert.ok(n.pcs.every((pc) => pc.signalingState === 'closed'));
});

async function waitFor<T>(f: () => T | undefined, ms = 2_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v) return v;
    if (Date.now() > end) throw new Error('waitFor: timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}
