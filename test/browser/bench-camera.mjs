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
// 'chromium&trickle=0' has the offer wait for ICE gathering (as before).
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
  const launched = {};
  const browsers = [];
  for (const name of which) {
    const [kind, ...q] = name.split('&');
    launched[kind] ??= kind === 'firefox' ? await launchFirefox() : await launchChromium();
    browsers.push({ name, q: q.length ? `&${q.join('&')}` : '', newPage: () => launched[kind].newPage() });
  }
  const runs = Object.fromEntries(which.map((n) => [n, []]));
  const probeRuns = [];
  const load = async (browser) => {
    const page = await browser.newPage();
    try {
      await page.goto(`${server.base}/?camera=door&token=${token}${browser.q}`);
      const r = await waitFor(page, 'the first frame', () => {
        const c = window.petrelCamera;
        const err = c?.error;
        if (err) return { error: err };
        if (c?.timings.firstFrame === undefined) return null;
        return { ...c.timings, mode: c.mode, navFirstFrame: c.navFirstFrame, gatheringAtOffer: c.gatheringAtOffer, iceLite: c.iceLite };
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
  console.log('| viewer | plays over | loads | peer connection p50 | offer sent p50 | answer p50 | ICE connected p50 | **first frame p50 / p90** | first frame since navigation p50 | all first frames |');
  console.log('|---|---|---|---|---|---|---|---|---|---|');
  for (const name of which) {
    const rs = runs[name];
    const med = (k) => pick(rs.map((r) => r[k]), 0.5) ?? '—';
    const modes = [...new Set(rs.map((r) => r.mode))].join(', ');
    const gathering = [...new Set(rs.map((r) => `${r.gatheringAtOffer ?? '—'}${r.iceLite ? ', ICE-lite answer' : ''}`))].join('; ');
    console.log(`| ${name} | ${modes} (gathering at offer: ${gathering}) | ${rs.length} | ${med('pcCreated')} | ${med('offerSent')} | ${med('answerArrived')} | ${med('iceConnected')} | **${med('firstFrame')} / ${pick(rs.map((r) => r.firstFrame), 0.9)}** | ${med('navFirstFrame')} | ${rs.map((r) => r.firstFrame).join(', ')} |`);
  }
  console.log(`| petrel probe (Go, WHEP) | webrtc | ${probeRuns.length} | | | | | **${pick(probeRuns, 0.5)} / ${pick(probeRuns, 0.9)}** | | ${probeRuns.join(', ')} |`);
} finally {
  await server.stop();
  cam.kill('SIGTERM');
  rmSync(clip, { recursive: true, force: true });
}
