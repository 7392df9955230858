// Unit tests of the SDK's pure parts, run in Node (`npm test`): the data framing,
// SDP msid mapping, negotiation serializing and URL handling. Everything that
// needs a browser is covered by test/browser against the real server.
import assert from 'node:assert/strict';
import test from 'node:test';
import { decodeData, encodeData } from '../sdk/data.js';
import { Serializer, TaskQueue } from '../sdk/negotiation.js';
import { wsUrl } from '../sdk/room.js';
import { h264Profile, msidByMid, rejectUndecodable } from '../sdk/sdp.js';

test('data frames round-trip text and binary with the header', () => {
  const payload = new Uint8Array([0, 1, 254, 255]);
  const frame = encodeData({ to: ['bob'], topic: 't', text: false }, payload);
  assert.equal(frame[0], 1);
  const hlen = (frame[1] << 8) | frame[2];
  assert.deepEqual(JSON.parse(new TextDecoder().decode(frame.subarray(3, 3 + hlen))), { to: ['bob'], topic: 't', text: false });
  const back = decodeData(frame);
  assert.deepEqual(back?.header, { to: ['bob'], topic: 't', text: false });
  assert.deepEqual([...(back?.payload ?? [])], [0, 1, 254, 255]);
});

test('data header length is big-endian beyond 255 bytes', () => {
  const topic = 'x'.repeat(300);
  const frame = encodeData({ topic, text: true }, new TextEncoder().encode('hi'));
  const hlen = JSON.stringify({ topic, text: true }).length;
  assert.equal(frame[1], hlen >> 8);
  assert.equal(frame[2], hlen & 0xff);
  assert.equal(new TextDecoder().decode(decodeData(frame)?.payload), 'hi');
});

test('data frames of another version or cut short are dropped', () => {
  const frame = encodeData({ text: true }, new Uint8Array([1]));
  assert.equal(decodeData(Uint8Array.of(2, ...frame.subarray(1))), null);
  assert.equal(decodeData(frame.subarray(0, 5)), null);
  assert.equal(decodeData(new Uint8Array([1, 0])), null);
  assert.equal(decodeData(Uint8Array.of(1, 0, 4, ...new TextEncoder().encode('nope'))), null);
});

test('msid per mid, skipping sections without one', () => {
  const sdp = [
    'v=0', 'o=- 1 2 IN IP4 0.0.0.0', 's=-', 't=0 0',
    'm=video 9 UDP/TLS/RTP/SAVPF 96', 'a=mid:0', 'a=msid:PA_a TR_v', 'a=sendonly',
    'm=audio 9 UDP/TLS/RTP/SAVPF 111', 'a=mid:1', 'a=ssrc:1234 msid:PA_a TR_a',
    'm=application 9 UDP/DTLS/SCTP webrtc-datachannel', 'a=mid:2',
    '',
  ].join('\r\n');
  const m = msidByMid(sdp);
  assert.deepEqual([...m.entries()], [
    ['0', { streamId: 'PA_a', trackId: 'TR_v' }],
    ['1', { streamId: 'PA_a', trackId: 'TR_a' }],
  ]);
});

test('negotiations asked for during a round fold into one more round', async () => {
  const rounds: boolean[] = [];
  let release!: () => void;
  const s = new Serializer(async (iceRestart) => {
    rounds.push(iceRestart);
    if (rounds.length === 1) await new Promise<void>((r) => (release = r));
  });
  const first = s.negotiate();
  const second = s.negotiate();
  const third = s.negotiate({ iceRestart: true });
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(rounds.length, 1, 'no overlap while the first round is in flight');
  release();
  await Promise.all([first, second, third]);
  assert.deepEqual(rounds, [false, true], 'one follow-up round, carrying the ICE restart');
  await s.negotiate();
  assert.deepEqual(rounds, [false, true, false]);
});

test('a failed round rejects its waiters and the next call runs again', async () => {
  let fail = true;
  const s = new Serializer(async () => {
    if (fail) throw new Error('sdp_invalid');
  });
  await assert.rejects(s.negotiate(), /sdp_invalid/);
  fail = false;
  await s.negotiate();
});

test('task queue runs tasks one at a time, in order, past failures', async () => {
  const q = new TaskQueue();
  const seen: string[] = [];
  const slow = q.run(async () => {
    await new Promise((r) => setTimeout(r, 20));
    seen.push('a');
  });
  const bad = q.run(async () => {
    seen.push('b');
    throw new Error('b failed');
  });
  const after = q.run(async () => seen.push('c'));
  await slow;
  await assert.rejects(bad);
  await after;
  assert.deepEqual(seen, ['a', 'b', 'c']);
});

test('server URLs become the WebSocket endpoint', () => {
  assert.equal(wsUrl('http://localhost:7880'), 'ws://localhost:7880/v1/rtc');
  assert.equal(wsUrl('https://sfu.example/'), 'wss://sfu.example/v1/rtc');
  assert.equal(wsUrl('wss://sfu.example/custom/rtc'), 'wss://sfu.example/custom/rtc');
});

test('an offered section the browser cannot decode is rejected and leaves BUNDLE; the others stay', () => {
  const sdp = [
    'v=0', 'o=- 1 2 IN IP4 0.0.0.0', 's=-', 't=0 0', 'a=group:BUNDLE 0 1 2',
    'm=video 9 UDP/TLS/RTP/SAVPF 102', 'a=mid:0', 'a=sendonly', 'a=rtpmap:102 H264/90000',
    'a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=64000d', 'a=msid:PA_h TR_high',
    'm=audio 9 UDP/TLS/RTP/SAVPF 111', 'a=mid:1', 'a=sendonly', 'a=rtpmap:111 opus/48000/2', 'a=msid:PA_h TR_aud',
    'm=video 9 UDP/TLS/RTP/SAVPF 103', 'a=mid:2', 'a=sendonly', 'a=rtpmap:103 H264/90000',
    'a=fmtp:103 packetization-mode=1;profile-level-id=4d0029', 'a=msid:PA_m TR_main', '',
  ].join('\r\n');
  // The Debian Chromium's receivers: Baseline and Main H.264, no High.
  const chromium = (kind: 'audio' | 'video') => kind === 'audio'
    ? [{ mimeType: 'audio/opus', clockRate: 48000 }]
    : ['42e01f', '42001f', '4d001f'].map((p) => ({ mimeType: 'video/H264', clockRate: 90000, sdpFmtpLine: `level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=${p}` }));
  const rejected = new Set<string>();
  const out = rejectUndecodable(sdp, rejected, chromium);
  assert.deepEqual(out.newly, ['0']);
  assert.match(out.sdp, /a=group:BUNDLE 1 2\r\n/);
  assert.match(out.sdp, /\r\nm=video 0 UDP\/TLS\/RTP\/SAVPF 102\r\na=mid:0\r\n/);
  assert.match(out.sdp, /\r\nm=audio 9 .*\r\na=mid:1\r\n/);
  assert.match(out.sdp, /\r\nm=video 9 .*\r\na=mid:2\r\n/);
  assert.deepEqual([...msidByMid(out.sdp).keys()], ['0', '1', '2']);
  // Once rejected, always: the next offer keeps it out, and reports nothing new.
  const again = rejectUndecodable(sdp, rejected, chromium);
  assert.deepEqual(again.newly, []);
  assert.match(again.sdp, /a=group:BUNDLE 1 2\r\n/);
  // A browser with no H.264 at all (Firefox here) rejects both video sections.
  const noH264 = rejectUndecodable(sdp, new Set(), (kind) => (kind === 'audio' ? chromium('audio') : [{ mimeType: 'video/VP8', clockRate: 90000 }]));
  assert.deepEqual(noH264.newly, ['0', '2']);
  assert.match(noH264.sdp, /a=group:BUNDLE 1\r\n/);
  // Without getCapabilities nothing is touched.
  assert.equal(rejectUndecodable(sdp, new Set(), () => undefined).sdp, sdp);
});

test('H.264 profiles are told apart as libwebrtc does', () => {
  assert.deepEqual(['42e01f', '42c01f', '42001f', '4d001f', '4d401f', '4d801f', '64001f', '640c1f', '64000d', 'f4001f', '7a001f', undefined].map(h264Profile),
    ['cb', 'cb', 'baseline', 'main', 'main', 'cb', 'high', 'constrained-high', 'high', 'high444', '7a00', 'baseline']);
});
