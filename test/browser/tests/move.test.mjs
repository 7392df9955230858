import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, expectGrowth, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

test('the server API moves a participant to another room: the SDK joins it and republishes', { timeout: 120_000 }, () =>
  scenario('move', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const alice = watch(new Participant('alice', await chromium.newPage()));
    const bob = watch(new Participant('bob', await chromium.newPage()));
    const carol = watch(new Participant('carol', await chromium.newPage()));
    await alice.join(server.base, await server.token('before', 'alice'));
    await bob.join(server.base, await server.token('before', 'bob'));
    await carol.join(server.base, await server.token('after', 'carol'));
    await bob.seesVideoOf(alice);

    await alice.page.evaluate(() => {
      window.__events = [];
      window.petrel.room.on('roomMoved', (room) => window.__events.push(`roomMoved ${room}`));
      for (const e of ['reconnected', 'disconnected']) window.petrel.room.on(e, () => window.__events.push(e));
    });
    await server.admin('/v1/admin/rooms/before/participants/alice/move', { method: 'POST', body: { room: 'after' } });
    const events = await waitFor(alice.page, 'alice to join the other room', () =>
      window.__events.includes('reconnected') && window.petrel.room.localTracks.size === 2 && window.__events);
    assert.deepEqual(events, ['roomMoved after', 'reconnected']);
    assert.equal(await alice.page.evaluate(() => window.petrel.room.room.name), 'after');
    await waitFor(alice.page, 'the app to show the new room', () => document.getElementById('room-name').textContent === 'after');
    const oldSid = alice.sid;
    alice.sid = await alice.page.evaluate(() => window.petrel.room.localParticipant.sid);

    // Alice and carol see each other; bob no longer sees alice, and alice no longer bob.
    await carol.seesVideoOf(alice);
    await alice.seesVideoOf(carol);
    await waitFor(bob.page, "alice's tile to leave bob's room", (sid) => !document.querySelector(`.tile[data-sid="${sid}"]`), oldSid);
    await waitFor(alice.page, "bob's tile to leave alice's page", (sid) => !document.querySelector(`.tile[data-sid="${sid}"]`), bob.sid);
    await expectGrowth("alice's video at carol", () => carol.inbound(), { framesDecoded: 10 });
    const inBefore = await server.admin('/v1/admin/rooms/before/participants');
    assert.deepEqual(inBefore.map((p) => p.identity), ['bob']);
  }));
