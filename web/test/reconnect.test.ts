// Unit tests of reconnection (sdk/reconnect.ts): the resume loop's pauses and
// its answers to each kind of failure, on a fake clock; the ICE watchdog on a
// fake peer connection.
import assert from 'node:assert/strict';
import test from 'node:test';
import { ICE_DISCONNECTED_GRACE_MS, IceWatch, reconnectLoop, type Clock, type ReconnectHost } from '../sdk/reconnect.js';
import { PetrelError } from '../sdk/protocol.js';
import { FakePc } from './fakes.js';

function fake(failures: unknown[], windowMs = 20_000) {
  let now = 0;
  const slept: number[] = [];
  const log: string[] = [];
  let reconnecting = true;
  const clock: Clock = {
    now: () => now,
    sleep: async (ms) => {
      slept.push(ms);
      now += ms;
    },
  };
  const host: ReconnectHost = {
    windowMs,
    reconnecting: () => reconnecting,
    attempt: async () => {
      now += 100; // each attempt takes a while
      const f = failures.shift();
      if (f) throw f;
      log.push('resumed');
    },
    forgetResume: () => log.push('forget'),
    finish: (r) => {
      log.push(`finish ${r}`);
      reconnecting = false;
    },
    failover: async () => void log.push('failover'),
  };
  return { host, clock, slept, log };
}

test('retries with doubling pauses up to 2 s and stops when an attempt succeeds', async () => {
  const net = () => new Error('websocket: connection failed');
  const f = fake([net(), net(), net(), net(), net()]);
  assert.equal(await reconnectLoop(f.host, 250, f.clock), true);
  assert.deepEqual(f.slept, [250, 500, 1000, 2000, 2000, 2000]);
  // A node that does not answer at all may be gone: failover after each such failure.
  assert.deepEqual(f.log, ['failover', 'failover', 'failover', 'failover', 'failover', 'resumed']);

  // A move reconnects at once (first pause 0), then as usual.
  const g = fake([net()]);
  await reconnectLoop(g.host, 0, g.clock);
  assert.deepEqual(g.slept, [0, 250]);
});

test('an unknown session joins anew; a fatal error ends the room; the window ends the tries', async () => {
  const f = fake([new PetrelError('not_found', 'no such session')]);
  assert.equal(await reconnectLoop(f.host, 250, f.clock), true);
  assert.deepEqual(f.log, ['forget', 'resumed'], 'no failover: the server did answer');

  const g = fake([new PetrelError('unauthorized', 'token expired'), new Error('never reached')]);
  assert.equal(await reconnectLoop(g.host, 250, g.clock), false);
  assert.deepEqual(g.log, ['finish unauthorized']);

  const failures = Array.from({ length: 100 }, () => new Error('down'));
  const h = fake(failures, 5_000);
  assert.equal(await reconnectLoop(h.host, 250, h.clock), false);
  assert.equal(h.log.at(-1), 'finish reconnect_failed');
  assert.ok(h.slept.reduce((a, b) => a + b, 0) <= 5_000 + 2_000);
});

test('leaving while reconnecting stops the loop without finishing again', async () => {
  const f = fake([new Error('down')]);
  let calls = 0;
  f.host.reconnecting = () => ++calls < 3;
  assert.equal(await reconnectLoop(f.host, 250, f.clock), false);
  assert.ok(!f.log.some((l) => l.startsWith('finish')));
});

test('ICE: a failed path restarts at once, a disconnected one only if it stays so', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const restarts: string[] = [];
  let active = true;
  const w = new IceWatch(() => active, (target) => restarts.push(target));
  const pub = new FakePc();
  const sub = new FakePc();
  w.watch(pub as unknown as RTCPeerConnection, 'publisher');
  w.watch(sub as unknown as RTCPeerConnection, 'subscriber');
  pub.iceConnectionState = 'failed';
  pub.oniceconnectionstatechange();
  assert.deepEqual(restarts, ['publisher']);

  sub.iceConnectionState = 'disconnected';
  sub.oniceconnectionstatechange();
  t.mock.timers.tick(ICE_DISCONNECTED_GRACE_MS);
  assert.deepEqual(restarts, ['publisher', 'subscriber']);

  // Recovers by itself within the grace: no restart.
  sub.oniceconnectionstatechange();
  sub.iceConnectionState = 'connected';
  sub.oniceconnectionstatechange();
  t.mock.timers.tick(ICE_DISCONNECTED_GRACE_MS);
  assert.equal(restarts.length, 2);

  // Not the room's active session (or the room is reconnecting): nothing.
  active = false;
  pub.oniceconnectionstatechange();
  assert.equal(restarts.length, 2);
  active = true;
  sub.iceConnectionState = 'disconnected';
  sub.oniceconnectionstatechange();
  w.stop();
  t.mock.timers.tick(ICE_DISCONNECTED_GRACE_MS);
  assert.equal(restarts.length, 2, 'stopped watches restart nothing');
});
