// Unit tests of one node's signaling (sdk/session.ts) with a fake socket and
// fake peer connections: routing of server messages, trickle, ICE restarts, and
// a replaced socket going quiet.
import assert from 'node:assert/strict';
import test from 'node:test';
import { Session, type SessionHandlers, type Signal } from '../sdk/session.js';
import type { ClientMessage, JoinedMessage, ServerMessage } from '../sdk/protocol.js';
import type { SignalHandlers } from '../sdk/signal.js';
import { FakePc, settle } from './fakes.js';

class FakeSignal implements Signal {
  open = true;
  sent: ClientMessage[] = [];
  requests: ClientMessage[] = [];
  closed = false;
  constructor(public h: SignalHandlers) {}
  async join(): Promise<JoinedMessage> {
    return { type: 'joined', participant: { sid: 'PA_me', identity: 'me' }, participants: [], resumeToken: 'r' } as unknown as JoinedMessage;
  }
  send(m: ClientMessage): void {
    if (!this.open) throw new Error('signal: socket not open');
    this.sent.push(m);
  }
  async request(m: ClientMessage): Promise<ServerMessage> {
    this.requests.push(m);
    return { type: 'response', sdp: 'answer' } as unknown as ServerMessage;
  }
  drop(): void {
    this.open = false;
    this.h.lost('dropped');
  }
  close(): void {
    this.open = false;
    this.closed = true;
  }
}

function setup(active = true) {
  const signals: FakeSignal[] = [];
  const pcs: FakePc[] = [];
  const got: { messages: ServerMessage[]; lost: string[]; failed: unknown[] } = { messages: [], lost: [], failed: [] };
  const handlers: SessionHandlers = {
    message: (m) => got.messages.push(m),
    lost: (r) => got.lost.push(r),
    subscriberFailed: (e) => got.failed.push(e),
  };
  const s = new Session(handlers, () => active, {
    newSignal: (h) => {
      const sig = new FakeSignal(h);
      signals.push(sig);
      return sig;
    },
    newPc: () => {
      const pc = new FakePc();
      pcs.push(pc);
      return pc as unknown as RTCPeerConnection;
    },
    newStream: () => ({ addTrack() {}, removeTrack() {} }) as unknown as MediaStream,
  });
  return { s, signals, pcs, got };
}

test('server messages go to the transport they are for, the rest to the handlers', async () => {
  const { s, signals, pcs, got } = setup();
  await s.join('ws://127.0.0.1/v1/rtc', { type: 'join', token: 't', protocol: 1 });
  s.createTransports({});
  const [pub, sub] = pcs;
  const h = signals[0].h;
  h.message({ type: 'offer', sdp: 'v=0\r\n' } as ServerMessage);
  await settle();
  assert.equal(sub.remoteDescription?.type, 'offer');
  assert.deepEqual(signals[0].sent.map((m) => m.type), ['answer']);
  h.message({ type: 'trickle', target: 'publisher', candidate: { candidate: 'c' } } as ServerMessage);
  assert.equal(pub.candidates.length, 0, 'held: no remote description yet');
  await s.publisher?.negotiate();
  assert.equal(pub.candidates.length, 1);
  h.message({ type: 'participantLeft', participantSid: 'PA_x', identity: 'x', reason: 'left' } as ServerMessage);
  assert.deepEqual(got.messages.map((m) => m.type), ['participantLeft']);

  // A failed subscriber round is reported, not thrown.
  sub.failSetRemote = new Error('bad sdp');
  h.message({ type: 'offer', sdp: 'v=0\r\n' } as ServerMessage);
  await settle();
  assert.equal(got.failed.length, 1);

  // Local candidates trickle with their target; a closed socket loses none of the rest.
  pub.onicecandidate({ candidate: { toJSON: () => ({ candidate: 'mine' }) } });
  assert.deepEqual(signals[0].sent.at(-1), { type: 'trickle', target: 'publisher', candidate: { candidate: 'mine' } });
  signals[0].open = false;
  assert.doesNotThrow(() => sub.onicecandidate({ candidate: null }));
});

test('a resume opens a new socket on the same transports; the old socket goes quiet', async () => {
  const { s, signals, pcs, got } = setup();
  await s.join('ws://a/v1/rtc', { type: 'join', token: 't', protocol: 1 });
  s.createTransports({});
  await s.join('ws://a/v1/rtc', { type: 'join', token: 't', protocol: 1 });
  assert.equal(signals[0].closed, true);
  assert.equal(pcs.length, 2, 'same transports');
  signals[0].h.message({ type: 'dominantSpeaker', participantSid: 'PA_x' } as ServerMessage);
  signals[0].h.lost('late');
  assert.equal(got.messages.length + got.lost.length, 0);
  signals[1].h.lost('gone');
  assert.deepEqual(got.lost, ['gone']);

  // New handlers (a move adopting this session) hear what comes next.
  const later: string[] = [];
  s.setHandlers({ message: (m) => later.push(m.type), lost: () => {}, subscriberFailed: () => {} });
  signals[1].h.message({ type: 'dominantSpeaker', participantSid: 'PA_x' } as ServerMessage);
  assert.deepEqual(later, ['dominantSpeaker']);
});

test('ICE restarts: the publisher offers anew, the subscriber asks the server; only while active', async () => {
  let active = false;
  const signals: FakeSignal[] = [];
  const pcs: FakePc[] = [];
  const s2 = new Session({ message() {}, lost() {}, subscriberFailed() {} }, () => active, {
    newSignal: (h) => {
      const sig = new FakeSignal(h);
      signals.push(sig);
      return sig;
    },
    newPc: () => {
      const pc = new FakePc();
      pcs.push(pc);
      return pc as unknown as RTCPeerConnection;
    },
    newStream: () => ({}) as MediaStream,
  });
  await s2.join('ws://a/v1/rtc', { type: 'join', token: 't', protocol: 1 });
  s2.createTransports({});
  const [pub, sub] = pcs;
  pub.iceConnectionState = 'failed';
  pub.oniceconnectionstatechange();
  await settle();
  assert.equal(pub.calls.length, 0, 'inactive: no restart');
  active = true;
  pub.oniceconnectionstatechange();
  sub.iceConnectionState = 'failed';
  sub.oniceconnectionstatechange();
  await settle();
  assert.equal(pub.calls[0], 'createOffer:restart');
  assert.deepEqual(signals[0].requests.map((m) => m.type).sort(), ['offer', 'restartIce']);

  s2.close();
  assert.equal(signals[0].closed, true);
  assert.equal(pub.signalingState, 'closed');
  assert.equal(s2.publisher, null);
  await assert.rejects(s2.request({ type: 'restartIce' }), /not connected/);
});
