// Browser side of a `petrel lab` run: launches Chromium (playwright-core)
// or Firefox ESR (puppeteer-core) in this network namespace, offers a
// "bulk" and a "probe" data channel to the Pion answerer over the lab's TCP
// signaling (one JSON line each way, as lab/dc.go), sends bulk data with
// bufferedAmount flow control and stamped probes, and stops when the
// receiver writes "done".
//
// node dcpeer.mjs --browser chromium --addr 10.201.0.2:7000 --probe ordered
//   [--msgsize 65536 --high 2097152 --low 1048576 --duration 10]
import net from 'node:net';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const args = Object.fromEntries(process.argv.slice(2).reduce((a, v, i, all) => {
  if (v.startsWith('--')) a.push([v.slice(2), all[i + 1]]);
  return a;
}, []));
const browserName = args.browser || 'chromium';
const [host, port] = (args.addr || '10.201.0.2:7000').split(':');
const msgSize = Number(args.msgsize || 65536);
const high = Number(args.high || 2 * 1024 * 1024);
const low = Number(args.low || 1024 * 1024);
const probeMode = args.probe || 'ordered';
const durationS = Number(args.duration || 10);
const timeoutMs = (durationS + 90) * 1000;
// --reverse: Petrel sends, the browser measures and prints the Result JSON.
const reverse = args.reverse === 'true';
// --transport ws (with --reverse): TCP into the page, over WebSockets.
const transport = args.transport || 'dc';

// The browser test harness installs the drivers (make test / test/browser).
const here = path.dirname(fileURLToPath(import.meta.url));
const modules = process.env.PETREL_BROWSER_MODULES || path.join(here, '../../test/browser/package.json');
const require = createRequire(modules);

async function launch() {
  if (browserName === 'chromium') {
    const { chromium } = require('playwright-core');
    const b = await chromium.launch({
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
        // Host candidates must carry the namespace's address, not an mDNS name.
        '--disable-features=WebRtcHideLocalIpsWithMdns'],
    });
    return { page: await b.newPage(), close: () => b.close() };
  }
  const puppeteer = require('puppeteer-core');
  const b = await puppeteer.launch({
    browser: 'firefox',
    executablePath: process.env.FIREFOX || '/usr/bin/firefox-esr',
    headless: true,
    extraPrefsFirefox: {
      'media.peerconnection.ice.obfuscate_host_addresses': false,
      'media.peerconnection.ice.loopback': true,
    },
  });
  return { page: await b.newPage(), close: () => b.close() };
}

function lines(sock) {
  let buf = '';
  const waiting = [];
  const queue = [];
  sock.on('data', (d) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (waiting.length) waiting.shift()(line); else queue.push(line);
    }
  });
  sock.on('close', () => { while (waiting.length) waiting.shift()(null); });
  return () => queue.length ? Promise.resolve(queue.shift()) : new Promise((r) => waiting.push(r));
}

async function connect() {
  for (let i = 0; i < 50; i++) {
    try {
      return await new Promise((resolve, reject) => {
        const s = net.connect(Number(port), host, () => resolve(s));
        s.once('error', reject);
      });
    } catch { await new Promise((r) => setTimeout(r, 100)); }
  }
  throw new Error(`cannot reach ${host}:${port}`);
}

const timer = setTimeout(() => { console.error('dcpeer: timeout'); process.exit(1); }, timeoutMs);
const { page, close } = await launch();
// measure runs in the page when the browser receives (--reverse): it counts
// the bulk channel's bytes for durationS from the first message and the
// probe channel's one-way delays, on data channels (answer) or, with
// --transport ws, on two WebSockets to the same address (TCP, the
// reference for the data channels).
const measure = async ({ answer, durationS, probeMode, ws }) => {
  const step = 0.25;
  const series = new Array(Math.round(durationS / step)).fill(0);
  const delays = [];
  let bytes = 0; let start = 0; let maxSeq = 0; let got = 0;
  const nowNs = () => (performance.timeOrigin + performance.now()) * 1e6;
  let finish;
  const finished = new Promise((r) => { finish = r; });
  const onBulk = (e) => {
    const t = performance.now();
    if (!start) { start = t; setTimeout(finish, durationS * 1000); }
    const el = (t - start) / 1000;
    if (el >= durationS) return;
    bytes += e.data.byteLength;
    series[Math.floor(el / step)] += e.data.byteLength;
  };
  const onProbe = (e) => {
    if (!start || (performance.now() - start) / 1000 >= durationS) return;
    const v = new DataView(e.data);
    const seq = Number(v.getBigUint64(0));
    delays.push((nowNs() - Number(v.getBigUint64(8))) / 1e6);
    got++; maxSeq = Math.max(maxSeq, seq + 1);
  };
  if (ws) {
    window.bulk = new WebSocket(`${ws}/bulk`);
    window.probe = new WebSocket(`${ws}/probe`);
  }
  for (const [ch, on] of [[window.bulk, onBulk], [window.probe, onProbe]]) {
    ch.binaryType = 'arraybuffer';
    ch.onmessage = on;
  }
  if (!ws) await window.pc.setRemoteDescription(answer);
  await finished;
  if (ws) window.bulk.close();
  delays.sort((a, b) => a - b);
  return {
    probe: probeMode, bytes, seconds: durationS, mbps: bytes * 8 / 1e6 / durationS,
    series: series.map((b) => b * 8 / 1e6 / step), series_step: step,
    probe_sent: maxSeq, probe_got: got,
    p50_ms: delays.length ? delays[Math.floor(delays.length / 2)] : 0,
    p99_ms: delays.length ? delays[Math.min(delays.length - 1, Math.floor(delays.length * 0.99))] : 0,
  };
};

async function run() {
  if (reverse && transport === 'ws') {
    (await connect()).destroy(); // the sender is listening
    const result = await page.evaluate(measure, { durationS, probeMode, ws: `ws://${host}:${port}` });
    process.stdout.write(JSON.stringify(result) + '\n');
    return;
  }
  const offer = await page.evaluate(async ({ probeMode }) => {
    const pc = new RTCPeerConnection();
    window.pc = pc;
    window.bulk = pc.createDataChannel('bulk');
    const init = probeMode === 'unordered' ? { ordered: false }
      : probeMode === 'partial' ? { ordered: false, maxRetransmits: 0 } : { ordered: true };
    window.probe = pc.createDataChannel('probe', init);
    await pc.setLocalDescription(await pc.createOffer());
    await new Promise((r) => {
      if (pc.iceGatheringState === 'complete') return r();
      pc.addEventListener('icegatheringstatechange', () => pc.iceGatheringState === 'complete' && r());
    });
    return { type: pc.localDescription.type, sdp: pc.localDescription.sdp };
  }, { probeMode });
  const sock = await connect();
  const next = lines(sock);
  sock.write(JSON.stringify(offer) + '\n');
  const answer = JSON.parse(await next());
  if (reverse) {
    const result = await page.evaluate(measure, { answer, durationS, probeMode });
    process.stdout.write(JSON.stringify(result) + '\n');
    sock.write('"done"\n');
    sock.destroy();
    return;
  }
  await page.evaluate(async ({ answer, msgSize, high, low }) => {
    await window.pc.setRemoteDescription(answer);
    const bulk = window.bulk;
    const chunk = new Uint8Array(msgSize);
    bulk.bufferedAmountLowThreshold = low;
    const fill = () => {
      try {
        while (bulk.readyState === 'open' && bulk.bufferedAmount < high) bulk.send(chunk);
      } catch (e) { /* closing */ }
    };
    bulk.onbufferedamountlow = fill;
    bulk.onopen = fill;
    const probe = window.probe;
    probe.onopen = () => {
      let seq = 0;
      const msg = new ArrayBuffer(64);
      const v = new DataView(msg);
      window.probeTimer = setInterval(() => {
        if (probe.readyState !== 'open') return;
        v.setBigUint64(0, BigInt(seq++));
        // Wall-clock ns, the clock the Go receiver compares with.
        v.setBigUint64(8, BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6)));
        probe.send(msg);
      }, 10);
    };
  }, { answer, msgSize, high, low });
  await next(); // "done" or close
  sock.destroy();
}
try {
  await run();
} finally {
  clearTimeout(timer);
  await close();
}
process.exit(0);
