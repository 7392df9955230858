// A publisher in an H.264 profile a viewer's browser cannot decode costs that viewer
// only that track: the room's other tracks still play, and the SDK says why.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { launchChromium, launchFirefox } from '../lib/browsers.mjs';
import { Participant, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { freePort } from '../lib/server.mjs';

// ffmpeg publishing H.264 in `profile` (and AAC, which the room makes Opus) over RTMP,
// for longer than the test takes on a loaded machine (the test ends it).
function rtmpPublisher(own, port, token, profile) {
  const ffmpeg = spawn('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-nostdin', '-re',
    '-f', 'lavfi', '-i', 'testsrc2=size=320x240:rate=30', '-f', 'lavfi', '-i', 'sine=frequency=440:sample_rate=48000',
    '-t', '150', '-c:v', 'libx264', '-preset', 'veryfast', '-tune', 'zerolatency', '-g', '30', '-bf', '0', '-profile:v', profile, '-pix_fmt', 'yuv420p',
    '-c:a', 'aac', '-f', 'flv', `rtmp://127.0.0.1:${port}/live/${token}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  ffmpeg.stderr.on('data', (b) => (stderr += b));
  own({ close: () => ffmpeg.kill('SIGKILL') });
  return () => stderr;
}

// Records the SDK's trackUnsupported events in the page.
function recordUnsupported(p) {
  return p.page.evaluate(() => {
    window.__unsupported = [];
    window.petrel.room.on('trackUnsupported', (pub, owner, code) =>
      window.__unsupported.push({ track: pub.sid, identity: owner.identity, code }));
  });
}

// The sid of `identity`'s video publication as `p` sees it.
function videoOf(p, identity) {
  return waitFor(p.page, `${identity}'s video publication`, (id) =>
    [...window.petrel.room.participants.values()].find((x) => x.identity === id)?.tracks &&
    [...[...window.petrel.room.participants.values()].find((x) => x.identity === id).tracks.values()].find((t) => t.kind === 'video')?.sid,
  identity, 20_000);
}

test('a viewer whose browser lacks a publisher\'s H.264 profile gets the other tracks and trackUnsupported', { timeout: 90_000 }, async () => {
  const port = await freePort();
  await scenario('h264-profile', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const firefox = own(await launchFirefox());
    // Chromium here receives H.264 Baseline and Main, not High; Firefox no H.264 at all.
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    const fox = watch(new Participant('fox', await firefox.newPage()));
    await viewer.join(server.base, await server.token('stage', 'viewer'));
    await recordUnsupported(viewer);

    // The High track comes first: in the viewer's offer it is the BUNDLE-tag section.
    const high = rtmpPublisher(own, port, await server.token('stage', 'high'), 'high');
    const highVideo = await videoOf(viewer, 'high').catch((e) => { throw new Error(`${e.message}; ffmpeg: ${high()}`); });
    await fox.join(server.base, await server.token('stage', 'fox'));
    const main = rtmpPublisher(own, port, await server.token('stage', 'main'), 'main');
    const mainVideo = await videoOf(viewer, 'main').catch((e) => { throw new Error(`${e.message}; ffmpeg: ${main()}`); });

    // A VP8/Opus browser publisher joins after them.
    const cam = watch(new Participant('cam', await chromium.newPage()));
    await cam.join(server.base, await server.token('stage', 'cam'));
    await viewer.seesVideoOf(cam);
    await fox.seesVideoOf(cam);
    const mainSid = await viewer.page.evaluate(() => [...window.petrel.room.participants.values()].find((x) => x.identity === 'main').sid);
    await viewer.seesVideoOf({ label: 'main', sid: mainSid });

    // Each is told which tracks it cannot receive, and why (the publication says so too).
    const told = async (p, n) => {
      const got = await waitFor(p.page, `${n} tracks marked unsupported`, (k) => {
        const out = [];
        for (const x of window.petrel.room.participants.values()) {
          for (const t of x.tracks.values()) if (t.unsupported) out.push(`${x.identity} ${t.sid} ${t.unsupported}`);
        }
        return out.length >= k && out;
      }, n, 15_000);
      return got.sort();
    };
    assert.deepEqual(await told(viewer, 1), [`high ${highVideo} codec_unsupported`]);
    assert.deepEqual(await viewer.page.evaluate(() => window.__unsupported), [{ identity: 'high', track: highVideo, code: 'codec_unsupported' }]);
    // The app's tile of the High publisher says why it shows no video.
    const banner = await viewer.page.evaluate((sid) => document.querySelector(`.tile[data-sid="${sid}"] .codec-error`)?.textContent,
      await viewer.page.evaluate(() => [...window.petrel.room.participants.values()].find((x) => x.identity === 'high').sid));
    assert.match(banner ?? '', /Cannot play this video/);
    assert.deepEqual(await told(fox, 2), [`high ${highVideo} codec_unsupported`, `main ${mainVideo} codec_unsupported`]);
  }, { args: ['--ingest-rtmp', `127.0.0.1:${port}`] });
});
