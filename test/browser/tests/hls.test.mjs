// "Watch over HLS": Chromium plays a room's LL-HLS egress through the app with
// hls.js (the room's H.264 and Opus come from an OBS-like ffmpeg RTMP
// publisher), the video advances, and the player's latency behind live, as
// hls.js measures it, is within 3 s of the part target. A camera plays the
// same way, and a room without H.264 says why it cannot.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { freePort } from '../lib/server.mjs';
import { startCamera, addCamera } from '../lib/camera.mjs';

function rtmpPublisher(own, port, token) {
  const ffmpeg = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-nostdin', '-re',
    '-f', 'lavfi', '-i', 'testsrc2=size=320x240:rate=30', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000',
    '-t', '150', '-c:v', 'libx264', '-preset', 'veryfast', '-tune', 'zerolatency', '-g', '30', '-bf', '0', '-profile:v', 'baseline', '-pix_fmt', 'yuv420p',
    '-c:a', 'aac', '-f', 'flv', `rtmp://127.0.0.1:${port}/live/${token}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  ffmpeg.stderr.on('data', (b) => (stderr += b));
  own({ close: () => ffmpeg.kill('SIGKILL') });
  return () => stderr;
}

const playing = (page, what) =>
  waitFor(page, `${what} to play over HLS`, () => {
    const h = window.petrelHLS;
    if (!h) return null;
    if (h.error) return { error: h.error };
    const t = h.video.currentTime;
    return t > 1 && h.frames() > 0 && { t, frames: h.frames() };
  }, undefined, 25_000);

test('Chromium watches a room and a camera over LL-HLS with hls.js, near live', { timeout: 90_000 }, async () => {
  const port = await freePort();
  await scenario('hls', async ({ server, own, watch }) => {
    const ff = rtmpPublisher(own, port, await server.token('stage', 'obs'));
    const chromium = own(await launchChromium());

    const viewer = watch(new Participant('hls-viewer', await chromium.newPage()));
    const token = await server.token('stage', 'viewer', ['--subscribe']);
    // The publisher is in the room with its first packets, audio and video
    // apart: wait until the room's playlist has its video (which starts the muxer).
    const playlistURL = `${server.base}/v1/rooms/stage/hls/index.m3u8?access_token=${token}`;
    for (let i = 0; ; i++) {
      const res = await fetch(playlistURL);
      if (res.ok && /avc1\./.test(await res.text())) break;
      assert.ok(i < 40, `the room's playlist has no video; ffmpeg: ${ff()}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    await viewer.page.goto(`${server.base}/?room=stage&hls=1&token=${token}`);
    const first = await playing(viewer.page, 'the room');
    assert.ok(!first.error, `${first.error}; ffmpeg: ${ff()}`);
    // hls.js starts behind live and catches up by playing faster (up to 1.5×);
    // once within the bound, its latency is sampled over a few seconds.
    const state = () => viewer.page.evaluate(() => {
      const h = window.petrelHLS;
      const b = h.video.buffered;
      const ranges = [];
      for (let i = 0; i < b.length; i++) ranges.push(`${b.start(i).toFixed(2)}-${b.end(i).toFixed(2)}`);
      return { latency: h.latency(), part: h.partTarget(), target: h.targetLatency(), t: h.video.currentTime, rate: h.video.playbackRate,
        buffered: ranges.join(','), frames: h.frames(), message: document.getElementById('hls-message').textContent };
    });
    const trace = [];
    for (let i = 0; ; i++) {
      const s = await state();
      trace.push(s);
      if (s.latency > 0 && s.part > 0 && s.latency <= s.part + 3) break;
      assert.ok(i < 40, `hls.js did not come within 3 s of the part target in 20 s: ${JSON.stringify(trace.slice(-6))}`);
      await new Promise((r) => setTimeout(r, 500));
    }
    // Five samples over 2.5 s; a window whose median is out of bound (a stall:
    // this machine is shared) is followed by another, for at most 20 s.
    let samples, last, median, lat;
    for (const until = Date.now() + 20_000; ;) {
      samples = [];
      for (let i = 0; i < 5; i++) {
        samples.push(await state());
        await new Promise((r) => setTimeout(r, 500));
      }
      last = samples[samples.length - 1];
      lat = samples.map((s) => s.latency).sort((a, b) => a - b);
      median = lat[Math.floor(lat.length / 2)];
      if ((median > 0 && median <= last.part + 3) || Date.now() > until) break;
    }
    assert.ok(last.t > first.t && last.frames > first.frames, `the video does not advance: ${JSON.stringify([first, last])}`);
    assert.ok(last.part > 0 && last.part <= 1, `part target ${last.part} s`);
    console.log(`hls.js latency behind live: median ${median.toFixed(2)} s, max ${lat[lat.length - 1].toFixed(2)} s (part target ${last.part} s, hls.js target ${last.target.toFixed(2)} s)`);
    assert.ok(median > 0 && median <= last.part + 3, `latency ${lat} s with part target ${last.part} s: ${JSON.stringify(samples)}`);
    assert.match(last.message, /^Playing over HLS · [\d.]+ s behind live\.$/);

    // The camera, through its page's "Watch over HLS" link.
    const cam = own(await startCamera());
    await addCamera(server, 'door', cam.url, { warm: true });
    const camViewer = watch(new Participant('hls-camera', await chromium.newPage()));
    await camViewer.page.goto(`${server.base}/?camera=door&token=${await server.token('camera/door', 'viewer', ['--subscribe'])}`);
    const href = await waitFor(camViewer.page, 'the HLS link', () => [...document.querySelectorAll('a')].find((a) => a.textContent === 'Watch over HLS')?.href);
    await camViewer.page.goto(href);
    const c = await playing(camViewer.page, 'the camera');
    assert.ok(!c.error, c.error);
    // The wall's token (every camera) opens the camera's playlist too; another
    // camera's does not.
    const playlist = async (room) =>
      (await fetch(`${server.base}/v1/cameras/door/hls/index.m3u8?token=${await server.token(room, 'viewer', ['--subscribe'])}`)).status;
    assert.equal(await playlist('cameras'), 200, "the wall's token");
    assert.equal(await playlist('camera/gate'), 403, "another camera's token");

    // A token for another room: the page says so, no endless "Loading".
    const refused = watch(new Participant('hls-refused', await chromium.newPage()));
    await refused.page.goto(`${server.base}/?room=stage&hls=1&token=${await server.token('other', 'viewer', ['--subscribe'])}`);
    const r = await playing(refused.page, 'the refused page');
    assert.match(r.error ?? '', /does not allow watching room "stage"/);
  }, { args: ['--ingest-rtmp', `127.0.0.1:${port}`] });
});
