// Starts the real petrel binary on loopback ports and makes tokens with it.
import { spawn, execFile } from 'node:child_process';
import { createWriteStream, mkdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import dgram from 'node:dgram';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('../../../', import.meta.url));
export const outDir = fileURLToPath(new URL('../out/', import.meta.url));
const bin = process.env.PETREL_BIN ?? `${root}bin/petrel`;

// A port free for both TCP and UDP on 127.0.0.1 (TURN and ICE-TCP share numbers with UDP).
export async function freePort() {
  for (let i = 0; i < 20; i++) {
    const port = await new Promise((resolve, reject) => {
      const s = net.createServer();
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => {
        const p = s.address().port;
        s.close(() => resolve(p));
      });
    });
    const udpFree = await new Promise((resolve) => {
      const u = dgram.createSocket('udp4');
      u.once('error', () => resolve(false));
      u.bind(port, '127.0.0.1', () => u.close(() => resolve(true)));
    });
    if (udpFree) return port;
  }
  throw new Error('no free port');
}

// Starts `petrel serve --loopback` and waits for /healthz. With dev: true no API
// key is set, so the server runs in development mode (POST /v1/dev/token works).
// args are extra flags for petrel serve (e.g. --max-tracks 1).
// env adds to (or overrides) the server's environment (nodes of one cluster
// share PETREL_API_SECRET).
export async function startServer(name, { dev = false, args: extraArgs = [], env: extraEnv = {} } = {}) {
  mkdirSync(outDir, { recursive: true });
  // Four different numbers: a port just freed can be handed out again by the
  // next bind to port 0 (a CI run got the same one for HTTP and ICE-TCP).
  const ports = new Set();
  while (ports.size < 4) ports.add(await freePort());
  const [http, udp, tcp, turn] = ports;
  const env = { ...process.env };
  delete env.PETREL_API_KEY;
  delete env.PETREL_API_SECRET;
  if (!dev) {
    env.PETREL_API_KEY = 'testkey';
    env.PETREL_API_SECRET = randomBytes(24).toString('hex');
  }
  Object.assign(env, extraEnv);
  const args = ['serve', '--loopback', '--http', `127.0.0.1:${http}`, '--rtc-udp-port', `${udp}`,
    '--rtc-tcp-port', `${tcp}`, '--turn-port', `${turn}`, ...extraArgs];
  const logPath = `${outDir}server-${name}.log`;
  const log = createWriteStream(logPath);
  const proc = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  proc.stdout.pipe(log);
  proc.stderr.pipe(log);
  let exited = null;
  proc.on('exit', (code, signal) => (exited = `exit code ${code} signal ${signal}`));

  const base = `http://localhost:${http}`;
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (exited) throw new Error(`petrel serve ${exited} before /healthz answered; see ${logPath}`);
    try {
      const res = await fetch(`http://127.0.0.1:${http}/healthz`);
      if (res.status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`petrel serve: /healthz not 200 within 15 s; see ${logPath}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }

  return {
    base, // http://localhost:PORT — localhost, so getUserMedia is allowed
    logPath,
    turnPort: turn,
    async token(room, identity, extra = []) {
      if (dev) {
        const res = await fetch(`http://127.0.0.1:${http}/v1/dev/token`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ room, identity, name: identity }),
        });
        if (!res.ok) throw new Error(`dev token: ${res.status} ${await res.text()}`);
        return (await res.json()).token;
      }
      const out = await new Promise((resolve, reject) =>
        execFile(bin, ['token', '--room', room, '--identity', identity, '--publish', '--subscribe', ...extra],
          { env }, (err, stdout, stderr) => (err ? reject(new Error(`petrel token: ${err.message} ${stderr}`)) : resolve(stdout))),
      );
      return out.trim().split('\n').pop().trim();
    },
    // A call of the admin API (by default GET, e.g. /v1/admin/rooms/r/participants/id), as JSON.
    async admin(path, { method = 'GET', body } = {}) {
      const token = await new Promise((resolve, reject) =>
        execFile(bin, ['token', '--identity', 'test-admin', '--admin'], { env },
          (err, stdout, stderr) => (err ? reject(new Error(`petrel token --admin: ${err.message} ${stderr}`)) : resolve(stdout.trim().split('\n').pop().trim()))),
      );
      const headers = dev ? {} : { Authorization: `Bearer ${token}` };
      const res = await fetch(`http://127.0.0.1:${http}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
      return res.json();
    },
    // An admin API GET, as the fetch Response (a file download).
    async adminFetch(path) {
      const token = await new Promise((resolve, reject) =>
        execFile(bin, ['token', '--identity', 'test-admin', '--admin'], { env },
          (err, stdout, stderr) => (err ? reject(new Error(`petrel token --admin: ${err.message} ${stderr}`)) : resolve(stdout.trim().split('\n').pop().trim()))),
      );
      return fetch(`http://127.0.0.1:${http}${path}`, { headers: dev ? {} : { Authorization: `Bearer ${token}` } });
    },
    async stop() {
      if (exited) return;
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 5_000);
      await gone;
      clearTimeout(t);
    },
  };
}
