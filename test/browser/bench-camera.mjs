// Camera time-to-stream in real browsers: fresh page loads of the camera page
// (?camera=<id>) in Chromium and Firefox ESR against an RTSP camera
// (`petrel camera emulate`, warm), on loopback. Each load is a new browser
// context; the figures are the page's own (window.petrelCamera): first frame
// painted, in ms since the viewer started (after the page's script and token)
// and since navigation started, and how the page played (WebRTC / HTTP live).
//
//   [PETREL_BENCH_ARGS=...] node bench-camera.mjs [LOADS] [VIEWER ...]     (default 7, chromium firefox)
//
// A VIEWER is chromium or firefox, with page parameters after '&':
// 'chromium&trickle=0' has the offer wait for ICE gathering (as before);
// 'chromium-bare' runs the same WHEP steps in a page without the app;
// 'chromium-idle' runs the SDK's whepPlay in the app's page once it has loaded
// and stood idle for a second (the app's code, without a page load beside it).
//
// 'chromium-bare&turn=1' sets the WHEP OPTIONS' TURN servers first, as early.js does.
// PETREL_BENCH_MARKS=1 adds, per viewer, the p50 of early.js's performance
// marks and of the server's own session steps (GET /v1/cameras/{id}).
//
// Needs bin/petrel (node build.mjs, or go build -o bin/petrel ./cmd/petrel).
import { spawn, execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, loadavg, cpus } from 'node:os';
import { join } from 'node:path';
import { launchChromium, launchFirefox } from './lib/browsers.mjs';
import { startServer, root } from './lib/server.mjs';
import { waitFor } from './lib/page.mjs';

const loads = Number(process.argv[2] ?? 7);
const which = process.argv.slice(3).length ? process.argv.slice(3) : ['chromium', 'firefox'];
const bin = process.env.PETREL_BIN ?? `${root}bin/petrel`;

const clip = mkdtempSync(join(tmpdir(), 'petrel-clip-'));
execFileSync('bash', [`${root}scripts/make-test-clip.sh`, clip, '10']);
const cam = spawn(bin, ['camera', 'emulate', '--addr', '127.0.0.1:0', '--clip', clip], { stdio: ['ignore', 'pipe', 'inherit'] });
const camURL = await new Promise((resolve) => createInterface({ input: cam.stdout }).once('line', (l) => resolve(l.trim())));
// PETREL_BENCH_ARGS: extra flags for petrel serve.
const server = await startServer('bench-camera', { args: (process.env.PETREL_BENCH_ARGS ?? '').split(' ').filter(Boolean) });
try {
  const admin = await server.token('', 'admin', ['--admin']);
  const res = await fetch(`${server.base}/v1/cameras`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ id: 'door', name: 'Front door', rtsp: camURL, warm: true }),
  });
  if (res.status !== 200) throw new Error(`POST /v1/cameras: ${res.status} ${await res.text()}`);
  const token = await server.token('camera/door', 'viewer', ['--subscribe']);
  // Warm: the RTSP session is open and a GOP is cached before the first load.
  await new Promise((r) => setTimeout(r, 2500));
  // A viewer is a browser and optional page parameters: chromium&trickle=0 is
  // Chromium with the offer waiting for ICE gathering, as the page did before.
  // 'chromium-bare': the same WHEP steps with no app, in a fresh page of the
  // server's origin: a peer connection and its offer made first (as early.js
  // does), then from 0 the POST with setLocalDescription alongside, the answer,
  // and the first frame painted. What is left is the browser's own.
  // 'chromium-bare&turn=1': the TURN servers from the WHEP OPTIONS set before
  // setLocalDescription, as early.js did.
  const bareLoad = (page, q) =>
    page.goto(`${server.base}/app.css`).then(() =>
      page.evaluate(async ([token, turn]) => {
        const options = turn ? fetch('/whep/camera%2Fdoor', { method: 'OPTIONS', headers: { Authorization: `Bearer ${token}` } }) : undefined;
        const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
        pc.addTransceiver('video', { direction: 'recvonly' });
        pc.addTransceiver('audio', { direction: 'recvonly' });
        const offer = await pc.createOffer();
        const t0 = performance.now();
        const at = () => Math.round((performance.now() - t0) * 10) / 10;
        const r = { mode: 'webrtc', pcCreated: 0, offerSent: 0 };
        const video = document.createElement('video');
        video.muted = video.autoplay = true;
        document.body.append(video);
        const first = new Promise((resolve) => {
          pc.ontrack = (ev) => {
            if (ev.track.kind !== 'video') return;
            video.srcObject = new MediaStream([ev.track]);
            video.requestVideoFrameCallback(() => resolve(at()));
          };
        });
        pc.oniceconnectionstatechange = () => pc.iceConnectionState === 'connected' && (r.iceConnected ??= at());
        const local = (async () => {
          if (options) {
            const link = (await options).headers.get('Link') ?? '';
            const iceServers = [...link.matchAll(/<([^>]+)>; rel="ice-server"; username="([^"]*)"; credential="([^"]*)"/g)].map((m) => ({ urls: m[1], username: m[2], credential: m[3] }));
            r.turnServers = iceServers.length;
            pc.setConfiguration({ ...pc.getConfiguration(), iceServers });
          }
          await pc.setLocalDescription(offer);
          r.localSet = at();
        })();
        const res = await fetch('/whep/camera%2Fdoor', { method: 'POST', headers: { 'Content-Type': 'application/sdp', Authorization: `Bearer ${token}` }, body: offer.sdp });
        r.answerArrived = at();
        const sdp = await res.text();
        await local;
        r.beforeRemote = at();
        await pc.setRemoteDescription({ type: 'answer', sdp });
        r.remote = at();
        r.firstFrame = await first;
        pc.close();
        return r;
      }, [token, /(^|&)turn=1/.test(q)]),
    );
  // 'chromium-idle': the app's room page (no camera: early.js starts nothing),
  // loaded and idle 1 s, then the SDK's whepPlay with a connection and offer
  // made first, as early.js makes them; from 0 when whepPlay is called.
  const idleLoad = (page) =>
    page.goto(`${server.base}/`).then(async () => {
      await new Promise((r) => setTimeout(r, 1000));
      return page.evaluate(async (token) => {
        const { whepPlay } = await import('/petrel-sdk.js');
        const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
        pc.addTransceiver('video', { direction: 'recvonly' });
        pc.addTransceiver('audio', { direction: 'recvonly' });
        const offer = pc.createOffer();
        await offer;
        const t0 = performance.now();
        const video = document.createElement('video');
        video.muted = video.autoplay = true;
        document.body.append(video);
        const first = new Promise((resolve) => {
          const onTrack = (track) => {
            if (track.kind !== 'video') return;
            video.srcObject = new MediaStream([track]);
            video.requestVideoFrameCallback(() => resolve(Math.round((performance.now() - t0) * 10) / 10));
          };
          window.idleSession = whepPlay('/whep/camera%2Fdoor', { token, prepared: { pc, offer }, onTrack });
        });
        const s = await window.idleSession;
        const r = { mode: 'webrtc', ...s.steps, firstFrame: await first };
        s.close();
        return r;
      }, token);
    });
  const launched = {};
  const browsers = [];
  for (const name of which) {
    const [viewer, ...q] = name.split('&');
    const kind = viewer.replace(/-(bare|idle)$/, '');
    launched[kind] ??= kind === 'firefox' ? await launchFirefox() : await launchChromium();
    browsers.push({ name, bare: viewer.endsWith('-bare'), idle: viewer.endsWith('-idle'), q: q.length ? `&${q.join('&')}` : '', newPage: () => launched[kind].newPage() });
  }
  const runs = Object.fromEntries(which.map((n) => [n, []]));
  const probeRuns = [];
  const load = async (browser) => {
    const page = await browser.newPage();
    try {
      if (browser.bare) return await bareLoad(page, browser.q);
      if (browser.idle) return await idleLoad(page);
      await page.goto(`${server.base}/?camera=door&token=${token}${browser.q}`);
      const r = await waitFor(page, 'the first frame', () => {
        const c = window.petrelCamera;
        const err = c?.error;
        if (err) return { error: err };
        if (c?.timings.firstFrame === undefined) return null;
        const marks = Object.fromEntries(performance.getEntriesByType('mark').map((m) => [m.name, m.startTime]));
        const t0 = marks['petrel:early:offerSent'];
        const rel = t0 === undefined ? {} : Object.fromEntries(Object.entries(marks).filter(([k]) => k.startsWith('petrel:early:')).map(([k, v]) => [k.slice(13), Math.round(v - t0)]));
        // The page's first paint and its stylesheet's arrival, on the same clock.
        if (t0 !== undefined) {
          for (const p of performance.getEntriesByType('paint')) rel[p.name] = Math.round(p.startTime - t0);
          for (const f of ['app.css', 'early.js']) {
            const e = performance.getEntriesByType('resource').find((e) => e.name.endsWith(`/${f}`));
            if (e) rel[f] = Math.round(e.responseEnd - t0);
            if (e) rel[`${f} requested`] = Math.round(e.startTime - t0);
          }
          const nav = performance.getEntriesByType('navigation')[0];
          rel.navigation = -Math.round(t0);
          if (nav) rel.document = Math.round(nav.responseEnd - t0);
        }
        return { ...c.timings, mode: c.mode, navFirstFrame: c.navFirstFrame, gatheringAtOffer: c.gatheringAtOffer, iceLite: c.iceLite, marks: rel };
      }, undefined, 15_000);
      if (r.error) throw new Error(`${browser.name}: ${r.error}`);
      return r;
    } finally {
      if (typeof page.context === 'function') await page.context().close();
      else await page.close();
    }
  };
  try {
    // Interleaved, one load of each browser and one probe session in turn, so
    // that the shared machine's load hits all alike. The first round warms
    // the browsers (process start, codecs) and is not counted.
    for (let i = 0; i <= loads; i++) {
      for (const b of browsers) {
        const r = await load(b);
        // The server's side of the session (its own records, ms from the WHEP POST):
        // the first ICE check to DTLS connected, and DTLS to the first RTP sent.
        const rec = (await (await fetch(`${server.base}/v1/cameras/door`, { headers: { Authorization: `Bearer ${admin}` } })).json()).sessions?.filter((s) => s.kind === 'whep').at(-1)?.stepsMs;
        if (r.mode === 'webrtc' && rec?.dtls_connected !== undefined) {
          r.server = rec;
          r.serverCheckToDTLS = Math.round((rec.dtls_connected - rec.ice_connected) * 10) / 10;
        }
        if (i > 0) runs[b.name].push(r);
      }
      const out = execFileSync(bin, ['probe', '--server', server.base.replace('localhost', '127.0.0.1'), '--loopback', '--json', '--runs', '1', '--token', token, 'door']).toString().trim().split('\n');
      const first = JSON.parse(out[0]);
      if (i > 0 && first.result?.firstFrame) probeRuns.push(Math.round(first.result.firstFrame / 1e5) / 10);
    }
  } finally {
    for (const b of Object.values(launched)) await b.close();
  }
  const pick = (v, q) => {
    v = v.filter((x) => x !== undefined).sort((a, b) => a - b);
    return v.length ? v[Math.min(v.length - 1, Math.max(0, Math.ceil(v.length * q) - 1))] : undefined;
  };
  console.log(`# ${new Date().toISOString()} ${cpus().length} CPUs, load ${loadavg()[0].toFixed(1)}, ${loads} loads per browser`);
  console.log('| viewer | plays over | loads | peer connection p50 | offer sent p50 | answer p50 | ICE connected p50 | **first frame p50 / p90** | first frame since navigation p50 | server: first check → DTLS p50 / max | all first frames |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const name of which) {
    const rs = runs[name];
    const med = (k) => pick(rs.map((r) => r[k]), 0.5) ?? '—';
    const modes = [...new Set(rs.map((r) => r.mode))].join(', ');
    if (process.env.PETREL_BENCH_MARKS && rs.some((r) => r.remote !== undefined)) console.log(`# ${name} p50: localSet ${med('localSet')}, before setRemoteDescription ${med('beforeRemote')}, remote set ${med('remote')}`);
    const gathering = [...new Set(rs.map((r) => `${r.gatheringAtOffer ?? '—'}${r.iceLite ? ', ICE-lite answer' : ''}`))].join('; ');
    console.log(`| ${name} | ${modes} (gathering at offer: ${gathering}) | ${rs.length} | ${med('pcCreated')} | ${med('offerSent')} | ${med('answerArrived')} | ${med('iceConnected')} | **${med('firstFrame')} / ${pick(rs.map((r) => r.firstFrame), 0.9)}** | ${med('navFirstFrame')} | ${med('serverCheckToDTLS')} / ${pick(rs.map((r) => r.serverCheckToDTLS), 1)} | ${rs.map((r) => r.firstFrame).join(', ')} |`);
  }
  if (process.env.PETREL_BENCH_MARKS) {
    for (const name of which) {
      const ms = runs[name].map((r) => r.marks ?? {});
      const keys = [...new Set(ms.flatMap((m) => Object.keys(m)))];
      if (keys.length) console.log(`# ${name} early.js marks p50 (ms from the offer sent): ${keys.map((k) => `${k} ${pick(ms.map((m) => m[k]), 0.5)}`).join(', ')}`);
      const sv = runs[name].map((r) => r.server ?? {});
      const steps = [...new Set(sv.flatMap((m) => Object.keys(m)))].sort((a, b) => pick(sv.map((m) => m[a]), 0.5) - pick(sv.map((m) => m[b]), 0.5));
      if (steps.length) console.log(`# ${name} server steps p50 (ms from the WHEP POST): ${steps.map((k) => `${k} ${pick(sv.map((m) => m[k]), 0.5)}`).join(', ')}`);
    }
  }
  console.log(`| petrel probe (Go, WHEP) | webrtc | ${probeRuns.length} | | | | | **${pick(probeRuns, 0.5)} / ${pick(probeRuns, 0.9)}** | | | ${probeRuns.join(', ')} |`);
} finally {
  await server.stop();
  cam.kill('SIGTERM');
  rmSync(clip, { recursive: true, force: true });
}
