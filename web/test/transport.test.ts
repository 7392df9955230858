// Unit tests of the two transports (sdk/publisher.ts, sdk/subscriber.ts) on fake
// peer connections and a fake signaling port: the order of the offer/answer
// steps, where answers and candidates are taken from, and what is held back.
import assert from 'node:assert/strict';
import test from 'node:test';
import { PublisherTransport, applyDemand, demandedEncodings, withAnnouncedIds, type SignalPort } from '../sdk/publisher.js';
import { SubscriberTransport } from '../sdk/subscriber.js';
import type { ClientMessage, ServerMessage } from '../sdk/protocol.js';
import { TaskQueue } from '../sdk/negotiation.js';
import { FakePc, FakeSender, FakeTrack, asPc, settle } from './fakes.js';

// A signaling port that records what is sent and answers requests with `reply`.
function port(reply: (m: ClientMessage) => Promise<ServerMessage> | ServerMessage = () => ({ type: 'response' }) as ServerMessage) {
  const sent: ClientMessage[] = [];
  const requests: ClientMessage[] = [];
  const p: SignalPort = {
    send: (m) => void sent.push(m),
    request: async (m) => {
      requests.push(m);
      return reply(m);
    },
  };
  return { p, sent, requests };
}

const fakeStream = () => {
  const tracks: unknown[] = [];
  return { tracks, addTrack: (t: unknown) => tracks.push(t), removeTrack: (t: unknown) => tracks.splice(tracks.indexOf(t), 1) } as unknown as MediaStream & { tracks: unknown[] };
};

test('publishing announces the track first, then adds a send-only sender with its encodings', async () => {
  const pc = new FakePc();
  const sig = port((m) => ({ type: 'response', track: { sid: 'TR_1', kind: 'video', source: 'camera', name: 'cam', muted: false } }) as unknown as ServerMessage);
  const stream = fakeStream();
  const t = new PublisherTransport(asPc(pc), sig.p, stream);
  assert.deepEqual(pc.channels.map((c) => c.label), ['_reliable', '_lossy']);
  const senders: string[] = [];
  t.onSender = (_s, kind) => senders.push(kind);
  const track = new FakeTrack('video', 'cid-1', 'label');
  const enc = [{ rid: 'q', maxBitrate: 150_000, scaleResolutionDownBy: 4 }];
  const { info, transceiver } = await t.publish(track as unknown as MediaStreamTrack, { source: 'camera', name: 'cam', sendEncodings: enc });
  assert.equal(info.sid, 'TR_1');
  const req = sig.requests[0] as Extract<ClientMessage, { type: 'publishTrack' }>;
  assert.equal(req.type, 'publishTrack');
  assert.equal(req.cid, 'cid-1');
  assert.equal(req.width, 640);
  const tr = transceiver as unknown as { direction: string; init: { sendEncodings: unknown; streams: unknown[] } };
  assert.equal(tr.direction, 'sendonly');
  assert.deepEqual(tr.init.sendEncodings, enc);
  assert.deepEqual(stream.tracks, [track]);
  assert.deepEqual(senders, ['video']);

  t.remove(track as unknown as MediaStreamTrack, transceiver.sender);
  assert.deepEqual(stream.tracks, []);
  assert.equal((transceiver.sender as unknown as FakeSender).track, null);

  const bad = new PublisherTransport(asPc(new FakePc()), port().p, fakeStream());
  await assert.rejects(bad.publish(track as unknown as MediaStreamTrack, { source: 'camera', name: '' }), /no track/);
});

test('a publisher round takes the answer from the reply or from an answer message, and holds candidates until then', async () => {
  const pc = new FakePc();
  let answerNow: ((m: ServerMessage) => void) | undefined;
  const sig = port((m) => (m.type === 'offer' ? new Promise((r) => (answerNow = r)) : ({ type: 'response' } as ServerMessage)));
  const t = new PublisherTransport(asPc(pc), sig.p, fakeStream());
  const done = t.negotiate();
  await settle();
  await t.addCandidate({ candidate: 'candidate:1 1 udp 1 127.0.0.1 5000 typ host' });
  assert.equal(pc.candidates.length, 0, 'held before the answer');
  answerNow?.({ type: 'response', sdp: 'the-answer' } as unknown as ServerMessage);
  await done;
  assert.deepEqual(pc.calls, ['createOffer', 'setLocal:offer', 'setRemote:answer', 'candidate']);
  assert.equal(pc.remoteDescription?.sdp, 'the-answer');

  // The answer as its own message (the reply carries no sdp, or comes later).
  const pc2 = new FakePc();
  const t2 = new PublisherTransport(asPc(pc2), port(() => new Promise<ServerMessage>(() => {})).p, fakeStream());
  const done2 = t2.negotiate({ iceRestart: true });
  await settle();
  t2.onAnswer('via-message');
  await done2;
  assert.equal(pc2.calls[0], 'createOffer:restart');
  assert.equal(pc2.remoteDescription?.sdp, 'via-message');
});

test('a failed publisher round rolls the offer back and the next round runs', async () => {
  const pc = new FakePc();
  let fail = true;
  const sig = port(() => (fail ? Promise.reject(new Error('offer: no reply')) : ({ type: 'response', sdp: 'ok' } as unknown as ServerMessage)));
  const t = new PublisherTransport(asPc(pc), sig.p, fakeStream());
  await assert.rejects(t.negotiate(), /no reply/);
  assert.deepEqual(pc.calls, ['createOffer', 'setLocal:offer', 'setLocal:rollback']);
  assert.equal(pc.signalingState, 'stable');
  fail = false;
  await t.negotiate();
  assert.equal(pc.remoteDescription?.sdp, 'ok');
});

test('track demands switch encodings off by layer, one update at a time', async () => {
  assert.deepEqual(demandedEncodings([{ rid: 'q' }, { rid: 'h' }, { rid: 'f' }], true, [false, true, true]), [false, true, true]);
  assert.deepEqual(demandedEncodings([{ rid: 'q' }, { rid: 'h' }], false), [false, false]);
  assert.deepEqual(demandedEncodings([{}], true, [false, false, false]), [true], 'an encoding without rid follows only active');

  const sender = new FakeSender();
  sender.params.encodings = [{ rid: 'q', active: true }, { rid: 'h', active: true }, { rid: 'f', active: true }];
  let woken = 0;
  const pub = { demandQueue: new TaskQueue(), demandWaiters: [() => woken++], transceiver: { sender } as unknown as RTCRtpTransceiver };
  await applyDemand(pub, false);
  assert.deepEqual(sender.params.encodings.map((e) => e.active), [false, false, false]);
  assert.equal(woken, 0);
  await applyDemand(pub, true, [true, true, false]);
  assert.deepEqual(sender.params.encodings.map((e) => e.active), [true, true, false]);
  assert.equal(woken, 1);
});

const offer = (mids: [string, string, string][], codec = 'opus/48000/2') =>
  [
    'v=0', 'o=- 1 2 IN IP4 0.0.0.0', 's=-', 't=0 0', `a=group:BUNDLE ${mids.map((m) => m[0]).join(' ')}`,
    ...mids.flatMap(([mid, pa, tr]) => ['m=audio 9 UDP/TLS/RTP/SAVPF 111', `a=mid:${mid}`, 'a=sendonly', `a=rtpmap:111 ${codec}`, `a=msid:${pa} ${tr}`]),
    '',
  ].join('\r\n');

test('server offers are answered in order, with the msid map ready before tracks fire', async () => {
  const pc = new FakePc();
  const sent: ClientMessage[] = [];
  const sub = new SubscriberTransport(asPc(pc), (m) => sent.push(m), () => [{ mimeType: 'audio/opus', clockRate: 48000 } as RTCRtpCodec]);
  let midsAtRemote: string[] = [];
  const setRemote = pc.setRemoteDescription.bind(pc);
  pc.setRemoteDescription = async (d) => {
    midsAtRemote = [...sub.mids.keys()];
    return setRemote(d);
  };
  await sub.addCandidate({ candidate: 'candidate:1 1 udp 1 127.0.0.1 5000 typ host' });
  const a = sub.onOffer(offer([['0', 'PA_a', 'TR_a']]));
  const b = sub.onOffer(offer([['0', 'PA_a', 'TR_a'], ['1', 'PA_b', 'TR_b']]));
  await Promise.all([a, b]);
  assert.deepEqual(midsAtRemote, ['0', '1']);
  assert.deepEqual(sub.mids.get('1'), { streamId: 'PA_b', trackId: 'TR_b' });
  assert.deepEqual(pc.calls, ['setRemote:offer', 'candidate', 'setLocal:answer', 'setRemote:offer', 'setLocal:answer']);
  assert.deepEqual(sent.map((m) => m.type), ['answer', 'answer']);
});

test('a section this browser cannot decode is declined and reported once', async () => {
  const pc = new FakePc();
  const sub = new SubscriberTransport(asPc(pc), () => {}, (kind) => (kind === 'audio' ? [{ mimeType: 'audio/opus', clockRate: 48000 } as RTCRtpCodec] : []));
  const reported: string[] = [];
  sub.attach({ track: () => {}, channel: () => {}, unsupported: (mid) => reported.push(mid) });
  await sub.onOffer(offer([['0', 'PA_a', 'TR_a']], 'G7221/16000'));
  await sub.onOffer(offer([['0', 'PA_a', 'TR_a']], 'G7221/16000'));
  assert.deepEqual(reported, ['0']);
  assert.match(pc.remoteDescription?.sdp ?? '', /m=audio 0 /);
});

test('tracks and channels wait for a consumer; receivers are handed over at once', async () => {
  const pc = new FakePc();
  const sub = new SubscriberTransport(asPc(pc), () => {});
  const receivers: unknown[] = [];
  sub.onReceiver = (r) => receivers.push(r);
  const ev = (id: string) => ({ track: { id }, receiver: { id: `r-${id}` } });
  pc.ontrack(ev('t1'));
  pc.ondatachannel({ channel: { label: '_reliable' } });
  pc.ontrack(ev('t2'));
  assert.equal(receivers.length, 2);
  const got: string[] = [];
  sub.attach({ track: (e) => got.push(e.track.id), channel: (c) => got.push(c.label), unsupported: () => {} });
  assert.deepEqual(got, ['_reliable', 't1', 't2']);
  pc.ontrack(ev('t3'));
  assert.deepEqual(got.at(-1), 't3');
});

test("the offer the server gets names each sending section's track by its announced cid (Firefox writes its own id)", () => {
  const sdp = [
    'v=0', 'o=mozilla...THIS_IS_SDPARTA 1 0 IN IP4 0.0.0.0', 's=-', 't=0 0', 'a=msid-semantic:WMS *',
    'm=audio 9 UDP/TLS/RTP/SAVPF 109', 'a=mid:0', 'a=msid:{s1} {ff-audio}', 'a=sendonly',
    'm=video 9 UDP/TLS/RTP/SAVPF 120', 'a=mid:1', 'a=msid:{s1} {ff-video}', 'a=ssrc:42 msid:{s1} {ff-video}', 'a=sendonly',
    'm=video 9 UDP/TLS/RTP/SAVPF 120', 'a=mid:2', 'a=msid:{s1} {ff-other}', 'a=sendonly',
    'm=application 9 UDP/DTLS/SCTP webrtc-datachannel', 'a=mid:3', '',
  ].join('\r\n');
  const out = withAnnouncedIds(sdp, new Map([['0', '{track-a}'], ['1', '{track-v}']]));
  assert.match(out, /a=mid:0\r\na=msid:\{s1\} \{track-a\}\r\n/);
  assert.match(out, /a=mid:1\r\na=msid:\{s1\} \{track-v\}\r\na=ssrc:42 msid:\{s1\} \{track-v\}\r\n/);
  // A section without an announced cid, and everything else, stays as it was.
  assert.match(out, /a=mid:2\r\na=msid:\{s1\} \{ff-other\}\r\n/);
  assert.equal(out.replace(/\{track-a\}/, '{ff-audio}').replaceAll('{track-v}', '{ff-video}'), sdp);
  assert.equal(withAnnouncedIds(sdp, new Map()), sdp);
});
