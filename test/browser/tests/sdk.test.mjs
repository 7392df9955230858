import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, expectGrowth, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

// Joins with the SDK directly (no app UI), publishing nothing, and records events.
async function joinWithSdk(p, base, token, opts) {
  await p.page.goto(`${base}/`);
  await p.page.evaluate(async ([token, opts]) => {
    const room = new window.petrel.Room();
    window.petrel.room = room;
    window.__events = [];
    window.__data = [];
    for (const e of ['trackPublished', 'trackSubscribed', 'trackUnsubscribed']) {
      room.on(e, (a, b) => window.__events.push({ e, sid: (b?.sid && a instanceof MediaStreamTrack ? b.sid : a.sid), kind: a.kind }));
    }
    room.on('trackSubscribed', (track) => {
      if (track.kind !== 'video') return;
      const v = document.createElement('video');
      v.id = 'sdk-video';
      v.muted = true;
      v.autoplay = true;
      v.srcObject = new MediaStream([track]);
      document.body.append(v);
    });
    room.on('dataReceived', (m) => window.__data.push({ text: m.text, reliable: m.reliable, from: m.from }));
    await room.connect(location.origin, token, { p2p: false, ...opts });
  }, [token, opts]);
  p.sid = await p.page.evaluate(() => window.petrel.room.localParticipant.sid);
}

test('SDK: selective subscription and addressed / lossy data messages', { timeout: 120_000 }, () =>
  scenario('sdk', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const alice = watch(new Participant('alice', await chromium.newPage()));
    const bob = watch(new Participant('bob', await chromium.newPage()));
    const carol = watch(new Participant('carol', await chromium.newPage()));
    await joinWithSdk(bob, server.base, await server.token('sdk', 'bob'), { autoSubscribe: false });
    await joinWithSdk(carol, server.base, await server.token('sdk', 'carol'), {});
    // Single-layer camera: this test is about selective subscription, and a third
    // participant would publish simulcast by default.
    await alice.join(server.base, await server.token('sdk', 'alice'), { simulcast: false });

    // Bob learns of alice's tracks but receives none until he asks.
    const published = await waitFor(bob.page, "alice's two tracks announced", () => {
      const pubs = window.__events.filter((x) => x.e === 'trackPublished');
      return pubs.length === 2 && pubs;
    });
    const video = published.find((x) => x.kind === 'video');
    await expectGrowth("carol's auto-subscribed video", () => carol.inbound(), { framesDecoded: 10 });
    assert.equal((await bob.inbound()).videoStreams, 0, 'bob receives no video before subscribing');
    assert.ok(!(await bob.page.evaluate(() => window.__events.some((x) => x.e === 'trackSubscribed'))));

    await bob.page.evaluate((sid) => window.petrel.room.subscribe(sid, true), video.sid);
    await waitFor(bob.page, 'the subscribed video to play', () => document.getElementById('sdk-video')?.videoWidth > 0);
    const [, b] = await expectGrowth("bob's chosen video", () => bob.inbound(), { framesDecoded: 10 });
    assert.equal(b.audioStreams, 0, 'audio was not asked for');
    const subscribed = await bob.page.evaluate(() => window.__events.filter((x) => x.e === 'trackSubscribed'));
    assert.deepEqual(subscribed.map((x) => [x.sid, x.kind]), [[video.sid, 'video']]);

    await bob.page.evaluate((sid) => window.petrel.room.subscribe(sid, false), video.sid);
    await waitFor(bob.page, 'trackUnsubscribed', (sid) => window.__events.some((x) => x.e === 'trackUnsubscribed' && x.sid === sid), video.sid);

    // A message addressed to bob reaches bob only: carol's first message is the broadcast after it.
    await alice.page.evaluate(async () => {
      await window.petrel.room.sendData('only for bob', { to: ['bob'] });
      await window.petrel.room.sendData('for everyone');
    });
    const atBob = await waitFor(bob.page, 'two messages at bob', () => window.__data.length >= 2 && window.__data);
    const atCarol = await waitFor(carol.page, 'the broadcast at carol', () => window.__data.length >= 1 && window.__data);
    assert.deepEqual(atBob.map((m) => m.text), ['only for bob', 'for everyone']);
    assert.equal(atCarol[0].text, 'for everyone');

    // The lossy channel delivers too (unordered, no retransmissions: one of several is enough).
    await alice.page.evaluate(async () => {
      for (let i = 0; i < 5; i++) await window.petrel.room.sendData(`lossy ${i}`, { reliable: false });
    });
    const lossy = await waitFor(carol.page, 'a lossy message', () => window.__data.find((m) => m.text?.startsWith('lossy')));
    assert.equal(lossy.reliable, false);
    assert.equal(lossy.from, 'alice');

    // Navigating away is leaving: carol's tile goes at once, not after the 20 s resume window.
    await waitFor(alice.page, "carol's tile", (sid) => !!document.querySelector(`.tile[data-sid="${sid}"]`), carol.sid);
    await carol.page.goto('about:blank');
    await waitFor(alice.page, "carol's tile to go", (sid) => !document.querySelector(`.tile[data-sid="${sid}"]`), carol.sid, 8_000);
  }));
