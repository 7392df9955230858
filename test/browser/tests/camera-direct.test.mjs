// Direct sessions with a WebRTC camera in Chromium (docs/cameras.md#direct-sessions):
// the emulated WebRTC camera (`petrel camera webrtc`, one direct session at
// most) is decoded over a peer connection whose selected candidate pair's
// remote end is the camera, not the server; a second viewer is refused by the
// camera and falls back to the SFU, where it decodes too.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, waitFor, expectGrowth } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { root } from '../lib/server.mjs';

const bin = process.env.PETREL_BIN ?? `${root}bin/petrel`;

async function startWebRTCCamera(url, token, clip) {
  const proc = spawn(bin, ['camera', 'webrtc', '--url', url, '--token', token, '--clip', clip, '--loopback', '--max-direct', '1'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr = [];
  proc.stderr.on('data', (d) => stderr.push(String(d)));
  await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`camera webrtc did not start: ${stderr.join('')}`)), 20_000);
    createInterface({ input: proc.stdout }).once('line', () => (clearTimeout(t), resolve()));
    proc.once('exit', (code) => reject(new Error(`camera webrtc exited ${code}: ${stderr.join('')}`)));
  });
  return {
    close: async () => {
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await gone;
    },
  };
}

// The selected pair's remote candidate as "address:port" of pc (by the name given).
async function remoteOf(page, which) {
  return page.evaluate(async (which) => {
    const pc = window.petrelCamera?.[which];
    if (!pc) return null;
    const stats = await pc.getStats();
    let pairId;
    stats.forEach((s) => { if (s.type === 'transport' && s.selectedCandidatePairId) pairId = s.selectedCandidatePairId; });
    const pair = pairId && stats.get(pairId);
    const remote = pair && stats.get(pair.remoteCandidateId);
    return remote ? `${remote.address}:${remote.port}` : null;
  }, which);
}

function framesOf(page) {
  return page.evaluate(async () => {
    const pc = window.petrelCamera?.pc;
    if (!pc) return { framesDecoded: 0 };
    let n = 0;
    (await pc.getStats()).forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video') n = s.framesDecoded ?? 0; });
    return { framesDecoded: n };
  });
}

test('Chromium decodes a WebRTC camera directly, and a viewer over the camera\'s limit through the SFU', { timeout: 120_000 }, () =>
  scenario('camera-direct', async ({ server, own, watch }) => {
    const clip = mkdtempSync(join(tmpdir(), 'petrel-clip-'));
    own({ close: () => rmSync(clip, { recursive: true, force: true }) });
    execFileSync('bash', [`${root}scripts/make-test-clip.sh`, clip, '6']);
    const admin = await server.token('', 'admin', ['--admin']);
    const auth = { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' };
    let res = await fetch(`${server.base}/v1/cameras`, { method: 'POST', headers: auth, body: JSON.stringify({ id: 'porch', name: 'Porch', webrtc: true }) });
    assert.equal(res.status, 200, `POST /v1/cameras: ${await res.text()}`);
    res = await fetch(`${server.base}/v1/cameras/porch/token`, { method: 'POST', headers: auth });
    const body = await res.text();
    assert.equal(res.status, 200, `camera token: ${body}`);
    const camToken = JSON.parse(body).token;
    own(await startWebRTCCamera(`${server.base.replace(/^http/, 'ws')}/v1/rtc`, camToken, clip));

    const chromium = own(await launchChromium());
    const token = await server.token('camera/porch', 'viewer', ['--subscribe']);
    const viewer = watch(new Participant('direct-viewer', await chromium.newPage()));
    await viewer.page.goto(`${server.base}/?camera=porch&direct=1&token=${token}`);
    await waitFor(viewer.page, 'a direct session', () => window.petrelCamera?.mode === 'direct' || (window.petrelCamera?.reason ?? false), undefined, 30_000);
    const mode = await viewer.page.evaluate(() => `${window.petrelCamera.mode} ${window.petrelCamera.reason ?? ''}`);
    assert.equal(mode.trim(), 'direct', `first viewer: ${mode}`);
    await expectGrowth('framesDecoded over the direct connection', () => framesOf(viewer.page), { framesDecoded: 25 });
    const direct = await remoteOf(viewer.page, 'pc');
    const toServer = await remoteOf(viewer.page, 'serverPc');
    assert.ok(direct && toServer, `selected pairs: direct ${direct}, server ${toServer}`);
    assert.notEqual(direct, toServer, 'the direct connection goes to the server');
    assert.notEqual(direct.split(':').pop(), toServer.split(':').pop(), `the direct pair's remote port is the server's (${direct} vs ${toServer})`);
    const st = await (await fetch(`${server.base}/v1/cameras/porch`, { headers: { Authorization: `Bearer ${admin}` } })).json();
    assert.equal(st.camera.viewers, 0, 'the SFU forwards the camera to the direct viewer');
    assert.ok(st.sessions.some((s) => s.kind === 'direct' && s.stepsMs.first_rtp > 0), `no direct session record: ${JSON.stringify(st.sessions)}`);

    // The camera serves one direct session: the next viewer goes through the SFU.
    const second = watch(new Participant('fallback-viewer', await chromium.newPage()));
    const token2 = await server.token('camera/porch', 'viewer-2', ['--subscribe']);
    await second.page.goto(`${server.base}/?camera=porch&direct=1&token=${token2}`);
    await waitFor(second.page, 'the fallback', () => window.petrelCamera?.mode === 'sfu', undefined, 30_000);
    const reason = await second.page.evaluate(() => window.petrelCamera.reason);
    assert.match(reason, /max direct sessions \(1\)/);
    await expectGrowth('framesDecoded through the SFU', () => framesOf(second.page), { framesDecoded: 25 });
  }));
