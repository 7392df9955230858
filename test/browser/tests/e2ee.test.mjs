import test from 'node:test';
import assert from 'node:assert/strict';
import { createDecipheriv, hkdfSync, pbkdf2Sync } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchChromium, launchFirefox } from '../lib/browsers.mjs';
import { Participant, expectGrowth, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

const PASSPHRASE = 'petrel e2ee test';
const dir = mkdtempSync(join(tmpdir(), 'petrel-e2ee-'));

// The frames of an IVF file (what ffmpeg copies a VP8 stream into).
function ivfFrames(buf) {
  const frames = [];
  for (let i = buf.readUInt16LE(6); i + 12 <= buf.length; ) {
    const n = buf.readUInt32LE(i);
    frames.push(buf.subarray(i + 12, i + 12 + n));
    i += 12 + n;
  }
  return frames;
}

// Decoded media of the subscriber connection, with the audio's energy: decrypted
// Opus carries the fake microphone's tone, dropped frames only concealment silence.
const media = (p) =>
  p.page.evaluate(async () => {
    const out = { framesDecoded: 0, audioPackets: 0, samples: 0, energy: 0 };
    (await window.petrel.room.subscriberPc.getStats()).forEach((s) => {
      if (s.type !== 'inbound-rtp') return;
      if (s.kind === 'video') out.framesDecoded += s.framesDecoded ?? 0;
      else {
        out.audioPackets += s.packetsReceived ?? 0;
        out.samples += s.totalSamplesReceived ?? 0;
        out.energy += s.totalAudioEnergy ?? 0;
      }
    });
    return out;
  });

const e2eeStats = (p) => p.page.evaluate(() => window.petrel.room.e2ee.stats());

// A page without the key (Chromium): records the first video frames of each
// receiver exactly as the server forwarded them, through a pass-through
// transform set as each track arrives (Chromium takes no transform later).
const recordFrames = (page) =>
  page.addInitScript(() => {
    const src = `onrtctransform = (ev) => { let n = 0; const { readable, writable, options } = ev.transformer;
      readable.pipeThrough(new TransformStream({ transform(f, c) { if (n++ < 40) postMessage({ mid: options.mid, data: new Uint8Array(f.data.slice(0)) }); c.enqueue(f); } })).pipeTo(writable); };`;
    const worker = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })));
    window.__frames = {};
    worker.onmessage = (ev) => (window.__frames[ev.data.mid] ??= []).push(btoa(String.fromCharCode(...ev.data.data)));
    const Native = window.RTCPeerConnection;
    window.RTCPeerConnection = class extends Native {
      constructor(...args) {
        super(...args);
        this.addEventListener('track', (ev) => {
          if (ev.track.kind === 'video') ev.receiver.transform = new RTCRtpScriptTransform(worker, { mid: ev.transceiver.mid });
        });
      }
    };
  });

// In the page: the frames recorded for participant `sid`'s video once there are 20 (see recordFrames).
const framesOf = (sid) => {
  const room = window.petrel.room;
  const pub = [...(room.participants.get(sid)?.tracks.values() ?? [])].find((t) => t.kind === 'video' && t.sfuTrack);
  const t = pub && room.subscriberPc.getTransceivers().find((x) => x.receiver.track === pub.sfuTrack);
  const frames = t && window.__frames[t.mid];
  return frames?.length >= 20 && frames;
};

// SFrame as docs/e2ee.md describes it, written again with Node's crypto: the
// frames the server forwarded must open with the passphrase's key for `identity`.
let base;
function openFrame(frame, identity) {
  base ??= pbkdf2Sync(PASSPHRASE, 'petrel-e2ee-v1', 100_000, 32, 'sha256');
  const sender = Buffer.from(hkdfSync('sha256', base, 'petrel-e2ee-v1', `sender ${identity}`, 32));
  const clear = frame[0] & 1 ? 3 : 10; // VP8 frame tag: P = 0 on a keyframe
  const c0 = frame[clear];
  let i = clear + 1;
  const field = (x, len) => {
    let v = 0;
    for (let j = 0; j < len; j++) v = v * 256 + frame[i + j];
    i += len;
    return v;
  };
  const kid = c0 & 0x80 ? field(0, ((c0 >> 4) & 7) + 1) : (c0 >> 4) & 7;
  const ctr = c0 & 0x08 ? field(0, (c0 & 7) + 1) : c0 & 7;
  const label = (text) => Buffer.concat([Buffer.from(text), Buffer.from(BigInt(kid).toString(16).padStart(16, '0'), 'hex'), Buffer.from([0, 4])]);
  const key = Buffer.from(hkdfSync('sha256', sender, Buffer.alloc(0), label('SFrame 1.0 Secret key '), 16));
  const nonce = Buffer.from(hkdfSync('sha256', sender, Buffer.alloc(0), label('SFrame 1.0 Secret salt '), 12));
  const c = Buffer.from(BigInt(ctr).toString(16).padStart(16, '0'), 'hex');
  for (let j = 0; j < 8; j++) nonce[4 + j] ^= c[j];
  const d = createDecipheriv('aes-128-gcm', key, nonce);
  d.setAAD(frame.subarray(0, i));
  d.setAuthTag(frame.subarray(frame.length - 16));
  const body = Buffer.concat([d.update(frame.subarray(i, frame.length - 16)), d.final()]);
  return { kid, ctr, clear, sealed: frame.subarray(i, frame.length - 16), body };
}

test('E2EE: Chromium and Firefox decode each other through the SFU; a wrong key decodes nothing and says so; the server forwards and records ciphertext', { timeout: 150_000 }, () =>
  scenario('e2ee', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const firefox = own(await launchFirefox());
    const chrome = watch(new Participant('chrome', await chromium.newPage()));
    const fox = watch(new Participant('fox', await firefox.newPage()));
    await chrome.join(server.base, await server.token('e2ee', 'chrome'), { e2ee: PASSPHRASE, simulcast: true });
    await fox.join(server.base, await server.token('e2ee', 'fox'), { e2ee: PASSPHRASE });
    for (const p of [chrome, fox]) {
      assert.equal(await p.page.evaluate(() => window.petrel.room.e2ee.api), 'script', `${p.label} uses RTCRtpScriptTransform`);
      assert.equal(await p.page.evaluate(() => document.getElementById('e2ee-badge').hidden), false, `${p.label} shows the E2EE badge`);
    }

    // Each decodes the other's encrypted video and audio (with the tone's energy).
    await chrome.seesVideoOf(fox);
    await fox.seesVideoOf(chrome);
    const rec = await server.admin('/v1/admin/rooms/e2ee/recording', { method: 'POST' });
    for (const p of [chrome, fox]) {
      const [a, b] = await expectGrowth(`${p.label}'s decrypted media`, () => media(p), { framesDecoded: 10, audioPackets: 20, samples: 10_000 });
      assert.ok(b.energy > a.energy, `${p.label} hears sound (audio energy ${a.energy} -> ${b.energy})`);
      const s = await e2eeStats(p);
      assert.ok(s.totals.encrypted > 50 && s.totals.decrypted > 50, `${p.label} encrypts and decrypts: ${JSON.stringify(s)}`);
    }

    // A simulcast layer switch under E2EE: fox asks for chrome's low layer and still decodes.
    const videoSid = await fox.page.evaluate((sid) =>
      [...window.petrel.room.participants.get(sid).tracks.values()].find((t) => t.kind === 'video').sid, chrome.sid);
    const before = (await fox.seesVideoOf(chrome)).w;
    await fox.page.evaluate((sid) => window.petrel.room.updateTrackSettings(sid, { quality: 'low' }), videoSid);
    const low = await waitFor(fox.page, "chrome's low layer", ([sid, w]) => {
      const v = document.querySelector(`.tile[data-sid="${sid}"] video`);
      return v.videoWidth > 0 && v.videoWidth < w && v.videoWidth;
    }, [chrome.sid, before], 20_000);
    await expectGrowth('fox decoding the low layer', () => media(fox), { framesDecoded: 10 });
    assert.ok(low < before, `low layer ${low} < ${before}`);

    // The wrong key, no key at all, and the right key through Chromium's older
    // encoded-streams API (all subscribe only) join together.
    const wrong = watch(new Participant('wrong', await chromium.newPage()));
    const plain = watch(new Participant('plain', await chromium.newPage()));
    const streams = watch(new Participant('streams', await chromium.newPage()));
    await recordFrames(plain.page);
    await Promise.all([
      streams.join(server.base, await server.token('e2ee', 'streams', ['--publish=false']), { e2ee: PASSPHRASE, e2eeTransform: 'streams', tracks: 0 }),
      wrong.join(server.base, await server.token('e2ee', 'wrong', ['--publish=false']), { e2ee: 'not the passphrase', tracks: 0 }),
      plain.join(server.base, await server.token('e2ee', 'plain', ['--publish=false']), { tracks: 0 }),
    ]);
    // The wrong key: nothing decodes, and both tiles say why.
    for (const other of [chrome, fox]) {
      const text = await waitFor(wrong.page, `the "cannot decrypt" state on ${other.label}'s tile`,
        (sid) => document.querySelector(`.tile[data-sid="${sid}"] .e2ee-error`)?.textContent, other.sid);
      assert.match(text, /Cannot decrypt: wrong encryption key/);
    }
    // Encoded streams: both publishers decode there, with no error on the tiles.
    assert.equal(await streams.page.evaluate(() => window.petrel.room.e2ee.api), 'streams');
    await streams.seesVideoOf(chrome);
    await streams.seesVideoOf(fox);
    await expectGrowth('video decrypted through encoded streams', () => media(streams), { framesDecoded: 20, audioPackets: 20 });
    assert.equal(await streams.page.evaluate(() => document.querySelectorAll('.e2ee-error').length), 0);

    // No key: the browser's decoder refuses what the server forwards (libvpx may
    // take the odd sealed keyframe, whose header is in the clear, for a picture).
    const frames = (await waitFor(plain.page, "chrome's forwarded frames", framesOf, chrome.sid)).map((b) => Buffer.from(b, 'base64'));
    const pl = await plain.page.evaluate(async () => {
      const o = { received: 0, decoded: 0 };
      (await window.petrel.room.subscriberPc.getStats()).forEach((s) => {
        if (s.type === 'inbound-rtp' && s.kind === 'video') (o.received += s.framesReceived ?? 0), (o.decoded += s.framesDecoded ?? 0);
      });
      return o;
    });
    assert.ok(pl.received >= 20 && pl.decoded * 10 < pl.received, `a page without the key decodes (almost) none of the video it receives: ${JSON.stringify(pl)}`);

    const w = await media(wrong);
    assert.equal(w.framesDecoded, 0, 'the wrong key decodes no video');
    const ws = await e2eeStats(wrong);
    assert.equal(ws.totals.decrypted, 0);
    assert.ok(ws.totals.failed > 20, `frames refused: ${JSON.stringify(ws)}`);
    assert.ok(w.audioPackets > 0, 'audio did reach the wrong key (and was refused)');

    // What the server forwarded: after the clear VP8 bytes, an SFrame header and
    // AES-GCM ciphertext that opens only with the passphrase's key for chrome.
    let keyframes = 0;
    for (const f of frames) {
      const o = openFrame(f, chrome.identity);
      assert.equal(o.kid, 0);
      if (o.clear === 10) keyframes++;
      assert.notDeepEqual(o.sealed.subarray(0, 16), o.body.subarray(0, 16), 'the payload is not in the clear');
      assert.throws(() => openFrame(f, fox.identity), /authenticate/, "fox's key does not open chrome's frames");
    }
    assert.ok(frames.length >= 20);
    assert.ok(keyframes >= 1 || frames.every((f) => f[0] & 1), 'keyframes are told apart by their clear frame tag');

    // The room's recording holds the frames as the server forwarded them:
    // each video track's SFrame ciphertext under its publisher's key, nothing
    // a player could decode without it.
    await server.admin('/v1/admin/rooms/e2ee/recording', { method: 'DELETE' });
    const res = await server.adminFetch(`/v1/admin/recordings/${rec.id}/export`);
    assert.equal(res.status, 200);
    const file = join(dir, 'e2ee.mp4');
    writeFileSync(file, Buffer.from(await res.arrayBuffer()));
    const owners = [];
    for (const v of [0, 1]) {
      const ivf = join(dir, `v${v}.ivf`);
      execFileSync('ffmpeg', ['-nostdin', '-v', 'error', '-y', '-i', file, '-map', `0:v:${v}`, '-c', 'copy', '-f', 'ivf', ivf]);
      const recorded = ivfFrames(readFileSync(ivf));
      assert.ok(recorded.length >= 30, `recorded video track ${v}: ${recorded.length} frames`);
      const owner = [chrome, fox].find((p) => { try { openFrame(recorded[0], p.identity); return true; } catch { return false; } });
      assert.ok(owner, `recorded video track ${v}: its first frame opens with neither publisher's key`);
      owners.push(owner.label);
      // A frame the recorder got incomplete (a packet lost on a loaded host)
      // does not authenticate; the others open, and none is in the clear.
      let opened = 0;
      for (const f of recorded) {
        let o;
        try { o = openFrame(f, owner.identity); } catch { continue; }
        opened++;
        assert.notDeepEqual(o.sealed.subarray(0, 16), o.body.subarray(0, 16), 'a recorded payload is in the clear');
      }
      console.log(`recorded video track ${v}: ${opened} of ${recorded.length} frames open`);
      assert.ok(opened >= 0.9 * recorded.length, `recorded video track ${v}: ${opened} of ${recorded.length} frames open with ${owner.label}'s key`);
    }
    assert.deepEqual(owners.sort(), ['chrome', 'fox'], 'the recording has both publishers\' video');

    // Ratchet: chrome's next key derives from its current one; fox follows by itself.
    assert.equal(await chrome.page.evaluate(() => window.petrel.room.e2ee.ratchetKey()), 1);
    await expectGrowth("fox decoding chrome's ratcheted frames", () => media(fox), { framesDecoded: 10 });
    // Rotation: chrome sends under a new key (index 7) that fox does not have yet,
    // so fox's tile says so; once fox is given it, the tile clears and video decodes.
    await chrome.page.evaluate(() => window.petrel.room.e2ee.setKey('the rotated passphrase', 7));
    const noKey = await waitFor(fox.page, "the no-key state on chrome's tile",
      (sid) => document.querySelector(`.tile[data-sid="${sid}"] .e2ee-error`)?.textContent, chrome.sid);
    assert.match(noKey, /Cannot decrypt: no key/);
    await fox.page.evaluate(() => window.petrel.room.e2ee.setKey('the rotated passphrase', 7, { send: false }));
    await waitFor(fox.page, "chrome's tile to clear", (sid) => !document.querySelector(`.tile[data-sid="${sid}"] .e2ee-error`), chrome.sid);
    await expectGrowth('fox decoding chrome under the rotated key', () => media(fox), { framesDecoded: 10 });
    assert.equal((await e2eeStats(chrome)).sendIndex, 7);
  }, { args: ['--recording-dir', join(dir, 'rec'), '--recording-segment', '2s'] }));
