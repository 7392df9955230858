// The room page over WebTransport (transport choice "WT datagrams" / "WT
// streams", or ?transport=wt-datagram|wt-stream): camera and microphone are
// encoded with WebCodecs and sent as MoQT objects; remote tracks decode into
// the same tiles as the WebRTC path. A deliberately small call: no pin, no
// simulcast, no screen share (docs/webtransport.md lists what WT lacks).
import { PetrelError, WtSession, type WtMode, webTransportMediaSupported } from '../sdk/index.js';

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
  s.on('disconnected', (reason) => {
    window.petrelWt = { session: null };
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
    await s.publish({ video: media.getVideoTracks()[0], audio: media.getAudioTracks()[0] }, { mode });
    window.petrelWt.publishedAt = performance.now();
  }
  return s;
}
