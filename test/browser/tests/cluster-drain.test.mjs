// A drained node moves its participants to another node make-before-break:
// two Chromium participants in a room on node a see each other; node a is
// drained; both end on node b and neither tile goes a second without a new
// frame. Needs Debian's redis-server (skipped without it).
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, expectGrowth, waitFor } from '../lib/page.mjs';
import { startServer, freePort, outDir } from '../lib/server.mjs';

const redisBin = (() => {
  try {
    return execFileSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' }).trim();
  } catch {
    return '';
  }
})();

async function startRedis() {
  const port = await freePort();
  const log = createWriteStream(`${outDir}redis-cluster-drain.log`);
  const proc = spawn(redisBin, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout.pipe(log);
  proc.stderr.pipe(log);
  const net = await import('node:net');
  for (let i = 0; i < 100; i++) {
    const up = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => (s.end(), resolve(true)));
      s.on('error', () => resolve(false));
    });
    if (up) return { addr: `127.0.0.1:${port}`, stop: () => proc.kill('SIGKILL') };
    await new Promise((r) => setTimeout(r, 100));
  }
  proc.kill('SIGKILL');
  throw new Error('redis-server did not start');
}

// Logs, in the page, each frame the tile of `sid` presents (requestVideoFrameCallback
// on the tile's video element: what the user sees, whatever track it shows).
const recordFrames = (p, sid) =>
  p.page.evaluate((sid) => {
    const v = document.querySelector(`.tile[data-sid="${sid}"] video`);
    v.__watched = true;
    const log = (window.__frames = []);
    const tick = () => {
      log.push(performance.now());
      v.requestVideoFrameCallback(tick);
    };
    v.requestVideoFrameCallback(tick);
  }, sid);

const framesGap = (p) =>
  p.page.evaluate(() => {
    const log = window.__frames;
    let gap = 0;
    let at = 0;
    for (let i = 1; i < log.length; i++) if (log[i] - log[i - 1] > gap) [gap, at] = [log[i] - log[i - 1], log[i - 1]];
    if (log.length && performance.now() - log[log.length - 1] > gap) [gap, at] = [performance.now() - log[log.length - 1], log[log.length - 1]];
    // When the longest gap began, in ms from the move's adoption (negative: before it).
    const from = window.__movedAt ? Math.round(at - window.__movedAt) : null;
    return { gap: Math.round(gap), frames: log.length, from };
  });

test('cluster drain: participants move to another node without a frozen frame over 1 s', { timeout: 150_000, skip: redisBin ? false : 'redis-server is not installed (Debian package redis-server; scripts/install-deps.sh)' }, async () => {
  const closers = [];
  const parts = [];
  try {
    const redis = await startRedis();
    closers.push(() => redis.stop());
    const env = { PETREL_API_SECRET: randomBytes(24).toString('hex') };
    const node = async (id) => {
      const s = await startServer(`drain-${id}`, { args: ['--redis', redis.addr, '--node-id', id], env });
      closers.push(() => s.stop());
      return s;
    };
    const a = await node('a');
    const b = await node('b');
    const chromium = await launchChromium();
    closers.push(() => chromium.close());
    const alice = new Participant('alice', await chromium.newPage());
    const bob = new Participant('bob', await chromium.newPage());
    parts.push(alice, bob);
    await alice.join(a.base, await a.token('drained', 'alice'));
    await bob.join(a.base, await a.token('drained', 'bob'));
    await alice.seesVideoOf(bob);
    await bob.seesVideoOf(alice);
    const before = { alice: alice.sid, bob: bob.sid };
    await recordFrames(alice, bob.sid);
    await recordFrames(bob, alice.sid);
    for (const p of [alice, bob]) {
      await p.page.evaluate(() => {
        window.__left = [];
        window.petrel.room.on('participantLeft', (x) => window.__left.push(x.identity));
        const info = console.info.bind(console);
        console.info = (...a) => {
          if (String(a[0]).includes('moved to')) window.__movedAt = performance.now();
          info(...a);
        };
      });
      p.page.on('console', (m) => m.text().includes('moved to') && p.moved.push(m.text()));
      p.moved = [];
    }
    await new Promise((r) => setTimeout(r, 1_000));

    // Drain node a through the admin API (as `petrel cluster drain a`).
    const admin = execFileSync(process.env.PETREL_BIN ?? new URL('../../../bin/petrel', import.meta.url).pathname,
      ['token', '--identity', 'ops', '--admin'], { env: { ...process.env, PETREL_API_KEY: 'testkey', ...env }, encoding: 'utf8' }).trim().split('\n').pop().trim();
    const res = await fetch(`${a.base.replace('localhost', '127.0.0.1')}/v1/admin/cluster/nodes/a/drain`, { method: 'POST', headers: { Authorization: `Bearer ${admin}` } });
    assert.equal(res.status, 200, `drain: ${res.status} ${await res.text()}`);

    // Both end on node b: their signaling socket is b's, and each shows the other.
    const bPort = new URL(b.base).port;
    for (const p of [alice, bob]) {
      await waitFor(p.page, `${p.label} to move to node b`, (port) =>
        window.petrel.room.state === 'connected' && window.petrel.room.url.includes(`:${port}/`), bPort, 30_000);
    }
    alice.sid = await alice.page.evaluate(() => window.petrel.room.localParticipant.sid);
    bob.sid = await bob.page.evaluate(() => window.petrel.room.localParticipant.sid);
    assert.notEqual(alice.sid, before.alice, 'a new session on node b');
    await alice.seesVideoOf(bob);
    await bob.seesVideoOf(alice);
    // Keep decoding after the move, on node b's connections.
    await expectGrowth("bob's video at alice after the move", () => alice.inbound(), { framesDecoded: 20 });
    await expectGrowth("alice's video at bob after the move", () => bob.inbound(), { framesDecoded: 20 });
    for (const [p, other] of [[alice, bob], [bob, alice]]) {
      const same = await p.page.evaluate((sid) => !!document.querySelector(`.tile[data-sid="${sid}"] video`)?.__watched, other.sid);
      assert.ok(same, `${p.label} shows ${other.label} in the same tile and video element`);
      const { gap, frames, from } = await framesGap(p);
      console.log(`${p.label}: ${other.label}'s tile: ${frames} frames, longest gap ${gap} ms from ${from} ms after the move; ${p.moved.join('; ')}`);
      assert.ok(frames > 30, `${p.label} saw ${frames} frames of ${other.label}`);
      assert.ok(gap < 1_000, `${p.label} saw ${other.label}'s video freeze for ${gap} ms during the move`);
      assert.deepEqual(await p.page.evaluate(() => window.__left), [], `${p.label} never saw anyone leave`);
    }
    // Node a is empty (as of its next heartbeat).
    let left;
    for (let i = 0; i < 50; i++) {
      const nodes = await (await fetch(`${b.base.replace('localhost', '127.0.0.1')}/v1/cluster/nodes`)).json();
      left = nodes.nodes.find((n) => n.id === 'a')?.participants ?? 0;
      if (left === 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(left, 0, `node a still has ${left} participants`);
  } catch (err) {
    await Promise.all(parts.map((p) => p.failureArtifacts('cluster-drain')));
    throw err;
  } finally {
    for (const close of closers.reverse()) await close();
  }
});
