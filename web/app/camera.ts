// The camera view (docs/cameras.md): ?cameras=1 shows the wall — every camera
// of the gateway over one peer connection (the room "cameras", where each camera
// is mirrored) with its state — and ?camera=<id> one camera with the
// time-to-stream overlay: each WebRTC step as this browser saw it, up to the
// first frame painted (requestVideoFrameCallback). ?http=1 plays the HTTP live
// fallback (fragmented MP4 through Media Source Extensions) instead.
import { Room, viewCamera, type RemoteParticipant } from '../sdk/index.js';

const WALL_ROOM = 'cameras';

interface CameraStatus {
  id: string;
  name?: string;
  state: string;
  lastError?: string;
  viewers: number;
  wallViewers: number;
  bitrate: number;
  video?: string;
  audio?: string;
  /** What happens to the camera's audio when it is not forwarded as sent (AAC). */
  audioNote?: string;
  width?: number;
  height?: number;
}

/** Time-to-stream steps in ms since the viewer started. */
export interface Timings {
  pcCreated?: number;
  offerCreated?: number;
  answerArrived?: number;
  iceConnected?: number;
  dtlsConnected?: number;
  firstFrame?: number;
}

declare global {
  interface Window {
    petrelCamera?: { timings: Timings; frames: () => number; mode: string; pc?: RTCPeerConnection; reason?: string; serverPc?: RTCPeerConnection; mseType?: string };
  }
}

async function devToken(room: string, identity: string): Promise<string> {
  const res = await fetch('/v1/dev/token', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ room, identity: `${identity}-${Math.random().toString(36).slice(2, 7)}`, name: identity }),
  });
  if (!res.ok) throw new Error(`no development token (${res.status}): open the page with ?token=…`);
  return ((await res.json()) as { token: string }).token;
}

async function fetchStatus(id: string, token: string): Promise<CameraStatus | null> {
  const res = await fetch(`/v1/cameras/${encodeURIComponent(id)}/status`, { headers: { Authorization: `Bearer ${token}` } });
  return res.ok ? ((await res.json()) as CameraStatus) : null;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function kbps(bps: number): string {
  return bps >= 1e6 ? `${(bps / 1e6).toFixed(1)} Mb/s` : `${Math.round(bps / 1e3)} kb/s`;
}

function badge(st: CameraStatus | null): string {
  if (!st) return 'unknown';
  let s = st.state;
  if (st.state === 'streaming') s += ` · ${kbps(st.bitrate)} · ${st.viewers + st.wallViewers} watching`;
  if (st.lastError && st.state !== 'streaming') s += ` · ${st.lastError}`;
  // No sound, and why (AAC without a transcoder, or the transcoder failing).
  if (st.audioNote && /video only|failed/.test(st.audioNote)) s += ` · ${st.audioNote}`;
  return s;
}

/** Mounts the camera page into root, replacing the room page. */
export async function mountCameraPage(root: HTMLElement, params: URLSearchParams): Promise<void> {
  // Hide, not remove, the room page: main.ts still wires its controls.
  for (const c of Array.from(root.children)) (c as HTMLElement).hidden = true;
  const page = el('section', 'camera-page');
  root.append(page);
  const id = params.get('camera');
  try {
    if (id) await viewer(page, id, params);
    else await wall(page, params);
  } catch (err) {
    page.append(el('p', 'error', err instanceof Error ? err.message : String(err)));
  }
}

// ---- the wall ---------------------------------------------------------------------

async function wall(page: HTMLElement, params: URLSearchParams): Promise<void> {
  page.append(el('h2', undefined, 'Cameras'));
  const grid = el('div', 'camera-wall');
  page.append(grid);
  const token = params.get('token') || (await devToken(WALL_ROOM, 'wall'));
  const room = new Room();
  const tiles = new Map<string, { tile: HTMLElement; badge: HTMLElement; id: string }>();
  const tileFor = (p: RemoteParticipant) => {
    let t = tiles.get(p.sid);
    if (!t) {
      const id = p.identity.replace(/^camera-/, '');
      const tile = el('figure', 'camera-tile');
      tile.dataset.camera = id;
      const video = el('video');
      video.autoplay = video.muted = video.playsInline = true;
      const cap = el('figcaption');
      const link = el('a', undefined, p.name || id);
      link.href = `?camera=${encodeURIComponent(id)}`;
      const b = el('span', 'camera-state', '…');
      cap.append(link, b);
      tile.append(video, cap);
      grid.append(tile);
      t = { tile, badge: b, id };
      tiles.set(p.sid, t);
    }
    return t;
  };
  room.on('participantJoined', (p) => void tileFor(p));
  room.on('participantLeft', (p) => {
    tiles.get(p.sid)?.tile.remove();
    tiles.delete(p.sid);
  });
  // The camera's session moved to another node: the same tile.
  room.on('participantMoved', (p, oldSid) => {
    const t = tiles.get(oldSid);
    tiles.delete(oldSid);
    if (t) tiles.set(p.sid, t);
  });
  room.on('trackSubscribed', (track, pub, p) => {
    if (!p || track.kind !== 'video') return;
    const video = tileFor(p).tile.querySelector('video') as HTMLVideoElement;
    video.srcObject = new MediaStream([track]);
    void video.play().catch(() => {});
    room.observeVideo(pub.sid, video);
  });
  await room.connect(location.origin, token, { name: 'wall' });
  for (const p of room.participants.values()) tileFor(p);
  const refresh = async () => {
    for (const t of tiles.values()) t.badge.textContent = badge(await fetchStatus(t.id, token));
  };
  void refresh();
  setInterval(() => void refresh(), 2000);
  window.petrelCamera = {
    timings: {},
    mode: 'wall',
    frames: () => {
      let n = 0;
      grid.querySelectorAll('video').forEach((v) => (n += v.getVideoPlaybackQuality?.().totalVideoFrames ?? 0));
      return n;
    },
  };
}

// ---- one camera with the overlay ----------------------------------------------------

async function viewer(page: HTMLElement, id: string, params: URLSearchParams): Promise<void> {
  const head = el('h2', undefined, `Camera ${id}`);
  const state = el('span', 'camera-state', '…');
  head.append(' ', state);
  const wrap = el('div', 'camera-view');
  const video = el('video');
  video.autoplay = video.muted = video.playsInline = true;
  video.controls = false;
  const overlay = el('pre', 'tts-overlay');
  overlay.id = 'tts-overlay';
  wrap.append(video, overlay);
  const links = el('p');
  const other = new URLSearchParams(params);
  const http = params.get('http') === '1';
  if (http) other.delete('http');
  else other.set('http', '1');
  const a = el('a', undefined, http ? 'Use WebRTC' : 'Use the HTTP fallback');
  a.href = `?${other}`;
  const back = el('a', undefined, 'All cameras');
  back.href = '?cameras=1';
  // ?direct=1: peer to peer with a WebRTC camera, the SFU as the fallback (viewDirect).
  const direct = params.get('direct') === '1';
  const otherDirect = new URLSearchParams(params);
  if (direct) otherDirect.delete('direct');
  else otherDirect.set('direct', '1');
  otherDirect.delete('http');
  const d = el('a', undefined, direct ? 'Through the server' : 'Direct (peer to peer)');
  d.href = `?${otherDirect}`;
  links.append(back, ' · ', a, ' · ', d);
  page.append(head, wrap, links);

  const room = `camera/${id}`;
  const token = params.get('token') || (await devToken(room, 'viewer'));
  const t: Timings = {};
  const start = performance.now();
  const mark = (k: keyof Timings) => {
    if (t[k] === undefined) t[k] = Math.round((performance.now() - start) * 10) / 10;
    draw();
  };
  const draw = () => {
    const rows: [string, number | undefined][] = [
      ['peer connection', t.pcCreated],
      ['offer + gathering', t.offerCreated],
      ['answer', t.answerArrived],
      ['ICE connected', t.iceConnected],
      ['DTLS connected', t.dtlsConnected],
      ['first frame', t.firstFrame],
    ];
    const mode = http ? 'HTTP live (fMP4)' : direct ? `WebRTC ${window.petrelCamera?.mode ?? 'direct'}` : 'WebRTC';
    overlay.textContent =
      `${mode} time-to-stream\n` +
      rows.filter(([, v]) => !http || v !== undefined).map(([k, v]) => `${k.padEnd(18)}${v === undefined ? '…' : `${v} ms`}`).join('\n');
    overlay.dataset.firstFrame = t.firstFrame === undefined ? '' : String(t.firstFrame);
  };
  draw();
  window.petrelCamera = { timings: t, mode: http ? 'http' : 'webrtc', frames: () => video.getVideoPlaybackQuality?.().totalVideoFrames ?? 0 };
  const onFirstFrame = () => {
    const v = video as HTMLVideoElement & { requestVideoFrameCallback?: (cb: () => void) => number };
    if (v.requestVideoFrameCallback) v.requestVideoFrameCallback(() => mark('firstFrame'));
    else video.addEventListener('playing', () => mark('firstFrame'), { once: true });
  };
  const poll = async () => (state.textContent = badge(await fetchStatus(id, token)));
  void poll();
  setInterval(() => void poll(), 2000);

  if (http) {
    onFirstFrame();
    await playHTTP(video, `/v1/cameras/${encodeURIComponent(id)}/live.mp4`, token, () => mark('answerArrived'));
    return;
  }
  if (direct) {
    await viewDirect(room, token, params, video, mark, onFirstFrame);
    draw();
    return;
  }
  const pc = new RTCPeerConnection({ iceTransportPolicy: params.get('relay') === '1' ? 'relay' : 'all', iceServers: await iceServers(room, token) });
  mark('pcCreated');
  window.petrelCamera.pc = pc;
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  pc.oniceconnectionstatechange = () => {
    if (pc.iceConnectionState === 'connected' || pc.iceConnectionState === 'completed') mark('iceConnected');
  };
  pc.onconnectionstatechange = () => {
    if (pc.connectionState === 'connected') mark('dtlsConnected');
  };
  pc.ontrack = (ev) => {
    if (ev.track.kind !== 'video') return;
    video.srcObject = new MediaStream([ev.track]);
    onFirstFrame();
    void video.play().catch(() => {});
  };
  await pc.setLocalDescription(await pc.createOffer());
  // Candidates go with the offer: one round trip, as WHEP without trickle.
  await new Promise<void>((resolve) => {
    if (pc.iceGatheringState === 'complete') return resolve();
    const done = () => pc.iceGatheringState === 'complete' && resolve();
    pc.addEventListener('icegatheringstatechange', done);
    setTimeout(resolve, 1000);
  });
  mark('offerCreated');
  const res = await fetch(`/whep/${encodeURIComponent(room)}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/sdp', Authorization: `Bearer ${token}` },
    body: pc.localDescription?.sdp,
  });
  if (res.status !== 201) throw new Error(`WHEP: ${res.status} ${await res.text()}`);
  mark('answerArrived');
  await pc.setRemoteDescription({ type: 'answer', sdp: await res.text() });
  addEventListener('pagehide', () => {
    const loc = res.headers.get('Location');
    if (loc) void fetch(loc, { method: 'DELETE', headers: { Authorization: `Bearer ${token}` }, keepalive: true });
    pc.close();
  });
}

/**
 * A direct session with a WebRTC camera (docs/cameras.md#direct-sessions): join
 * the camera's room without subscribing, and let the SDK try peer to peer, then
 * the SFU. The overlay's steps are the direct attempt's; mode says which path won.
 */
async function viewDirect(
  room: string,
  token: string,
  params: URLSearchParams,
  video: HTMLVideoElement,
  mark: (k: keyof Timings) => void,
  onFirstFrame: () => void,
): Promise<void> {
  const r = new Room();
  const relay = params.get('relay') === '1';
  await r.connect(location.origin, token, { name: 'viewer', autoSubscribe: false, p2p: false, iceTransportPolicy: relay ? 'relay' : 'all' });
  const steps: Record<string, keyof Timings> = { pcCreated: 'pcCreated', offerCreated: 'offerCreated', answerArrived: 'answerArrived', iceConnected: 'iceConnected', dtlsConnected: 'dtlsConnected' };
  const view = await viewCamera(r, { onStep: (s) => steps[s] && mark(steps[s]) });
  const cam = window.petrelCamera;
  if (cam) {
    cam.mode = view.path;
    cam.pc = view.pc ?? r.subscriberPc ?? undefined;
    cam.reason = view.reason;
    cam.serverPc = r.publisherPc ?? undefined; // the room's connection to the server, for comparison
  }
  video.srcObject = new MediaStream([view.video]);
  onFirstFrame();
  void video.play().catch(() => {});
  addEventListener('pagehide', () => {
    view.close();
    void r.disconnect();
  });
}

/** TURN servers for a relay-only viewer, from an authorized OPTIONS (Link headers). */
async function iceServers(room: string, token: string): Promise<RTCIceServer[]> {
  const res = await fetch(`/whep/${encodeURIComponent(room)}`, { method: 'OPTIONS', headers: { Authorization: `Bearer ${token}` } });
  const out: RTCIceServer[] = [];
  for (const link of (res.headers.get('Link') ?? '').split(/,(?=\s*<)/)) {
    const m = /<([^>]+)>.*rel="ice-server"/.exec(link);
    if (!m) continue;
    const user = /username="([^"]*)"/.exec(link)?.[1];
    const cred = /credential="([^"]*)"/.exec(link)?.[1];
    out.push({ urls: m[1], username: user, credential: cred });
  }
  return out;
}

/**
 * Plays fragmented MP4 streamed over HTTP through Media Source Extensions.
 * With the camera's audio (an Opus track, dOps, in the init) the SourceBuffer
 * takes both tracks and uses the stream's own timestamps ('segments'): the
 * server aligns the two timelines, 'sequence' would shift them apart at each
 * gap. Playback starts where both tracks are buffered.
 */
async function playHTTP(video: HTMLVideoElement, url: string, token: string, onResponse: () => void): Promise<void> {
  const ms = new MediaSource();
  video.src = URL.createObjectURL(ms);
  await new Promise((r) => ms.addEventListener('sourceopen', r, { once: true }));
  const res = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
  if (!res.ok || !res.body) throw new Error(`live.mp4: ${res.status} ${await res.text()}`);
  onResponse();
  const reader = res.body.getReader();
  let sb: SourceBuffer | null = null;
  let pending: Uint8Array[] = [];
  let init: Uint8Array | null = null;
  const pump = () => {
    if (!sb || sb.updating || pending.length === 0) return;
    const n = pending.reduce((s, b) => s + b.length, 0);
    const buf = new Uint8Array(n);
    let o = 0;
    for (const b of pending) {
      buf.set(b, o);
      o += b.length;
    }
    pending = [];
    sb.appendBuffer(buf);
  };
  void video.play().catch(() => {});
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    if (!sb) {
      init = init ? concat(init, value) : value;
      const codec = avcCodec(init);
      if (!codec) continue;
      const audio = hasBox(init, 'dOps');
      const type = `video/mp4; codecs="${codec}${audio ? ', opus' : ''}"`;
      sb = ms.addSourceBuffer(type);
      sb.mode = audio ? 'segments' : 'sequence';
      if (window.petrelCamera) window.petrelCamera.mseType = type;
      sb.addEventListener('updateend', () => {
        pump();
        // Live: stay at the edge rather than drifting behind; start where
        // audio and video are both buffered.
        const b = video.buffered;
        if (!b.length) return;
        if (b.end(b.length - 1) - video.currentTime > 1) video.currentTime = b.end(b.length - 1) - 0.1;
        else if (video.currentTime < b.start(0)) video.currentTime = b.start(0);
      });
      pending.push(init);
    } else pending.push(value);
    pump();
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** Whether b holds a box of type t (a four-character code). */
function hasBox(b: Uint8Array, t: string): boolean {
  const c = [...t].map((x) => x.charCodeAt(0));
  for (let i = 4; i + 4 <= b.length; i++) if (b[i] === c[0] && b[i + 1] === c[1] && b[i + 2] === c[2] && b[i + 3] === c[3]) return true;
  return false;
}

/** The avc1.PPCCLL codec string from the avcC box of an init segment, once it is all there. */
function avcCodec(b: Uint8Array): string | null {
  for (let i = 4; i + 8 < b.length; i++) {
    if (b[i] === 0x61 && b[i + 1] === 0x76 && b[i + 2] === 0x63 && b[i + 3] === 0x43) {
      const hex = (x: number) => x.toString(16).padStart(2, '0');
      return `avc1.${hex(b[i + 5])}${hex(b[i + 6])}${hex(b[i + 7])}`;
    }
  }
  return null;
}
