// The camera view in Chromium: a camera declared through the admin API (RTSP
// from `petrel camera emulate`), watched over WebRTC (framesDecoded grows, the
// time-to-stream overlay shows the first frame), over the HTTP live fallback
// (fragmented MP4 through MSE: frames play), and on the wall.
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

async function startCamera(clip, ...extra) {
  const proc = spawn(bin, ['camera', 'emulate', '--addr', '127.0.0.1:0', '--clip', clip, ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr = [];
  proc.stderr.on('data', (d) => stderr.push(String(d)));
  const url = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`camera emulate did not start: ${stderr.join('')}`)), 10_000);
    createInterface({ input: proc.stdout }).once('line', (l) => (clearTimeout(t), resolve(l.trim())));
    proc.once('exit', (code) => reject(new Error(`camera emulate exited ${code}: ${stderr.join('')}`)));
  });
  return {
    url,
    close: async () => {
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await gone;
    },
  };
}

test('Chromium views a camera over WebRTC, over the HTTP fallback and on the wall', { timeout: 120_000 }, () =>
  scenario('camera', async ({ server, own, watch }) => {
    const clip = mkdtempSync(join(tmpdir(), 'petrel-clip-'));
    own({ close: () => rmSync(clip, { recursive: true, force: true }) });
    execFileSync('bash', [`${root}scripts/make-test-clip.sh`, clip, '6']);
    const cam = own(await startCamera(clip));
    const admin = await server.token('', 'admin', ['--admin']);
    const res = await fetch(`${server.base}/v1/cameras`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ id: 'door', name: 'Front door', rtsp: cam.url }),
    });
    assert.equal(res.status, 200, `POST /v1/cameras: ${await res.text()}`);

    const chromium = own(await launchChromium());
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    const token = await server.token('camera/door', 'viewer', ['--subscribe']);
    await viewer.page.goto(`${server.base}/?camera=door&token=${token}`);
    await waitFor(viewer.page, 'the viewer connection', () => window.petrelCamera?.pc !== undefined);
    await expectGrowth('framesDecoded of the camera', async () => {
      return viewer.page.evaluate(async () => {
        const pc = window.petrelCamera?.pc;
        if (!pc) return { framesDecoded: 0 };
        let n = 0;
        (await pc.getStats()).forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video') n = s.framesDecoded ?? 0; });
        return { framesDecoded: n };
      });
    }, { framesDecoded: 25 });
    await waitFor(viewer.page, 'the first frame in the overlay', () => (document.getElementById('tts-overlay')?.dataset.firstFrame ?? '') !== '');
    const overlay = await viewer.page.evaluate(() => document.getElementById('tts-overlay').textContent);
    assert.match(overlay, /first frame\s+[\d.]+ ms/);
    assert.match(overlay, /ICE connected\s+[\d.]+ ms/);
    await waitFor(viewer.page, 'the camera state', () => /^streaming/.test(document.querySelector('.camera-state')?.textContent ?? ''));

    // The HTTP fallback: fragmented MP4 through Media Source Extensions.
    const httpViewer = watch(new Participant('http-viewer', await chromium.newPage()));
    await httpViewer.page.goto(`${server.base}/?camera=door&http=1&token=${token}`);
    await expectGrowth('frames played from live.mp4', async () => ({ frames: await httpViewer.page.evaluate(() => window.petrelCamera?.frames() ?? 0) }), { frames: 25 });
    // G.711 has no MSE form: this camera's fallback is video only.
    assert.doesNotMatch(await httpViewer.page.evaluate(() => window.petrelCamera?.mseType ?? ''), /opus/);

    // An AAC camera's fallback carries its audio as Opus (transcoded): the
    // SourceBuffer takes both tracks, video plays and audio is decoded.
    const aacCam = own(await startCamera(clip, '--audio', 'aac'));
    const res2 = await fetch(`${server.base}/v1/cameras`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ id: 'yard', name: 'Yard', rtsp: aacCam.url }),
    });
    assert.equal(res2.status, 200, `POST /v1/cameras: ${await res2.text()}`);
    const yardToken = await server.token('camera/yard', 'viewer', ['--subscribe']);
    const aacViewer = watch(new Participant('aac-http-viewer', await chromium.newPage()));
    await aacViewer.page.goto(`${server.base}/?camera=yard&http=1&token=${yardToken}`);
    await expectGrowth('frames and audio bytes played from live.mp4', async () => aacViewer.page.evaluate(() => ({
      frames: window.petrelCamera?.frames() ?? 0,
      audioBytes: document.querySelector('video')?.webkitAudioDecodedByteCount ?? 0,
    })), { frames: 25, audioBytes: 1000 });
    assert.match(await aacViewer.page.evaluate(() => window.petrelCamera?.mseType ?? ''), /avc1\.[0-9a-f]{6}, opus/);

    // The wall: the camera's tile plays, over the wall room's connection.
    const wall = watch(new Participant('wall', await chromium.newPage()));
    const wallToken = await server.token('cameras', 'wall', ['--subscribe']);
    await wall.page.goto(`${server.base}/?cameras=1&token=${wallToken}`);
    await waitFor(wall.page, 'the camera tile', () => document.querySelector('.camera-tile[data-camera="door"]') !== null);
    await expectGrowth('frames on the wall', async () => ({ frames: await wall.page.evaluate(() => window.petrelCamera?.frames() ?? 0) }), { frames: 25 });
  }));
