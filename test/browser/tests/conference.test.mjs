import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, expectGrowth, sleep, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

// Polls `sample` (per-participant frame counters) in windows of `windowMs` until one
// window shows `on` decoding (at least `min` frames) and `off` not at all.
async function onlyDecoding(what, sample, on, off, { min = 5, windowMs = 2_000, timeoutMs = 25_000 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  for (;;) {
    const a = await sample();
    await sleep(windowMs);
    const b = await sample();
    const grew = (sid) => (b[sid] ?? 0) - (a[sid] ?? 0);
    if (grew(on) >= min && grew(off) === 0) return;
    last = `${on.slice(0, 10)} +${grew(on)}, ${off.slice(0, 10)} +${grew(off)}`;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms (last window: ${last})`);
  }
}

// Last-N 1 at the viewer: only one other participant's video comes, and pinning
// (the tile's Pin button) decides which. Both others' microphones are muted so that
// speaker changes do not pick for us.
test('pin: with Last-N 1 the pinned participant keeps decoding, the other stops', { timeout: 120_000 }, () =>
  scenario('pin', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    const bob = watch(new Participant('bob', await chromium.newPage()));
    const carol = watch(new Participant('carol', await chromium.newPage()));
    await bob.join(server.base, await server.token('pin', 'bob'));
    await carol.join(server.base, await server.token('pin', 'carol'));
    await viewer.join(server.base, await server.token('pin', 'viewer'));
    await viewer.seesVideoOf(bob);
    await viewer.seesVideoOf(carol);
    for (const p of [bob, carol]) {
      await p.page.click('#mic');
      await waitFor(p.page, 'the mic muted', () => document.getElementById('mic').textContent === 'Unmute');
    }

    await viewer.page.evaluate(() => window.petrel.room.setLastN(1));
    const frames = () => viewer.framesByParticipant();

    await viewer.page.click(`.tile[data-sid="${bob.sid}"] .pin`);
    assert.equal(await viewer.page.textContent(`.tile[data-sid="${bob.sid}"] .pin`), 'Unpin');
    assert.ok(await viewer.page.evaluate((sid) => document.querySelector(`.tile[data-sid="${sid}"]`).classList.contains('pinned'), bob.sid));
    await onlyDecoding('bob pinned: bob decodes, carol stops', frames, bob.sid, carol.sid);

    // Move the pin: carol's video comes back, bob's stops.
    await viewer.page.click(`.tile[data-sid="${bob.sid}"] .pin`);
    await viewer.page.click(`.tile[data-sid="${carol.sid}"] .pin`);
    await onlyDecoding('carol pinned: carol decodes, bob stops', frames, carol.sid, bob.sid);
    await viewer.seesVideoOf(carol);

    // The tile readout shows the layer and bitrate received.
    const readout = await waitFor(viewer.page, "carol's tile readout", (sid) => {
      const t = document.querySelector(`.tile[data-sid="${sid}"] .readout`)?.textContent ?? '';
      return /^\d+×\d+ \d+fps \d/.test(t) && !t.startsWith('0×') && t;
    }, carol.sid);
    assert.match(readout, /kbps|Mbps/);
  }));

const mediaPath = (p) => p.page.evaluate(() => window.petrel.room.mediaPath);

// A 1:1 call goes direct; a third participant brings both back to the server.
test('p2p: two participants go direct, a third brings them back to the SFU', { timeout: 120_000 }, () =>
  scenario('p2p', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const alice = watch(new Participant('alice', await chromium.newPage()));
    const bob = watch(new Participant('bob', await chromium.newPage()));
    await alice.join(server.base, await server.token('p2p', 'alice'), { p2p: true });
    await bob.join(server.base, await server.token('p2p', 'bob'), { p2p: true });

    for (const p of [alice, bob]) await waitFor(p.page, `${p.label} on the direct path`, () => window.petrel.room.mediaPath === 'p2p', undefined, 25_000);
    for (const [p, other] of [[alice, bob], [bob, alice]]) {
      await p.seesVideoOf(other);
      await expectGrowth(`${p.label}'s direct media`, () => p.inbound('directPc'), { framesDecoded: 10, audioPackets: 20 });
      assert.match(await p.page.textContent('#media-path'), /p2p/);
      // The tile's readout is about the stream that shows: the direct one.
      await waitFor(p.page, `${other.label}'s tile readout from the direct path`, (sid) =>
        / p2p$/.test(document.querySelector(`.tile[data-sid="${sid}"] .readout`)?.textContent ?? ''), other.sid);
    }
    // The SFU connection stays up but idle: nothing is encoded for it.
    await sleep(1_000);
    const before = await alice.framesEncodedToSfu();
    await sleep(2_000);
    assert.equal(await alice.framesEncodedToSfu(), before, 'alice encodes nothing for the SFU while direct');
    assert.equal(await alice.page.evaluate(() => window.petrel.room.publisherPc.connectionState), 'connected');

    const carol = watch(new Participant('carol', await chromium.newPage()));
    await carol.join(server.base, await server.token('p2p', 'carol'), { p2p: true });
    for (const p of [alice, bob]) await waitFor(p.page, `${p.label} back on the SFU`, () => window.petrel.room.mediaPath === 'sfu' && !window.petrel.room.directPc, undefined, 15_000);
    // Each decodes the other's camera from the subscriber connection again.
    for (const [p, other] of [[alice, bob], [bob, alice]]) {
      const sample = () => p.framesByParticipant().then((f) => ({ other: f[other.sid] ?? 0 }));
      await expectGrowth(`${p.label} decoding ${other.label} through the SFU`, sample, { other: 20 });
    }
    for (const [p, other] of [[alice, bob], [bob, alice], [carol, alice], [carol, bob]]) await p.seesVideoOf(other);
    await expectGrowth("carol's media", () => carol.inbound(), { framesDecoded: 20 });
    assert.equal(await mediaPath(carol), 'sfu');
  }));

// Adaptive subscription: a tile moved off-screen stops receiving (the SDK sends
// paused), and receives again when it is back, at the size it is shown.
test('adaptive subscription: an off-screen tile is paused, and resumes on screen', { timeout: 120_000 }, () =>
  scenario('adaptive', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const sender = watch(new Participant('sender', await chromium.newPage()));
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    await sender.join(server.base, await server.token('adaptive', 'sender'));
    await viewer.join(server.base, await server.token('adaptive', 'viewer'));
    await viewer.seesVideoOf(sender);
    const frames = () => viewer.framesByParticipant().then((f) => ({ sender: f[sender.sid] ?? 0 }));
    await expectGrowth('video on screen', frames, { sender: 10 });

    const tile = `.tile[data-sid="${sender.sid}"]`;
    await viewer.page.evaluate((sel) => Object.assign(document.querySelector(sel).style, { position: 'fixed', top: '-5000px' }), tile);
    // Paused: after a moment no frame arrives any more.
    await sleep(2_500);
    const a = await frames();
    await sleep(2_000);
    const b = await frames();
    assert.equal(b.sender - a.sender, 0, 'no frames while the tile is off-screen');

    await viewer.page.evaluate((sel) => Object.assign(document.querySelector(sel).style, { position: '', top: '' }), tile);
    await expectGrowth('video back on screen', frames, { sender: 10 });
  }));
