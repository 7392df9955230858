// The camera view (docs/cameras.md): ?cameras=1 shows the wall — every camera
// of the gateway over one peer connection (the room "cameras", where each camera
// is mirrored) with its state — and ?camera=<id> one camera with the
// time-to-stream overlay: each WebRTC step as this browser saw it, up to the
// first frame painted (requestVideoFrameCallback). ?http=1 plays the HTTP live
// fallback (fragmented MP4 through Media Source Extensions) instead.
import { Room, PetrelError, viewCamera, whepPlay, whepIceServers, WhepError, receivesOverWebRTC, type RemoteParticipant, type RemoteTrackPublication, type WhepSession } from '../sdk/index.js';

const WALL_ROOM = 'cameras';

interface CameraStatus {
  id: string;
  name?: string;
  state: string;
  lastError?: string;
  viewers: number;
  wallViewers: number;
  liveViewers: number;
  bitrate: number;
  video?: string;
  audio?: string;
  /** What happens to the camera's audio when it is not forwarded as sent (AAC). */
  audioNote?: string;
  /** How an H.265 camera reaches browsers without H.265 (transcoded to H.264), or why it cannot. */
  videoNote?: string;
  /** The codec of the camera's transcoded video track (video/H264 for an H.265 camera), if any. */
  transcoded?: string;
  width?: number;
  height?: number;
}

/** requestVideoFrameCallback's metadata (the fields Chromium and Firefox give), times in performance.now() ms. */
interface VideoFrameMeta {
  presentationTime?: number;
  expectedDisplayTime?: number;
  receiveTime?: number;
  captureTime?: number;
  processingDuration?: number;
  presentedFrames?: number;
  width?: number;
  height?: number;
}

/** Time-to-stream steps in ms since the viewer started. */
export interface Timings {
  pcCreated?: number;
  /** The offer went to the server (WHEP POST, or the direct session's relay message). */
  offerSent?: number;
  /** ICE gathering completed: after offerSent, since the offer does not wait for it. */
  gatheringComplete?: number;
  answerArrived?: number;
  iceConnected?: number;
  dtlsConnected?: number;
  firstFrame?: number;
}

declare global {
  interface Window {
    petrelCamera?: {
      timings: Timings;
      frames: () => number;
      /** 'webrtc' or 'http' (camera page), 'direct' or 'sfu' (direct sessions), 'wall'. */
      mode: string;
      pc?: RTCPeerConnection;
      /** Why the page plays this way when it chose for itself (or why not direct). */
      reason?: string;
      /** The error shown on the page. */
      error?: string;
      /** First frame in ms since navigation started (the page's own load included). */
      navFirstFrame?: number;
      /** ICE gathering state when the WHEP offer was sent. */
      gatheringAtOffer?: RTCIceGatheringState;
      iceLite?: boolean;
      serverPc?: RTCPeerConnection;
      mseType?: string;
      /** The camera's codec reaches this browser transcoded (an H.265 camera as H.264). */
      transcoded?: boolean;
      /** requestVideoFrameCallback's metadata of the first frame (receiveTime, presentationTime, …). */
      firstFrameMeta?: VideoFrameMeta;
    };
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
  if (st.state === 'streaming') s += ` · ${kbps(st.bitrate)} · ${st.viewers + st.wallViewers + (st.liveViewers ?? 0)} watching`;
  if (st.lastError && st.state !== 'streaming') s += ` · ${st.lastError}`;
  // No sound, and why (AAC without a transcoder, or the transcoder failing).
  if (st.audioNote && /video only|failed/.test(st.audioNote)) s += ` · ${st.audioNote}`;
  // An H.265 camera no transcoder serves (no ffmpeg, or ffmpeg failing).
  if (st.videoNote && /cannot|failed/.test(st.videoNote)) s += ` · ${st.videoNote}`;
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

/**
 * Wall tiles that play the HTTP live stream at once, in a browser without H.264
 * for WebRTC: each is a long-lived request, and a browser opens at most six
 * HTTP/1.1 connections to a server (the status polls need one).
 */
const WALL_HTTP_TILES = 4;

async function wall(page: HTMLElement, params: URLSearchParams): Promise<void> {
  page.append(el('h2', undefined, 'Cameras'));
  const note = el('p', 'camera-message');
  note.id = 'camera-message';
  const grid = el('div', 'camera-wall');
  page.append(note, grid);
  // Cameras send H.264: a browser that cannot receive it over WebRTC gets the
  // tiles over HTTP live instead, and the room only for who is there.
  const http = params.get('http') === '1' || !receivesOverWebRTC('video/H264');
  const how = http ? `HTTP live${params.get('http') === '1' ? '' : ' (automatic: this browser cannot receive H.264 over WebRTC)'}` : 'WebRTC';
  note.textContent = `Tiles play over ${how}.`;
  note.dataset.way = http ? 'http' : 'webrtc';
  const headerStatus = document.getElementById('status');
  if (headerStatus) headerStatus.textContent = `connecting · ${http ? 'HTTP live' : 'WebRTC'}…`;
  const token = params.get('token') || (await devToken(WALL_ROOM, 'wall'));
  const room = new Room();
  type Tile = { tile: HTMLElement; badge: HTMLElement; how: HTMLElement; id: string };
  const tiles = new Map<string, Tile>();
  let httpTiles = 0;
  // A tile over HTTP live: the wall room carries each camera's picture, its
  // HTTP stream is the camera's own (an H.265 camera's H.264 transcode).
  const playTileHTTP = (t: Tile, why: string) => {
    const video = t.tile.querySelector('video') as HTMLVideoElement;
    if (httpTiles >= WALL_HTTP_TILES) {
      t.tile.dataset.way = 'none';
      t.how.textContent = `not playing: ${WALL_HTTP_TILES} HTTP live tiles at most, open the camera to watch it`;
      return;
    }
    httpTiles++;
    t.tile.dataset.way = 'http';
    video.srcObject = null;
    t.how.textContent = WAY_NAME.http;
    if (why) {
      t.how.title = why;
      note.textContent = 'Tiles play over WebRTC, or over HTTP live where their tile says so.';
    }
    void playHTTP(video, `/v1/cameras/${encodeURIComponent(t.id)}/live.mp4`, token, () => {}).catch((err) => {
      t.tile.dataset.error = err instanceof Error ? err.message : String(err);
      t.badge.textContent = t.tile.dataset.error;
    });
  };
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
      // How this tile plays: tiles of one wall can play different ways.
      const how = el('span', 'camera-how');
      cap.append(link, b, how);
      tile.append(video, cap);
      grid.append(tile);
      t = { tile, badge: b, how, id };
      tiles.set(p.sid, t);
      if (http) playTileHTTP(t, '');
    }
    return t;
  };
  // Over WebRTC the wall asks only for what this browser can decode, known
  // from its receiver capabilities: an H.265 camera's tile plays over HTTP live.
  // Each new video track (a camera's codec can change) is considered; a tile
  // already on HTTP live stays there, its stream follows the camera.
  const considered = new Set<string>();
  const consider = (pub: RemoteTrackPublication, p: RemoteParticipant) => {
    const t = tileFor(p);
    const way = t.tile.dataset.way;
    if (http || pub.kind !== 'video' || way === 'http' || way === 'none' || considered.has(pub.sid)) return;
    considered.add(pub.sid);
    if (receivesOverWebRTC(pub.info.mimeType ?? '')) {
      t.tile.dataset.way = 'webrtc';
      t.how.textContent = WAY_NAME.webrtc;
      void room.subscribe(pub.sid, true).catch((err) => (t.badge.textContent = `cannot subscribe: ${err instanceof Error ? err.message : String(err)}`));
    } else playTileHTTP(t, `this browser cannot receive ${pub.info.mimeType} over WebRTC`);
  };
  room.on('participantJoined', (p) => void tileFor(p));
  room.on('trackPublished', consider);
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
    const t = tileFor(p);
    if (t.tile.dataset.way !== 'webrtc') return;
    const video = t.tile.querySelector('video') as HTMLVideoElement;
    video.srcObject = new MediaStream([track]);
    void video.play().catch(() => {});
    room.observeVideo(pub.sid, video);
  });
  room.on('connectionStateChanged', (st) => {
    if (headerStatus) headerStatus.textContent = st === 'connected' ? `connected · ${http ? 'HTTP live' : 'WebRTC'}` : st;
  });
  await room.connect(location.origin, token, { name: 'wall', autoSubscribe: false });
  if (headerStatus) headerStatus.textContent = `connected · ${http ? 'HTTP live' : 'WebRTC'}`;
  for (const p of room.participants.values()) {
    tileFor(p);
    for (const pub of p.tracks.values()) consider(pub, p);
  }
  const refresh = async () => {
    for (const t of tiles.values()) {
      const st = await fetchStatus(t.id, token);
      if (!t.tile.dataset.error) t.badge.textContent = badge(st);
      // live.mp4 serves an H.265 camera's H.264 transcode.
      if (t.tile.dataset.way === 'http' && st?.video === 'video/H265' && st.transcoded) {
        t.tile.dataset.transcoded = '1';
        t.how.textContent = `${WAY_NAME.http} · H.265 camera, transcoded to H.264 for this browser`;
      }
    }
  };
  void refresh();
  setInterval(() => void refresh(), 2000);
  window.petrelCamera = {
    timings: {},
    mode: 'wall',
    reason: http ? how : undefined,
    frames: () => {
      let n = 0;
      grid.querySelectorAll('video').forEach((v) => (n += v.getVideoPlaybackQuality?.().totalVideoFrames ?? 0));
      return n;
    },
  };
}

// ---- one camera with the overlay ----------------------------------------------------

/** How the camera page plays: WebRTC (WHEP) or the HTTP live stream (fMP4 through MSE). */
export type Way = 'webrtc' | 'http';

const WAY_NAME: Record<Way, string> = { webrtc: 'WebRTC', http: 'HTTP live' };

/** How long without a first frame before the page says so (the session may still come). */
const SLOW_START_MS = 8000;

async function viewer(page: HTMLElement, id: string, params: URLSearchParams): Promise<void> {
  const head = el('h2', undefined, `Camera ${id}`);
  const state = el('span', 'camera-state', '…');
  head.append(' ', state);
  const wrap = el('div', 'camera-view');
  // early.js's video when it started the session (it may be playing already): moved, not replaced.
  const video = window.petrelEarly?.video ?? el('video');
  video.autoplay = video.muted = video.playsInline = true;
  video.controls = false;
  const overlay = el('pre', 'tts-overlay');
  overlay.id = 'tts-overlay';
  wrap.append(video, overlay);
  // How the camera plays, and any error: always a sentence, never an endless "…".
  const message = el('p', 'camera-message');
  message.id = 'camera-message';
  message.setAttribute('role', 'status');
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
  // The camera's LL-HLS egress, played with hls.js (hls.ts).
  const toHLS = new URLSearchParams(params);
  for (const k of ['http', 'direct']) toHLS.delete(k);
  toHLS.set('hls', '1');
  const h = el('a', undefined, 'Watch over HLS');
  h.href = `?${toHLS}`;
  links.append(back, ' · ', a, ' · ', d, ' · ', h);
  page.append(head, wrap, message, links);
  document.querySelector('.camera-early-page')?.remove();
  document.documentElement.classList.remove('camera-early');

  const t: Timings = {};
  let way: Way = http ? 'http' : 'webrtc';
  let reason = http ? 'asked for (&http=1)' : '';
  let error = '';
  // Set when the camera's codec reaches this browser transcoded (an H.265 camera).
  let codecNote = '';
  const headerStatus = document.getElementById('status');
  const say = () => {
    const how = direct && way === 'webrtc' ? `WebRTC ${window.petrelCamera?.mode ?? 'direct'}` : WAY_NAME[way];
    const auto = (reason && !http ? ` (automatic: ${reason})` : '') + (codecNote ? ` · ${codecNote}` : '');
    let line: string;
    if (error) line = `Error: ${error}`;
    else if (t.firstFrame !== undefined) line = `Playing over ${how}${auto}.`;
    else line = `Connecting over ${how}${auto}…`;
    message.textContent = line;
    message.className = error ? 'camera-message error' : 'camera-message';
    message.dataset.way = way;
    if (headerStatus) headerStatus.textContent = error ? 'error' : t.firstFrame !== undefined ? `playing · ${how}` : `connecting · ${how}…`;
  };
  say();
  const room = `camera/${id}`;
  const token = params.get('token') || (await devToken(room, 'viewer'));
  // The viewer's start; an early WebRTC start (early.ts) counts from its offer, as whepPlay's steps do.
  let start = performance.now();
  performance.mark?.('petrel:camera:start');
  const draw = () => {
    const rows: [string, number | undefined][] =
      way === 'http'
        ? [
            ['response', t.answerArrived],
            ['first frame', t.firstFrame],
          ]
        : [
            ['peer connection', t.pcCreated],
            ['offer sent', t.offerSent],
            ['answer', t.answerArrived],
            ['ICE connected', t.iceConnected],
            ['DTLS connected', t.dtlsConnected],
            ['first frame', t.firstFrame],
          ];
    const mode = way === 'http' ? 'HTTP live (fMP4)' : direct ? `WebRTC ${window.petrelCamera?.mode ?? 'direct'}` : 'WebRTC';
    // A step that will not come (an error) shows as —, not as a waiting "…".
    const pending = error ? '—' : '…';
    overlay.textContent =
      `${mode} time-to-stream\n` + rows.map(([k, v]) => `${k.padEnd(18)}${v === undefined ? pending : `${v} ms`}`).join('\n');
    if (way === 'webrtc' && t.gatheringComplete !== undefined && !direct) overlay.textContent += `\n${'(ICE gathered'.padEnd(18)}${t.gatheringComplete} ms)`;
    // The steps count from the viewer's start; this from navigation (the page's own load included).
    const nav = window.petrelCamera?.navFirstFrame;
    if (nav !== undefined) overlay.textContent += `\n${'(since page load'.padEnd(18)}${nav} ms)`;
    overlay.dataset.firstFrame = t.firstFrame === undefined ? '' : String(t.firstFrame);
  };
  const mark = (k: keyof Timings, ms?: number) => {
    if (t[k] === undefined) t[k] = ms ?? Math.round((performance.now() - start) * 10) / 10;
    draw();
    if (k === 'firstFrame') say();
  };
  const cam: NonNullable<Window['petrelCamera']> = { timings: t, mode: way, frames: () => video.getVideoPlaybackQuality?.().totalVideoFrames ?? 0 };
  window.petrelCamera = cam;
  const fail = (why: string) => {
    // A stream requested by early.js and not played must not stay open.
    void window.petrelEarly?.live?.then((r) => r.body?.cancel()).catch(() => {});
    if (window.petrelEarly) window.petrelEarly.live = undefined;
    error = why;
    cam.error = why;
    draw();
    say();
  };
  const useWay = (w: Way, why: string) => {
    way = w;
    reason = why;
    cam.mode = w;
    cam.reason = why || undefined;
    draw();
    say();
  };
  draw();
  let frameHooked = false;
  const onFirstFrame = () => {
    if (frameHooked) return;
    frameHooked = true;
    const v = video as HTMLVideoElement & { requestVideoFrameCallback?: (cb: (now: number, meta: VideoFrameMeta) => void) => number };
    const got = (_now?: number, meta?: VideoFrameMeta) => {
      cam.navFirstFrame = Math.round(performance.now() * 10) / 10;
      performance.mark?.('petrel:camera:firstFrame');
      if (meta) cam.firstFrameMeta = meta;
      mark('firstFrame');
    };
    if (v.requestVideoFrameCallback) v.requestVideoFrameCallback(got);
    else video.addEventListener('playing', () => got(), { once: true });
  };
  setTimeout(() => {
    if (t.firstFrame !== undefined || error) return;
    const pc = cam.pc;
    const where = way === 'webrtc' && pc ? ` (ICE ${pc.iceConnectionState}, connection ${pc.connectionState})` : '';
    message.textContent = `No picture after ${SLOW_START_MS / 1000} s over ${WAY_NAME[way]}${where}; still trying.`;
  }, SLOW_START_MS);
  // The camera's status, after the stream's requests have gone (it is not on the way to the picture).
  const watchStatus = () => {
    void fetchStatus(id, token)
      .catch(() => null)
      .then((st) => {
        state.textContent = badge(st);
        // The server gives a browser without H.265 the camera's H.264 transcode,
        // over WebRTC (WHEP answers with it) and over HTTP live alike.
        if (st?.video === 'video/H265' && st.transcoded && (way === 'http' || !receivesOverWebRTC('video/H265'))) {
          codecNote = 'H.265 camera, transcoded to H.264 for this browser';
          cam.transcoded = true;
          say();
        }
      });
    setInterval(() => void fetchStatus(id, token).then((st) => (state.textContent = badge(st))).catch(() => {}), 2000);
  };

  const playLive = async () => {
    onFirstFrame();
    try {
      // The request early.js made while the app loaded, if it did (first try only).
      const early = window.petrelEarly?.live;
      if (window.petrelEarly) window.petrelEarly.live = undefined;
      await playHTTP(video, `/v1/cameras/${encodeURIComponent(id)}/live.mp4`, token, () => mark('answerArrived'), (note) => (message.textContent = note), early);
    } catch (err) {
      fail(err instanceof Error ? err.message : String(err));
    }
  };
  if (way === 'http') {
    const playing = playLive();
    watchStatus();
    return playing;
  }
  // The page knows before it asks: every camera sends H.264 or H.265, so a
  // browser without H.264 for WebRTC (Firefox without its OpenH264 plugin)
  // plays HTTP live at once. An H.265 camera is refused by the server's answer.
  if (!receivesOverWebRTC('video/H264')) {
    useWay('http', 'this browser cannot receive H.264 over WebRTC');
    const playing = playLive();
    watchStatus();
    return playing;
  }
  if (direct) {
    watchStatus();
    try {
      await viewDirect(room, token, params, video, mark, onFirstFrame);
    } catch (err) {
      if (err instanceof PetrelError && err.code === 'codec_unsupported') {
        useWay('http', err.message.replace(/^codec_unsupported: /, '').replace(/;.*/, ''));
        return playLive();
      }
      fail(err instanceof Error ? err.message : String(err));
    }
    draw();
    say();
    return;
  }
  const early = window.petrelEarly;
  if (early?.answered && early.at?.offerSent !== undefined) start = early.at.offerSent;
  // The first frame painted before the app loaded (early.js held it until then).
  if (early?.answered && early.at?.firstFrame !== undefined) {
    frameHooked = true;
    cam.navFirstFrame = Math.round(early.at.firstFrame * 10) / 10;
    if (early.firstFrameMeta) cam.firstFrameMeta = early.firstFrameMeta as VideoFrameMeta;
    mark('firstFrame', Math.round((early.at.firstFrame - start) * 10) / 10);
  }
  // A session early.js started has its servers (inlined in the page, or its OPTIONS).
  const servers = early?.answered ? [] : whepIceServers(`/whep/${encodeURIComponent(room)}`, token, early?.options).catch(() => []);
  const relay = params.get('relay') === '1';
  let fellBack = false;
  const fallBack = (why: string) => {
    if (fellBack || t.firstFrame !== undefined) return;
    fellBack = true;
    session?.close();
    video.srcObject = null;
    useWay('http', why);
    void playLive();
  };
  let session: WhepSession | undefined;
  const starting = whepPlay(`/whep/${encodeURIComponent(room)}`, {
    token,
    iceServers: servers,
    iceTransportPolicy: relay ? 'relay' : 'all',
    // &trickle=0: the offer waits for gathering, as the page did before (for comparison).
    trickle: params.get('trickle') !== '0',
    prepared: early,
    onStep: (s, ms) => s !== 'firstTrack' && mark(s, early?.answered ? ms : undefined),
    onTrack: (track) => {
      if (track.kind !== 'video') return;
      const playing = video.srcObject instanceof MediaStream && video.srcObject.getTracks().includes(track);
      if (!playing) video.srcObject = new MediaStream([track]);
      onFirstFrame();
      void video.play().catch(() => {});
    },
    // UDP blocked and no TURN: HTTP live is the fallback for such networks.
    onFailed: (why) => (relay || t.firstFrame !== undefined ? fail(`WebRTC ${why}`) : fallBack(`WebRTC ${why}`)),
  });
  watchStatus();
  try {
    session = await starting;
  } catch (err) {
    if (err instanceof WhepError && err.codecUnsupported) {
      fallBack(`the server says: ${err.message}`);
      return;
    }
    fail(err instanceof WhepError ? `WHEP ${err.status}: ${err.message}` : `WHEP: ${err instanceof Error ? err.message : String(err)}`);
    return;
  }
  cam.pc = session.pc;
  cam.gatheringAtOffer = session.gatheringAtOffer;
  cam.iceLite = session.iceLite;
  addEventListener('pagehide', () => session?.close());
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
  const steps: Record<string, keyof Timings> = { pcCreated: 'pcCreated', offerCreated: 'offerSent', answerArrived: 'answerArrived', iceConnected: 'iceConnected', dtlsConnected: 'dtlsConnected' };
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

/** How many times (1 s apart) the HTTP live stream is asked again while the camera has no video. */
const LIVE_RETRIES = 10;

/**
 * Plays fragmented MP4 streamed over HTTP through Media Source Extensions.
 * With the camera's audio (an Opus track, dOps, in the init) the SourceBuffer
 * takes both tracks and uses the stream's own timestamps ('segments'): the
 * server aligns the two timelines, 'sequence' would shift them apart at each
 * gap. Playback starts where both tracks are buffered.
 */
async function playHTTP(
  video: HTMLVideoElement,
  url: string,
  token: string,
  onResponse: () => void,
  onNote: (text: string) => void = () => {},
  early?: Promise<Response>,
): Promise<void> {
  if (typeof MediaSource === 'undefined') throw new Error('this browser has no Media Source Extensions: the HTTP live stream cannot play here');
  const ms = new MediaSource();
  const opened = new Promise((r) => ms.addEventListener('sourceopen', r, { once: true }));
  video.src = URL.createObjectURL(ms);
  // The request goes while the MediaSource opens. A camera still connecting
  // has no video yet (503): ask again, a while.
  const ask = async () => {
    for (let i = 0; ; i++) {
      // no-store: Firefox otherwise holds a second request for the same URL
      // (another tab of the camera) behind the first's cache entry, for ~20 s.
      const r = (i === 0 && early ? await early.catch(() => null) : null) ?? (await fetch(url, { headers: { Authorization: `Bearer ${token}` }, cache: 'no-store' }));
      if (r.status !== 503 || i >= LIVE_RETRIES) return r;
      onNote(`Waiting for the camera's video (${(await r.text().catch(() => '')).includes('no video') ? 'it has none yet' : 'server busy'})…`);
      await new Promise((w) => setTimeout(w, 1000));
    }
  };
  const [res] = await Promise.all([ask(), opened]);
  if (!res.ok || !res.body) {
    const text = await res.text().catch(() => '');
    let msg = text;
    try {
      msg = (JSON.parse(text) as { message?: string }).message ?? text;
    } catch {
      /* not JSON */
    }
    throw new Error(`HTTP live ${res.status}: ${msg || res.statusText}`);
  }
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
    if (done) throw new Error('the server ended the HTTP live stream');
    if (!sb) {
      init = init ? concat(init, value) : value;
      const codec = avcCodec(init);
      if (!codec) continue;
      const audio = hasBox(init, 'dOps');
      const type = `video/mp4; codecs="${codec}${audio ? ', opus' : ''}"`;
      if (!MediaSource.isTypeSupported(type)) {
        void reader.cancel();
        throw new Error(`this browser's Media Source Extensions cannot play ${type}`);
      }
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
