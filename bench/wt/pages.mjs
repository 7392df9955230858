// Publisher and subscriber pages of the WebTransport vs WebRTC comparison, for
// Playwright pages on a Petrel origin: used by bench/wt/peer.mjs (the lab) and
// by test/browser/tests/webtransport.test.mjs (the smoke run and the cross-
// transport test). A path is 'webrtc', 'wt-datagram' or 'wt-stream'.
import { readFileSync } from 'node:fs';

const probeJs = readFileSync(new URL('./probe.js', import.meta.url), 'utf8');

/** Chromium flags: a plain-http lab origin must count as secure for WebTransport and WebCodecs. */
export function chromiumArgs(base) {
  const a = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run',
    '--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream', '--autoplay-policy=no-user-gesture-required',
    '--disable-features=WebRtcHideLocalIpsWithMdns',
    // Hidden or occluded pages must keep rendering and measuring at full rate.
    '--disable-renderer-backgrounding', '--disable-background-timer-throttling', '--disable-backgrounding-occluded-windows'];
  if (base && !/^https:|\/\/localhost[:/]/.test(base)) a.push(`--unsafely-treat-insecure-origin-as-secure=${new URL(base).origin}`);
  return a;
}

/** Loads the app page and the SDK (once per page; the start functions call it). */
export async function prepare(page, base) {
  if (page.petrelPrepared) return;
  page.petrelPrepared = true;
  await page.goto(`${base}/`, { timeout: 90_000 });
  await page.addScriptTag({ content: probeJs });
  await page.evaluate(async () => {
    window.sdk = await import('/petrel-sdk.js');
  });
}

/** Dev-mode token from the server (no API key configured). */
export async function devToken(base, room, identity) {
  const res = await fetch(`${base.replace('//localhost', '//127.0.0.1')}/v1/dev/token`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ room, identity, name: identity }),
  });
  if (!res.ok) throw new Error(`dev token: ${res.status} ${await res.text()}`);
  return (await res.json()).token;
}

/**
 * Opens the publisher: the timestamped canvas source (`probe: true`) or the fake
 * camera, published over `path`. Resolves once publishing started.
 */
export async function startPublisher(page, base, path, token, { probe = true, audio = false } = {}) {
  await prepare(page, base);
  return page.evaluate(async ([path, token, probe, audio]) => {
    const video = probe ? window.probe.source(30) : (await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480 } })).getVideoTracks()[0];
    const mic = audio ? (await navigator.mediaDevices.getUserMedia({ audio: true })).getAudioTracks()[0] : undefined;
    const t0 = performance.now();
    if (path === 'webrtc') {
      const room = new window.sdk.Room();
      window.pub = { room };
      await room.connect(location.origin, token, { p2p: false, autoSubscribe: false });
      await room.publishTrack(video, { source: 'camera', simulcast: false });
      if (mic) await room.publishTrack(mic, { source: 'microphone' });
    } else {
      const mode = path === 'wt-stream' ? 'stream' : 'datagram';
      const s = await window.sdk.WtSession.connect(location.origin, token, { mode, autoSubscribe: false });
      window.pub = { session: s };
      await s.publish({ video, audio: mic }, { mode });
    }
    return { setupMs: performance.now() - t0 };
  }, [path, token, probe, audio]);
}

/** Publisher-side counters: frames encoded, target bitrate, encoded size. */
export function publisherStats(page) {
  return page.evaluate(async () => {
    if (window.pub.session) {
      const v = (await window.pub.session.getStats()).local.find((l) => l.kind === 'video');
      return { framesEncoded: v?.framesEncoded ?? 0, targetBitrate: v?.targetBitrate ?? 0, width: v?.width, height: v?.height, retransmitted: v?.retransmitted, groupsReset: v?.groupsReset, keyframeRequests: v?.keyframeRequests };
    }
    let out = { framesEncoded: 0 };
    (await window.pub.room.publisherPc.getStats()).forEach((s) => {
      if (s.type === 'outbound-rtp' && s.kind === 'video') out = { framesEncoded: s.framesEncoded ?? 0, targetBitrate: s.targetBitrate ?? 0, width: s.frameWidth, height: s.frameHeight, retransmitted: s.retransmittedPacketsSent, keyframeRequests: s.pliCount };
    });
    return out;
  });
}

/**
 * Opens the subscriber over `path`, shows the first video track that arrives
 * and measures it (probe.measure). Resolves with the session start time: from
 * connect to the first rendered frame.
 */
export async function startSubscriber(page, base, path, token, { timeoutMs = 30_000 } = {}) {
  await prepare(page, base);
  return page.evaluate(async ([path, token, timeoutMs]) => {
    const v = document.createElement('video');
    v.muted = true;
    v.autoplay = true;
    v.playsInline = true;
    v.width = 640;
    v.height = 480;
    document.body.prepend(v);
    const t0 = performance.now();
    let got;
    const gotTrack = new Promise((r) => (got = r));
    if (path === 'webrtc') {
      const room = new window.sdk.Room();
      window.sub = { room };
      room.on('trackSubscribed', (track) => track.kind === 'video' && got(track));
      await room.connect(location.origin, token, { p2p: false });
    } else {
      const mode = path === 'wt-stream' ? 'stream' : 'datagram';
      // wt-datagram-floor: the receiver's earlier retransmission hold (A/B runs).
      const repairHold = path === 'wt-datagram-floor' ? 'floor' : 'gaps';
      const s = await window.sdk.WtSession.connect(location.origin, token, { mode, repairHold });
      window.sub = { session: s };
      s.on('trackSubscribed', (sub) => sub.info.kind === 'video' && got(sub.track));
      // Tracks already in the room were subscribed during connect.
      for (const sub of s.subscriptions.values()) if (sub.info.kind === 'video') got(sub.track);
    }
    const connectMs = performance.now() - t0;
    const track = await Promise.race([gotTrack, new Promise((_, rej) => setTimeout(() => rej(new Error('no video track within the timeout')), timeoutMs))]);
    const trackMs = performance.now() - t0;
    v.srcObject = new MediaStream([track]);
    window.meter = window.probe.measure(v);
    const deadline = performance.now() + timeoutMs;
    while (!window.meter.m.firstFrameAt) {
      if (performance.now() > deadline) throw new Error('no frame rendered within the timeout');
      await new Promise((r) => setTimeout(r, 20));
    }
    // WebTransport: where the start went (ms after the subscription was made;
    // early: media datagrams that overtook the SUBSCRIBE_OK).
    let detail;
    if (window.sub.session) {
      const v = (await window.sub.session.getStats()).remote.find((r) => r.kind === 'video');
      detail = { trackMs, ...(v?.start ?? {}), early: window.sub.session.earlyDatagrams ?? 0 };
    }
    return { connectMs, firstFrameMs: window.meter.m.firstFrameAt - t0, startDetail: detail };
  }, [path, token, timeoutMs]);
}

/** Transport-level counters of the subscriber: bytes, frames, loss. */
export function subscriberCounters(page) {
  return page.evaluate(async () => {
    if (window.sub.session) {
      const v = (await window.sub.session.getStats()).remote.find((r) => r.kind === 'video');
      return {
        bytes: v?.bytesReceived ?? 0, framesDecoded: v?.framesDecoded ?? 0, framesReceived: v?.objectsReceived ?? 0,
        lost: v?.framesLost ?? 0, nacks: v?.nacksSent ?? 0, keyframeRequests: v?.keyframeRequests ?? 0, targetDelayMs: v?.targetDelayMs ?? 0,
        transitMs: v?.lastTransitMs, jitterMs: v?.jitterMs, late: v?.framesLate ?? 0, dropped: v?.framesDropped ?? 0, rttMs: (await window.sub.session.getStats()).rttMs,
      };
    }
    const out = { bytes: 0, framesDecoded: 0, framesReceived: 0, lost: 0, nacks: 0, keyframeRequests: 0, packets: 0 };
    (await window.sub.room.subscriberPc.getStats()).forEach((s) => {
      if (s.type !== 'inbound-rtp' || s.kind !== 'video') return;
      out.bytes += s.bytesReceived ?? 0;
      out.framesDecoded += s.framesDecoded ?? 0;
      out.framesReceived += s.framesReceived ?? 0;
      out.lost += s.packetsLost ?? 0;
      out.packets += s.packetsReceived ?? 0;
      out.nacks += s.nackCount ?? 0;
      out.keyframeRequests += s.pliCount ?? 0;
      out.targetDelayMs = s.jitterBufferEmittedCount ? (1000 * s.jitterBufferDelay) / s.jitterBufferEmittedCount : 0;
    });
    return out;
  });
}

/** Starts a measuring window (drops what the warm-up saw). */
export async function resetWindow(page) {
  const c = await subscriberCounters(page);
  await page.evaluate(() => window.meter.reset());
  return c;
}

/** Ends a window: the page's summary plus counter deltas since `before`. */
export async function endWindow(page, before) {
  const s = await page.evaluate(() => window.meter.summary());
  const c = await subscriberCounters(page);
  const d = (k) => (c[k] ?? 0) - (before[k] ?? 0);
  return {
    ...s,
    kbps: (8 * d('bytes')) / 1000 / s.seconds,
    decodedFps: d('framesDecoded') / s.seconds,
    receivedFps: d('framesReceived') / s.seconds,
    // Packets (WebRTC) or frames (WebTransport) lost on the way, as a fraction.
    loss: c.packets !== undefined ? d('lost') / Math.max(1, d('lost') + d('packets')) : d('lost') / Math.max(1, d('lost') + d('framesReceived')),
    nacks: d('nacks'),
    keyframeRequests: d('keyframeRequests'),
    targetDelayMs: c.targetDelayMs,
    // WebTransport only: capture wall clock to arrival of the last frame, jitter, frames late or dropped, QUIC RTT.
    transitMs: c.transitMs, jitterMs: c.jitterMs, late: c.late, dropped: c.dropped, rttMs: c.rttMs,
  };
}
