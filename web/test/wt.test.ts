// Unit tests of the WebTransport media path's pure parts: the jitter buffer, the
// rate controller and the session's RTT estimates. The wire format is in
// wtwire.test.ts; the browser pipeline is covered by
// test/browser/tests/webtransport.test.mjs against the real server.
import assert from 'node:assert/strict';
import test from 'node:test';
import { JitterBuffer } from '../sdk/wtjitter.js';
import { RateController } from '../sdk/wtrate.js';
import { RttEstimator } from '../sdk/wtrtt.js';

// A GOP-long group starting at frame 0: object = frame number.
const frame = (id: number, key = false) => ({ group: 0, object: id, tsMs: id * 33, key, data: id });
const ids = (fs: { object: number; group: number }[]) => fs.map((f) => (f.group ? f.group * 100 + f.object : f.object));

test('jitter buffer releases reordered frames in order at their playout time', () => {
  const jb = new JitterBuffer<number>({ minDelayMs: 20 });
  // Transit 100 ms; frame 2 overtakes frame 1.
  jb.push(frame(0, true), 100);
  assert.deepEqual(ids(jb.pop(100)), [], 'held for the target delay');
  assert.deepEqual(ids(jb.pop(120)), [0]);
  jb.push(frame(2), 166 + 100);
  jb.push(frame(1), 133 + 100 + 5);
  assert.deepEqual(ids(jb.pop(300)), [1, 2]);
  assert.equal(jb.stats.lost, 0);
  assert.equal(jb.needKeyframe, false);
});

test('a frame missing past the deadline is given up; video then waits for a keyframe', () => {
  const jb = new JitterBuffer<number>({ minDelayMs: 20 });
  jb.push(frame(0, true), 0);
  assert.deepEqual(ids(jb.pop(20)), [0]);
  jb.push(frame(2), 66); // frame 1 never comes
  jb.push(frame(3), 99);
  assert.deepEqual(ids(jb.pop(80)), [], 'frame 2 is not due yet: frame 1 may still come');
  assert.deepEqual(ids(jb.pop(200)), [], 'deltas after a gap do not decode');
  assert.equal(jb.needKeyframe, true);
  assert.equal(jb.stats.lost, 1);
  jb.needKeyframe = false;
  jb.push({ group: 1, object: 0, tsMs: 132, key: true, data: 4 }, 132);
  assert.deepEqual(ids(jb.pop(300)), [100], 'resumes at the keyframe of the next group');
  assert.equal(jb.stats.dropped, 2, 'frames 2 and 3 were dropped');
  jb.push(frame(1), 301);
  assert.equal(jb.stats.late, 1, 'the straggler is late');
});

test('a repair hold delays only the frames behind a missing one', () => {
  const jb = new JitterBuffer<number>({ minDelayMs: 20 });
  jb.setRepairMs(100); // a retransmission is on its way
  jb.push(frame(0, true), 0);
  assert.deepEqual(ids(jb.pop(20)), [0], 'in order: played at the jitter target, not held for the repair');
  jb.push(frame(1), 33);
  assert.deepEqual(ids(jb.pop(53)), [1]);
  jb.push(frame(3), 99); // frame 2 is being retransmitted
  assert.deepEqual(ids(jb.pop(119)), [], 'frame 3 is due but waits for the repair of frame 2');
  assert.equal(jb.nextDue(), 219, 'due at its playout time plus the repair allowance');
  jb.push(frame(2), 150); // the retransmission
  assert.deepEqual(ids(jb.pop(150)), [2, 3], 'the repair releases the held frame at once');
  assert.equal(jb.stats.lost, 0);
  jb.push(frame(4), 152);
  assert.deepEqual(ids(jb.pop(152)), [4], 'after the repair, frames play at the jitter target again');
  jb.push(frame(6), 198); // frame 5 lost; nothing is being repaired any more
  jb.setRepairMs(0);
  assert.deepEqual(ids(jb.pop(218)), [], 'given up at its playout time, without the allowance');
  assert.equal(jb.stats.lost, 1);
  assert.equal(jb.needKeyframe, true);
});

test('a new group follows any object of the previous one without counting a loss', () => {
  const jb = new JitterBuffer<number>({ minDelayMs: 20 });
  jb.push(frame(0, true), 0);
  jb.push(frame(1), 33);
  jb.push({ group: 1, object: 0, tsMs: 66, key: true, data: 0 }, 66);
  assert.deepEqual(ids(jb.pop(200)), [0, 1, 100]);
  assert.equal(jb.stats.lost, 0);
  assert.equal(jb.needKeyframe, false);
});

test('audio skips a lost frame without waiting for a keyframe', () => {
  const jb = new JitterBuffer<number>({ minDelayMs: 20, video: false });
  jb.push({ group: 0, object: 0, tsMs: 0, key: true, data: 0 }, 0);
  jb.push({ group: 2, object: 0, tsMs: 40, key: true, data: 2 }, 40);
  assert.deepEqual(ids(jb.pop(100)), [0, 200]);
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
  assert.ok(jb.targetMs > 60 && jb.targetMs <= 200, `target ${jb.targetMs}`);
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

test('rate controller backs off when the RTT rises above the path minimum (a queue), without loss', () => {
  const rc = new RateController({ startBps: 1_000_000 });
  let now = 1000;
  rc.update({ rttMs: 40, minRttMs: 40 }, now);
  const before = rc.update({ rttMs: 45, minRttMs: 40 }, (now += 500)).bitrate;
  const d = rc.update({ rttMs: 400, minRttMs: 40 }, (now += 500));
  assert.ok(d.bitrate < before * 0.9, `${before} -> ${d.bitrate}`);
  const held = rc.update({ rttMs: 100, minRttMs: 40 }, (now += 500)).bitrate;
  assert.ok(held <= d.bitrate, 'no growth while a queue is still there');
});

test('rate controller starts at 150 kbit/s and ramps per clean round trip, stopping at the first queue', () => {
  const rc = new RateController({ maxBps: 2_500_000 });
  assert.equal(rc.bitrate, 150_000, 'starts below WebRTC\'s 300 kbit/s');
  let now = 1000;
  // No delay signal yet: no start-up jump.
  let d = rc.update({ lossFraction: 0 }, now);
  d = rc.update({ lossFraction: 0 }, (now += 500));
  assert.ok(d.bitrate < 160_000, `held without a delay signal: ${d.bitrate}`);
  // A clean 40 ms path: past 800 kbit/s within 4 s.
  let t = 0;
  while (d.bitrate < 800_000 && t < 10_000) {
    d = rc.update({ lossFraction: 0, rttMs: 42, minRttMs: 40 }, (now += 500));
    t += 500;
  }
  assert.ok(t <= 4_000, `reached ${d.bitrate} after ${t} ms`);
  assert.equal(rc.startingUp, true);
  // On a long path the ramp is per round trip: slower per second than at 40 ms.
  const slow = new RateController();
  let n2 = 1000;
  slow.update({ rttMs: 500, minRttMs: 500 }, n2);
  const s1 = slow.update({ rttMs: 500, minRttMs: 500 }, (n2 += 500)).bitrate;
  assert.ok(s1 > 170_000 && s1 < 190_000, `a fifth per 500 ms round trip: ${s1}`);
  // Half a second of queue: the start-up ends with a halving, then no growth while it drains.
  const before = d.bitrate;
  d = rc.update({ lossFraction: 0, rttMs: 700, minRttMs: 40 }, (now += 500));
  assert.ok(d.bitrate <= before * 0.5 + 1, `${before} -> ${d.bitrate}`);
  assert.equal(rc.startingUp, false);
  const held = rc.update({ rttMs: 200, minRttMs: 40 }, (now += 500)).bitrate;
  assert.ok(held <= d.bitrate, 'no growth while the queue drains');
  // QUIC's estimate, where the browser reports one, lifts the start-up.
  const q = new RateController();
  let n3 = 1000;
  q.update({ rttMs: 30, minRttMs: 30 }, n3);
  assert.ok(q.update({ rttMs: 30, minRttMs: 30, estimatedBps: 1_600_000 }, (n3 += 500)).bitrate >= 800_000);
});

test('RTT: NACK round trips smooth the estimate until the browser reports one', () => {
  const e = new RttEstimator();
  assert.equal(e.rttMs, 100, 'until known');
  e.nackAnswered(40);
  assert.equal(e.rttMs, 40, 'the first sample is taken as is');
  e.nackAnswered(120);
  assert.equal(e.rttMs, 50, 'then smoothed by 1/8');
  e.nackAnswered(-1);
  assert.equal(e.rttMs, 50, 'a bad sample is ignored');
  e.fromBrowser(undefined);
  e.fromBrowser(0);
  assert.equal(e.rttMs, 50);
  e.fromBrowser(30);
  e.nackAnswered(500);
  assert.equal(e.rttMs, 30, "the browser's figure wins over NACK samples");
});

test('RTT probe: the median of five against the minimum from the handshake on', () => {
  const e = new RttEstimator();
  e.requestAnswered(20); // half the handshake
  e.probeSent(1000);
  assert.equal(e.probe.pendingSince, 1000);
  assert.equal(e.probe.minRttMs, 20, 'the handshake bounds the minimum before any probe');
  for (const ms of [30, 25, 200, 28, 26, 27]) e.probeAnswered(ms);
  e.probeEnded();
  assert.equal(e.probe.pendingSince, 0);
  assert.equal(e.probe.samples, 6);
  assert.equal(e.probe.rttMs, 27, 'median of the last five (25, 200, 28, 26, 27): a late timer is not a queue');
  assert.equal(e.probe.minRttMs, 20, 'a queued path never raises the minimum');
  e.requestAnswered(12);
  e.probeAnswered(400);
  assert.equal(e.probe.minRttMs, 12, 'any faster answer lowers it');
  assert.equal(e.probe.rttMs, 28);
});
