// The room page over WebTransport (transport choice "WT datagrams" / "WT
// streams", or ?transport=wt-datagram|wt-stream): camera and microphone are
// encoded with WebCodecs and sent as MoQT objects; remote tracks decode into
// the same tiles as the WebRTC path. A deliberately small call: no pin, no
// simulcast, no screen share (docs/webtransport.md lists what WT lacks).
import { PetrelError, WtSession, type WtMode, type WtStats, qualityOf, webTransportMediaSupported } from '../sdk/index.js';

export type Transport = 'webrtc' | 'wt-datagram' | 'wt-stream';

export function transportChoice(v: string | null | undefined): Transport {
  return v === 'wt-datagram' || v === 'wt-stream' ? v : 'webrtc';
}

/** What the page needs from main.ts to show a WT call in its tiles. */
export interface WtCallUi {
  addTile(sid: string, name: string, local: boolean): HTMLElement;
  removeTile(sid: string): void;
  setStatus(text: string): void;
  note(text: string): void;
  /** The connection panel: quality, the bitrate line, one row per track. */
  showConnection(quality: string, line: string, rows: string[][]): void;
  /** The devices panel: the camera and microphone in use. */
  showDevices(current: { camera?: string; microphone?: string }): void;
  onLeft(reason: string): void;
}

declare global {
  interface Window {
    petrelWt?: { session: WtSession | null; publishedAt?: number };
  }
}

/** Joins over WebTransport and publishes camera and microphone. */
export async function joinWt(token: string, mode: WtMode, ui: WtCallUi): Promise<WtSession> {
  if (!webTransportMediaSupported()) {
    throw new PetrelError('unsupported', 'this browser lacks WebTransport, WebCodecs or MediaStreamTrackProcessor (use Chromium, or WebRTC)');
  }
  ui.setStatus('connecting (WebTransport)…');
  const s = await WtSession.connect(location.origin, token, { mode });
  window.petrelWt = { session: s };
  ui.setStatus(`connected (WebTransport ${mode}s)`);
  const own = ui.addTile(s.participantSid || 'local', `${s.identity} (you)`, true);
  s.on('participantJoined', (p) => ui.addTile(p.sid, p.name, false));
  s.on('participantLeft', (p) => ui.removeTile(p.sid));
  s.on('trackSubscribed', (sub) => {
    const tile = ui.addTile(sub.participant.sid, sub.participant.name, false);
    if (sub.info.kind === 'video') {
      const v = tile.querySelector('video') as HTMLVideoElement;
      v.srcObject = new MediaStream([sub.track]);
      v.dataset.trackSid = sub.info.sid;
    } else {
      const a = document.createElement('audio');
      a.autoplay = true;
      a.dataset.trackSid = sub.info.sid;
      a.srcObject = new MediaStream([sub.track]);
      tile.append(a);
    }
  });
  s.on('trackUnsubscribed', (sub) => {
    document.querySelectorAll(`[data-track-sid="${CSS.escape(sub.info.sid)}"]`).forEach((el) => {
      if (el instanceof HTMLVideoElement) el.srcObject = null;
      else el.remove();
    });
  });
  const statsTimer = setInterval(() => void s.getStats().then((st) => ui.showConnection(...connectionPanel(st, s.identity)), () => {}), 1000);
  s.on('disconnected', (reason) => {
    clearInterval(statsTimer);
    window.petrelWt = { session: null };
    ui.showConnection('lost', '↑ — ↓ —', []);
    ui.onLeft(reason);
  });
  let media: MediaStream | undefined;
  try {
    media = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480 }, audio: true });
  } catch (e) {
    ui.note(`camera/microphone: ${(e as Error).message}`);
  }
  if (media) {
    (own.querySelector('video') as HTMLVideoElement).srcObject = new MediaStream(media.getVideoTracks());
    ui.showDevices({ camera: media.getVideoTracks()[0]?.getSettings().deviceId, microphone: media.getAudioTracks()[0]?.getSettings().deviceId });
    await s.publish({ video: media.getVideoTracks()[0], audio: media.getAudioTracks()[0] }, { mode });
    window.petrelWt.publishedAt = performance.now();
  }
  return s;
}

// Bytes counted at the last panel update, per track, for the bitrates.
const lastBytes = new Map<string, { bytes: number; at: number }>();
let lastLoss = { lost: 0, got: 0 };

function rate(key: string, bytes: number, now: number): number {
  const prev = lastBytes.get(key);
  lastBytes.set(key, { bytes, at: now });
  return prev && now > prev.at ? ((bytes - prev.bytes) * 8 * 1000) / (now - prev.at) : 0;
}

function kbps(bps: number): string {
  return bps >= 1e6 ? `${(bps / 1e6).toFixed(1)} Mbps` : `${Math.round(bps / 1000)} kbps`;
}

/**
 * The connection panel of a WebTransport session, as the WebRTC one reads:
 * quality from the round trip and the frames lost since the last update,
 * bitrates from the byte counters, a row per track.
 */
function connectionPanel(st: WtStats, self: string): [string, string, string[][]] {
  const now = performance.now();
  let up = 0;
  let down = 0;
  const rows: string[][] = [];
  for (const l of st.local) {
    const b = rate(`out/${l.kind}`, l.bytesSent, now);
    up += b;
    rows.push(['you', `↑ ${l.kind}`, kbps(b), l.kind === 'video' ? `${l.width}×${l.height} ${l.framesEncoded}f` : '', '']);
  }
  let lost = 0;
  let got = 0;
  for (const r of st.remote) {
    const b = rate(`in/${r.trackSid}`, r.bytesReceived, now);
    down += b;
    lost += r.framesLost;
    got += r.framesDecoded;
    rows.push([r.participant === self ? 'you' : r.participant, `↓ ${r.kind}`, kbps(b), r.kind === 'video' ? `${r.framesDecoded}f` : '', r.framesLost ? `lost ${r.framesLost}` : '']);
  }
  const dl = lost - lastLoss.lost;
  const dg = got - lastLoss.got;
  lastLoss = { lost, got };
  const loss = dl > 0 && dl + dg > 0 ? dl / (dl + dg) : 0;
  const rtt = st.rttMs > 0 ? st.rttMs : undefined;
  const line = `↑ ${kbps(up)} ↓ ${kbps(down)}${rtt !== undefined ? ` · RTT ${Math.round(rtt)} ms` : ''} · WebTransport`;
  return [qualityOf(loss, rtt), line, rows];
}
