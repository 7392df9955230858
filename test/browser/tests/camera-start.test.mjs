// The camera page starts at once and plays in any browser: its WHEP offer goes
// before ICE gathering completes (Chromium; the SDK's whepPlay in Firefox too),
// a Firefox without H.264 for WebRTC (this machine's: no OpenH264 plugin) plays
// the camera over HTTP live by itself, whether it knows from its receiver
// capabilities or from the server's answer, and the page says which way it
// plays; errors are shown, never an endless "…". In Chromium the page's head
// script plays the video before the app has loaded.
import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium, launchFirefox } from '../lib/browsers.mjs';
import { Participant, waitFor, expectGrowth } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { startCamera, addCamera } from '../lib/camera.mjs';

// A generous bound: the page's first frame on loopback, on a shared machine.
const FIRST_FRAME_BOUND_MS = 10_000;

// The camera page's state once it plays or fails.
const settled = (page) =>
  waitFor(page, 'the camera page to play or fail', () => {
    const c = window.petrelCamera;
    if (!c || (c.timings.firstFrame === undefined && !c.error)) return null;
    return {
      mode: c.mode,
      reason: c.reason ?? '',
      error: c.error ?? '',
      timings: c.timings,
      gatheringAtOffer: c.gatheringAtOffer,
      message: document.getElementById('camera-message')?.textContent ?? '',
      header: document.getElementById('status')?.textContent ?? '',
      overlay: document.getElementById('tts-overlay')?.textContent ?? '',
    };
  });

const frames = (page) => page.evaluate(() => ({ frames: window.petrelCamera?.frames() ?? 0 }));

// An error shows as a sentence on the page and in the header, and no step waits with "…".
async function expectError(page, url, pattern) {
  await page.goto(url);
  const s = await settled(page);
  assert.match(s.error, pattern);
  assert.match(s.message, /^Error: /);
  assert.equal(s.header, 'error');
  assert.doesNotMatch(s.overlay, /…/);
}

test('Chromium: the camera page offers before ICE gathering completes, plays over WebRTC and says so', { timeout: 90_000 }, () =>
  scenario('camera-start-chromium', async ({ server, own, watch }) => {
    const cam = own(await startCamera());
    await addCamera(server, 'door', cam.url, { warm: true });
    const token = await server.token('camera/door', 'viewer', ['--subscribe']);
    const chromium = own(await launchChromium());
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    await viewer.page.goto(`${server.base}/?camera=door&token=${token}`);
    const s = await settled(viewer.page);
    assert.equal(s.error, '');
    assert.equal(s.mode, 'webrtc');
    assert.notEqual(s.gatheringAtOffer, 'complete', 'the offer waited for ICE gathering');
    const gathered = await waitFor(viewer.page, 'ICE gathering to complete', () => window.petrelCamera.timings.gatheringComplete);
    assert.ok(s.timings.offerSent < gathered, `offer sent at ${s.timings.offerSent} ms, gathering complete at ${gathered} ms`);
    // The page's head script (early.js) POSTs the offer as soon as it is made,
    // without waiting for app.js, and the page takes that session over. The POST
    // does not wait for setLocalDescription (nor for the TURN servers it waits for).
    const marks = await viewer.page.evaluate(() => Object.fromEntries(performance.getEntriesByType('mark').map((m) => [m.name, m.startTime])));
    assert.ok(marks['petrel:early:offerSent'] < marks['petrel:early:localSet'], `offer sent at ${marks['petrel:early:offerSent']}, local description set at ${marks['petrel:early:localSet']}`);
    assert.equal(s.timings.offerSent, 0, 'the camera page did not take over the session early.js started');
    assert.equal(marks['petrel:whep:localSet'], undefined, 'the camera page made a second session');
    // early.js shows the video itself and loads the app only once its first
    // frame is painted; the camera page adopts that video, still playing.
    assert.ok(marks['petrel:early:firstFrame'] !== undefined && marks['petrel:early:firstFrame'] <= marks['petrel:early:app'], `first frame at ${marks['petrel:early:firstFrame']}, app loaded at ${marks['petrel:early:app']}`);
    const adopted = await viewer.page.evaluate(() => ({
      same: document.querySelector('.camera-page:not(.camera-early-page) .camera-view video') === window.petrelEarly?.video,
      leftover: !!document.querySelector('.camera-early-page') || document.documentElement.classList.contains('camera-early'),
    }));
    assert.deepEqual(adopted, { same: true, leftover: false });
    // The TURN servers came inlined in the page (no OPTIONS before setLocalDescription).
    const ice = await viewer.page.evaluate(() => ({
      servers: window.petrelCamera.pc.getConfiguration().iceServers?.length ?? 0,
      options: performance.getEntriesByName('petrel:early:options').length,
    }));
    assert.deepEqual(ice, { servers: 1, options: 0 });
    assert.ok(s.timings.firstFrame < FIRST_FRAME_BOUND_MS, `first frame at ${s.timings.firstFrame} ms`);
    assert.match(s.overlay, /offer sent\s+[\d.]+ ms/);
    assert.match(s.overlay, /first frame\s+[\d.]+ ms/);
    assert.equal(s.message, 'Playing over WebRTC.');
    assert.equal(s.header, 'playing · WebRTC');
    await expectGrowth('frames of the camera', () => frames(viewer.page), { frames: 10 });

    // Relay only: the TURN servers (OPTIONS) are set while the offer is made, before gathering.
    const relayed = watch(new Participant('relay', await chromium.newPage()));
    await relayed.page.goto(`${server.base}/?camera=door&relay=1&token=${token}`);
    const sr = await settled(relayed.page);
    assert.equal(sr.error, '');
    assert.equal(sr.mode, 'webrtc');
    const pair = await relayed.page.evaluate(async () => {
      let local;
      const r = await window.petrelCamera.pc.getStats();
      r.forEach((s) => s.type === 'transport' && s.selectedCandidatePairId && (local = r.get(r.get(s.selectedCandidatePairId).localCandidateId)?.candidateType));
      return local;
    });
    assert.equal(pair, 'relay');

    // Errors: a refused token, over WebRTC and over HTTP live.
    const bad = watch(new Participant('bad-token', await chromium.newPage()));
    await expectError(bad.page, `${server.base}/?camera=door&token=not-a-token`, /^WHEP 401: /);
    await expectError(bad.page, `${server.base}/?camera=door&http=1&token=not-a-token`, /^HTTP live 401: /);
  }));

test('Firefox without H.264 for WebRTC plays the camera over HTTP live by itself and says why', { timeout: 120_000 }, (t) =>
  scenario('camera-start-firefox', async ({ server, own, watch }) => {
    const cam = own(await startCamera());
    await addCamera(server, 'door', cam.url, { warm: true });
    const token = await server.token('camera/door', 'viewer', ['--subscribe']);
    const firefox = own(await launchFirefox());
    const caps = await (await firefox.newPage()).evaluate(() => RTCRtpReceiver.getCapabilities('video').codecs.map((c) => c.mimeType));
    if (caps.some((m) => /h264/i.test(m))) {
      t.skip('this Firefox receives H.264 over WebRTC (OpenH264 installed): nothing to fall back from');
      return;
    }

    // Known before asking: the receiver's capabilities lack H.264.
    const viewer = watch(new Participant('viewer', await firefox.newPage()));
    await viewer.page.goto(`${server.base}/?camera=door&token=${token}`);
    let s = await settled(viewer.page);
    assert.equal(s.error, '');
    assert.equal(s.mode, 'http');
    assert.match(s.reason, /cannot receive H\.264 over WebRTC/);
    assert.equal(s.message, 'Playing over HTTP live (automatic: this browser cannot receive H.264 over WebRTC).');
    assert.equal(s.header, 'playing · HTTP live');
    assert.ok(s.timings.firstFrame < FIRST_FRAME_BOUND_MS, `first frame at ${s.timings.firstFrame} ms`);
    await expectGrowth('frames played from live.mp4', () => frames(viewer.page), { frames: 10 });

    // Known from the server's answer: a browser whose capabilities claim
    // H.264 but whose offer carries none is refused, and falls back.
    const lying = watch(new Participant('claims-h264', await firefox.newPage()));
    await lying.page.evaluateOnNewDocument(() => {
      const real = RTCRtpReceiver.getCapabilities.bind(RTCRtpReceiver);
      RTCRtpReceiver.getCapabilities = (kind) => {
        const c = real(kind);
        if (kind === 'video' && c) c.codecs.push({ mimeType: 'video/H264', clockRate: 90000, sdpFmtpLine: 'packetization-mode=1;profile-level-id=42e01f' });
        return c;
      };
    });
    await lying.page.goto(`${server.base}/?camera=door&token=${token}`);
    s = await settled(lying.page);
    assert.equal(s.error, '');
    assert.equal(s.mode, 'http');
    assert.match(s.reason, /^the server says: .*codec/);
    assert.match(s.message, /^Playing over HTTP live \(automatic: the server says: /);
    await expectGrowth('frames played from live.mp4 after the refusal', () => frames(lying.page), { frames: 10 });

    // The wall: its tile plays over HTTP live too (a wall token).
    const wallToken = await server.token('cameras', 'wall', ['--subscribe']);
    const wall = watch(new Participant('wall', await firefox.newPage()));
    await wall.page.goto(`${server.base}/?cameras=1&token=${wallToken}`);
    await waitFor(wall.page, 'the camera tile over HTTP live', () => document.querySelector('.camera-tile[data-camera="door"]')?.dataset.way === 'http');
    assert.match(await wall.page.evaluate(() => document.getElementById('camera-message').textContent), /HTTP live \(automatic: /);
    await expectGrowth('frames on the wall', () => frames(wall.page), { frames: 10 });

    // Errors: no such camera, a refused token.
    const other = await server.token('camera/nope', 'viewer', ['--subscribe']);
    const bad = watch(new Participant('errors', await firefox.newPage()));
    await expectError(bad.page, `${server.base}/?camera=nope&token=${other}`, /^HTTP live 404: no camera nope/);
    await expectError(bad.page, `${server.base}/?camera=door&http=1&token=not-a-token`, /^HTTP live 401: /);
  }));

test('Firefox: the SDK\'s whepPlay offers before ICE gathering completes and decodes a room\'s VP8', { timeout: 90_000 }, () =>
  scenario('camera-start-sdk', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const pub = watch(new Participant('publisher', await chromium.newPage()));
    await pub.join(server.base, await server.token('vp8', 'publisher'));
    const firefox = own(await launchFirefox());
    const viewer = watch(new Participant('whep-viewer', await firefox.newPage()));
    await viewer.page.goto(`${server.base}/`);
    const token = await server.token('vp8', 'whep-viewer', ['--subscribe']);
    const r = await viewer.page.evaluate(async (token) => {
      const { whepPlay } = await import('/petrel-sdk.js');
      const video = document.createElement('video');
      video.muted = video.autoplay = true;
      document.body.append(video);
      const s = await whepPlay('/whep/vp8', {
        token,
        onTrack: (t) => t.kind === 'video' && (video.srcObject = new MediaStream([t])),
      });
      window.whep = { s, video };
      return { gatheringAtOffer: s.gatheringAtOffer, offerSent: s.steps.offerSent };
    }, token);
    assert.notEqual(r.gatheringAtOffer, 'complete', 'the offer waited for ICE gathering');
    const gathered = await waitFor(viewer.page, 'ICE gathering to complete', () => window.whep.s.steps.gatheringComplete);
    assert.ok(r.offerSent < gathered, `offer sent at ${r.offerSent} ms, gathering complete at ${gathered} ms`);
    await expectGrowth('frames decoded over WHEP', () => viewer.page.evaluate(async () => {
      let frames = 0;
      (await window.whep.s.pc.getStats()).forEach((s) => s.type === 'inbound-rtp' && s.kind === 'video' && (frames += s.framesDecoded ?? 0));
      return { frames };
    }), { frames: 10 });
  }));
