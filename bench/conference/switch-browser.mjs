// Layer-switch delay as a browser user sees it: a Chromium publisher with three
// simulcast encodings (the SDK's q/h/f), a Chromium viewer that asks for the low
// or the high layer through the SDK (updateTrackSettings), and the time from the
// request to the first frame of the new layer the viewer's <video> presents
// (requestVideoFrameCallback: the frame's width tells the layer). The server,
// both browsers and this script share the machine; run it alone.
//
//   make build && node bench/conference/switch-browser.mjs [switches=24] [out.json] [keep-high|cold]
//
// Uses the browser tests' helpers (test/browser/lib, its node_modules).
import { writeFileSync } from 'node:fs';
import { execSync } from 'node:child_process';
import os from 'node:os';
import { launchChromium } from '../../test/browser/lib/browsers.mjs';
import { Participant, sleep, waitFor } from '../../test/browser/lib/page.mjs';
import { startServer } from '../../test/browser/lib/server.mjs';

const switches = Number(process.argv[2] ?? 24);
const outPath = process.argv[3];
// keep-high: a second viewer holds the top layer on at the publisher.
const keepHigh = process.argv[4] === 'keep-high';
// cold: 4-5 s between switches, longer than the server keeps a layer nobody
// needs on at the publisher (demandOffDelay, 3 s): every switch up waits for
// the publisher to turn its top encoding back on.
const cold = process.argv[4] === 'cold';

const load0 = os.loadavg();
const server = await startServer('switch-browser');
const chromium = await launchChromium();
try {
  const sender = new Participant('sender', await chromium.newPage());
  const viewer = new Participant('viewer', await chromium.newPage());
  await viewer.page.addInitScript(() => {
    const gum = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
    navigator.mediaDevices.getUserMedia = (c) => (c?.video ? Promise.reject(new DOMException('no camera', 'NotFoundError')) : gum(c));
  });
  await sender.join(server.base, await server.token('switch', 'sender'), { simulcast: true });
  await viewer.join(server.base, await server.token('switch', 'viewer'), { tracks: 1 });
  await viewer.seesVideoOf(sender);
  if (keepHigh) {
    // A second viewer that keeps the top layer in demand: the publisher never
    // turns it off, and a switch up is the keyframe alone.
    const holder = new Participant('holder', await chromium.newPage());
    await holder.page.addInitScript(() => {
      const gum = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
      navigator.mediaDevices.getUserMedia = (c) => (c?.video ? Promise.reject(new DOMException('no camera', 'NotFoundError')) : gum(c));
    });
    await holder.join(server.base, await server.token('switch', 'holder'), { tracks: 1 });
    await holder.seesVideoOf(sender);
    await holder.page.evaluate(async (sid) => {
      const room = window.petrel.room;
      room.unobserveVideo(document.querySelector(`.tile[data-sid="${sid}"] video`));
      const track = [...room.participants.get(sid).tracks.values()].find((t) => t.kind === 'video');
      await room.updateTrackSettings(track.sid, { quality: 'high' });
    }, sender.sid);
  }
  // Let the publisher's encoders reach their sizes (Chrome starts the top
  // layer small and raises it as its own bandwidth estimate grows).
  await sleep(5_000);

  const results = await viewer.page.evaluate(async ([sid, n, pause]) => {
    const room = window.petrel.room;
    const video = document.querySelector(`.tile[data-sid="${sid}"] video`);
    room.unobserveVideo(video);
    const track = [...room.participants.get(sid).tracks.values()].find((t) => t.kind === 'video');
    let frames = [];
    const step = (now, meta) => {
      frames.push({ now, presented: meta.presentationTime, width: meta.width });
      video.requestVideoFrameCallback(step);
    };
    video.requestVideoFrameCallback(step);
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    // petrel_layer_switch_seconds from the server's /metrics (loopback: allowed).
    const switchMetric = async () => {
      try {
        const text = await (await fetch('/metrics')).text();
        const sum = Number(/^petrel_layer_switch_seconds_sum (\S+)$/m.exec(text)?.[1]);
        const count = Number(/^petrel_layer_switch_seconds_count (\S+)$/m.exec(text)?.[1]);
        return Number.isFinite(sum) && Number.isFinite(count) ? { sum, count } : null;
      } catch {
        return null;
      }
    };
    // The first frame after t0 whose width `ok` accepts.
    const firstFrame = async (t0, ok, timeoutMs) => {
      const end = performance.now() + timeoutMs;
      while (performance.now() < end) {
        const f = frames.find((x) => x.now >= t0 && ok(x.width));
        if (f) return f;
        await sleep(5);
      }
      return null;
    };
    // Settle on each layer once to learn its width.
    await room.updateTrackSettings(track.sid, { quality: 'low' });
    await sleep(2_000);
    const lowW = frames[frames.length - 1].width;
    await room.updateTrackSettings(track.sid, { quality: 'high' });
    for (let i = 0; i < 100 && frames[frames.length - 1].width < lowW * 2; i++) await sleep(100);
    await sleep(2_000);
    const highW = frames[frames.length - 1].width;
    const out = { lowW, highW, samples: [] };
    if (highW < lowW * 2) return { ...out, error: `the high layer (${highW}) is not twice the low (${lowW})` };
    const isLow = (w) => w <= lowW * 1.5;
    const isHigh = (w) => w >= highW / 1.5;
    let want = 'low';
    for (let i = 0; i < n; i++) {
      // Only from a settled state: the old layer showing for 500 ms.
      const from = want === 'low' ? isHigh : isLow;
      const settled = await (async () => {
        const end = performance.now() + 10_000;
        while (performance.now() < end) {
          const recent = frames.filter((x) => x.now >= performance.now() - 500);
          if (recent.length >= 3 && recent.every((x) => from(x.width))) return true;
          await sleep(50);
        }
        return false;
      })();
      if (!settled) {
        out.samples.push({ to: want, ms: null, unsettled: true });
        want = want === 'low' ? 'high' : 'low';
        continue;
      }
      frames = frames.slice(-10);
      const m0 = await switchMetric();
      const t0 = performance.now();
      await room.updateTrackSettings(track.sid, { quality: want });
      const acked = performance.now();
      const f = await firstFrame(t0, want === 'low' ? isLow : isHigh, 10_000);
      const m1 = await switchMetric();
      // The server's part: the request to the new layer's keyframe forwarded.
      const serverMs = m1 && m0 && m1.count - m0.count === 1 ? (m1.sum - m0.sum) * 1000 : null;
      out.samples.push({ to: want, ms: f ? f.presented - t0 : null, callbackMs: f ? f.now - t0 : null, ackMs: acked - t0, serverMs, width: f?.width });
      want = want === 'low' ? 'high' : 'low';
      // Out of step with the publisher's keyframe rhythm.
      await sleep(pause + Math.random() * 800);
    }
    return out;
  }, [sender.sid, switches, cold ? 4_200 : 1_200]);

  const load1 = os.loadavg();
  if (results.error) throw new Error(results.error);
  const q = (xs, p) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor(p * (s.length - 1) + 0.5))];
  };
  const ok = results.samples.filter((s) => s.ms !== null);
  const row = (label, xs) =>
    xs.length === 0
      ? `| ${label} | 0 | – | – | – | – |`
      : `| ${label} | ${xs.length} | ${q(xs, 0.5).toFixed(0)} | ${q(xs, 0.9).toFixed(0)} | ${Math.min(...xs).toFixed(0)} | ${Math.max(...xs).toFixed(0)} |`;
  const commit = execSync('git rev-parse --short HEAD').toString().trim();
  if (outPath) writeFileSync(outPath, JSON.stringify({ at: new Date().toISOString(), commit, keepHigh, cold, load0, load1, ...results }, null, 1));
  const unsettled = results.samples.filter((s) => s.unsettled).length;
  console.log(`${results.samples.length} switches asked: ${ok.length} shown, ${unsettled} not started (the old layer never settled), ${results.samples.length - ok.length - unsettled} not shown within 10 s`);
  console.log(`Chromium layer switches (${results.lowW}px <-> ${results.highW}px${keepHigh ? ', top layer held on by a second viewer' : ''}${cold ? ', 4-5 s apart (top encoding off before each switch up)' : ''}), ${ok.length}/${results.samples.length} completed; commit ${commit}; load average before ${load0.map((x) => x.toFixed(2)).join(' ')}, after ${load1.map((x) => x.toFixed(2)).join(' ')}`);
  console.log('| switches | n | median ms | p90 ms | min ms | max ms |');
  console.log('|---|---:|---:|---:|---:|---:|');
  console.log(row('all', ok.map((s) => s.ms)));
  console.log(row('up (low → high)', ok.filter((s) => s.to === 'high').map((s) => s.ms)));
  console.log(row('down (high → low)', ok.filter((s) => s.to === 'low').map((s) => s.ms)));
  const srv = results.samples.filter((s) => s.serverMs !== null && s.serverMs !== undefined);
  console.log(row('server part: request to keyframe forwarded', srv.map((s) => s.serverMs)));
  console.log(row('  of switches up', srv.filter((s) => s.to === 'high').map((s) => s.serverMs)));
  console.log(row('  of switches down', srv.filter((s) => s.to === 'low').map((s) => s.serverMs)));
} finally {
  await chromium.close();
  await server.stop();
}
