// Cluster placement helpers of the SDK (web/sdk/cluster.ts) against a real
// HTTP server standing in for nothing but HTTP: a node list, /healthz and
// /v1/cluster/place, as Petrel serves them.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import test from 'node:test';
import { httpBase, placeParticipant, tokenRoom, failover } from '../sdk/cluster.js';

test('tokenRoom reads the room claim of a JWT, empty for garbage', () => {
  const payload = Buffer.from(JSON.stringify({ room: 'standup', sub: 'alice' })).toString('base64url');
  assert.equal(tokenRoom(`x.${payload}.y`), 'standup');
  assert.equal(tokenRoom('not a token'), '');
});

test('httpBase maps signaling URLs to HTTP bases', () => {
  assert.equal(httpBase('ws://127.0.0.1:7880/v1/rtc'), 'http://127.0.0.1:7880');
  assert.equal(httpBase('wss://a.example/v1/rtc'), 'https://a.example');
  assert.equal(httpBase('http://b.example:8080/x'), 'http://b.example:8080');
});

test('placement sends measured round trips and the exclusions, and follows the answer', async () => {
  let asked: { room: string; rtt: Record<string, number>; exclude: string[] } | null = null;
  const srv = createServer((req, res) => {
    const base = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
    if (req.url === '/v1/cluster/nodes') {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ self: 'a', nodes: [{ id: 'a', url: base, ws: base.replace('http', 'ws') + '/v1/rtc', draining: false }] }));
    } else if (req.url === '/healthz') {
      res.end('ok\n');
    } else if (req.url === '/v1/cluster/place' && req.method === 'POST') {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        asked = JSON.parse(body);
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify({ node: 'a', ws: 'ws://elsewhere/v1/rtc' }));
      });
    } else {
      res.statusCode = 404;
      res.end();
    }
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  try {
    const base = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
    const p = await placeParticipant(base, 'standup');
    assert.deepEqual(p, { node: 'a', ws: 'ws://elsewhere/v1/rtc' });
    assert.equal(asked!.room, 'standup');
    assert.ok(typeof asked!.rtt.a === 'number' && asked!.rtt.a >= 0, 'the round trip to node a was measured');
    const f = await failover([{ id: 'b', url: 'http://127.0.0.1:1', ws: '', draining: false }, { id: 'a', url: base, ws: '', draining: false }], 'b', 'standup');
    assert.deepEqual(f, { node: 'a', ws: 'ws://elsewhere/v1/rtc' });
    assert.deepEqual(asked!.exclude, ['b']);
  } finally {
    srv.close();
  }
});

test('without a cluster, placement answers null', async () => {
  const srv = createServer((_req, res) => {
    res.statusCode = 404;
    res.end();
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  try {
    assert.equal(await placeParticipant(`http://127.0.0.1:${(srv.address() as { port: number }).port}`, 'r'), null);
  } finally {
    srv.close();
  }
});
