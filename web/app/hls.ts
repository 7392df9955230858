// "Watch over HLS": a room's (?room=<name>&hls=1, ?track=<sid> to pick one) or a
// camera's (?camera=<id>&hls=1) live egress played with hls.js in low-latency
// mode, as a passive viewer: no WebRTC, no join. The token travels in the
// playlist's query, which the server repeats on every URI it writes, so the
// same URL plays in any player.
import Hls from 'hls.js';

declare global {
  interface Window {
    petrelHLS?: {
      url: string;
      hls: Hls | null;
      video: HTMLVideoElement;
      error: string;
      /** Seconds behind the live edge, as hls.js measures it. */
      latency: () => number;
      /** The latency hls.js aims at (s): the playlist's part hold-back. */
      targetLatency: () => number;
      /** The part target of the playlist (s), 0 before it loads. */
      partTarget: () => number;
      frames: () => number;
    };
  }
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

async function devToken(room: string): Promise<string> {
  const identity = `hls-${Math.random().toString(36).slice(2, 7)}`;
  const res = await fetch('/v1/dev/token', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ room, identity, name: 'HLS viewer' }),
  });
  if (!res.ok) throw new Error(`no development token (${res.status}): open the page with ?token=…`);
  return ((await res.json()) as { token: string }).token;
}

/** The HLS URL of a room or a camera, token included. */
export function hlsURL(params: URLSearchParams, token: string): string {
  const cam = params.get('camera');
  const q = new URLSearchParams();
  const track = params.get('track');
  if (!cam && track) q.set('track', track);
  q.set('access_token', token);
  const path = cam ? `/v1/cameras/${encodeURIComponent(cam)}/hls/index.m3u8` : `/v1/rooms/${encodeURIComponent(params.get('room') ?? '')}/hls/index.m3u8`;
  return `${path}?${q}`;
}

/** Mounts the HLS page into root, replacing the room page. */
export async function mountHLSPage(root: HTMLElement, params: URLSearchParams): Promise<void> {
  for (const c of Array.from(root.children)) (c as HTMLElement).hidden = true;
  const cam = params.get('camera');
  const name = cam ? `Camera ${cam}` : `Room ${params.get('room') ?? ''}`;
  const page = el('section', 'camera-page');
  const head = el('h2', undefined, `${name} · HLS`);
  const wrap = el('div', 'camera-view');
  const video = el('video');
  video.autoplay = video.muted = video.playsInline = true;
  video.controls = true;
  wrap.append(video);
  const message = el('p', 'camera-message', 'Loading the playlist…');
  message.id = 'hls-message';
  message.setAttribute('role', 'status');
  const links = el('p');
  const back = new URLSearchParams(params);
  back.delete('hls');
  const a = el('a', undefined, cam ? 'Watch over WebRTC' : 'Join the room');
  a.href = `?${back}`;
  links.append(a);
  page.append(head, wrap, message, links);
  root.append(page);
  const headerStatus = document.getElementById('status');

  let hls: Hls | null = null;
  const state: NonNullable<Window['petrelHLS']> = {
    url: '',
    hls,
    video,
    error: '',
    latency: () => hls?.latency ?? 0,
    targetLatency: () => hls?.targetLatency ?? 0,
    partTarget: () => hls?.levels[hls.currentLevel >= 0 ? hls.currentLevel : 0]?.details?.partTarget ?? 0,
    frames: () => video.getVideoPlaybackQuality?.().totalVideoFrames ?? 0,
  };
  window.petrelHLS = state;
  const fail = (msg: string) => {
    state.error = msg;
    message.textContent = `Error: ${msg}`;
    message.className = 'camera-message error';
    if (headerStatus) headerStatus.textContent = 'error';
  };
  try {
    const token = params.get('token') || (await devToken(cam ? `camera/${cam}` : (params.get('room') ?? '')));
    const url = hlsURL(params, token);
    state.url = url;
    // The first request starts the server's muxer; its errors (no such room,
    // a codec HLS does not carry, a refused token) are sentences to show.
    const res = await fetch(url, { cache: 'no-store' });
    if (!res.ok) {
      const body = (await res.json().catch(() => null)) as { message?: string } | null;
      throw new Error(body?.message ?? `the playlist answered ${res.status}`);
    }
    if (Hls.isSupported()) {
      // Aim 1 s behind live; behind that (a slow start, a stall) play up to 1.5×
      // until caught up, and jump forward when more than 4 s behind.
      hls = new Hls({ lowLatencyMode: true, backBufferLength: 30, liveSyncDuration: 1, liveMaxLatencyDuration: 4, maxLiveSyncPlaybackRate: 1.5 });
      state.hls = hls;
      hls.on(Hls.Events.ERROR, (_e, d) => {
        if (d.fatal) fail(`${d.details}${d.response ? ` (HTTP ${d.response.code})` : ''}`);
      });
      hls.loadSource(url);
      hls.attachMedia(video);
    } else if (video.canPlayType('application/vnd.apple.mpegurl')) {
      video.src = url; // Safari plays HLS natively
    } else {
      throw new Error('this browser plays neither HLS nor Media Source Extensions');
    }
    setInterval(() => {
      if (state.error) return;
      if (video.currentTime > 0) {
        const lat = state.latency();
        message.textContent = `Playing over HLS${lat ? ` · ${lat.toFixed(1)} s behind live` : ''}.`;
        message.className = 'camera-message';
        if (headerStatus) headerStatus.textContent = 'playing · HLS';
      }
    }, 1000);
  } catch (err) {
    fail(err instanceof Error ? err.message : String(err));
  }
}
