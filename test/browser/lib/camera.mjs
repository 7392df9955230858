// A camera for the browser tests: `petrel camera emulate` (RTSP, the generated
// test clip) declared to a server through the admin API.
import { spawn, execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { root } from './server.mjs';

const bin = process.env.PETREL_BIN ?? `${root}bin/petrel`;

// Starts the emulator on a fresh clip of secs seconds; close() stops it and removes the clip.
export async function startCamera(secs = 6, ...extra) {
  const clip = mkdtempSync(join(tmpdir(), 'petrel-clip-'));
  execFileSync('bash', [`${root}scripts/make-test-clip.sh`, clip, String(secs)]);
  const proc = spawn(bin, ['camera', 'emulate', '--addr', '127.0.0.1:0', '--clip', clip, ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr = [];
  proc.stderr.on('data', (d) => stderr.push(String(d)));
  const url = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`camera emulate did not start: ${stderr.join('')}`)), 10_000);
    createInterface({ input: proc.stdout }).once('line', (l) => (clearTimeout(t), resolve(l.trim())));
    proc.once('exit', (code) => reject(new Error(`camera emulate exited ${code}: ${stderr.join('')}`)));
  });
  return {
    url,
    close: async () => {
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await gone;
      rmSync(clip, { recursive: true, force: true });
    },
  };
}

// Declares camera id (RTSP at url) through the admin API; extra goes into the declaration.
export async function addCamera(server, id, url, extra = {}) {
  const admin = await server.token('', 'admin', ['--admin']);
  const res = await fetch(`${server.base}/v1/cameras`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ id, name: id, rtsp: url, ...extra }),
  });
  if (res.status !== 200) throw new Error(`POST /v1/cameras: ${res.status} ${await res.text()}`);
}
