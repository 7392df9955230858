import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

// Going back up exercises trackDemand: after quality "low" the publisher turns its
// upper encodings off, and "high" must turn them on again.
test('simulcast: the viewer gets the layer its quality asks for, down and up again', { timeout: 120_000 }, () =>
  scenario('simulcast', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const sender = watch(new Participant('sender', await chromium.newPage()));
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    await sender.page.goto(`${server.base}/?${new URLSearchParams({ token: await server.token('sim', 'sender'), simulcast: '1', p2p: '0' })}`);
    await waitFor(sender.page, 'sender to publish', () => window.petrel.room?.localTracks.size === 2);
    sender.sid = await sender.page.evaluate(() => window.petrel.room.localParticipant.sid);
    await viewer.join(server.base, await server.token('sim', 'viewer'));
    await viewer.seesVideoOf(sender);

    const videoSid = await viewer.page.evaluate(
      (sid) => [...window.petrel.room.participants.get(sid).tracks.values()].find((t) => t.kind === 'video' && t.info.simulcast)?.sid,
      sender.sid,
    );
    assert.ok(videoSid, 'the camera track is announced as simulcast');
    // The size the viewer's tile shows follows the quality it asks for. Relative
    // check: under CPU load Chrome scales or drops its top layers.
    const widthAt = (quality, atLeast, atMost) =>
      viewer.page
        .evaluate(([sid, q]) => window.petrel.room.updateTrackSettings(sid, { quality: q }), [videoSid, quality])
        .then(() =>
          waitFor(viewer.page, `a ${quality} layer (width ${atLeast}..${atMost})`, (c) => {
            const w = document.querySelector(`.tile[data-sid="${c.sid}"] video`).videoWidth;
            return w >= c.atLeast && w <= c.atMost && w;
          }, { sid: sender.sid, atLeast, atMost }, 15_000),
        );
    const low = await widthAt('low', 1, 400);
    const high = await widthAt('high', low * 2, 4096);
    assert.ok(high >= low * 2, `high ${high} vs low ${low}`);
  }));

test('screen share: a second tile appears at the other side and goes with it', { timeout: 120_000 }, () =>
  scenario('screen', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const sharer = watch(new Participant('sharer', await chromium.newPage()));
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    await sharer.join(server.base, await server.token('screen', 'sharer'));
    await viewer.join(server.base, await server.token('screen', 'viewer'));
    await viewer.seesVideoOf(sharer);

    await sharer.page.click('#screen');
    const screenTile = `.tile[data-sid="${sharer.sid}/screen"] video`;
    await waitFor(viewer.page, 'the screen tile', (sel) => document.querySelector(sel)?.videoWidth > 0, screenTile);
    assert.equal(await sharer.page.textContent('#screen'), 'Stop sharing');
    assert.match(await viewer.page.textContent(`.tile[data-sid="${sharer.sid}/screen"] .label`), /sharer \(screen\)/);
    // The camera still plays next to the screen.
    await viewer.seesVideoOf(sharer);

    await sharer.page.click('#screen');
    await waitFor(viewer.page, 'the screen tile to go', (sel) => !document.querySelector(sel), screenTile);
    assert.equal(await sharer.page.evaluate(() => window.petrel.room.localTracks.size), 2);
  }));
