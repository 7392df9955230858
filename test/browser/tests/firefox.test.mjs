import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium, launchFirefox } from '../lib/browsers.mjs';
import { Participant, growth } from '../lib/page.mjs';
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
      const [a, b] = await growth(() => p.inbound());
      assert.ok(b.framesDecoded > a.framesDecoded + 10, `${who} decodes video: ${a.framesDecoded} -> ${b.framesDecoded}`);
      assert.ok(b.audioPackets > a.audioPackets + 20, `${who} receives audio: ${a.audioPackets} -> ${b.audioPackets}`);
    }

    await chrome.collectData();
    await fox.page.evaluate(() => window.petrel.room.sendData('from firefox'));
    const got = await chrome.page.evaluate(async () => {
      for (let i = 0; i < 40 && !window.__data.length; i++) await new Promise((r) => setTimeout(r, 250));
      return window.__data;
    });
    assert.equal(got[0]?.text, 'from firefox');
  }));
