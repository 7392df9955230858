// One run of the comparison, inside the lab's host a: one Chromium with two
// clients (separate contexts: a publisher drawing timestamped frames and a
// subscriber measuring them), both talking to Petrel in host b over `path`.
// Prints one JSON line: the subscriber's window summary and the session start.
//
// node bench/wt/peer.mjs --base http://10.201.0.2:7880 --path wt-datagram
//   [--duration 15 --warmup 4 --room r1 --cgroup /sys/fs/cgroup/cpu/x --ready 1]
//
// --ready: print `ready` once both pages are loaded and wait for a line on stdin.
import { appendFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { chromiumArgs, devToken, endWindow, prepare, publisherStats, resetWindow, startPublisher, startSubscriber } from './pages.mjs';

const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) => {
  if (v.startsWith('--')) a.push([v.slice(2), all[i + 1]]);
  return a;
}, []));
const base = args.base ?? 'http://10.201.0.2:7880';
const path = args.path ?? 'webrtc';
const durationS = Number(args.duration ?? 15);
const warmupS = Number(args.warmup ?? 4);
const room = args.room ?? `wt-${Date.now()}`;

// The CPU-limit experiment: this process (and so the browser it starts) joins a cgroup first.
if (args.cgroup) appendFileSync(`${args.cgroup}/cgroup.procs`, `${process.pid}\n`);

const require = createRequire(process.env.PETREL_BROWSER_MODULES ?? new URL('../../test/browser/package.json', import.meta.url).pathname);
const { chromium } = require('playwright-core');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = [];

async function waitHealthy() {
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      if ((await fetch(`${base}/healthz`)).ok) return;
    } catch { /* not yet */ }
    if (Date.now() > deadline) throw new Error(`${base}/healthz not answering`);
    await sleep(200);
  }
}

let browser;
const hardStop = setTimeout(() => {
  console.log(JSON.stringify({ path, error: 'timeout', log: log.slice(-20) }));
  process.exit(1);
}, (durationS + warmupS + 75) * 1000);
try {
  await waitHealthy();
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: chromiumArgs(base), timeout: 30_000 });
  const page = async (label) => {
    const p = await (await browser.newContext({ viewport: { width: 800, height: 600 } })).newPage();
    p.on('console', (m) => log.push(`[${label}] ${m.text()}`));
    p.on('pageerror', (e) => log.push(`[${label} error] ${e?.message ?? e}`));
    return p;
  };
  const pub = await page('pub');
  const sub = await page('sub');
  if (args.ready) {
    // The runner impairs the link once the pages are loaded (their 260 KB
    // are no part of the measurement, and took minutes at 0.1 Mbit/s).
    await prepare(pub, base);
    await prepare(sub, base);
    console.log('ready');
    await new Promise((res) => process.stdin.once('data', res));
  }
  // Tokens from the runner (signed with the server's key), or development tokens on loopback.
  const p = await startPublisher(pub, base, path, args.pubtoken ?? (await devToken(base, room, 'pub')));
  const s = await startSubscriber(sub, base, path, args.subtoken ?? (await devToken(base, room, 'sub')), { timeoutMs: 45_000 });
  await sleep(warmupS * 1000);
  const before = await resetWindow(sub);
  await sleep(durationS * 1000);
  const r = await endWindow(sub, before);
  const ps = await publisherStats(pub);
  console.log(JSON.stringify({ path, ...r, connectMs: s.connectMs, firstFrameMs: s.firstFrameMs, startDetail: s.startDetail, pubSetupMs: p.setupMs, pub: ps }));
} catch (e) {
  console.log(JSON.stringify({ path, error: String(e?.message ?? e).slice(0, 500), log: log.slice(-20) }));
  process.exitCode = 1;
} finally {
  clearTimeout(hardStop);
  // A browser that does not close (seen under heavy load: node spinning for minutes
  // after the result was printed) must not hold the run: exit regardless.
  await Promise.race([browser?.close().catch(() => {}), sleep(5_000)]);
  process.exit(process.exitCode ?? 0);
}
