import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, sleep, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { startShaper, throughShaper } from '../lib/shaper.mjs';

// What a viewer shows of `pub`: the decoded width and the tile readout.
const shown = (viewer, pub) =>
  viewer.page.evaluate((sid) => {
    const tile = document.querySelector(`.tile[data-sid="${sid}"]`);
    const v = tile?.querySelector('video');
    return { width: v?.videoWidth ?? 0, readout: tile?.querySelector('.readout')?.textContent ?? '' };
  }, pub.sid);

// Takes the viewer's tile of `pub` out of adaptive subscription and asks for the
// top layer, so that what it gets is decided by its bandwidth alone.
const wantHigh = (viewer, pub) =>
  viewer.page.evaluate(async (sid) => {
    const room = window.petrel.room;
    const video = document.querySelector(`.tile[data-sid="${sid}"] video`);
    room.unobserveVideo(video);
    const track = [...room.participants.get(sid).tracks.values()].find((t) => t.kind === 'video');
    await room.updateTrackSettings(track.sid, { quality: 'high' });
  }, pub.sid);

const frames = (viewer, pub) => viewer.framesByParticipant().then((f) => f[pub.sid] ?? 0);

// Watches the frames a viewer decodes of `pub` until stop(): how many, and the
// longest time without a new one (a freeze, as a user would see it).
function monitor(viewer, pub) {
  let running = true;
  const started = Date.now();
  const done = (async () => {
    const first = await frames(viewer, pub);
    let prev = first;
    let lastGrowth = Date.now();
    let longestStall = 0;
    const stalls = []; // freezes over a second: how long, when they ended, the width after
    while (running) {
      await sleep(200);
      const n = await frames(viewer, pub).catch(() => prev);
      if (n > prev) {
        if (Date.now() - lastGrowth > 1000) stalls.push(`${Date.now() - lastGrowth} ms to +${Date.now() - started} ms at ${(await shown(viewer, pub)).width}px`);
        longestStall = Math.max(longestStall, Date.now() - lastGrowth);
        lastGrowth = Date.now();
        prev = n;
      }
    }
    longestStall = Math.max(longestStall, Date.now() - lastGrowth);
    return { decoded: prev - first, longestStall, stalls, ms: Date.now() - started };
  })();
  return { stop: () => ((running = false), done) };
}

async function watchDecoding(viewer, pub, ms) {
  const m = monitor(viewer, pub);
  await sleep(ms);
  return m.stop();
}

// Waits until the viewer decodes `pub` at a width `ok` accepts; returns it.
const widthUntil = (viewer, pub, what, ok, timeoutMs) =>
  waitFor(viewer.page, what, ([sid, src]) => {
    const w = document.querySelector(`.tile[data-sid="${sid}"] video`)?.videoWidth ?? 0;
    // eslint-disable-next-line no-new-func
    return w > 0 && new Function('w', `return ${src}`)(w) && w;
  }, [pub.sid, ok], timeoutMs);

// A viewer without a camera: only the publishers' cameras matter in these tests,
// and more encoders would only load the machine. The app joins with its
// microphone alone (join with { tracks: 1 }).
const noCamera = (p) =>
  p.page.addInitScript(() => {
    const gum = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
    navigator.mediaDevices.getUserMedia = (c) =>
      c?.video ? Promise.reject(new DOMException('no camera in this test', 'NotFoundError')) : gum(c);
  });

// One simulcast publisher, two viewers who ask for the top layer. The slow one
// reaches the server through a relay that passes 300 kbit/s toward it:
// the server's bandwidth estimate for it must bring it down to the low layer while
// the fast one keeps the top layer; when the limit rises the slow one climbs, and
// when it falls again it steps back down, decoding all along.
test('bandwidth: viewers behind different real limits get different layers and keep decoding', { timeout: 150_000 }, () =>
  scenario('bandwidth', async ({ server, own, watch }) => {
    const shaper = await startShaper({ target: server.turnPort, kbps: 300 });
    own({ close: () => shaper.close() });
    const chromium = own(await launchChromium());
    const sender = watch(new Participant('sender', await chromium.newPage()));
    const fast = watch(new Participant('fast', await chromium.newPage()));
    const slow = watch(new Participant('slow', await chromium.newPage()));
    await throughShaper(slow.page, server.turnPort, shaper.port);
    for (const v of [fast, slow]) await noCamera(v);

    await sender.join(server.base, await server.token('bw', 'sender'), { simulcast: true });
    await fast.join(server.base, await server.token('bw', 'fast'), { tracks: 1 });
    await slow.join(server.base, await server.token('bw', 'slow'), { relay: true, tracks: 1 });
    await fast.seesVideoOf(sender);
    await slow.seesVideoOf(sender);
    // Asked once video shows: before that the subscriber connection may not
    // have chosen its pair yet.
    const types = await slow.selectedCandidateTypes();
    assert.equal(types.subscriber?.local, 'relay', `the slow viewer's media must cross the shaper: ${JSON.stringify(types)}`);
    await wantHigh(fast, sender);
    await wantHigh(slow, sender);

    // Under the limit: the slow viewer settles on the quarter layer, the fast one
    // on a layer at least twice as wide (Chrome may scale its top layers down
    // under CPU load, hence relative).
    const slowLow = await widthUntil(slow, sender, 'the slow viewer on the low layer', 'w <= 400', 40_000);
    const fastHigh = await widthUntil(fast, sender, 'the fast viewer on a high layer', `w >= ${slowLow * 2}`, 20_000);
    assert.ok(shaper.stats().forwarded > 0, 'media crossed the shaper');
    const readout = await waitFor(slow.page, 'the readout of the low layer', ([sid, w]) => {
      const t = document.querySelector(`.tile[data-sid="${sid}"] .readout`)?.textContent ?? '';
      return t.startsWith(`${w}×`) && t;
    }, [sender.sid, slowLow]);
    assert.match(readout, /kbps|Mbps/);
    const [slowRun, fastRun] = await Promise.all([watchDecoding(slow, sender, 6_000), watchDecoding(fast, sender, 6_000)]);
    const steady = () => `slow ${JSON.stringify(slowRun)}, fast ${JSON.stringify(fastRun)}, shaper ${JSON.stringify(shaper.stats())}`;
    assert.ok(slowRun.decoded >= 30, `slow viewer decoded ${slowRun.decoded} frames in 6 s: ${steady()}`);
    assert.ok(fastRun.decoded >= 30, `fast viewer decoded ${fastRun.decoded} frames in 6 s: ${steady()}`);
    const [slowNow, fastNow] = [await shown(slow, sender), await shown(fast, sender)];
    assert.ok(slowNow.width <= 400, `the slow viewer stays on the low layer: ${slowNow.width}px, ${slowNow.readout}; ${steady()}`);
    assert.ok(fastNow.width >= slowLow * 2, `the fast viewer stays high: ${fastNow.width}px, ${fastNow.readout}; ${steady()}`);

    // The limit rises: the estimate grows (padding probes) and the slow viewer
    // climbs, without a freeze on the way.
    shaper.setRate(4_000);
    const switching = monitor(slow, sender);
    const t0 = Date.now();
    const up = await widthUntil(slow, sender, 'the slow viewer to climb', `w >= ${slowLow * 2}`, 45_000);
    const upMs = Date.now() - t0;
    // The limit falls again: back down at the next keyframe of the low layer.
    shaper.setRate(300);
    const t1 = Date.now();
    const down = await widthUntil(slow, sender, 'the slow viewer to step down again', 'w <= 400', 30_000);
    const downMs = Date.now() - t1;
    await sleep(3_000);
    const after = await switching.stop();
    let summary = `slow ${slowLow} -> ${up} (${upMs} ms) -> ${down} (${downMs} ms), fast ${fastHigh}; steady slow ${slowRun.decoded} frames/6 s, stall ${slowRun.longestStall} ms, fast ${fastRun.decoded} frames, stall ${fastRun.longestStall} ms; across the switches ${after.decoded} frames in ${after.ms} ms, longest stall ${after.longestStall} ms; shaper ${JSON.stringify(shaper.stats())}`;
    // What the slow viewer's browser saw, to tell a freeze's cause (loss,
    // a missing keyframe, the sender) when this fails.
    const inbound = await slow.page.evaluate(async () => {
      const o = [];
      (await window.petrel.room.subscriberPc.getStats()).forEach((r) => {
        if (r.type === 'inbound-rtp' && r.kind === 'video') o.push({ nack: r.nackCount, pli: r.pliCount, lost: r.packetsLost, keyframes: r.keyFramesDecoded, freezes: r.freezeCount, decoded: r.framesDecoded });
      });
      return o;
    });
    summary += `; freezes over 1 s: steady slow [${slowRun.stalls}], fast [${fastRun.stalls}], switching [${after.stalls}]; slow inbound ${JSON.stringify(inbound)}`;
    console.log(`bandwidth: ${summary}`);
    // Across the switches the slow viewer keeps decoding at no less than a
    // third of its own steady frame rate (the sender's rate depends on how
    // loaded the machine is; a freeze shows as far fewer frames).
    const expected = (slowRun.decoded / 6_000) * after.ms;
    assert.ok(after.decoded >= expected / 3, `slow viewer decoded ${after.decoded} frames while switching up and down, expected about ${Math.round(expected)}: ${summary}`);
    // Steady, a stall of seconds is a freeze a user would notice. A tenfold drop
    // of the link strands the packets queued for the higher layer, and the low
    // layer starts at its next keyframe: a moment, not a frozen picture.
    for (const [who, r, limit] of [['slow', slowRun, 2_500], ['fast', fastRun, 2_500], ['slow across the switches', after, 4_000]]) {
      assert.ok(r.longestStall < limit, `${who}: ${r.longestStall} ms without a decoded frame: ${summary}`);
    }
  }));

// Pinning under a limit: one viewer behind 800 kbit/s, which carries one
// publisher's middle layer (about 350 kbit/s here) with the other's low one, but
// not two middle layers. The allocation serves the pinned publisher first, so
// moving the pin moves the better layer.
test('bandwidth: under a limit the pinned publisher gets the better layer', { timeout: 150_000 }, () =>
  scenario('bandwidth-pin', async ({ server, own, watch }) => {
    const shaper = await startShaper({ target: server.turnPort, kbps: 800 });
    own({ close: () => shaper.close() });
    const chromium = own(await launchChromium());
    const alice = watch(new Participant('alice', await chromium.newPage()));
    const bob = watch(new Participant('bob', await chromium.newPage()));
    const viewer = watch(new Participant('viewer', await chromium.newPage()));
    await throughShaper(viewer.page, server.turnPort, shaper.port);
    await noCamera(viewer);
    await alice.join(server.base, await server.token('bwpin', 'alice'), { simulcast: true });
    await bob.join(server.base, await server.token('bwpin', 'bob'), { simulcast: true });
    await viewer.join(server.base, await server.token('bwpin', 'viewer'), { relay: true, tracks: 1 });
    for (const p of [alice, bob]) {
      await viewer.seesVideoOf(p);
      await wantHigh(viewer, p);
    }
    // Without pins alice, who joined first, comes first. Pinning bob gives him
    // the better layer; moving the pin back gives it to alice again.
    const better = (first, second, what) =>
      waitFor(viewer.page, what, ([a, b]) => {
        const w = (sid) => document.querySelector(`.tile[data-sid="${sid}"] video`)?.videoWidth ?? 0;
        return w(a) > w(b) && w(b) > 0 && [w(a), w(b)];
      }, [first.sid, second.sid], 40_000);
    await viewer.page.click(`.tile[data-sid="${bob.sid}"] .pin`);
    const [bobPinned, alicePlain] = await better(bob, alice, 'bob, pinned, to get a better layer than alice');
    await viewer.page.click(`.tile[data-sid="${bob.sid}"] .pin`);
    await viewer.page.click(`.tile[data-sid="${alice.sid}"] .pin`);
    const [alicePinned, bobPlain] = await better(alice, bob, 'alice, pinned, to get a better layer than bob');
    // Both keep decoding: the other one is stepped down, not dropped.
    const [a, b] = await Promise.all([watchDecoding(viewer, alice, 4_000), watchDecoding(viewer, bob, 4_000)]);
    assert.ok(a.decoded >= 20 && b.decoded >= 20, `decoded in 4 s: alice ${a.decoded}, bob ${b.decoded}`);
    console.log(`bandwidth-pin: bob pinned ${bobPinned} vs alice ${alicePlain}; alice pinned ${alicePinned} vs bob ${bobPlain}; stalls ${a.longestStall}/${b.longestStall} ms`);
  }));
