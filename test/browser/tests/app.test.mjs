import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, expectGrowth, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

test('dev mode: join through the form, see names, mute shows on the other side', { timeout: 120_000 }, () =>
  scenario('app-dev', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const carol = watch(new Participant('carol', await chromium.newPage()));
    const dave = watch(new Participant('dave', await chromium.newPage()));

    // Carol types into the form; the page fetches a dev token.
    await carol.page.goto(`${server.base}/?p2p=0`);
    await carol.page.fill('input[name=room]', 'lobby');
    await carol.page.fill('input[name=name]', 'Carol');
    await carol.page.click('#join-form button');
    await waitFor(carol.page, 'carol to publish', () => window.petrel.room?.localTracks.size === 2);
    assert.equal(await carol.page.isVisible('#join-form'), false, 'the form is gone once joined');
    assert.equal(await carol.page.textContent('#room-name'), 'lobby');
    carol.sid = await carol.page.evaluate(() => window.petrel.room.localParticipant.sid);

    // Dave joins straight from a link.
    await dave.page.goto(`${server.base}/?room=lobby&name=Dave&autojoin=1&p2p=0`);
    await waitFor(dave.page, 'dave to publish', () => window.petrel.room?.localTracks.size === 2);
    dave.sid = await dave.page.evaluate(() => window.petrel.room.localParticipant.sid);

    assert.equal((await carol.seesVideoOf(dave)).label, 'Dave');
    assert.equal((await dave.seesVideoOf(carol)).label, 'Carol');

    const daveLabel = `.tile[data-sid="${dave.sid}"] .label`;
    await dave.page.click('#mic');
    await waitFor(dave.page, 'the mic button to say Unmute', () => document.getElementById('mic').textContent === 'Unmute');
    await waitFor(carol.page, "dave's tile to show muted", (sel) => document.querySelector(sel)?.classList.contains('mic-off'), daveLabel);
    await dave.page.click('#mic');
    await waitFor(carol.page, "dave's tile to show unmuted", (sel) => !document.querySelector(sel)?.classList.contains('mic-off'), daveLabel);

    // Switching the microphone publishes the other device; dave keeps hearing carol.
    const options = await carol.page.evaluate(() => [...document.querySelectorAll('#mic-select option')].map((o) => [o.value, o.textContent]));
    assert.ok(options.length >= 2, `fake microphones listed: ${JSON.stringify(options)}`);
    const [micId, micLabel] = options[options.length - 1];
    await carol.page.selectOption('#mic-select', micId);
    await waitFor(carol.page, 'the new microphone published', (label) =>
      [...window.petrel.room.localTracks.values()].some((t) => t.source === 'microphone' && t.track.label === label), micLabel);
    await expectGrowth("carol's new microphone at dave", () => dave.inbound(), { audioPackets: 20 });

    // A bad token gets the server's error on the form, not a silent failure.
    const eve = watch(new Participant('eve', await chromium.newPage()));
    await eve.page.goto(`${server.base}/?token=not-a-jwt&autojoin=1`);
    const error = await waitFor(eve.page, 'the join error', () => document.getElementById('join-error').textContent);
    assert.match(error, /^unauthorized: /);
    assert.equal(await eve.page.isVisible('#join-form'), true);

    // The readouts show live numbers.
    await waitFor(carol.page, 'a bitrate readout', () => /↓ [1-9]\d* kbps/.test(document.getElementById('bitrate').textContent));
    await waitFor(carol.page, 'a quality readout', () => document.getElementById('quality').dataset.q === 'excellent');
  }, { dev: true }));
