import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, waitFor } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

// Scalable video: the publisher sends one VP9 encoding with three spatial and
// three temporal layers (L3T3_KEY); the server forwards each viewer only the
// spatial layer its quality asks for. Two viewers asking for different
// qualities decode different sizes, then swap, and keep decoding throughout.
// VP9, not AV1: Chromium here encodes both, but VP9's libvpx SVC encoder keeps
// real time on the shared 2 cores where AV1's does not reliably.
test('svc: VP9 L3T3_KEY, two viewers get different spatial layers and keep decoding across switches', { timeout: 150_000 }, () =>
  scenario('svc', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const sender = watch(new Participant('sender', await chromium.newPage()));
    const low = watch(new Participant('low', await chromium.newPage()));
    const high = watch(new Participant('high', await chromium.newPage()));
    await sender.page.goto(`${server.base}/?${new URLSearchParams({ token: await server.token('svc', 'sender'), svc: 'vp9', p2p: '0' })}`);
    await waitFor(sender.page, 'sender to publish', () => window.petrel.room?.localTracks.size === 2);
    sender.sid = await sender.page.evaluate(() => window.petrel.room.localParticipant.sid);
    // The publisher really sends one VP9 encoding with the scalability mode.
    const out = await waitFor(sender.page, 'VP9 L3T3_KEY outbound', async () => {
      const stats = await window.petrel.room.publisherPc.getStats();
      for (const s of stats.values()) {
        // The first stats after the encoder starts may not name the mode yet.
        if (s.type !== 'outbound-rtp' || s.kind !== 'video' || !s.framesEncoded || !s.scalabilityMode) continue;
        const codec = stats.get(s.codecId)?.mimeType;
        return { codec, mode: s.scalabilityMode, rid: s.rid ?? '', w: s.frameWidth };
      }
      return false;
    });
    assert.equal(out.codec, 'video/VP9');
    assert.equal(out.mode, 'L3T3_KEY');
    assert.equal(out.rid, '', 'one encoding, not simulcast');

    await low.join(server.base, await server.token('svc', 'low'));
    await high.join(server.base, await server.token('svc', 'high'));
    await low.seesVideoOf(sender);
    await high.seesVideoOf(sender);
    const videoSid = await low.page.evaluate(
      (sid) => [...window.petrel.room.participants.get(sid).tracks.values()].find((t) => t.kind === 'video')?.sid,
      sender.sid,
    );
    // What a viewer sees: the decoded width, frames decoded, and the codec.
    const seen = (p) =>
      p.page.evaluate(async (sid) => {
        const v = document.querySelector(`.tile[data-sid="${sid}"] video`);
        // The stats of this tile's track alone (the viewers publish cameras too).
        const stats = await window.petrel.room.subscriberPc.getStats(v.srcObject.getVideoTracks()[0]);
        for (const s of stats.values()) {
          if (s.type === 'inbound-rtp') return { width: v.videoWidth, decoded: s.framesDecoded ?? 0, codec: stats.get(s.codecId)?.mimeType ?? '' };
        }
        return { width: v.videoWidth, decoded: 0, codec: '' };
      }, sender.sid);
    const ask = (p, quality) => p.page.evaluate(([sid, q]) => window.petrel.room.updateTrackSettings(sid, { quality: q }), [videoSid, quality]);
    // The tiles' readouts (size, frame rate, bitrate received) say what went wrong.
    const readouts = async () => {
      const r = [];
      for (const p of [low, high]) {
        const inbound = await p.page.evaluate(async (sid) => {
          const v = document.querySelector(`.tile[data-sid="${sid}"] video`);
          for (const s of (await window.petrel.room.subscriberPc.getStats(v.srcObject.getVideoTracks()[0])).values()) {
            if (s.type === 'inbound-rtp') {
              const { packetsReceived, packetsLost, framesReceived, framesDecoded, keyFramesDecoded, framesDropped, pliCount, nackCount, frameWidth } = s;
              return { packetsReceived, packetsLost, framesReceived, framesDecoded, keyFramesDecoded, framesDropped, pliCount, nackCount, frameWidth };
            }
          }
          return null;
        }, sender.sid);
        r.push(`${p.label}: ${await p.page.textContent(`.tile[data-sid="${sender.sid}"] .readout`)} ${JSON.stringify(inbound)}`);
      }
      return r.join(', ');
    };
    // The width of the top spatial layer the publisher encodes right now (its
    // outbound-rtp frameWidth): Chrome changes it during the test (CPU and
    // bandwidth adaptation; 640 and 1280 both seen), and every layer with it.
    const topNow = () =>
      sender.page.evaluate(async () => {
        for (const s of (await window.petrel.room.publisherPc.getStats()).values()) {
          if (s.type === 'outbound-rtp' && s.kind === 'video' && s.frameWidth) return s.frameWidth;
        }
        return 0;
      });
    const decodedWidth = (p) =>
      p.page.evaluate((sid) => document.querySelector(`.tile[data-sid="${sid}"] video`)?.videoWidth ?? 0, sender.sid);
    // Waits until p decodes a width that `ok(width, top)` accepts, top being
    // what the publisher sends as its top layer at that moment (read before and
    // after the viewer's width, so that a change in between is not taken for
    // the wrong layer).
    const sizes = []; // decoded/top widths accepted, for the log
    const widthIn = async (p, what, ok) => {
      const deadline = Date.now() + 20_000;
      const seenW = [];
      for (;;) {
        const t0 = await topNow();
        const w = await decodedWidth(p);
        const t1 = await topNow();
        if (w > 0 && t0 === t1 && t0 > 0 && ok(w, t0)) {
          sizes.push(`${p.label} ${w}/${t0}`);
          return { w, top: t0 };
        }
        if (seenW.at(-1) !== `${w}/${t1}`) seenW.push(`${w}/${t1}`);
        if (Date.now() > deadline) throw new Error(`${p.label}: timed out after 20 s waiting for ${what} (decoded/top widths seen: ${seenW.slice(-10).join(', ')}); ${await readouts()}`);
        await new Promise((r) => setTimeout(r, 250));
      }
    };
    // The base layer is a quarter of the top one, the middle half; "the base
    // layer" is anything up to a third of the top, "the top layer" anything
    // over two thirds of it.
    const isBase = (w, top) => w <= top / 3;
    const isTop = (w, top) => w >= (top * 2) / 3;

    await ask(low, 'low');
    await ask(high, 'high');
    // Sizes relative to what the publisher sends now: under CPU load Chrome
    // scales its layers down, and back up when it can.
    await widthIn(low, 'the base layer', isBase);
    await widthIn(high, 'the top layer', isTop);
    assert.equal((await seen(low)).codec, 'video/VP9');
    assert.equal((await seen(high)).codec, 'video/VP9');

    // Swap, twice; both keep decoding: frames decoded grow across every switch.
    let before = [await seen(low), await seen(high)];
    for (const [up, down] of [[low, high], [high, low]]) {
      await ask(up, 'high');
      await ask(down, 'low');
      await widthIn(up, 'the top layer after switching up', isTop);
      await widthIn(down, 'the base layer after switching down', isBase);
      // Decoding goes on at the new sizes (frame counts, not time: the
      // shared machine's frame rate varies).
      const after = [];
      for (const [i, p] of [low, high].entries()) {
        let now = await seen(p);
        for (let k = 0; k < 40 && now.decoded < before[i].decoded + 10; k++) {
          await new Promise((r) => setTimeout(r, 500));
          now = await seen(p);
        }
        assert.ok(now.decoded >= before[i].decoded + 10, `${p.label} decoded ${before[i].decoded} → ${now.decoded} across the switch; ${await readouts()}`);
        after.push(now);
      }
      before = after;
    }
    console.log(`svc: decoded/top widths ${sizes.join(', ')}`);
  }));
