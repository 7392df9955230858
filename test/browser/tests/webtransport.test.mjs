import test from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { scenario } from '../lib/scenario.mjs';
import { sleep, waitFor } from '../lib/page.mjs';
import { chromiumArgs, endWindow, publisherStats, resetWindow, startPublisher, startSubscriber } from '../../../bench/wt/pages.mjs';

// One room, two transports: a page publishing over WebTransport (WebCodecs
// frames as MoQT objects) is decoded by a WebRTC page (the server packetizes
// the frames into RTP), and a WebRTC publisher is decoded by a WebTransport
// page (the server depacketizes RTP into frames), in both WebTransport modes.
// The publisher draws its timestamp into every picture (bench/wt/probe.js):
// the subscriber must render frames whose stamp it can read back and whose
// pixels match the source picture regenerated from that stamp (PSNR), which
// a frozen, garbled or foreign picture cannot fake.

async function launch() {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_BIN ?? '/usr/bin/chromium', args: chromiumArgs(), timeout: 30_000 });
  return {
    async page(label, log) {
      const ctx = await browser.newContext({ viewport: { width: 800, height: 600 } });
      const page = await ctx.newPage();
      page.on('console', (m) => log.push(`[${label} ${m.type()}] ${m.text()}`));
      page.on('pageerror', (e) => log.push(`[${label} pageerror] ${e?.message ?? e}`));
      return page;
    },
    close: () => browser.close().catch(() => {}),
  };
}

// Publishes over `from`, subscribes over `to`, measures a short window.
async function pair(server, b, room, from, to, log, windowMs = 4_000) {
  const pub = await b.page(`${room}-pub`, log);
  const sub = await b.page(`${room}-sub`, log);
  await startPublisher(pub, server.base, from, await server.token(room, `pub-${from}`));
  const start = await startSubscriber(sub, server.base, to, await server.token(room, `sub-${to}`), { timeoutMs: 25_000 });
  await sleep(1_000); // past the first keyframe's decode
  const before = await resetWindow(sub);
  await sleep(windowMs);
  const r = await endWindow(sub, before);
  const p = await publisherStats(pub);
  await pub.close();
  await sub.close();
  return { ...r, start, pub: p };
}

function assertDecodes(what, r) {
  const detail = JSON.stringify(r);
  // Each a user-visible property: frames keep coming, they are ours and recent, they look like the source.
  assert.ok(r.uniqueFps >= 3, `${what}: ${r.uniqueFps?.toFixed(1)} distinct stamped frames/s (${detail})`);
  assert.ok(r.latP50 !== null && r.latP50 < 3_000, `${what}: glass-to-glass p50 ${r.latP50} ms (${detail})`);
  assert.ok(r.psnr !== null && r.psnr > 18, `${what}: PSNR ${r.psnr} dB against the source picture (${detail})`);
  assert.ok(r.width >= 160 && r.height >= 120, `${what}: picture ${r.width}x${r.height}`);
}

test('WebTransport and WebRTC decode each other in one room (datagrams and streams)', { timeout: 240_000 }, () =>
  scenario('webtransport', async ({ server, own }) => {
    const log = [];
    const b = own(await launch());
    try {
      const results = {};
      for (const [from, to] of [
        ['wt-datagram', 'webrtc'],
        ['webrtc', 'wt-datagram'],
        ['wt-stream', 'webrtc'],
        ['webrtc', 'wt-stream'],
      ]) {
        const r = await pair(server, b, `wt-${from}-${to}`, from, to, log);
        results[`${from} -> ${to}`] = r;
        assertDecodes(`${from} -> ${to}`, r);
      }
      // The comparison harness's smoke run: WebTransport end to end, as the lab measures it.
      const smoke = await pair(server, b, 'wt-smoke', 'wt-datagram', 'wt-datagram', log);
      assertDecodes('wt-datagram -> wt-datagram', smoke);
      assert.ok(smoke.start.firstFrameMs > 0, 'session start measured');
      results['wt-datagram -> wt-datagram'] = smoke;
      for (const [k, r] of Object.entries(results)) {
        console.log(`# ${k}: ${r.uniqueFps.toFixed(1)} fps, p50 ${r.latP50} ms, p95 ${r.latP95} ms, PSNR ${r.psnr?.toFixed(1)} dB, ${r.kbps.toFixed(0)} kbit/s, first frame ${r.start.firstFrameMs.toFixed(0)} ms`);
      }
    } catch (err) {
      err.message += `\n--- page console ---\n${log.slice(-60).join('\n')}`;
      throw err;
    }
  }, { dev: true }));

// The app's transport choice: a page joined with ?transport=wt-stream (fake camera
// and microphone, WebCodecs) and a WebRTC page show each other's video in their tiles.
test('app: a WebTransport participant and a WebRTC participant see each other', { timeout: 120_000 }, () =>
  scenario('webtransport-app', async ({ server, own }) => {
    const log = [];
    const b = own(await launch());
    try {
      const wt = await b.page('app-wt', log);
      const rtc = await b.page('app-rtc', log);
      const open = (page, identity, transport) =>
        server.token('wt-app', identity).then((token) => page.goto(`${server.base}/?${new URLSearchParams({ token, name: identity, autojoin: '1', p2p: '0', transport })}`));
      await open(wt, 'wt-user', 'wt-stream');
      await open(rtc, 'rtc-user', 'webrtc');
      const remoteVideo = (page, what) => waitFor(page, what, () => {
        const err = document.getElementById('join-error')?.textContent;
        if (err) throw new Error(`join error shown: ${err}`);
        const v = document.querySelector('.tile:not([data-local]) video');
        return v && v.videoWidth > 0 && v.readyState >= 2 && { w: v.videoWidth, h: v.videoHeight };
      }, undefined, 30_000);
      const atWt = await remoteVideo(wt, 'the WebTransport page to show the WebRTC camera');
      const atRtc = await remoteVideo(rtc, 'the WebRTC page to show the WebTransport camera');
      assert.ok(atWt.w > 0 && atRtc.w > 0);
      assert.match(await wt.evaluate(() => document.getElementById('status').textContent), /WebTransport stream/);
      // Its connection panel reads as a WebRTC participant's: quality, bitrate, devices.
      await waitFor(wt, 'quality, bitrate and devices in the WebTransport connection panel', () => {
        const q = document.getElementById('quality')?.dataset.q;
        const line = document.getElementById('bitrate')?.textContent ?? '';
        const cam = document.getElementById('camera-select');
        return q && q !== 'unknown' && /↑ [1-9]\d* kbps/.test(line) && /↓ [1-9]\d* kbps/.test(line) && cam?.value && { q, line };
      });
    } catch (err) {
      err.message += `\n--- page console ---\n${log.slice(-40).join('\n')}`;
      throw err;
    }
  }, { dev: true }));
