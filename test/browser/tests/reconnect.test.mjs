import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, expectGrowth, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

// What identifies the session and its ICE generation on both peer connections.
const snapshot = () => {
  const room = window.petrel.room;
  const ufrag = (sdp) => sdp?.match(/a=ice-ufrag:(\S+)/)?.[1];
  return {
    sid: room.localParticipant.sid,
    tracks: [...room.localTracks.keys()].sort(),
    publisherUfrag: ufrag(room.publisherPc.localDescription?.sdp),
    subscriberUfrag: ufrag(room.subscriberPc.remoteDescription?.sdp),
  };
};

test('a dropped signaling socket is resumed with an ICE restart, media keeps flowing', { timeout: 120_000 }, () =>
  scenario('reconnect', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const alice = watch(new Participant('alice', await chromium.newPage()));
    const bob = watch(new Participant('bob', await chromium.newPage()));
    await alice.join(server.base, await server.token('resume', 'alice'));
    await bob.join(server.base, await server.token('resume', 'bob'));
    await alice.seesVideoOf(bob);
    await bob.seesVideoOf(alice);

    const before = await alice.page.evaluate(snapshot);
    await bob.page.evaluate(() => {
      window.__left = [];
      window.petrel.room.on('participantLeft', (p) => window.__left.push(p.identity));
    });
    await alice.page.evaluate(() => {
      window.__events = [];
      for (const e of ['reconnecting', 'reconnected', 'disconnected']) window.petrel.room.on(e, () => window.__events.push(e));
      window.petrel.room.simulateSignalLoss();
    });
    const events = await waitFor(alice.page, 'alice to resume', () =>
      window.__events.includes('reconnected') && window.petrel.room.state === 'connected' && window.__events);
    assert.deepEqual(events, ['reconnecting', 'reconnected']);

    // Same participant and tracks; both connections went through an ICE restart.
    const after = await waitFor(alice.page, 'both ICE restarts', (b) => {
      const s = (0, eval)(`(${b.fn})`)();
      return s.publisherUfrag !== b.before.publisherUfrag && s.subscriberUfrag !== b.before.subscriberUfrag && s;
    }, { fn: snapshot.toString(), before });
    assert.equal(after.sid, before.sid);
    assert.deepEqual(after.tracks, before.tracks);

    await waitFor(alice.page, 'ICE connected again', () =>
      ['connected', 'completed'].includes(window.petrel.room.publisherPc.iceConnectionState) &&
      ['connected', 'completed'].includes(window.petrel.room.subscriberPc.iceConnectionState));
    for (const [who, p] of [['alice', alice], ['bob', bob]]) {
      await expectGrowth(`${who}'s video after resume`, () => p.inbound(), { framesDecoded: 10 });
    }
    assert.deepEqual(await bob.page.evaluate(() => window.__left), [], 'bob never saw alice leave');

    await bob.collectData();
    await alice.page.evaluate(() => window.petrel.room.sendData('still here'));
    await waitFor(bob.page, 'a data message after resume', () => window.__data.some((m) => m.text === 'still here'));

    // An ICE restart without losing the socket (a network change): new ICE
    // credentials on both connections, and bob keeps seeing alice.
    await alice.page.evaluate(() => window.petrel.room.restartIce());
    await waitFor(alice.page, 'both ICE restarts again', (b) => {
      const s = (0, eval)(`(${b.fn})`)();
      return s.publisherUfrag !== b.before.publisherUfrag && s.subscriberUfrag !== b.before.subscriberUfrag && s;
    }, { fn: snapshot.toString(), before: after });
    await expectGrowth("alice's video at bob after an ICE restart", () => bob.inbound(), { framesDecoded: 10 });
    await expectGrowth("bob's video at alice after an ICE restart", () => alice.inbound(), { framesDecoded: 10 });
  }));

test('a participant the server no longer knows joins again and republishes', { timeout: 120_000 }, () =>
  scenario('full-reconnect', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const alice = watch(new Participant('alice', await chromium.newPage()));
    const bob = watch(new Participant('bob', await chromium.newPage()));
    await alice.join(server.base, await server.token('rejoin', 'alice'));
    await bob.join(server.base, await server.token('rejoin', 'bob'));
    await bob.seesVideoOf(alice);
    const oldSid = alice.sid;

    await alice.page.evaluate(() => {
      window.__events = [];
      for (const e of ['reconnecting', 'reconnected', 'disconnected']) window.petrel.room.on(e, () => window.__events.push(e));
      window.petrel.room.simulateSignalLoss({ fullReconnect: true });
    });
    const events = await waitFor(alice.page, 'alice to rejoin', () =>
      window.__events.includes('reconnected') && window.petrel.room.localTracks.size === 2 && window.__events);
    assert.deepEqual(events, ['reconnecting', 'reconnected']);
    alice.sid = await alice.page.evaluate(() => window.petrel.room.localParticipant.sid);
    assert.notEqual(alice.sid, oldSid, 'a new participant');

    // Bob sees the new alice (the old one is gone), and alice sees bob on her new connections.
    await bob.seesVideoOf(alice);
    await waitFor(bob.page, "the old alice's tile to go", (sid) => !document.querySelector(`.tile[data-sid="${sid}"]`), oldSid);
    await alice.seesVideoOf(bob);
    await expectGrowth("alice's video at bob", () => bob.inbound(), { framesDecoded: 10 });
    await expectGrowth("bob's video at alice", () => alice.inbound(), { framesDecoded: 10 });
  }));
