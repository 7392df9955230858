import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, sleep, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

// An audio-mixed room in the app: three people, each with a microphone that
// plays a tone of its own frequency (and no camera). Each page must receive one
// audio stream from the server, play it, show no tile for it, and what it plays
// must hold the other two tones and not its own (the minus-one).

const FREQS = [500, 700, 1100];

// Replaces the page's microphone with a WebAudio tone (the fake device's beep
// is the same for every page) and reports no camera, before the app loads.
function toneMicrophone(freq) {
  const gum = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
  navigator.mediaDevices.getUserMedia = async (c) => {
    if (c?.video) throw new DOMException('no camera here', 'NotFoundError');
    if (!c?.audio) return gum(c);
    const ctx = new AudioContext();
    await ctx.resume();
    const osc = ctx.createOscillator();
    osc.frequency.value = freq;
    const level = ctx.createGain();
    level.gain.value = 0.2;
    const dest = ctx.createMediaStreamDestination();
    osc.connect(level).connect(dest);
    osc.start();
    window.__toneCtx = ctx;
    return dest.stream;
  };
}

// The level (dB) of each frequency in what the page's audio elements play,
// from an FFT of their streams averaged over `ms`, and the median level of
// the spectrum (the floor).
function heard([freqs, ms]) {
  return new Promise((resolve, reject) => {
    const els = [...document.querySelectorAll('audio')].filter((a) => a.srcObject);
    if (!els.length) return reject(new Error('no audio element plays anything'));
    const ctx = new AudioContext();
    const an = ctx.createAnalyser();
    an.fftSize = 8192;
    an.smoothingTimeConstant = 0;
    for (const a of els) ctx.createMediaStreamSource(a.srcObject).connect(an);
    const bins = new Float32Array(an.frequencyBinCount);
    const sum = new Float64Array(an.frequencyBinCount);
    let reads = 0;
    const t = setInterval(() => {
      an.getFloatFrequencyData(bins);
      for (let i = 0; i < bins.length; i++) sum[i] += Math.pow(10, Math.max(bins[i], -200) / 10);
      reads++;
    }, 50);
    setTimeout(() => {
      clearInterval(t);
      const db = (i) => 10 * Math.log10(sum[i] / reads + 1e-30);
      const hz = ctx.sampleRate / an.fftSize;
      // The tone's level: the loudest bin within ±15 Hz (Opus moves a pure tone a little).
      const at = (f) => Math.max(...[-2, -1, 0, 1, 2].map((d) => db(Math.round(f / hz) + d)));
      const all = Array.from(sum, (_, i) => db(i)).slice(Math.round(100 / hz), Math.round(4000 / hz)).sort((a, b) => a - b);
      const out = { floor: all[all.length >> 1], reads };
      for (const f of freqs) out[f] = at(f);
      ctx.close();
      resolve(out);
    }, ms);
  });
}

test('audio-mixed room: each of three pages receives one stream, plays the other two tones and not its own, and shows no tile for the mix', { timeout: 90_000 }, () =>
  scenario('audiomix', async ({ server, own, watch }) => {
    await server.admin('/v1/admin/rooms', { method: 'POST', body: { name: 'mixed', audioMix: true } });
    const chromium = own(await launchChromium());
    const people = [];
    for (const [i, freq] of FREQS.entries()) {
      const page = await chromium.newPage();
      await page.addInitScript(toneMicrophone, freq);
      const p = watch(new Participant(`speaker${i}`, page));
      p.freq = freq;
      await p.join(server.base, await server.token('mixed', `speaker${i}`), { tracks: 1 });
      people.push(p);
    }

    for (const p of people) {
      // The room as the user sees it: their own tile and the two others', no
      // tile for the mixer, the room marked as mixed.
      const view = await waitFor(p.page, `${p.label} to show three tiles`, () => {
        const labels = [...document.querySelectorAll('.tile .label')].map((l) => l.textContent);
        return labels.length === 3 && labels;
      });
      assert.ok(!view.some((l) => /mix/i.test(l)), `${p.label} shows a tile for the mix: ${view}`);
      assert.equal(await p.page.evaluate(() => document.getElementById('mix-badge').hidden), false, `${p.label}: the header does not say the audio is mixed`);
      // One audio stream from the server, playing in one audio element.
      const streams = await waitFor(p.page, `${p.label} to play one audio stream`, async () => {
        const els = [...document.querySelectorAll('audio')].filter((a) => a.srcObject && !a.paused);
        let inbound = 0;
        let packets = 0;
        (await window.petrel.room.subscriberPc.getStats()).forEach((s) => {
          if (s.type === 'inbound-rtp' && s.kind === 'audio') {
            inbound++;
            packets += s.packetsReceived ?? 0;
          }
        });
        return els.length >= 1 && packets > 50 && { elements: els.length, inbound };
      });
      assert.deepEqual(streams, { elements: 1, inbound: 1 }, `${p.label}: audio elements and inbound audio streams`);
    }

    // What each page plays: the other two tones well above the spectrum's
    // floor and 30 dB above its own.
    for (const p of people) {
      let h;
      for (let attempt = 0; attempt < 3; attempt++) {
        h = await p.page.evaluate(heard, [FREQS, 1500]);
        const others = FREQS.filter((f) => f !== p.freq);
        if (others.every((f) => h[f] > h.floor + 30 && h[f] > h[p.freq] + 30)) break;
        await sleep(500);
      }
      const detail = `${p.label} (own ${p.freq} Hz) hears ${JSON.stringify(h)}`;
      for (const f of FREQS.filter((f) => f !== p.freq)) assert.ok(h[f] > h.floor + 30, `the tone at ${f} Hz is missing: ${detail}`);
      // Its own tone at the others' level would be the mix without the minus-one;
      // 30 dB down leaves only Opus's coding noise around the others' tones.
      for (const f of FREQS.filter((f) => f !== p.freq)) assert.ok(h[f] > h[p.freq] + 30, `its own tone comes back: ${detail}`);
    }
  }));

// The server decodes a mixed room's audio: a page with an end-to-end
// encryption passphrase would send it noise, so it is told why it cannot
// join, and leaves nothing behind in the room.
test('audio-mixed room: a page with an end-to-end encryption passphrase is refused with a clear error', { timeout: 60_000 }, () =>
  scenario('audiomix-e2ee', async ({ server, own, watch }) => {
    await server.admin('/v1/admin/rooms', { method: 'POST', body: { name: 'mixed', audioMix: true } });
    const chromium = own(await launchChromium());
    const p = watch(new Participant('encrypted', await chromium.newPage()));
    // As Participant.join opens the app, with the passphrase in the fragment.
    const q = new URLSearchParams({ token: await server.token('mixed', 'encrypted'), name: 'encrypted', autojoin: '1', p2p: '0' });
    await p.page.goto(`${server.base}/?${q}#${new URLSearchParams({ e2ee: 'correct horse' })}`);
    const shown = await waitFor(p.page, 'the join error', () => document.getElementById('join-error')?.textContent);
    assert.match(shown, /mixes this room's audio/);
    assert.equal(await p.page.evaluate(() => window.petrel?.room?.state ?? 'none'), 'none', 'the app holds a room after the refusal');
    const deadline = Date.now() + 5_000;
    for (;;) {
      const room = (await server.admin('/v1/admin/rooms')).find((r) => r.name === 'mixed');
      if (!room || room.numParticipants === 0) break;
      if (Date.now() > deadline) throw new Error(`the refused page is still in the room: ${JSON.stringify(room)}`);
      await sleep(250);
    }
  }));
