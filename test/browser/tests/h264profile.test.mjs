// A publisher in an H.264 profile a viewer's browser cannot decode costs that viewer
// only that track: the room's other tracks still play, and the SDK says why.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { freePort } from '../lib/server.mjs';

// ffmpeg publishing H.264 in `profile` (and AAC, which the room makes Opus) over RTMP.
function rtmpPublisher(own, port, token, profile) {
  const ffmpeg = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-nostdin', '-re',
    '-f', 'lavfi', '-i', 'testsrc2=size=320x240:rate=30', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000',
    '-t', '40', '-c:v', 'libx264', '-preset', 'veryfast', '-tune', 'zerolatency', '-g', '30', '-bf', '0', '-profile:v', profile, '-pix_fmt', 'yuv420p',
    '-c:a', 'aac', '-f', 'flv', `rtmp://127.0.0.1:${port}/live/${token}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  ffmpeg.stderr.on('data', (b) => (stderr += b));
  own({ close: () => ffmpeg.kill('SIGKILL') });
  return () => stderr;
}

test('Chromium without High profile still gets the other tracks and is told it cannot receive a High publisher', { timeout: 90_000 }, async () => {
  const port = await freePort();
  await scenario('h264-high', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    await viewer.page.addInitScript(() => {
      window.__unsupported = [];
    });
    await viewer.join(server.base, await server.token('stage', 'viewer'));
    await viewer.page.evaluate(() => window.petrel.room.on('trackUnsupported', (pub, p, code) =>
      window.__unsupported.push({ track: pub.sid, identity: p?.identity, code })));

    const high = rtmpPublisher(own, port, await server.token('stage', 'obs'), 'high');
    const obsSid = await waitFor(viewer.page, 'participant obs in the room', () =>
      [...window.petrel.room.participants.values()].find((p) => p.identity === 'obs' && p.tracks.size >= 1)?.sid, undefined, 20_000)
      .catch((e) => { throw new Error(`${e.message}; ffmpeg: ${high()}`); });

    // A VP8/Opus browser publisher joins after the High one.
    const cam = watch(new Participant('cam', await chromium.newPage()));
    await cam.join(server.base, await server.token('stage', 'cam'));
    await viewer.seesVideoOf(cam);

    // The viewer is told which track it cannot receive, and why.
    const told = await waitFor(viewer.page, 'the High track reported unsupported', () =>
      window.__unsupported.length > 0 && window.__unsupported, undefined, 15_000);
    assert.equal(told[0].identity, 'obs');
    assert.equal(told[0].code, 'codec_unsupported');
    const obsVideo = await viewer.page.evaluate((sid) =>
      [...window.petrel.room.participants.get(sid).tracks.values()].find((t) => t.kind === 'video')?.sid, obsSid);
    assert.equal(told[0].track, obsVideo);
  }, { args: ['--ingest-rtmp', `127.0.0.1:${port}`] });
});
