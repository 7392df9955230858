// Camera control from the browser: a Chromium viewer of a camera room clicks the
// PTZ controls and talks; the camera emulator (petrel onvif-emulator, its own
// process) receives the ONVIF commands and the audio, and the test asserts on
// what it recorded.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, sleep, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { root } from '../lib/server.mjs';

const bin = process.env.PETREL_BIN ?? `${root}bin/petrel`;

// Starts the emulator and returns its URLs and a stop function.
async function startEmulator() {
  const proc = spawn(bin, ['onvif-emulator', '--listen', '127.0.0.1:0', '--user', 'admin', '--password', 'pw',
    '--backchannel', '127.0.0.1:0', '--backchannel-codec', 'PCMU'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr = [];
  proc.stderr.on('data', (d) => stderr.push(String(d)));
  const line = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`onvif-emulator did not start: ${stderr.join('')}`)), 10_000);
    createInterface({ input: proc.stdout }).once('line', (l) => (clearTimeout(t), resolve(l)));
    proc.once('exit', (code) => reject(new Error(`onvif-emulator exited ${code}: ${stderr.join('')}`)));
  });
  const urls = JSON.parse(line);
  const base = new URL(urls.onvif).origin;
  return {
    onvif: urls.onvif,
    backchannelURL: urls.backchannel,
    commands: async () => (await fetch(`${base}/emulator/commands`)).json(),
    loudspeaker: async () => (await fetch(`${base}/emulator/backchannel`)).json(),
    close: async () => {
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await gone;
    },
  };
}

async function until(what, fn, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

test('PTZ from the UI reaches the camera; talk-back delivers G.711 audio to its loudspeaker', { timeout: 120_000 }, () =>
  scenario('ptz', async ({ server, own, watch }) => {
    const emu = await startEmulator();
    own(emu);

    // The camera, declared through the admin API: its video ingest is not needed
    // here (the RTSP URL points nowhere and retries), its ONVIF and backchannel are
    // the emulator's.
    const admin = await server.token('', 'admin', ['--admin']);
    const res = await fetch(`${server.base}/v1/cameras`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ id: 'ptzcam', name: 'PTZ cam', rtsp: 'rtsp://127.0.0.1:1/none',
        onvif: { url: emu.onvif, user: 'admin', password: 'pw', backchannel: emu.backchannelURL } }),
    });
    assert.equal(res.status, 200, `POST /v1/cameras: ${await res.text()}`);

    const chromium = own(await launchChromium());
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    const token = await server.token('camera/ptzcam', 'viewer', ['--ptz']);
    await viewer.page.goto(`${server.base}/?token=${token}&autojoin=1&p2p=0`);

    // The controls load the camera's presets over the data channel.
    await waitFor(viewer.page, 'the presets of the camera', () => document.querySelectorAll('#ptz-presets option').length === 2);
    const names = await viewer.page.evaluate(() => [...document.querySelectorAll('#ptz-presets option')].map((o) => o.textContent));
    assert.deepEqual(names, ['Home', 'Gate']);

    // Hold the right arrow: continuous moves to the right, a stop on release.
    const right = await viewer.page.locator('#ptz-right').boundingBox();
    await viewer.page.mouse.move(right.x + right.width / 2, right.y + right.height / 2);
    await viewer.page.mouse.down();
    await until('a continuous move at the camera', async () => (await emu.commands()).some((c) => c.op === 'ContinuousMove'));
    await sleep(700); // held: the move is renewed
    await viewer.page.mouse.up();
    const cmds = await until('a stop at the camera', async () => {
      const c = await emu.commands();
      return c.some((x) => x.op === 'Stop') && c;
    });
    const moves = cmds.filter((c) => c.op === 'ContinuousMove');
    assert.ok(moves.length >= 2, `held for 700 ms: ${moves.length} moves (renewed every 500 ms)`);
    for (const m of moves) {
      assert.equal(m.pan, 0.5, 'right arrow: pan velocity 0.5');
      assert.equal(m.tilt, 0);
      assert.equal(m.timeout, 'PT1S');
      assert.equal(m.profile, 'profile_main', 'the PTZ profile, not the first one');
    }
    assert.equal(cmds.at(-1).op, 'Stop', 'nothing moves the camera after the stop');
    await waitFor(viewer.page, 'the status line', () => document.querySelector('.ptz-status')?.textContent === 'stopped');

    // A preset, chosen and sent with a click.
    await viewer.page.selectOption('#ptz-presets', { label: 'Gate' });
    await viewer.page.click('#ptz-preset-go');
    const go = await until('GotoPreset at the camera', async () => (await emu.commands()).find((c) => c.op === 'GotoPreset'));
    assert.equal(go.preset, '2');

    // Talk: the browser publishes its (fake) microphone as G.711 µ-law, the
    // gateway carries it over the ONVIF backchannel, the loudspeaker hears it.
    await viewer.page.click('#ptz-talk');
    await waitFor(viewer.page, 'talking', () => /^talking/.test(document.querySelector('.ptz-status')?.textContent ?? ''));
    const st = await until('audio at the camera loudspeaker', async () => {
      const s = await emu.loudspeaker();
      return s.Packets >= 100 && s;
    });
    assert.equal(st.Sessions, 1);
    assert.equal(st.PayloadType, 0, 'PCMU end to end: the browser encoded G.711, nobody transcoded');
    // Chromium's fake microphone beeps: some packets carry the tone.
    await until('the fake microphone beep at the loudspeaker', async () => (await emu.loudspeaker()).LoudPackets >= 5);
    await viewer.page.click('#ptz-talk');
    await waitFor(viewer.page, 'talk ended', () => /^talk ended/.test(document.querySelector('.ptz-status')?.textContent ?? ''));
    const after = (await emu.loudspeaker()).Packets;
    await sleep(1000);
    assert.ok((await emu.loudspeaker()).Packets - after < 10, 'audio stops with the talk');

    // Digital zoom: the wheel over the picture zooms it in the browser only.
    const tile = viewer.page.locator('.tile:has(.camera-controls)');
    const box = await tile.boundingBox();
    await viewer.page.mouse.move(box.x + box.width / 2, box.y + box.height / 3);
    await viewer.page.mouse.wheel(0, -400);
    await waitFor(viewer.page, 'a digital zoom', () => Number(document.querySelector('.tile:has(.camera-controls)')?.dataset.zoom ?? 1) > 1.5);
  }));
