import test from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium } from '../lib/browsers.mjs';
import { Participant, sleep } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';

// Audio Last-N at 2: five talkers publish a tone each at a different loudness,
// and a listener receives the audio of only the two loudest. Chromium writes the
// RFC 6464 level of what it encodes; nothing in the test sets a level itself.

const N = 2;
// Speech amplitude per talker, about 7.5 dB apart (2.5 of the detector's 3 dB
// steps, above its 2-step switching margin); the room noise in the pauses is
// the floor the server measures speech against.
const GAINS = [0.0038, 0.009, 0.021, 0.05, 0.12];
const NOISE = 0.002;

// A talker: the SDK alone (no camera, no app UI), publishing a WebAudio tone
// of its own frequency that speaks for 240 ms and pauses 60 ms (room noise
// only), the rhythm a speaker detector expects of speech. startTalker makes
// the sound, joinTalker joins and publishes it.
async function startTalker(p, base, freq, gain) {
  await p.page.goto(`${base}/`);
  await p.page.evaluate(async ([freq, gain, noise]) => {
    const ctx = new AudioContext();
    await ctx.resume();
    const osc = ctx.createOscillator();
    osc.frequency.value = freq;
    // env's gain follows a looped 300 ms envelope: 0 for 60 ms, then 1.
    const env = ctx.createGain();
    env.gain.value = 0;
    const shape = ctx.createBuffer(1, Math.round(ctx.sampleRate * 0.3), ctx.sampleRate);
    const d = shape.getChannelData(0);
    for (let i = 0; i < d.length; i++) d[i] = i < ctx.sampleRate * 0.06 ? 0 : 1;
    const envSrc = ctx.createBufferSource();
    envSrc.buffer = shape;
    envSrc.loop = true;
    envSrc.connect(env.gain);
    const level = ctx.createGain();
    level.gain.value = gain;
    const floor = ctx.createGain();
    floor.gain.value = noise;
    const dest = ctx.createMediaStreamDestination();
    osc.connect(env).connect(level).connect(dest);
    osc.connect(floor).connect(dest);
    osc.start();
    envSrc.start();
    window.__level = level;
    window.__ctx = ctx;
    window.__mic = dest.stream.getAudioTracks()[0];
  }, [freq, gain, NOISE]);
}

async function joinTalker(p, token) {
  await p.page.evaluate(async (token) => {
    const room = new window.petrel.Room();
    window.petrel.room = room;
    await room.connect(location.origin, token, { p2p: false, autoSubscribe: false });
    await room.publishTrack(window.__mic, { source: 'microphone' });
  }, token);
  p.sid = await p.page.evaluate(() => window.petrel.room.localParticipant.sid);
}

const setGain = (p, gain) => p.page.evaluate((g) => window.__level.gain.setValueAtTime(g, window.__ctx.currentTime), gain);

// The listener subscribes to everything and plays each remote track, as the app
// would; per talker it reports the browser's own receive counters.
async function joinListener(p, base, token) {
  await p.page.goto(`${base}/`);
  await p.page.evaluate(async (token) => {
    const room = new window.petrel.Room();
    window.petrel.room = room;
    window.__who = {}; // receiver track id → talker identity
    room.on('trackSubscribed', (track, _pub, participant) => {
      if (track.kind !== 'audio') return;
      window.__who[track.id] = participant.identity;
      const a = document.createElement('audio');
      a.autoplay = true;
      a.srcObject = new MediaStream([track]);
      document.body.append(a);
    });
    await room.connect(location.origin, token, { p2p: false });
  }, token);
}

function received(p) {
  return p.page.evaluate(async () => {
    const out = {};
    for (const who of Object.values(window.__who)) out[who] = { packets: 0, energy: 0 };
    (await window.petrel.room.subscriberPc.getStats()).forEach((s) => {
      const who = s.type === 'inbound-rtp' && s.kind === 'audio' && window.__who[s.trackIdentifier];
      if (who) out[who] = { packets: s.packetsReceived ?? 0, energy: s.totalAudioEnergy ?? 0 };
    });
    return out;
  });
}

// Polls windows of windowMs until, in one, exactly the talkers of `want` get
// packets (and their sound is not silence) and every other talker gets none.
// Returns when that window ended, counted from `since`.
async function hearsExactly(what, listener, talkers, want, { since = Date.now(), windowMs = 600, timeoutMs = 20_000 } = {}) {
  const deadline = since + timeoutMs;
  let a = await received(listener);
  let last = '';
  for (;;) {
    await sleep(windowMs);
    const b = await received(listener);
    const grew = (t) => ({ packets: (b[t.identity]?.packets ?? 0) - (a[t.identity]?.packets ?? 0), energy: (b[t.identity]?.energy ?? 0) - (a[t.identity]?.energy ?? 0) });
    const ok = talkers.every((t) => {
      const g = grew(t);
      return want.includes(t) ? g.packets >= windowMs / 20 / 2 && g.energy > 0 : g.packets === 0;
    }) && talkers.every((t) => t.identity in b);
    if (ok) return Date.now() - since;
    last = talkers.map((t) => `${t.identity} +${grew(t).packets}`).join(', ');
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms (last window: ${last})`);
    a = b;
  }
}

test('audio Last-N: a listener hears only the 2 loudest of 5 talkers, and follows a change of loudness', { timeout: 90_000 }, () =>
  scenario('audiolastn', async ({ server, own, watch }) => {
    const chromium = own(await launchChromium());
    const talkers = await Promise.all(GAINS.map(async (gain, i) => {
      const t = watch(new Participant(`talker${i}`, await chromium.newPage()));
      t.identity = `talker${i}`;
      await startTalker(t, server.base, 300 + 110 * i, gain);
      return t;
    }));
    const listener = watch(new Participant('listener', await chromium.newPage()));
    await joinListener(listener, server.base, await server.token('alastn', 'listener'));
    // Quietest first: the louder ones must take the places the first joiners had.
    for (const t of talkers) await joinTalker(t, await server.token('alastn', t.identity));

    const loud = [talkers[4], talkers[3]];
    await hearsExactly('the two loudest (talker4, talker3) and no one else', listener, talkers, loud);
    // Steady: a longer window still has exactly them.
    await hearsExactly('the same two over 2 s', listener, talkers, loud, { windowMs: 2_000, timeoutMs: 2_000 });

    // The quietest becomes the loudest and the loudest the quietest: the
    // listener's set follows within 2 s (with the room's 100 ms decisions and
    // the loudness falling over about a second, it takes well under that).
    await Promise.all([setGain(talkers[0], GAINS[4]), setGain(talkers[4], GAINS[0])]);
    const t0 = Date.now();
    const took = await hearsExactly('after the swap: talker0 and talker3', listener, talkers, [talkers[0], talkers[3]], { since: t0, windowMs: 400, timeoutMs: 2_000 });
    assert.ok(took <= 2_000, `the set changed ${took} ms after the swap`);
    await hearsExactly('talker0 and talker3 over 2 s', listener, talkers, [talkers[0], talkers[3]], { windowMs: 2_000, timeoutMs: 2_000 });
  }, { args: ['--audio-last-n', String(N)] }));
