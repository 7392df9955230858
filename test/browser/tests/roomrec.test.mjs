// Room recording in the browsers: Firefox (a token with the record grant)
// starts recording a room where it talks with Chromium, then stops it; the
// export holds every track (ffprobe); a Chromium viewer opens the recording
// in the app (room recording/<id>), seeks and plays, and sees both
// participants' recorded video decode.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launchChromium, launchFirefox } from '../lib/browsers.mjs';
import { Participant, expectGrowth, waitFor, sleep } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
const dir = mkdtempSync(join(tmpdir(), 'petrel-roomrec-'));

test('room recording: recorded by a participant, exported with every track, played back in the app', { timeout: 180_000 }, () =>
  scenario('roomrec', async ({ server, own, watch }) => {
    const firefox = own(await launchFirefox());
    const chromium = own(await launchChromium());
    const fox = watch(new Participant('fox', await firefox.newPage()));
    const chrome = watch(new Participant('chrome', await chromium.newPage()));
    await fox.join(server.base, await server.token('talk', 'fox', ['--record']));
    await chrome.join(server.base, await server.token('talk', 'chrome'));
    await chrome.seesVideoOf(fox);
    await fox.seesVideoOf(chrome);

    // Without the grant: refused with the reason.
    const refused = await chrome.page.evaluate(() => window.petrel.room.startRecording().then(() => 'started', (e) => e.message));
    assert.match(refused, /record grant/);
    const rec = await fox.page.evaluate(() => window.petrel.room.startRecording());
    assert.equal(rec.room, 'talk');
    assert.equal(rec.startedBy, 'fox');
    await sleep(4000);
    const done = await fox.page.evaluate(() => window.petrel.room.stopRecording());
    assert.equal(done.active, false);

    const info = await server.admin(`/v1/admin/recordings/${rec.id}`);
    const who = info.tracks.filter((t) => t.ranges?.length).map((t) => `${t.identity}/${t.kind}`).sort();
    assert.deepEqual(who, ['chrome/audio', 'chrome/video', 'fox/audio', 'fox/video'], JSON.stringify(info.tracks));

    // The export: every track, as ffprobe reads it.
    const res = await server.adminFetch(`/v1/admin/recordings/${rec.id}/export`);
    assert.equal(res.status, 200);
    const file = join(dir, 'talk.mp4');
    writeFileSync(file, Buffer.from(await res.arrayBuffer()));
    const probe = JSON.parse(execFileSync('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_type,codec_name', '-of', 'json', file]).toString());
    const kinds = probe.streams.map((s) => s.codec_type).sort();
    assert.deepEqual(kinds, ['audio', 'audio', 'video', 'video'], JSON.stringify(probe.streams));

    // Playback in the app: the viewer joins recording/<id>; the timeline
    // talks to the recording's participant; each recorded participant gets a tile.
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    const token = await server.token(`recording/${rec.id}`, 'viewer');
    await viewer.page.goto(`${server.base}/?${new URLSearchParams({ token, name: 'viewer', autojoin: '1', p2p: '0' })}`);
    await waitFor(viewer.page, 'the recording timeline with its ranges', () => window.petrel?.timeline?.ranges?.length > 0, undefined, 30_000);
    const ranges = await viewer.page.evaluate(() => window.petrel.timeline.ranges);
    const mid = Math.round((ranges[0].from + ranges.at(-1).to) / 2);
    const r = await viewer.page.evaluate((t) => window.petrel.timeline.seek(t), mid);
    assert.equal(r.state, 'paused');
    const shown = () => [...document.querySelectorAll('.tile[data-sid^="recorded/"]')]
      .map((t) => `${t.dataset.sid}:${t.querySelector('video')?.videoWidth > 0}`).sort().join(',');
    await waitFor(viewer.page, 'both recorded participants shown after the seek',
      (s) => new Function(`return (${s})()`)() === 'recorded/chrome:true,recorded/fox:true', shown.toString(), 45_000);
    await viewer.page.evaluate(() => window.petrel.timeline.play(window.petrel.timeline.ranges[0].from));
    await expectGrowth('the played-back video', () => viewer.inbound(), { framesDecoded: 30, audioPackets: 20 });
    assert.equal(await viewer.page.evaluate(() => document.querySelector('.timeline').dataset.state), 'playing');
  }, { args: ['--recording-dir', join(dir, 'rec'), '--recording-segment', '2s'] }));
