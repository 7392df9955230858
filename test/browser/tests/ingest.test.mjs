// OBS-like ffmpeg publishers over RTMP and SRT are participants Chromium sees and hears.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, waitFor, expectGrowth } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { freePort } from '../lib/server.mjs';

// One Chromium viewer in a room; ffmpeg publishes to `target(token)` in `format`.
async function playsPublisher(name, format, target, args) {
  await scenario(name, async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    await viewer.join(server.base, await server.token('stage', 'viewer'));

    const token = await server.token('stage', 'obs');
    const ffmpeg = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-nostdin', '-re',
      '-f', 'lavfi', '-i', 'testsrc2=size=320x240:rate=30', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000',
      '-t', '40', '-c:v', 'libx264', '-preset', 'veryfast', '-tune', 'zerolatency', '-g', '30', '-bf', '0', '-profile:v', 'baseline', '-pix_fmt', 'yuv420p',
      '-c:a', 'aac', '-f', format, target(token)], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    ffmpeg.stderr.on('data', (b) => (stderr += b));
    own({ close: () => ffmpeg.kill('SIGKILL') });

    // The publisher shows up as participant "obs"; its tile plays the test pattern.
    const sid = await waitFor(viewer.page, 'participant obs in the room', () =>
      [...window.petrel.room.participants.values()].find((p) => p.identity === 'obs')?.sid, undefined, 20_000)
      .catch((e) => { throw new Error(`${e.message}; ffmpeg: ${stderr}`); });
    const obs = { label: 'obs', sid };
    const seen = await viewer.seesVideoOf(obs);
    assert.deepEqual([seen.w, seen.h], [320, 240]);
    const [, b] = await expectGrowth("the publisher's media", () => viewer.inbound(), { framesDecoded: 20, audioPackets: 25, samples: 1 });
    assert.equal(b.videoStreams, 1, JSON.stringify(b));
    assert.equal(b.audioStreams, 1, JSON.stringify(b));
  }, { args });
}

test('Chromium plays an RTMP publisher in its room', { timeout: 90_000 }, async () => {
  const port = await freePort();
  await playsPublisher('ingest-rtmp', 'flv', (token) => `rtmp://127.0.0.1:${port}/live/${token}`, ['--ingest-rtmp', `127.0.0.1:${port}`]);
});

test('Chromium plays an SRT publisher in its room', { timeout: 90_000 }, async () => {
  const port = await freePort(); // a free TCP port number; the SRT listener takes it on UDP
  await playsPublisher('ingest-srt', 'mpegts', (token) => `srt://127.0.0.1:${port}?mode=caller&streamid=${token}`, ['--ingest-srt', `127.0.0.1:${port}`]);
});
