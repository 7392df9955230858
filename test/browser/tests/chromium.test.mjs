import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, expectGrowth, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

test('two Chromium participants see, hear and message each other', { timeout: 120_000 }, () =>
  scenario('chromium-pair', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const alice = watch(new Participant('alice', await chromium.newPage()));
    const bob = watch(new Participant('bob', await chromium.newPage()));
    await alice.join(server.base, await server.token('pair', 'alice'));
    await bob.join(server.base, await server.token('pair', 'bob'));

    // Each tile shows the other's video under their name.
    const seenByAlice = await alice.seesVideoOf(bob);
    const seenByBob = await bob.seesVideoOf(alice);
    assert.match(seenByAlice.label, /bob/);
    assert.match(seenByBob.label, /alice/);

    for (const [who, p] of [['alice', alice], ['bob', bob]]) {
      const [, b] = await expectGrowth(`${who}'s media`, () => p.inbound(), { framesDecoded: 10, audioPackets: 20, samples: 1 });
      assert.equal(b.videoStreams, 1, `${who} receives one video stream: ${JSON.stringify(b)}`);
      assert.equal(b.audioStreams, 1, `${who} receives one audio stream: ${JSON.stringify(b)}`);
    }

    // Data messages, text and binary, each way, with the sender's identity.
    await alice.collectData();
    await bob.collectData();
    await alice.page.evaluate(async () => {
      await window.petrel.room.sendData('hello bob ✓', { topic: 'greeting' });
      await window.petrel.room.sendData(new Uint8Array([0, 1, 2, 127, 128, 254, 255]));
    });
    await bob.page.evaluate(() => window.petrel.room.sendData('hello alice', { reliable: true }));
    const atBob = await waitFor(bob.page, 'bob to receive 2 messages', () => window.__data.length >= 2 && window.__data);
    const atAlice = await waitFor(alice.page, 'alice to receive 1 message', () => window.__data.length >= 1 && window.__data);
    const text = atBob.find((m) => m.text !== undefined);
    const binary = atBob.find((m) => m.text === undefined);
    assert.deepEqual({ text: text?.text, topic: text?.topic, from: text?.from }, { text: 'hello bob ✓', topic: 'greeting', from: alice.identity });
    assert.deepEqual(binary?.bytes, [0, 1, 2, 127, 128, 254, 255]);
    assert.equal(binary?.from, alice.identity);
    assert.equal(atAlice[0].text, 'hello alice');
    assert.equal(atAlice[0].from, bob.identity);

    // The chat box: what alice types shows up in bob's message list.
    await alice.page.fill('#chat-form input', 'see you in the chat');
    await alice.page.click('#chat-form button');
    await waitFor(bob.page, 'the chat line at bob', () =>
      [...document.querySelectorAll('#messages li')].some((li) => li.textContent.includes('see you in the chat')));

    // Leaving removes the tile on the other side.
    await bob.page.click('#leave');
    await waitFor(alice.page, "bob's tile to go", (sid) => !document.querySelector(`.tile[data-sid="${sid}"]`), bob.sid);
  }));
