// Drives the web app in a page. Works with Playwright and Puppeteer pages alike:
// only goto, evaluate(fn, arg), screenshot and the console event are used.
import { writeFileSync, mkdirSync } from 'node:fs';
import { outDir } from './server.mjs';

export async function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

// Polls fn(arg) in the page until it returns a truthy value, which is returned.
export async function waitFor(page, what, fn, arg, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await page.evaluate(fn, arg);
      if (last) return last;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
    await sleep(250);
  }
}

// A participant: a page of the room app, its console log kept for failure reports.
export class Participant {
  constructor(label, page) {
    this.label = label;
    this.page = page;
    this.log = [];
    page.on('console', (m) => {
      const text = m.text();
      // Puppeteer (Firefox) prints an Error argument as "JSHandle@error": say what it was.
      if (!text.includes('JSHandle@')) return this.log.push(`[${m.type()}] ${text}`);
      Promise.all(m.args().map((a) => a.evaluate((v) => (v instanceof Error ? `${v.name}: ${v.message}` : String(v))).catch(() => '?')))
        .then((parts) => this.log.push(`[${m.type()}] ${parts.join(' ')}`));
    });
    page.on('pageerror', (e) => this.log.push(`[pageerror] ${e?.message ?? e}`));
    // The signaling transcript (Playwright pages only), for failure reports.
    this.signal = [];
    const t0 = Date.now();
    if (typeof page.context === 'function') {
      page.on('websocket', (ws) => {
        const keep = (dir) => (f) => {
          if (!/"type":"(ping|pong)"/.test(f.payload)) this.signal.push(`${Date.now() - t0}ms ${dir} ${f.payload}`);
        };
        ws.on('framesent', keep('->'));
        ws.on('framereceived', keep('<-'));
        ws.on('close', () => this.signal.push(`${Date.now() - t0}ms socket closed`));
      });
    }
  }

  // Opens the app with a token (autojoin) and waits until camera and mic are published.
  // A 1:1 room stays on the SFU path (p2p=0) unless `p2p` is set: most tests are
  // about the server, and with two participants the SDK would otherwise go direct.
  // `e2ee`: the end-to-end encryption passphrase, in the URL fragment as a user
  // would have it; `e2eeTransform`: 'script' or 'streams' instead of the browser's default.
  async join(base, token, { name = this.label, relay = false, tracks = 2, p2p = false, simulcast, e2ee, e2eeTransform } = {}) {
    const q = new URLSearchParams({ token, name, autojoin: '1' });
    if (e2eeTransform) q.set('e2eeTransform', e2eeTransform);
    if (relay) q.set('relay', '1');
    if (!p2p) q.set('p2p', '0');
    if (simulcast !== undefined) q.set('simulcast', simulcast ? '1' : '0');
    await this.page.goto(`${base}/?${q}${e2ee ? `#${new URLSearchParams({ e2ee })}` : ''}`);
    await waitFor(this.page, `${this.label} to join`, () => {
      const err = document.getElementById('join-error')?.textContent;
      if (err) throw new Error(`join error shown: ${err}`);
      return window.petrel?.room?.state === 'connected';
    });
    await waitFor(this.page, `${this.label} to publish ${tracks} tracks`, (n) => window.petrel.room.localTracks.size >= n, tracks);
    this.sid = await this.page.evaluate(() => window.petrel.room.localParticipant.sid);
    this.identity = await this.page.evaluate(() => window.petrel.room.localParticipant.identity);
  }

  // Media counters of the subscriber connection (or `pc`: 'directPc', 'publisherPc'),
  // read from the browser's own getStats.
  inbound(pcName = 'subscriberPc') {
    return this.page.evaluate(async (pcName) => {
      const pc = window.petrel.room?.[pcName];
      const out = { framesDecoded: 0, videoPackets: 0, audioPackets: 0, samples: 0, videoStreams: 0, audioStreams: 0 };
      if (!pc) return out;
      (await pc.getStats()).forEach((s) => {
        if (s.type !== 'inbound-rtp') return;
        if (s.kind === 'video') {
          out.videoStreams++;
          out.framesDecoded += s.framesDecoded ?? 0;
          out.videoPackets += s.packetsReceived ?? 0;
        } else if (s.kind === 'audio') {
          out.audioStreams++;
          out.audioPackets += s.packetsReceived ?? 0;
          out.samples += s.totalSamplesReceived ?? 0;
        }
      });
      return out;
    }, pcName);
  }

  // Video frames received per publishing participant (subscriber connection), from the SDK's stats.
  framesByParticipant() {
    return this.page.evaluate(async () => {
      const out = {};
      for (const t of (await window.petrel.room.getStats()).tracks) {
        if (t.direction === 'inbound' && t.kind === 'video') out[t.participantSid] = (out[t.participantSid] ?? 0) + (t.framesDecoded ?? 0);
      }
      return out;
    });
  }

  // Frames encoded by the camera sender on the publisher (SFU) connection.
  framesEncodedToSfu() {
    return this.page.evaluate(async () => {
      let n = 0;
      (await window.petrel.room.publisherPc.getStats()).forEach((s) => {
        if (s.type === 'outbound-rtp' && s.kind === 'video') n += s.framesEncoded ?? 0;
      });
      return n;
    });
  }

  // Local candidate types of the selected pairs, per peer connection.
  selectedCandidateTypes() {
    return this.page.evaluate(async () => {
      const types = async (pc) => {
        if (!pc) return null;
        const r = await pc.getStats();
        let pair;
        r.forEach((s) => {
          if (s.type === 'transport' && s.selectedCandidatePairId) pair = r.get(s.selectedCandidatePairId);
        });
        r.forEach((s) => {
          if (!pair && s.type === 'candidate-pair' && (s.selected || (s.nominated && s.state === 'succeeded'))) pair = s;
        });
        if (!pair) return null;
        return { local: r.get(pair.localCandidateId)?.candidateType, remote: r.get(pair.remoteCandidateId)?.candidateType };
      };
      return { publisher: await types(window.petrel.room.publisherPc), subscriber: await types(window.petrel.room.subscriberPc) };
    });
  }

  // Waits until the tile of `other` shows decoding video: the user-visible check.
  async seesVideoOf(other, timeoutMs = 25_000) {
    return waitFor(this.page, `${this.label} to show ${other.label}'s video`, (sid) => {
      const v = document.querySelector(`.tile[data-sid="${sid}"] video`);
      return v && v.videoWidth > 0 && v.readyState >= 2 && { w: v.videoWidth, h: v.videoHeight, label: v.parentElement.querySelector('.label').textContent };
    }, other.sid, timeoutMs);
  }

  // Starts collecting data messages in the page (call before the other side sends).
  collectData() {
    return this.page.evaluate(() => {
      window.__data = [];
      window.petrel.room.on('dataReceived', (m) =>
        window.__data.push({ text: m.text, bytes: Array.from(m.payload), from: m.from, topic: m.topic, reliable: m.reliable }));
    });
  }

  async failureArtifacts(prefix) {
    mkdirSync(outDir, { recursive: true });
    const base = `${outDir}${prefix}-${this.label}`;
    writeFileSync(`${base}.log`, this.log.join('\n') + '\n');
    if (this.signal.length) writeFileSync(`${base}-signal.log`, this.signal.join('\n') + '\n');
    // The state of both peer connections: where a stuck negotiation shows.
    const state = await this.page.evaluate(async () => {
      const room = window.petrel?.room;
      const pcState = async (pc) => {
        if (!pc) return null;
        const stats = [];
        (await pc.getStats()).forEach((s) => {
          if (['inbound-rtp', 'outbound-rtp', 'candidate-pair', 'transport'].includes(s.type)) stats.push(s);
        });
        return {
          signalingState: pc.signalingState,
          iceConnectionState: pc.iceConnectionState,
          connectionState: pc.connectionState,
          transceivers: pc.getTransceivers().map((t) => ({ mid: t.mid, direction: t.direction, currentDirection: t.currentDirection, track: t.receiver.track?.id })),
          localSdp: pc.localDescription?.sdp,
          remoteSdp: pc.remoteDescription?.sdp,
          stats,
        };
      };
      return room && {
        state: room.state,
        participants: [...room.participants.values()].map((p) => ({ sid: p.sid, identity: p.identity, tracks: [...p.tracks.values()].map((t) => ({ ...t.info, subscribed: t.subscribed, hasTrack: !!t.track })) })),
        publisher: await pcState(room.publisherPc),
        subscriber: await pcState(room.subscriberPc),
      };
    }).catch((e) => ({ error: String(e) }));
    writeFileSync(`${base}-state.json`, JSON.stringify(state ?? null, null, 1));
    await this.page.screenshot({ path: `${base}.png` }).catch((e) => console.error(`screenshot ${base}: ${e.message}`));
  }
}

// Waits until each counter in `mins` has grown by at least that much since the
// first sample. Polling instead of a fixed interval keeps it true to "it grows"
// on a loaded machine, where a browser may decode at a few frames per second.
export async function expectGrowth(what, sample, mins, timeoutMs = 20_000) {
  const a = await sample();
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    await sleep(500);
    const b = await sample();
    const short = Object.entries(mins).filter(([k, d]) => !(b[k] - a[k] >= d));
    if (!short.length) return [a, b];
    if (Date.now() > deadline) {
      const detail = short.map(([k, d]) => `${k} ${a[k]} -> ${b[k]} (want +${d})`).join(', ');
      throw new Error(`${what}: did not grow within ${timeoutMs} ms: ${detail}`);
    }
  }
}
