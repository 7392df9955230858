// An H.265 camera plays in browsers that receive no H.265 over WebRTC (neither
// Chromium nor Firefox does): the server transcodes it to H.264 on demand
// (camera/hevc.go) and the page says so. Chromium gets the transcode over
// WebRTC (its WHEP offer lacks H.265), a Firefox without H.264 for WebRTC over
// HTTP live. On the wall both play the camera's tile over HTTP live.
import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium, launchFirefox } from '../lib/browsers.mjs';
import { Participant, waitFor, expectGrowth } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { startCamera, addCamera } from '../lib/camera.mjs';

const settled = (page) =>
  waitFor(page, 'the camera page to play or fail, saying it is transcoded', () => {
    const c = window.petrelCamera;
    if (!c || (c.timings.firstFrame === undefined && !c.error) || (!c.error && !c.transcoded)) return null;
    return {
      mode: c.mode,
      error: c.error ?? '',
      firstFrame: c.timings.firstFrame,
      message: document.getElementById('camera-message')?.textContent ?? '',
      header: document.getElementById('status')?.textContent ?? '',
    };
  });

const frames = (page) => page.evaluate(() => ({ frames: window.petrelCamera?.frames() ?? 0 }));

// The wall (?cameras=1): the H.265 camera's tile plays the transcode over HTTP
// live (the wall room carries the camera's H.265, which neither browser
// receives over WebRTC) and its caption says so.
async function wallPlays(page, base, token, who) {
  await page.goto(`${base}/?cameras=1&token=${token}`);
  const tile = await waitFor(page, `the H.265 camera's wall tile to say how it plays (${who})`, () => {
    const t = document.querySelector('.camera-tile[data-camera="hevc"]');
    const how = t?.querySelector('.camera-how')?.textContent ?? '';
    return t && /transcoded/.test(how) && { way: t.dataset.way, how, error: t.dataset.error ?? '' };
  });
  assert.equal(tile.error, '');
  assert.equal(tile.way, 'http');
  assert.equal(tile.how, 'HTTP live · H.265 camera, transcoded to H.264 for this browser');
  const tileFrames = () => page.evaluate(() => ({ frames: document.querySelector('.camera-tile[data-camera="hevc"] video').getVideoPlaybackQuality().totalVideoFrames }));
  await expectGrowth(`frames of the H.265 camera's wall tile in ${who}`, tileFrames, { frames: 10 });
}

test('an H.265 camera plays transcoded to H.264 in Chromium (WebRTC) and Firefox (HTTP live), and on the wall (HTTP live), and the pages say so', { timeout: 120_000 }, () =>
  scenario('camera-hevc', async ({ server, own, watch }) => {
    const cam = own(await startCamera(6, '--video', 'h265', '--no-audio'));
    await addCamera(server, 'hevc', cam.url);
    const token = await server.token('camera/hevc', 'viewer', ['--subscribe']);

    const chromium = own(await launchChromium());
    const c = watch(new Participant('chromium', await chromium.newPage()));
    await c.page.goto(`${server.base}/?camera=hevc&token=${token}`);
    const sc = await settled(c.page);
    assert.equal(sc.error, '');
    assert.equal(sc.mode, 'webrtc');
    assert.match(sc.message, /^Playing over WebRTC · H\.265 camera, transcoded to H\.264 for this browser\.$/);
    const codec = await c.page.evaluate(async () => {
      let mime = '';
      (await window.petrelCamera.pc.getStats()).forEach((s) => s.type === 'codec' && /video/.test(s.mimeType) && (mime = s.mimeType));
      return mime;
    });
    assert.equal(codec, 'video/H264');
    await expectGrowth('frames of the H.265 camera in Chromium', () => frames(c.page), { frames: 10 });
    console.log(`chromium: first frame ${sc.firstFrame} ms (cold camera, transcoder starting)`);
    const wallToken = await server.token('cameras', 'wall', ['--subscribe']);
    await wallPlays(c.page, server.base, wallToken, 'Chromium');

    const firefox = own(await launchFirefox());
    const f = watch(new Participant('firefox', await firefox.newPage()));
    await f.page.goto(`${server.base}/?camera=hevc&token=${token}`);
    const sf = await settled(f.page);
    assert.equal(sf.error, '');
    assert.equal(sf.mode, 'http');
    assert.match(sf.message, /^Playing over HTTP live \(automatic: .*\) · H\.265 camera, transcoded to H\.264 for this browser\.$/);
    await expectGrowth('frames of the H.265 camera in Firefox', () => frames(f.page), { frames: 10 });
    console.log(`firefox: first frame ${sf.firstFrame} ms (transcoder running)`);
    await wallPlays(f.page, server.base, wallToken, 'Firefox');
  }));
