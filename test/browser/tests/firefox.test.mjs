import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium, launchFirefox } from '../lib/browsers.mjs';
import { Participant, expectGrowth, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

test('Firefox ESR and Chromium in one room decode each other', { timeout: 120_000 }, () =>
  scenario('firefox-chromium', async ({ server, own, watch }) => {
    const firefox = own(await launchFirefox());
    const chromium = own(await launchChromium());
    const fox = watch(new Participant('fox', await firefox.newPage()));
    const chrome = watch(new Participant('chrome', await chromium.newPage()));
    await fox.join(server.base, await server.token('mixed', 'fox'));
    await chrome.join(server.base, await server.token('mixed', 'chrome'));

    await fox.seesVideoOf(chrome);
    await chrome.seesVideoOf(fox);
    for (const [who, p] of [['firefox', fox], ['chromium', chrome]]) {
      await expectGrowth(`${who}'s media`, () => p.inbound(), { framesDecoded: 10, audioPackets: 20 });
    }

    // The room knows Firefox's tracks by the sids Firefox was given (Firefox's
    // SDP names its tracks by ids of its own), so muting one reaches the others.
    const local = await fox.page.evaluate(() => [...window.petrel.room.localTracks.keys()].sort());
    const seen = await chrome.page.evaluate((sid) => [...window.petrel.room.participants.get(sid).tracks.keys()].sort(), fox.sid);
    assert.deepEqual(seen, local, "chromium sees firefox's tracks under the sids firefox holds");
    const video = await fox.page.evaluate(() => [...window.petrel.room.localTracks.values()].find((t) => t.kind === 'video').sid);
    await fox.page.evaluate((sid) => window.petrel.room.muteTrack(sid, true), video);
    await waitFor(chrome.page, "firefox's video muted", ([p, t]) => window.petrel.room.participants.get(p).tracks.get(t)?.info.muted === true, [fox.sid, video]);

    await chrome.collectData();
    await fox.collectData();
    await fox.page.evaluate(() => window.petrel.room.sendData('from firefox'));
    await chrome.page.evaluate(() => window.petrel.room.sendData(new Uint8Array([9, 8, 7]), { topic: 'bin' }));
    const got = await waitFor(chrome.page, 'the message from firefox', () => window.__data.length && window.__data);
    assert.equal(got[0].text, 'from firefox');
    assert.equal(got[0].from, fox.identity);
    const atFox = await waitFor(fox.page, 'the binary message from chromium', () => window.__data.length && window.__data);
    assert.deepEqual({ bytes: atFox[0].bytes, topic: atFox[0].topic, from: atFox[0].from }, { bytes: [9, 8, 7], topic: 'bin', from: chrome.identity });
  }));
