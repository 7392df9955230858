// Unit tests of the WebTransport media path's pure parts: the jitter buffer and
// the rate controller. The wire format and the browser pipeline are covered by
// test/browser/tests/webtransport.test.mjs against the real server.
import assert from 'node:assert/strict';
import test from 'node:test';
import { JitterBuffer } from '../sdk/wtjitter.js';
import { RateController } from '../sdk/wtrate.js';

const frame = (id: number, key = false) => ({ id, tsMs: id * 33, key, data: id });

test('jitter buffer releases reordered frames in order at their playout time', () => {
  const jb = new JitterBuffer<number>({ minDelayMs: 20 });
  // Transit 100 ms; frame 2 overtakes frame 1.
  jb.push(frame(0, true), 100);
  assert.deepEqual(jb.pop(100).map((f) => f.id), [], 'held for the target delay');
  assert.deepEqual(jb.pop(120).map((f) => f.id), [0]);
  jb.push(frame(2), 166 + 100);
  jb.push(frame(1), 133 + 100 + 5);
  assert.deepEqual(jb.pop(300).map((f) => f.id), [1, 2]);
  assert.equal(jb.stats.lost, 0);
  assert.equal(jb.needKeyframe, false);
});

test('a frame missing past the deadline is given up; video then waits for a keyframe', () => {
  const jb = new JitterBuffer<number>({ minDelayMs: 20 });
  jb.push(frame(0, true), 0);
  assert.deepEqual(jb.pop(20).map((f) => f.id), [0]);
  jb.push(frame(2), 66); // frame 1 never comes
  jb.push(frame(3), 99);
  assert.deepEqual(jb.pop(80).map((f) => f.id), [], 'frame 2 is not due yet: frame 1 may still come');
  assert.deepEqual(jb.pop(200).map((f) => f.id), [], 'deltas after a gap do not decode');
  assert.equal(jb.needKeyframe, true);
  assert.equal(jb.stats.lost, 1);
  jb.needKeyframe = false;
  jb.push(frame(4, true), 132);
  assert.deepEqual(jb.pop(300).map((f) => f.id), [4], 'resumes at the keyframe');
  assert.equal(jb.stats.dropped, 2, 'frames 2 and 3 were dropped');
  jb.push(frame(1), 301);
  assert.equal(jb.stats.late, 1, 'the straggler is late');
});

test('audio skips a lost frame without waiting for a keyframe', () => {
  const jb = new JitterBuffer<number>({ minDelayMs: 20, video: false });
  jb.push({ id: 0, tsMs: 0, key: true, data: 0 }, 0);
  jb.push({ id: 2, tsMs: 40, key: true, data: 2 }, 40);
  assert.deepEqual(jb.pop(100).map((f) => f.id), [0, 2]);
  assert.equal(jb.needKeyframe, false);
});

test('the target delay follows the jitter, bounded', () => {
  const jb = new JitterBuffer<number>({ minDelayMs: 10, maxDelayMs: 200 });
  let t = 0;
  for (let i = 0; i < 200; i++) {
    t = i * 33 + (i % 2 ? 60 : 0); // alternate 0 and 60 ms extra transit
    jb.push(frame(i, i === 0), t);
    jb.pop(t);
  }
  assert.ok(jb.targetMs > 100 && jb.targetMs <= 200, `target ${jb.targetMs}`);
  assert.ok(jb.stats.late === 0, 'no frame came after its deadline');
});

test('rate controller backs off on loss, grows when clean, follows QUIC estimate and scales down', () => {
  const rc = new RateController({ startBps: 1_000_000, minBps: 50_000, maxBps: 2_000_000 });
  let now = 1000;
  let d = rc.update({ lossFraction: 0 }, now);
  for (let i = 0; i < 20; i++) d = rc.update({ lossFraction: 0 }, (now += 500));
  assert.ok(d.bitrate > 1_000_000, `grew to ${d.bitrate}`);
  const before = d.bitrate;
  d = rc.update({ lossFraction: 0.3 }, (now += 500));
  assert.ok(d.bitrate < before * 0.9, `backed off: ${before} -> ${d.bitrate}`);
  const once = d.bitrate;
  d = rc.update({ lossFraction: 0.3 }, (now += 50));
  assert.equal(d.bitrate, once, 'one decrease per RTT');
  d = rc.update({ lossFraction: 0, estimatedBps: 200_000 }, (now += 500));
  assert.ok(d.bitrate <= 180_000, `capped by QUIC's estimate: ${d.bitrate}`);
  assert.ok(d.scale >= 2, 'fewer pixels at a low rate');
  for (let i = 0; i < 10; i++) d = rc.update({ dropFraction: 0.5, rttMs: 50 }, (now += 500));
  assert.equal(d.bitrate, 50_000, 'floor');
  assert.equal(d.scale, 4);
});
